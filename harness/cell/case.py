"""Suite -> result rows: generate each case once, then for every backend variant decide
(available? supported? fits?), build metadata, run, check against the reference, time.

The work is split by job: harness/plan/cells.py (options, cells, prechecks), harness/cell/prepare.py
(the case's batch, a cell's inputs, the row draft), harness/cell/run.py (one cell -> one typed row)
and harness/cell/accounting.py (where the wall time went). This module runs one case's cells in
order; import each name from the module that defines it."""

from __future__ import annotations

import time
from typing import Callable, Iterator

import torch

from harness.cell.prepare import CaseContext, short_error, status_row
from harness.cell.run import run_cell
from harness.plan.cells import IMPORTED, Cell, RunOptions, precheck
from harness.records.results import ResultRow, Status
from harness.spec import Suite


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
    try:
        for cell in runnable:
            if on_event:
                on_event("cell", cell)
            row = run_cell(cell, case_data, suite, opts)
            if row.host is not None and row.host.breakdown_ms is not None:
                # availability/support/memory checks, made before the case's batch existed
                row.host.breakdown_ms["precheck"] = precheck_ms.get(id(cell), 0.0)
                if id(cell) in import_ms:
                    row.host.breakdown_ms["import"] = import_ms[id(cell)]
            yield row
    finally:
        del case_data
        if opts.device.type == "cuda":
            torch.cuda.empty_cache()
