"""Benchmarks against peers measured in the same run: ``diffmb bench`` and ``python -m diffmb.bench``.

Each benchmark is a module of this package, ``diffmb.bench.<name>`` for a name in
:data:`BENCHMARKS`, exposing ``run(out_dir, quick) -> {case: {"value", "unit", "peer",
"peer_value", "ratio"}}`` and runnable alone as ``python -m diffmb.bench.<name> --out DIR
[--quick]``. Peers are measured in the same run, so ratios are the numbers to read, not absolute
times. A peer that is not installed (or fails) reports ``peer_value: null`` and ``ratio: null``.
Everything here ships with the package: no path outside it is read.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

# benchmark name -> what it measures; order is the order of a full run
BENCHMARKS = {
    "core": "dynamics kernels (ABA, CRBA, RNEA, Lagrange, Kane) under jit(vmap) vs Pinocchio",
    "sim": "simulate on the four-box chain vs MuJoCo C and MJX; gradient cost and memory",
    "variational": "symplectic variational step vs RK4 at equal energy error; its gradient",
    "contacts": "quadruped on a plane, batch 1024: diffmb vs MJX, MuJoCo C, jaxsim; gradient/forward",
    "sysid": "identification of a UR5's damping, armature and masses, and of a thrown cube's friction "
             "and solref: diffmb.optim.fit vs mujoco.sysid",
    "rover": "the rover's 5 s rough traverse against real time (one core); 256 rovers in one call",
    "robots": "published robots (gymnasium's Ant and Humanoid, Menagerie's A1) standing and dropped, "
              "batch 1, 64, 1024: diffmb's implicit step vs MuJoCo C on one and on all threads",
}


class UnknownBenchmark(ValueError):
    """A benchmark name that is not one of :data:`BENCHMARKS`."""


def case(value, unit, peer, peer_value, **extra) -> dict:
    """One benchmark record: our value beside a peer's, measured in the same run.

    ``peer_value`` None or NaN (peer not installed or failed) gives ``peer_value`` and ``ratio``
    None (``null`` in JSON)."""
    pv = None if peer_value is None or not math.isfinite(float(peer_value)) else float(peer_value)
    ratio = float(value) / pv if pv else None
    return {"value": float(value), "unit": unit, "peer": peer, "peer_value": pv, "ratio": ratio,
            **extra}


def best_time(f, reps=3) -> float:
    """Best wall time of ``reps`` calls of ``f()`` (the least disturbed by other load)."""
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return min(ts)


def available() -> list[str]:
    return list(BENCHMARKS)


def select(only: str | None) -> list[str]:
    """The benchmark names of a comma-separated ``only`` (all when empty), checked up front."""
    if not only:
        return available()
    names = [n.strip() for n in only.split(",") if n.strip()]
    bad = [n for n in names if n not in BENCHMARKS]
    if bad or not names:
        what = ", ".join(repr(n) for n in bad) if bad else repr(only)
        raise UnknownBenchmark(f"unknown benchmark {what}; valid names: {', '.join(BENCHMARKS)}")
    return list(dict.fromkeys(names))


def load(name: str):
    """The module ``diffmb.bench.<name>``."""
    select(name)
    return importlib.import_module(f"{__name__}.{name}")


def run_all(out_dir: Path, quick: bool = False, only: str | None = None) -> dict:
    """Run the benchmarks named in ``only`` (default: all); ``{"<name>/<case>": record}``."""
    names = select(only)  # every name is checked before anything runs
    # compile times are measured cold: no persistent cache, here or in the child processes
    import jax

    jax.config.update("jax_enable_compilation_cache", False)
    os.environ["JAX_ENABLE_COMPILATION_CACHE"] = "false"
    results = {}
    for n in names:
        res = load(n).run(Path(out_dir), quick=quick)
        results.update({f"{n}/{k}": v for k, v in res.items() if not k.startswith("_")})
    return results


def jsonable(x):
    """``x`` with every non-finite float replaced by None, so that the JSON is standard."""
    if isinstance(x, dict):
        return {k: jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def write_json(path: Path, obj) -> None:
    """Write ``obj`` as standard JSON (NaN and inf become null) atomically."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(jsonable(obj), indent=2, allow_nan=False))
    os.replace(tmp, path)


