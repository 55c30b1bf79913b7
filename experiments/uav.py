"""Reproduce the UAV study (seed 000): python experiments/uav.py [--quick] [--out DIR]."""

import argparse
import pathlib

from diffmb.studies.uav import reproduce

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="out/uav")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    reproduce(pathlib.Path(a.out), quick=a.quick)
