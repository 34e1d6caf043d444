"""attn-harness: benchmark and conformance harness for attention backends.

From Python: ``harness.api`` (``run``, ``load``, ``report``, ``compare``; docs/api.md), loaded on
first use so that ``import harness`` stays light. ``harness.run`` and ``harness.load`` are
shortcuts; ``compare`` and ``report`` are reached as ``harness.api.compare`` /
``harness.api.report`` (``harness.compare`` and ``harness.report`` are the modules).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["api", "run", "load"]


def __getattr__(name: str) -> Any:  # PEP 562: nothing heavy until asked for
    if name == "api":
        return importlib.import_module("harness.api")
    if name in ("run", "load", "HarnessError"):
        return getattr(importlib.import_module("harness.api"), name)
    raise AttributeError(f"module 'harness' has no attribute {name!r}")
