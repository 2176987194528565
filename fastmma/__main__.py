"""``python -m fastmma``: the command line (:mod:`fastmma.cli`)."""

import sys

from .cli import main

sys.exit(main())
