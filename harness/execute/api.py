"""``Executor``: what ``harness run`` needs of whatever places its cells, and ``make_executor``,
which picks one from the flags. Three implement it:

- ``InProcessExecutor`` (harness/execute/local.py, ``--no-isolation``): cells run in this process.
- ``LocalExecutor`` (harness/execute/local.py, the default): one isolated worker process per
  ``--devices`` entry, cases spread over them from a shared queue (harness/plan/balance.py).
- ``RayExecutor`` (harness/execute/ray_cluster.py, ``--ray``): one actor per GPU of a Ray cluster,
  each keeping one isolated local worker.

The run loop calls only these members, so a new executor is one class and one line here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Generator, Protocol, Sequence

if TYPE_CHECKING:
    from harness.execute.local import ExecOptions
    from harness.records.results import ResultRow
    from harness.plan.cells import Cell, RunOptions
    from harness.spec import Suite


class Executor(Protocol):
    @property
    def reports_versions(self) -> bool:
        """The workers report the backends' versions (``backend_versions``, filled once they are
        ready): the parent need not import the libraries to write run.json's ``backends``."""

    backend_versions: dict[str, dict[str, Any]]
    #: time.monotonic() when every worker was ready (None: no workers, or not known).
    t_all_ready: float | None

    def start(self, backends: Sequence[type]) -> None:
        """Start workers now (their imports overlap the parent's planning); may do nothing."""

    def run(self, cells: list[Cell], on_start: Callable[[Cell], None] | None = None) -> Generator[ResultRow, None, None]:
        """Every cell's row, as each finishes (``on_start`` before a cell runs, where known)."""

    def placement(self) -> str:
        """Where the cells run, for the run's first line: ``cpu (1 worker(s))``."""

    def header_fields(self) -> dict[str, Any]:
        """What run.json records about the workers once the rows are in (``workers``, ...)."""

    def close(self) -> None:
        """End whatever ``start``/``run`` left running."""


def make_executor(suite: Suite, opts: RunOptions, exec_opts: ExecOptions, ray: str | None = None) -> Executor:
    """The executor the flags ask for: ``--ray [ADDRESS]``, ``--no-isolation``, else local workers."""
    if ray is not None:
        from harness.execute.ray_cluster import RayExecutor

        return RayExecutor(suite, opts, exec_opts, address=ray)
    from harness.execute.local import InProcessExecutor, LocalExecutor

    return (LocalExecutor if exec_opts.isolation else InProcessExecutor)(suite, opts, exec_opts)
