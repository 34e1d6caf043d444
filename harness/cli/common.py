"""What the command modules share: the consoles, the usage error, the light lazy imports."""

from __future__ import annotations

import sys

from rich.console import Console

from harness.cli.flags import UsageError  # noqa: F401  (commands raise it; main prints it, exit 2)
from harness.cli.lazy import LazyModule, lazy_function

EXIT_USAGE = 2
RESULTS_FILE = "results.jsonl"  # harness.records.results.RESULTS_FILE without its pydantic import (a test keeps them equal)

# Imported on first use: building the parser (--help, --version) loads neither torch nor pandas.
torch = LazyModule("torch")
registry = LazyModule("harness.registry")
terminal = LazyModule("harness.report.terminal.tables")  # imports the result models (pydantic)
check_suite_backends = lazy_function("harness.spec.registry_check", "check_suite_backends")
load_suite = lazy_function("harness.spec", "load_suite")
ResultWriter = lazy_function("harness.records.results", "ResultWriter")
read_rows = lazy_function("harness.records.results", "read_rows")
variant_label = lazy_function("harness.records.results", "variant_label")
write_header = lazy_function("harness.records.results", "write_header")

CONSOLE = Console(stderr=False)
ERR_CONSOLE = Console(stderr=True)


def console() -> Console:
    """``harness.cli.console``, looked up at each use: a program (or a test) may replace it."""
    return getattr(sys.modules.get("harness.cli"), "console", CONSOLE)


def err_console() -> Console:
    return getattr(sys.modules.get("harness.cli"), "err_console", ERR_CONSOLE)


def spec_error() -> type[Exception]:
    from harness.spec import SpecError

    return SpecError
