"""``python -m diffmb.bench [--quick] [--only NAMES] --out DIR``: the same as ``diffmb bench``."""

import sys

from . import main

sys.exit(main())
