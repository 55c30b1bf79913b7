"""Study `arm`: UR5 mass/damping identification and minimum-effort swing.

    python experiments/arm.py [--quick] [--out DIR]      (same as `diffmb reproduce arm`)
"""

import argparse
import pathlib

from diffmb.studies.arm import reproduce

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="out/arm")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    reproduce(pathlib.Path(a.out), quick=a.quick)
