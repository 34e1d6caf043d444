"""``python -m harness.cli`` (harness/__init__.py guards Ctrl-C before the package loads)."""

import sys

from harness import interrupts
from harness.cli import main

sys.exit(interrupts.exit_code(main()))
