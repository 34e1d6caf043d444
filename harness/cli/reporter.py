"""``ConsoleReporter``: what ``harness run`` shows of a run (harness/execute/runner.py's
``Reporter``) on two rich consoles: the run's first line, a progress bar with its ETA (on a
terminal; without one, harness/cli/progress.py's plain lines), the closing tables, the notes."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from rich.console import Console
from rich.markup import escape
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)

from harness.cli.common import console as cli_console, err_console as cli_err_console, terminal
from harness.cli.progress import PlainProgress

if TYPE_CHECKING:
    from harness.plan.cells import Cell
    from harness.records.results import ResultRow


class _BarProgress:
    def __init__(self, bar: Progress, task: Any, plain: PlainProgress | None) -> None:
        self.bar, self.task, self.plain = bar, task, plain

    def cell_started(self, cell: Cell) -> None:
        self.bar.update(self.task, description=escape(f"{cell.case.name[:40]} {cell.backend.name}"))

    def row_done(self, row: ResultRow) -> None:
        self.bar.advance(self.task)
        if self.plain is not None:
            self.plain.advance(row.group)


class ConsoleReporter:
    """A run on ``console`` (stdout) and ``err_console`` (stderr; default: ``harness.cli``'s
    two, which a program may replace). ``quiet``: no progress bar or progress lines."""

    def __init__(self, console: Console | None = None, err_console: Console | None = None,
                 quiet: bool = False) -> None:
        self.console = console or cli_console()
        self.err_console = err_console or cli_err_console()
        self.quiet = quiet

    def notice(self, text: str) -> None:
        self.console.print(text)

    def started(self, suite: str, cells: int, placement: str, out_dir: Path) -> None:
        self.console.print(f"[bold]{escape(suite)}[/]: {cells} cells on {placement} -> {out_dir}")

    @contextlib.contextmanager
    def progress(self, total: int, label: str) -> Iterator[_BarProgress]:
        with Progress(TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), console=self.console,
                      transient=False, disable=self.quiet) as bar:
            task = bar.add_task("starting", total=total)
            # No terminal (a pipe, a CI log): a line per case group and every 10 s, with the ETA.
            plain = None if self.quiet or self.console.is_terminal else PlainProgress(self.console, total, label)
            yield _BarProgress(bar, task, plain)
            bar.update(task, description="done")

    def summary(self, rows: list[ResultRow], out_dir: Path) -> None:
        terminal.print_summary(rows, out_dir, self.console, self.err_console)

    def nothing_ran(self, hint: str) -> None:
        self.err_console.print(hint, highlight=False, soft_wrap=True)

    def failed(self, count: int, strict: bool) -> None:
        # A run that found a broken cell exits 0 unless --strict: say so, every time.
        note = "exit 1" if strict else "exit 0; --strict makes that exit 1"
        self.err_console.print(f"{count} cell(s) failed (mismatch/error/timeout): {note}", highlight=False)