def _cpu_seconds(pid: int) -> float | None:
    """CPU time (user + system, all threads) of a process from /proc, or None where there is
    no /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def run_module(module: str, args, env, what: str, timeout: float, cpu: int | None = None,
               stall: float = 60.0) -> str:
    """Run ``python -m module *args`` in a fresh process; its last line of output.

    ``cpu``: pin the process to that core *before* anything is imported (JAX sizes its thread
    pools to the cores it may use when it starts; pinning a running process instead leaves two
    pools' worth of threads on one core, which measured a 1.7x slower gradient). A process that
    runs past ``timeout`` seconds, or uses no CPU for ``stall`` seconds (a wedged thread pool:
    all threads waiting), is killed and a ``RuntimeError`` says which."""
    if cpu is None:
        cmd = [sys.executable, "-m", module, *args]
    else:
        boot = (f"import os, runpy, sys; os.sched_setaffinity(0, {{{int(cpu)}}}); "
                f"sys.argv[0] = {module!r}; "
                f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)")
        cmd = [sys.executable, "-c", boot, *args]
    import tempfile

    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen(cmd, env=env, stdout=out, stderr=err, text=True)
        start = last_busy = time.monotonic()
        used = _cpu_seconds(p.pid)
        why = None
        while p.poll() is None:
            time.sleep(1.0)
            now, u = time.monotonic(), _cpu_seconds(p.pid)
            if u is not None and used is not None and u > used + 0.05:
                last_busy, used = now, u
            if now - start > timeout:
                why = f"timed out after {timeout:g} s"
            elif u is not None and now - last_busy > stall:
                why = f"wedged: no CPU used for {stall:g} s (after {now - start:.0f} s)"
            if why:
                p.kill()
                p.wait()
                raise RuntimeError(f"{what} {why}")
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if p.returncode != 0:
        raise RuntimeError(f"{what} failed:\n{stderr[-2000:]}")
    return stdout.strip().splitlines()[-1]


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options of ``diffmb bench`` and ``python -m diffmb.bench`` (one definition for both)."""
    parser.add_argument("--out", required=True, help="output directory (writes DIR/bench.json "
                        "and each benchmark's DIR/bench_<name>.json)")
    parser.add_argument("--quick", action="store_true", help="shorter horizons and batches")
    parser.add_argument("--only", default=None,
                        help=f"comma-separated subset of: {', '.join(BENCHMARKS)} (default: all)")
    return parser


def run_and_write(out_dir: Path, quick: bool = False, only: str | None = None) -> dict:
    """:func:`run_all`, then ``out_dir/bench.json``; the results."""
    res = run_all(out_dir, quick=quick, only=only)
    write_json(Path(out_dir) / "bench.json", res)
    return res


def print_table(res: dict) -> None:
    """One line per case: our value, the peer's, their ratio."""
    num = lambda x, spec: "null" if x is None else format(x, spec)  # noqa: E731
    for name, r in res.items():
        print(f"{name:48s} {r['value']:12.4g} {r['unit']:10s} vs {r['peer']}: "
              f"{num(r['peer_value'], '.4g')}  ratio {num(r['ratio'], '.3g')}")


def main_for(name: str, run, argv=None) -> int:
    """``python -m diffmb.bench.<name> --out DIR [--quick]``: run one benchmark (which writes
    ``DIR/bench_<name>.json``) and print its cases."""
    ap = argparse.ArgumentParser(prog=f"python -m {__name__}.{name}",
                                 description=BENCHMARKS[name])
    ap.add_argument("--out", default="out/bench", help="output directory")
    ap.add_argument("--quick", action="store_true", help="shorter horizons and batches")
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    res = run(out, quick=a.quick)
    res = {k: v for k, v in res.items() if not k.startswith("_")}
    print(json.dumps(jsonable(res), indent=2))
    return 0


def main(argv=None) -> int:
    """``python -m diffmb.bench [--quick] [--only NAMES] --out DIR``: the same as ``diffmb bench``
    (unknown names and an unusable --out exit 2, Ctrl-C 130)."""
    ap = add_arguments(argparse.ArgumentParser(prog="python -m diffmb.bench",
                                               description=__doc__.split("\n\n")[0]))
    a = ap.parse_args(argv)
    try:
        select(a.only)
    except UnknownBenchmark as e:
        ap.error(str(e))
    out = Path(a.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        ap.error(f"--out {out}: cannot create the directory ({e.strerror or e})")
    try:
        print_table(run_and_write(out, quick=a.quick, only=a.only))
    except KeyboardInterrupt:
        print(f"\npython -m diffmb.bench: interrupted (Ctrl-C); {out} is incomplete",
              file=sys.stderr)
        return 130
    return 0
