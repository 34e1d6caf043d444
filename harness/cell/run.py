"""One cell (case x backend x variant) -> one typed result row.

``run_cell`` walks the stages in order (prepare, first call, check, timing, re-check), each a
small function that fills its part of a ``RowDraft`` with the typed payload it produced; the
draft becomes a validated ``ResultRow`` once, at the end. A backend that rejects the batch
gives an ``unsupported`` row, one that raises an ``error`` row naming the stage."""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable

import torch

from attn_contract import (
    MLA_EXPANDED,
    lse_to_natural,
)
from harness.cell.accounting import Stopwatch, sync, breakdown
from harness.cell.check import check_output, kernel_kv_dtype, tolerance_for
from harness.cell.context_parallel.cell import run_cp_cell
from harness.cell.graph_replay import graph_mode_stage
from harness.cell.invariants import check_invariants
from harness.case.metrics import layout_work
from harness.plan.cells import Cell, RunOptions, timing_skip_reason
from harness.case.reference import reference_lse_for
from harness.records.results import (BatchSummary, Call, Check, Host, InvariantResult, Metrics, Recheck, ResultRow, RowLayout, Status, Timing)
from harness.case.roofline import get_ceilings, roofline_metrics
from harness.spec import Suite
from harness.timing import GraphDecision, TimingOptions, time_callable
from harness.case.workload import Batch

from harness.cell.prepare import (
    SENTINEL, CaseContext, CellStage, CellTrace, CellUnsupported, PreparedCell, RowDraft, base_row, changed_inputs,
    prepare_cell, short_error)


# ---------------------------------------------------------------- the stages of run_cell
Judge = Callable[..., Check]


# The expanded (prefill) form gets its context K/V already up-projected, for every backend alike.
MLA_UPPROJECTION_NOTE = ("the context's up-projection (kv_b_proj over each request's cached latent, which vLLM runs "
                         "every chunked-prefill step) is not timed, for any backend: K/V arrive up-projected")


def first_call(prepared: PreparedCell, draft: RowDraft, trace: CellTrace) -> None:
    """The first forward (JIT included) and what the backend says it called."""
    trace.stage = CellStage.FORWARD
    prepared.forward(lse=prepared.lse)
    trace.host["first_call_ms"] = trace.stopwatch.lap("first_call")
    facts = dict(prepared.impl.describe_call(prepared.metadata) or {})
    if prepared.cascade_rule is not None:
        facts.update(prepared.cascade_rule.call_fields())
    if prepared.config.attention_kind == MLA_EXPANDED:
        facts["untimed_work"] = MLA_UPPROJECTION_NOTE
    draft.call = Call.model_validate(facts)


def make_judge(prepared: PreparedCell, case_data: CaseContext) -> Judge:
    """The check of one output (and LSE) of this cell against the case's reference."""
    batch, cfg, view = case_data.batch, case_data.batch.config, prepared.view
    ref_out = case_data.ref_out
    assert ref_out is not None and case_data.ref_lse is not None  # called only where the reference was made
    # The LSE a backend's declared ALiBi convention gives (outputs are the same either way).
    ref_lse = reference_lse_for(batch, case_data.ref_lse, prepared.caps.alibi_lse)
    if prepared.token_index is not None:
        ref_out, ref_lse = ref_out[prepared.token_index], ref_lse[prepared.token_index]
    tol = tolerance_for(cfg.dtype, kernel_kv_dtype(cfg))

    def judge(o: torch.Tensor, l: torch.Tensor | None, unwritten: torch.Tensor | None = None) -> Check:
        # Each request (and segment kind) judged on its own; see harness/cell/check.py. The
        # LSE is read in the base the backend declares: a wrong declaration fails here.
        l = lse_to_natural(l, prepared.caps.lse_base) if l is not None else None
        return check_output(o, ref_out, tol, l, ref_lse if l is not None else None, unwritten,
                            query_start_loc=view.query_start_loc, kinds=view.kinds,
                            seq_lens=view.seq_lens, request_ids=prepared.order)
    return judge


def check_first_output(prepared: PreparedCell, batch: Batch, judge: Judge, draft: RowDraft, trace: CellTrace) -> None:
    """The first call's output against the reference, and the inputs the backend may have written."""
    trace.stage = CellStage.CHECK
    unwritten = None
    if torch.isnan(prepared.out).any():
        # Second run with a finite sentinel tells unwritten elements from computed NaNs.
        probe = torch.full_like(prepared.out, SENTINEL)
        prepared.forward(out=probe)
        unwritten = probe == SENTINEL
    draft.check = judge(prepared.out, prepared.lse, unwritten)
    if not draft.check.passed:
        draft.mark(Status.MISMATCH, draft.check.message)
    touched = changed_inputs(prepared, batch)
    if touched:
        draft.inputs_written(touched)
    trace.stopwatch.lap("check")


