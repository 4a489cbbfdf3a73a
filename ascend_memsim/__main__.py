"""``python -m ascend_memsim``: the command line (see :mod:`ascend_memsim.cli`)."""

import sys

from .cli import main

sys.exit(main())
