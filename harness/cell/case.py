"""Suite -> result rows: generate each case once, then for every backend variant decide
(available? supported? fits?), build metadata, run, check against the reference, time.

The work is split by job: harness/plan/cells.py (options, cells, prechecks), harness/cell/prepare.py
(the case's batch, a cell's inputs, the row draft), harness/cell/run.py (one cell -> one typed row)
and harness/cell/accounting.py (where the wall time went). This module runs one case's cells in
order; import each name from the module that defines it."""

from __future__ import annotations

import time
from typing import Any, Callable, Iterator

import torch

from harness.cell.prepare import CaseContext, short_error, status_row
from harness.cell.run import CellInProgress, end_cell, run_cell, start_cell, timing_call
from harness.plan.cells import IMPORTED, Cell, RunOptions, precheck, timing_skip_reason
from harness.records.results import ResultRow, Status
from harness.spec import Suite
from harness.timing import TimingOptions
from harness.timing.loop import time_in_turn, time_interleaved


def iterate_case(
    case_cells: list[Cell],
    suite: Suite,
    opts: RunOptions,
    on_start: Callable[[Cell], None] | None = None,
    on_event: Callable[[str, Cell | None], None] | None = None,
) -> Iterator[ResultRow]:
    """Rows of one case's cells (all of the same case). ``on_event("prepare", None)`` fires
    before the batch/reference is made and ``on_event("cell", cell)`` before each cell runs,
    so a supervising process knows what a crash or a hang belongs to."""
    case = case_cells[0].case
    runnable: list[Cell] = []
    precheck_ms: dict[int, float] = {}
    import_ms: dict[int, float] = {}  # the backend's first availability probe in this process
    for cell in case_cells:
        if on_start:
            on_start(cell)
        first = cell.backend not in IMPORTED
        t0 = time.perf_counter()
        reason, status = precheck(cell, opts)
        IMPORTED.add(cell.backend)
        precheck_ms[id(cell)] = (time.perf_counter() - t0) * 1e3
        if first:
            import_ms[id(cell)] = precheck_ms.pop(id(cell))
        if reason and status is not None:
            yield status_row(cell, suite, opts, status, reason)
        else:
            runnable.append(cell)
    if not runnable:
        return
    if on_event:
        on_event("prepare", None)
    try:
        case_data = CaseContext(case, opts.device, want_reference=opts.check)
        case_data.num_cells = len(runnable)
    except Exception as e:
        for cell in runnable:
            yield status_row(cell, suite, opts, Status.ERROR, f"generate/reference: {short_error(e)}")
        return
    def finish(row: ResultRow, cell: Cell) -> ResultRow:
        if row.host is not None and row.host.breakdown_ms is not None:
            # availability/support/memory checks, made before the case's batch existed
            row.host.breakdown_ms["precheck"] = precheck_ms.get(id(cell), 0.0)
            if id(cell) in import_ms:
                row.host.breakdown_ms["import"] = import_ms[id(cell)]
        return row

    try:
        if hold_together(runnable, opts):
            yield from _held(runnable, case_data, suite, opts, on_event, finish)
            return
        for cell in runnable:
            if on_event:
                on_event("cell", cell)
            yield finish(run_cell(cell, case_data, suite, opts), cell)
    finally:
        del case_data
        if opts.device.type == "cuda":
            torch.cuda.empty_cache()


def hold_together(cells: list[Cell], opts: RunOptions) -> bool:
    """Whether a case's timed cells are prepared and held in memory together, then timed: in
    interleaved rounds (``sampling`` interleaved, or auto on a GPU; harness/timing/interleave.py)
    or, ``sequential`` on a GPU, each alone in turn with the same placement as rounds
    (``time_in_turn``). Needs the run to time, more than one cell to be timed and those cells to
    fit in memory all prepared at once; otherwise each cell is prepared, timed and freed before
    the next (rows say ``sampling: sequential``)."""
    t = opts.timing
    if not opts.time or t is None or len(cells) < 2:
        return False
    if t.sampling != "interleaved" and opts.device.type != "cuda":
        return False  # the CPU holds cells only when rounds are asked for
    if any(c.case.context_parallel is not None for c in cells):
        return False  # a context-parallel cell runs whole (harness/cell/context_parallel/)
    # Cells that will not be timed (references) finish at once and are never held with the others.
    timed = [c for c in cells if not timing_skip_reason(c.backend.capabilities(c.variant), opts.device.type, opts)]
    if opts.fit_together is None:  # no memory check given: only when rounds are asked for explicitly
        return len(timed) > 1 and t.sampling == "interleaved"
    return len(timed) > 1 and opts.fit_together(timed) is None


def _held(cells: list[Cell], case_data: CaseContext, suite: Suite, opts: RunOptions,
                 on_event: Callable[[str, Cell | None], None] | None,
                 finish: Callable[[ResultRow, Cell], ResultRow]) -> Iterator[ResultRow]:
    """Every cell up to its timing, the timed ones held and timed together (in rounds, or in turn:
    ``hold_together``), then each one's re-check and row. A crash while sampling is attributed to the last cell started (the
    supervisor's view)."""
    started: list[CellInProgress] = []
    # Cells that will not be timed (references) first: they finish and free their memory before
    # the timed ones are prepared and held, so their peak never adds to the held cells'
    # (harness/plan/memory.py; a torch-math reference behind four held cells ran out of memory).
    held = [not timing_skip_reason(c.backend.capabilities(c.variant), opts.device.type, opts) for c in cells]
    for cell in [c for c, h in zip(cells, held) if not h] + [c for c, h in zip(cells, held) if h]:
        if on_event:
            on_event("cell", cell)
        got = start_cell(cell, case_data, suite, opts)
        if isinstance(got, ResultRow):
            yield finish(got, cell)
        elif not got.timed:  # nothing to wait for: its memory is freed now
            yield finish(end_cell(got, case_data, opts), cell)
        else:
            started.append(got)
    measured: dict[int, dict[str, Any] | BaseException] = {}
    share_ms = 0.0
    if len(started) > 1:
        t0 = time.perf_counter()
        timing = opts.timing or TimingOptions.for_device(opts.device)
        # Sustained: one after another on a queue kept full (each call's own settled state);
        # sequential: one after another, held as rounds hold them; otherwise rounds.
        in_turn = opts.device.type == "cuda" and (timing.clock_regime == "sustained" or timing.sampling == "sequential")
        together = time_in_turn if in_turn else time_interleaved
        # Keyed by the cell's position as text: the timing loops name their calls by str.
        records = together({str(i): timing_call(p.prepared, opts) for i, p in enumerate(started)}, opts.device, timing)
        share_ms = (time.perf_counter() - t0) * 1e3 / len(started)
        measured = {id(started[int(i)]): r for i, r in records.items()}
    for p in started:
        # The wait for the other cells is not this cell's time; its share of the rounds is.
        p.trace.stopwatch.start += time.perf_counter() - p.paused_at - (share_ms / 1e3 if id(p) in measured else 0.0)
        p.trace.stopwatch.skip()
        yield finish(end_cell(p, case_data, opts, measured.get(id(p)), share_ms), p.cell)