def timing_call(prepared: PreparedCell, opts: RunOptions) -> tuple[Callable[[], None], GraphDecision, torch.Tensor]:
    """What timing repeats for a cell, its graph decision and the output a replay is checked on."""
    timing_opts = opts.timing or TimingOptions.for_device(opts.device)
    return prepared.timed_call, prepared.graph_decision(enabled=timing_opts.cuda_graph), prepared.out


def time_cell(prepared: PreparedCell, case_data: CaseContext, opts: RunOptions, draft: RowDraft,
              trace: CellTrace, measured: dict[str, Any] | None = None, timing_ms: float = 0.0) -> None:
    """Timing (harness/timing/) and the work and roofline figures of the measured time.
    ``measured``: the record when the cell was timed with others of its case (interleaved
    rounds, ``timing_ms`` its share of their wall time), else it is timed here."""
    sw, device = trace.stopwatch, opts.device
    trace.stage = CellStage.TIMING
    if measured is None:
        fn, graph, out = timing_call(prepared, opts)
        measured = time_callable(fn, device, opts.timing or TimingOptions.for_device(device), graph=graph, output=out)
        sw.lap("timing")
    else:
        measured = dict(measured)
        sw.ms["timing"] = sw.ms.get("timing", 0.0) + timing_ms
        sw.skip()
    enqueue_us = measured.pop("host_enqueue_us", None)
    timing = Timing.model_validate(measured)
    if enqueue_us is not None:
        trace.host["enqueue_us"] = enqueue_us  # host cost of launching one call, kept out of median_us
    work = layout_work(case_data.layout)
    t = timing.median_us * 1e-6
    ceilings, why_not = get_ceilings(device) if opts.roofline else (None, "disabled")
    draft.metrics = Metrics.model_validate(
        {**work.model_dump(), **roofline_metrics(work.flops, work.bytes, t, ceilings, why_not)})
    draft.timing = timing
    sw.lap("metrics")


def recheck(prepared: PreparedCell, cell: Cell, batch: Batch, judge: Judge, timed: bool, opts: RunOptions,
            draft: RowDraft, trace: CellTrace) -> None:
    """Check what was timed: the output the timed calls (graph replays included) left, then one
    more call into a NaN-poisoned buffer. Catches metadata that drifts after the first call and
    kernels that write only part of a reused buffer. Then the invariants (--invariants)."""
    assert draft.check is not None
    trace.stage = CellStage.CHECK
    later: list[tuple[str, torch.Tensor, torch.Tensor | None]] = []
    if timed:
        later.append(("after timing", prepared.out.clone(), None))
    poisoned = torch.full_like(prepared.out, float("nan"))
    lse2 = torch.full_like(prepared.lse, float("nan")) if prepared.lse is not None else None
    prepared.forward(out=poisoned, lse=lse2)
    sync(opts.device)
    later.append(("repeat call", poisoned, lse2))
    rechecks = []
    for when, o2, l2 in later:
        r2 = judge(o2, l2)
        rechecks.append(Recheck(when=when, passed=r2.passed, message=r2.message, rel_l2_err=r2.rel_l2_err,
                                num_failed_requests=r2.num_failed_requests))
        if not r2.passed:
            draft.mismatch(f"{when}: {r2.message}")
    draft.check.rechecks = rechecks
    if opts.invariants:
        inv: list[InvariantResult] = check_invariants(cell.backend, cell.variant, batch, opts.device)
        draft.check.invariants = inv
        broken = [r for r in inv if r.status in (Status.MISMATCH, Status.ERROR)]
        if broken:
            draft.mismatch(f"invariant {broken[0].invariant}: {broken[0].detail}")
    touched = changed_inputs(prepared, batch)
    if touched and draft.check.inputs_modified is None:
        draft.inputs_written(touched)
    trace.stopwatch.lap("check")


def diagnose(prepared: PreparedCell, cell: Cell, draft: RowDraft) -> None:
    """A mismatch the backend recognises as a known library bug gets its one-line diagnosis."""
    if draft.status != Status.MISMATCH or draft.check is None:
        return
    # The backend reads the check as its JSON dict (the contract knows no harness types).
    diagnosis = cell.backend.diagnose_mismatch(prepared.config, cell.variant, prepared.view.layer,
                                               draft.check.model_dump())
    if diagnosis:
        draft.reason = f"{draft.reason}; {diagnosis}"
        draft.check.diagnosis = diagnosis


