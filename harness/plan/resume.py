"""``--resume DIR``: which cells of an interrupted run are still to run (docs/robustness.md)."""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Any

from harness.records.header import ResumeRecord, RunHeader
from harness.records.results import HEADER_FILE, RESULTS_FILE, read_rows, read_run_header, repair_torn_tail, variant_label
from harness.plan.cells import Cell
from harness.spec import Suite


def cell_key(suite: Suite, cell: Cell) -> tuple[str, str, str, str]:
    """The identity a result row has for this cell (``ResultRow.key``)."""
    return (suite.suite, cell.case.name, cell.backend.name, variant_label(cell.variant))


class ResumeError(ValueError):
    """A folder that cannot be resumed with this suite (one-line reason)."""


def check_resumable(out_dir: Path, suite: Suite, seed: int | None = None) -> tuple[RunHeader, list[Any]]:
    """``out_dir``'s header and rows, or ResumeError when this suite and seed cannot continue it.
    ``harness run`` asks before any worker starts, so a wrong folder costs nothing."""
    out_dir = Path(out_dir)
    return _resumable_header(out_dir, suite, seed), _rows(out_dir)


def _resumable_header(out_dir: Path, suite: Suite, seed: int | None) -> RunHeader:
    """run.json of the folder to resume, checked against this suite and seed (all fields unset
    where the folder has none)."""
    if not (out_dir / HEADER_FILE).exists() and not (out_dir / RESULTS_FILE).exists():
        raise ResumeError(f"--resume {out_dir}: no run.json or {RESULTS_FILE} there; nothing to resume")
    try:
        header = read_run_header(out_dir)
    except ValueError as e:
        raise ResumeError(f"--resume {out_dir}: {e}") from None
    if header.suite not in (None, suite.suite):
        raise ResumeError(f"--resume {out_dir}: it holds suite {header.suite!r}, not {suite.suite!r}")
    if "seed" in header.model_fields_set and header.seed != seed:
        ran = "without --seed (each case's own seed)" if header.seed is None else f"with --seed {header.seed}"
        now = "drop --seed" if header.seed is None else f"give --seed {header.seed}"
        raise ResumeError(f"--resume {out_dir}: it ran {ran}; resume with the same seed: {now}")
    return header


def _rows(out_dir: Path) -> list[Any]:
    try:
        return read_rows(out_dir) if (out_dir / RESULTS_FILE).exists() else []
    except ValueError as e:
        raise ResumeError(f"--resume {out_dir}: {e}") from None


def resume_plan(out_dir: Path, suite: Suite, cells: list[Cell], argv: list[str],
                seed: int | None = None) -> tuple[list[Cell], RunHeader]:
    """The cells of ``cells`` that ``out_dir`` has no row for, and its header with this resume
    recorded. A torn last line (the run was killed mid-write) is cut off first."""
    from harness.records.env import git_sha

    out_dir = Path(out_dir)
    header = _resumable_header(out_dir, suite, seed)  # a folder it refuses is left as it is
    torn = repair_torn_tail(out_dir / RESULTS_FILE)
    # Read after the cut: a last row whole but for its newline is cut there, so it runs again.
    rows = _rows(out_dir)
    done = {r.key for r in rows}
    todo = [c for c in cells if cell_key(suite, c) not in done]
    this = ResumeRecord(time_utc=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                        command=" ".join(argv), git_sha=git_sha(), rows_before=len(rows), cells_to_run=len(todo),
                        torn_bytes_removed=torn)
    return todo, header.updated(resumed=[*(header.resumed or []), this])
