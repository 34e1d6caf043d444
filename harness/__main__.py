"""``python -m harness`` and the ``harness`` script (pyproject's entry point): the command line,
with Ctrl-C guarded from the first instruction on (harness/startup.py)."""

from __future__ import annotations

import sys

from harness.startup import guard_startup


def main() -> int:
    guard_startup()
    from harness import cli, interrupts  # torch, rich, pydantic: the slow part of starting

    return interrupts.exit_code(cli.main())


if __name__ == "__main__":
    sys.exit(main())