@dataclass
class CellInProgress:
    """A cell stopped before its timing (``start_cell``), to be timed with the other cells of
    its case and finished by ``end_cell``."""

    cell: Cell
    draft: RowDraft
    trace: CellTrace
    prepared: PreparedCell
    judge: Judge | None
    timed: bool
    paused_at: float = 0.0  # perf_counter when it stopped: the wait for the others is not its time
    graph_modes: bool = False  # the suite asks for the graph-mode axis (harness/cell/graph_replay.py)


def _error(draft: RowDraft, trace: CellTrace, e: BaseException) -> None:
    # Diagnostics of the stages that finished (call, check) stay; no number from a failed cell.
    draft.timing = draft.metrics = None
    draft.mark(Status.ERROR, f"{trace.stage}: {short_error(e)}")
    draft.traceback = "".join(traceback.format_exception(e, limit=8))


def _done(draft: RowDraft, trace: CellTrace, case_data: CaseContext, opts: RunOptions) -> ResultRow:
    draft.host = Host.model_validate({**trace.host, **breakdown(trace.stopwatch, case_data)})
    return draft.finish(opts.check)


def start_cell(cell: Cell, case_data: CaseContext, suite: Suite, opts: RunOptions) -> CellInProgress | ResultRow:
    """A cell's stages up to its timing (prepare, first call, check); its row when it ends
    there (unsupported, an error, a context-parallel cell, which runs whole)."""
    if cell.case.context_parallel is not None:  # KV sharded over ranks: harness/cell/context_parallel/
        return run_cp_cell(cell, case_data, suite, opts)
    draft = base_row(cell, suite, opts)
    batch = case_data.batch
    draft.batch = BatchSummary.model_validate(batch.summary())
    draft.layout = RowLayout.model_validate(case_data.layout.as_dict())
    trace = CellTrace(Stopwatch(opts.device))
    try:
        try:
            prepared = prepare_cell(cell.backend, cell.variant, batch, opts.device, trace)
        except CellUnsupported as e:
            draft.mark(Status.UNSUPPORTED, str(e))
            return draft.finish(opts.check)
        first_call(prepared, draft, trace)
        judge = None
        if opts.check and case_data.ref_out is not None:
            trace.stage = CellStage.CHECK
            judge = make_judge(prepared, case_data)
            check_first_output(prepared, batch, judge, draft, trace)
        timed = opts.time
        skipped = timing_skip_reason(prepared.caps, opts.device.type, opts)
        if skipped:
            timed, draft.timing_skipped = False, skipped
    except Exception as e:  # a backend that rejects or crashes costs only its own cell
        _error(draft, trace, e)
        return _done(draft, trace, case_data, opts)
    return CellInProgress(cell, draft, trace, prepared, judge, timed, time.perf_counter(),
                          graph_modes=suite.graph_modes)


def end_cell(p: CellInProgress, case_data: CaseContext, opts: RunOptions,
             measured: dict[str, Any] | BaseException | None = None, timing_ms: float = 0.0) -> ResultRow:
    """Timing (here, or the record ``measured`` with the case's other cells), the re-check and
    the diagnosis, then the row."""
    draft, trace, prepared = p.draft, p.trace, p.prepared
    try:
        if p.timed:
            if isinstance(measured, BaseException):
                trace.stage = CellStage.TIMING
                raise measured
            time_cell(prepared, case_data, opts, draft, trace, measured, timing_ms)
        if p.judge is not None:
            recheck(prepared, p.cell, case_data.batch, p.judge, p.timed, opts, draft, trace)
        if p.graph_modes and p.judge is not None:
            trace.stage = CellStage.CHECK
            draft.graph_modes = graph_mode_stage(prepared, draft, time_it=p.timed)
            trace.stopwatch.lap("check")
        diagnose(prepared, p.cell, draft)
    except Exception as e:  # a backend that rejects or crashes costs only its own cell
        _error(draft, trace, e)
    return _done(draft, trace, case_data, opts)


def run_cell(cell: Cell, case_data: CaseContext, suite: Suite, opts: RunOptions) -> ResultRow:
    """Run one backend variant on one prepared case. Backend failures become an ``error`` row."""
    started = start_cell(cell, case_data, suite, opts)
    return started if isinstance(started, ResultRow) else end_cell(started, case_data, opts)
