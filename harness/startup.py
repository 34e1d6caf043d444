"""Ctrl-C before the command line is running. Kept free of heavy imports: it is installed
before torch and the kernel libraries load (seconds), so an interrupt then ends quietly
(exit 130) instead of with a KeyboardInterrupt traceback from deep inside an import."""

from __future__ import annotations

import os
import signal


def _interrupted_while_starting(signum: int, frame: object) -> None:
    # Nothing has run or been written yet: no cleanup to do, so leave at once.
    os.write(2, b"interrupted while starting: nothing was run or written\n")
    os._exit(130)


def guard_startup() -> None:
    """Until ``harness.cli.main`` takes over, Ctrl-C exits 130 with one line."""
    signal.signal(signal.SIGINT, _interrupted_while_starting)
