"""The messages between a run's parent and its workers (harness/execute/local.py): typed, pickled
as they are. Moved out of executor.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.plan.cells import Cell
from harness.records.results import ResultRow


# Parent -> worker
@dataclass(frozen=True)
class RunCase:
    """Run these cells (all of one case; the worker makes its batch and reference once)."""

    cells: list[Cell]


@dataclass(frozen=True)
class Shutdown:
    """Exit now (the worker is idle)."""


# Worker -> parent
@dataclass(frozen=True)
class WorkerReady:
    """The worker has torch and its CUDA context and waits for a case (the backends' libraries
    are still importing on a thread: ``LibrariesReady`` follows)."""

    pid: int


@dataclass(frozen=True)
class LibrariesReady:
    """Every backend's library the worker was asked to import is imported (harness/execute/worker/imports.py);
    ``import_s``: seconds each backend's first availability probe took."""

    import_s: dict[str, float] = field(default_factory=dict)
    versions: dict[str, dict[str, Any]] = field(default_factory=dict)  # the run header's "backends"


@dataclass(frozen=True)
class PreparingCase:
    """Generating the case's batch and reference (a crash or hang now is the case's)."""


@dataclass(frozen=True)
class CellStarted:
    """The cell with this key (``cell_key``) is running (a crash or hang now is this cell's)."""

    key: tuple[str, str, str, str]


@dataclass(frozen=True)
class RowDone:
    """A finished cell's typed row, with the worker's pid and device (pickled as it is)."""

    row: ResultRow


@dataclass(frozen=True)
class CasePartDeferred:
    """These cells of the case were not run: their backends' libraries were still importing.
    The parent queues them again (they run later as a case of their own); ``CaseDone`` follows."""

    cells: list[Cell]


@dataclass(frozen=True)
class CaseDone:
    """Every cell of the case has its row; the worker is idle again."""


@dataclass(frozen=True)
class CaseFailed:
    """A harness error outside any cell; the case's remaining cells get ``error`` rows."""

    error: str
    traceback: str


@dataclass(frozen=True)
class RestartMe:
    """The worker's CUDA context is no longer trustworthy (sent after the failing row); it exits."""

    reason: str


WorkerMessage = WorkerReady | LibrariesReady | CasePartDeferred | PreparingCase | CellStarted | RowDone | CaseDone | CaseFailed | RestartMe
