"""The ``diffmb`` command line: reproduce the studies, identify parameters from data, benchmark.

    diffmb reproduce <study>|all --out DIR [--quick]
    diffmb identify <study> --data FILE.csv --out DIR
    diffmb bench [--quick] --out DIR
    diffmb list

Each study is a module ``diffmb.studies.<name>`` with ``reproduce(out_dir, quick)`` (and, where
it identifies parameters, ``identify(data_csv, out_dir)``); this file is only the registry.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
import traceback
from pathlib import Path

# study name on the command line -> module; order is the order of `reproduce all`
STUDIES = {
    "arm": "diffmb.studies.arm",
    "uav": "diffmb.studies.uav",
    "chain": "diffmb.studies.chain",
    "flexible-arm": "diffmb.studies.flexible_arm",
}

class CLIError(Exception):
    """A user error: printed as one line, exit code 2."""


def _study_module(name: str):
    if name not in STUDIES:
        raise CLIError(f"unknown study {name!r}; choose one of: {', '.join(STUDIES)} (or 'all')")
    try:
        return importlib.import_module(STUDIES[name])
    except ModuleNotFoundError as e:
        if e.name == STUDIES[name]:
            raise CLIError(f"study {name!r} is registered but not installed ({e.name})") from None
        raise


def _reproduce(args) -> int:
    names = list(STUDIES) if args.study == "all" else [args.study]
    for n in names:
        _study_module(n)  # fail fast on unknown names
    out = Path(args.out)
    failed = []
    for n in names:
        mod = _study_module(n)
        d = out / n if args.study == "all" else out
        d.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        print(f"[diffmb] reproduce {n} -> {d} ({'quick' if args.quick else 'full'})", flush=True)
        try:
            mod.reproduce(d, quick=args.quick)
        except Exception:  # keep going with the other studies; report at the end
            if args.study != "all":
                raise
            traceback.print_exc()
            failed.append(n)
            continue
        print(f"[diffmb] {n}: done in {time.perf_counter() - t0:.1f} s", flush=True)
    if args.study == "all":
        _write_index(out, names, failed)
    if failed:
        print(f"[diffmb] failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def _write_index(out: Path, names, failed):
    lines = ["# diffmb studies", ""]
    for n in names:
        status = "FAILED" if n in failed else f"[report]({n}/report.md)"
        lines.append(f"- **{n}**: {status}")
    (out / "README.md").write_text("\n".join(lines) + "\n")


def _identify(args) -> int:
    mod = _study_module(args.study)
    if not hasattr(mod, "identify"):
        raise CLIError(f"study {args.study!r} has no identification")
    data = Path(args.data)
    if not data.is_file():
        raise CLIError(f"{data}: no such data file")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        res = mod.identify(data, out)
    except ValueError as e:  # bad data: the message names file, row and column
        raise CLIError(str(e)) from None
    if isinstance(res, dict):
        print(json.dumps(res.get("identified", res), indent=2, default=float))
    return 0


def _bench(args) -> int:
    from .bench import run_all

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    res = run_all(out, quick=args.quick, only=args.only)
    (out / "bench.json").write_text(json.dumps(res, indent=2))
    for case, r in res.items():
        print(f"{case:48s} {r['value']:12.4g} {r['unit']:10s} vs {r['peer']}: "
              f"{r['peer_value']:.4g}  ratio {r['ratio']:.3g}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="diffmb", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("reproduce", help="run a study and write results.json, figures, report.md")
    r.add_argument("study", help=f"one of {', '.join(STUDIES)}, or all")
    r.add_argument("--out", required=True, help="output directory")
    r.add_argument("--quick", action="store_true", help="shorter horizons, same contract keys")
    i = sub.add_parser("identify", help="fit a study's parameters to measured data (CSV)")
    i.add_argument("study")
    i.add_argument("--data", required=True, help="CSV: first column t [s], then named channels")
    i.add_argument("--out", required=True)
    b = sub.add_parser("bench", help="benchmarks against peers measured in the same run")
    b.add_argument("--out", required=True)
    b.add_argument("--quick", action="store_true")
    b.add_argument("--only", default=None, help="comma-separated subset of benchmarks")
    sub.add_parser("list", help="list the studies")
    return p


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.cmd == "reproduce":
            return _reproduce(args)
        if args.cmd == "identify":
            return _identify(args)
        if args.cmd == "bench":
            return _bench(args)
        for n, m in STUDIES.items():
            print(f"{n:14s} {m}")
        return 0
    except CLIError as e:
        print(f"diffmb: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
