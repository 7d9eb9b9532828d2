"""``python -m agent`` (see agent/cli.py)."""

import sys

from .cli import main

sys.exit(main())
