"""attn-harness: benchmark and conformance harness for attention backends.

From Python: ``harness.api`` (``run``, ``load``, ``report``, ``compare``; docs/api.md), loaded on
first use so that ``import harness`` stays light. ``harness.run`` and ``harness.load`` are
shortcuts; ``compare`` and ``report`` are reached as ``harness.api.compare`` /
``harness.api.report`` (``harness.analysis.compare`` and ``harness.report`` are the modules).
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

__all__ = ["api", "run", "load"]


def _started_as_command() -> bool:
    """``python -m harness`` / ``python -m harness.cli`` while Python is still locating the
    module (sys.argv[0] is "-m" then): the package is imported before the command's own code."""
    argv = getattr(sys, "orig_argv", [])
    return sys.argv[:1] == ["-m"] and "-m" in argv and argv[argv.index("-m") + 1:][:1] in (["harness"], ["harness.cli"])


if _started_as_command():
    # Guard Ctrl-C from here, not only once the command's module has been compiled and runs
    # (seconds on a loaded machine without cached bytecode): an early Ctrl-C exits 130 quietly.
    from harness.startup import guard_startup

    guard_startup()


def __getattr__(name: str) -> Any:  # PEP 562: nothing heavy until asked for
    if name == "api":
        return importlib.import_module("harness.api")
    if name in ("run", "load", "HarnessError"):
        return getattr(importlib.import_module("harness.api"), name)
    raise AttributeError(f"module 'harness' has no attribute {name!r}")
