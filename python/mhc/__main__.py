"""`python -m mhc precompile ...`: the `mhc` command line (cli.py)."""

import sys

from .cli import main

sys.exit(main())
