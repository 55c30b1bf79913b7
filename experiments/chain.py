"""Reproduce the chain study (seed 001): python experiments/chain.py [--quick] [--out DIR]."""

import argparse
import pathlib

from diffmb.studies.chain import reproduce

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="out/chain")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    reproduce(pathlib.Path(a.out), quick=a.quick)
