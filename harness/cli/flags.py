"""Flags of the top-level parser: ``--version`` and ``-v``/``-vv`` (logging, quiet by default),
and ``UsageError``, the one kind of bad command-line input (harness/cli/run_flags.py raises it too)."""

from __future__ import annotations

import argparse
import logging

from harness.records.versions import VersionAction


class UsageError(Exception):
    """Bad command-line input: printed as one line, exit code 2."""


def add_global_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--version", action=VersionAction)
    p.add_argument("-v", dest="log_verbosity", action="count", default=0,
                   help="log what the harness does to stderr (-v: info, -vv: debug); quiet by default")


def configure_logging(args: argparse.Namespace) -> None:
    """One stderr handler on the ``harness`` logger; warnings only unless -v/-vv."""
    n = getattr(args, "log_verbosity", 0) or 0
    level = logging.WARNING if n == 0 else logging.INFO if n == 1 else logging.DEBUG
    log = logging.getLogger("harness")
    log.setLevel(level)
    if not any(getattr(h, "_harness", False) for h in log.handlers):
        h = logging.StreamHandler()
        h.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"))
        h._harness = True  # type: ignore[attr-defined]
        log.addHandler(h)
