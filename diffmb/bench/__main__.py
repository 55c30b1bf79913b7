"""``python -m diffmb.bench [--quick] [--only core,sim,variational] --out DIR``."""

import sys

from . import main

sys.exit(main())
