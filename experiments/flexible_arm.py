"""Reproduce the flexible-arm study (issue 8): ``python experiments/flexible_arm.py [--quick]``."""

import argparse
import pathlib

from diffmb.studies.flexible_arm import reproduce

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=pathlib.Path, default=pathlib.Path("out/flexible-arm"))
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    res = reproduce(a.out, quick=a.quick)
    print(f"wrote {a.out}/results.json, report.md and figures")
