"""The closing tables and verdict of ``harness run`` on ``harness.cli``'s consoles (the wall-time
bookkeeping and the exit code are the runner's: harness/execute/run_end.py)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.cli.common import console, err_console, terminal

if TYPE_CHECKING:
    from harness.records.results import ResultRow


def print_summary(rows: list[ResultRow], out_dir: Path, max_rows: int = 80) -> None:
    """The run's tables and verdict (harness/report/terminal/tables.py), on harness.cli's consoles."""
    terminal.print_summary(rows, out_dir, console(), err_console(), max_rows)


def fmt(*a: Any, **k: Any) -> Any:  # older names of the terminal's helpers (harness.cli._fmt, ...)
    return terminal.fmt(*a, **k)


def reason_kind(*a: Any, **k: Any) -> Any:
    return terminal.reason_kind(*a, **k)


def letter_ids(*a: Any, **k: Any) -> Any:
    return terminal.letter_ids(*a, **k)
