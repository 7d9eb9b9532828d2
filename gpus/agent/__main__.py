"""``python -m gpus.agent`` (see gpus/agent/cli.py)."""

import sys

from .cli import main

sys.exit(main())
