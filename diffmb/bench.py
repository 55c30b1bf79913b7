"""``diffmb bench``: runs the benchmark scripts of ``experiments/`` (a source checkout).

Each script ``experiments/bench_<name>.py`` exposes ``run(out_dir, quick) -> {case: {"value",
"unit", "peer", "peer_value", "ratio"}}``; peers are measured in the same run, so ratios are the
numbers to read, not absolute times.
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"


def case(value, unit, peer, peer_value, **extra) -> dict:
    """One benchmark record: our value beside a peer's, measured in the same run."""
    ratio = float(value) / float(peer_value) if peer_value else float("nan")
    return {"value": float(value), "unit": unit, "peer": peer, "peer_value": float(peer_value),
            "ratio": ratio, **extra}


def best_time(f, reps=3) -> float:
    """Best wall time of ``reps`` calls of ``f()`` (the least disturbed by other load)."""
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return min(ts)


def available():
    return sorted(p.stem[len("bench_"):] for p in EXPERIMENTS.glob("bench_*.py"))


def _load(name):
    path = EXPERIMENTS / f"bench_{name}.py"
    spec = importlib.util.spec_from_file_location(f"diffmb_bench_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_all(out_dir: Path, quick: bool = False, only: str | None = None) -> dict:
    if not EXPERIMENTS.is_dir():
        raise RuntimeError(f"benchmarks live in {EXPERIMENTS}: run `diffmb bench` from a checkout")
    names = available() if not only else only.split(",")
    results = {}
    for n in names:
        if n not in available():
            raise ValueError(f"unknown benchmark {n!r}; available: {available()}")
        res = _load(n).run(Path(out_dir), quick=quick)
        results.update({f"{n}/{k}": v for k, v in res.items() if not k.startswith("_")})
    return results
