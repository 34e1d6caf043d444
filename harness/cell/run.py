"""One cell (case x backend x variant) -> one typed result row.

``run_cell`` walks the stages in order (prepare, first call, check, timing, re-check), each a
small function that fills its part of a ``RowDraft`` with the typed payload it produced; the
draft becomes a validated ``ResultRow`` once, at the end. A backend that rejects the batch
gives an ``unsupported`` row, one that raises an ``error`` row naming the stage."""

from __future__ import annotations

import traceback
from dataclasses import asdict, dataclass, field, fields, replace
from enum import StrEnum
from typing import Any, Callable

import torch

from attn_contract import (
    AttentionBackend,
    AttentionConfig,
    Capabilities,
    CommonAttentionMetadata,
    decode_first_order,
    lse_to_natural,
)
from harness.cell.accounting import Stopwatch, _sync, breakdown
from harness.cell.cascade import decide as decide_cascade
from harness.cell.check import check_output, tolerance_for
from harness.case.layout import CaseLayout, case_layout
from harness.case.metrics import layout_work
from harness.plan.cells import Cell, RunOptions, reproducer, timing_skip_reason
from harness.case.reference import reference_attention, reference_lse_for
from harness.records.results import (BatchSummary, Call, Check, Host, InvariantResult, Metrics, Recheck, ResultRow, RowConfig,
                             RowLayout, Status, Timing, VariantAxes, variant_label)
from harness.case.roofline import get_ceilings, roofline_metrics
from harness.spec import CaseSpec, Suite
from harness.timing import GraphDecision, TimingOptions, graph_decision, time_callable
from harness.case.workload import Batch, generate

SENTINEL = 3.0e4  # finite, exactly representable in fp16/bf16, far outside any attention output


class CaseContext:
    """Per-case data shared by the backends: the batch and its reference, made once."""

    def __init__(self, case: CaseSpec, device: torch.device, want_reference: bool):
        sw = Stopwatch(device)
        self.layout: CaseLayout = case_layout(case)
        self.batch: Batch = generate(case, device, self.layout)
        sw.lap("generate")
        self.ref_out: torch.Tensor | None = None
        self.ref_lse: torch.Tensor | None = None
        if want_reference:
            self.ref_out, self.ref_lse = reference_attention(self.batch)
            sw.lap("reference")
        # Case-level stages, made once and shared by the case's cells (rows say by how many).
        self.case_ms = sw.ms
        self.num_cells = 1


class CellStage(StrEnum):
    """Where a cell is; an error row's reason starts with it ("metadata build: ...")."""

    PREPARE = "prepare"
    KV_CACHE = "kv cache"
    BUILD = "metadata build"
    FORWARD = "forward"
    CHECK = "check"
    TIMING = "timing"


@dataclass
class CellTrace:
    """A cell's progress: the stage it is in (for the error reason), where its wall time went
    (``stopwatch``) and the host-side figures of the row (``host``: ``Host`` field -> value)."""

    stopwatch: Stopwatch
    stage: CellStage = CellStage.PREPARE
    host: dict[str, float] = field(default_factory=dict)


class CellUnsupported(Exception):
    """The backend cannot run this batch (``check_batch_support``): a status, not an error."""


# ---------------------------------------------------------------- the row being built
@dataclass
class RowDraft:
    """A result row while its cell runs: identity first, then each payload, typed, as the stage
    that measures it finishes. ``finish`` validates the whole row once (status invariants)."""

    suite: str
    case: str
    backend: str
    variant: dict[str, Any]
    variant_label: str
    device: str
    config: RowConfig
    case_group: str
    case_params: dict[str, Any]
    reproducer: str
    variant_axes: VariantAxes | None = None
    batch: BatchSummary = field(default_factory=BatchSummary)
    layout: RowLayout | None = None
    status: Status = Status.PASS
    reason: str = ""
    check: Check | None = None
    timing: Timing | None = None
    metrics: Metrics | None = None
    host: Host | None = None
    call: Call | None = None
    timing_skipped: str | None = None
    traceback: str | None = None

    def mark(self, status: Status, reason: str) -> None:
        self.status, self.reason = status, reason

    def mismatch(self, reason: str) -> None:
        """A later finding turns a passing row into a mismatch (the first reason stays)."""
        if self.status == Status.PASS:
            self.mark(Status.MISMATCH, reason)

    def inputs_written(self, touched: str) -> None:
        """The backend wrote into its own inputs: a mismatch whatever the output says."""
        assert self.check is not None
        self.mark(Status.MISMATCH, f"backend wrote into its inputs ({touched}); {self.reason}".rstrip("; "))
        self.check.inputs_modified = touched

    def finish(self, checked: bool) -> ResultRow:
        """The typed row; with checking on (``checked``), a row that ran must carry its check."""
        return ResultRow.model_validate({f.name: getattr(self, f.name) for f in fields(self)},
                                        context={"checked": checked})


def row_config_fields(cfg: AttentionConfig) -> dict[str, Any]:
    """The layer's fields a row records; the MLA ones only on MLA cells (MHA rows keep their shape)."""
    d = asdict(cfg)
    if not cfg.is_mla:
        for key in ("v_head_size", "attention_kind", "mla"):
            d.pop(key)
    return d


def base_row(cell: Cell, suite: Suite, opts: RunOptions) -> RowDraft:
    """A cell's identity: what every row of it carries, whatever happens next."""
    cfg = cell.case.attention_config()
    return RowDraft(
        suite=suite.suite, case=cell.case.name, backend=cell.backend.name, variant=cell.variant,
        variant_label=variant_label(cell.variant), device=str(opts.device),
        config=RowConfig.model_validate({**row_config_fields(cfg), "seed": cell.case.seed, "tags": list(cell.case.tags)}),
        case_group=cell.case.group or cell.case.name, case_params=dict(cell.case.params),
        reproducer=reproducer(cell, opts),
        variant_axes=VariantAxes.model_validate(cell.axes) if cell.axes else None)


def status_row(cell: Cell, suite: Suite, opts: RunOptions, status: Status, reason: str) -> ResultRow:
    """A row for a cell that did not run (or whose worker died): no measurements."""
    draft = base_row(cell, suite, opts)
    draft.mark(status, reason)
    return ResultRow.model_validate({f.name: getattr(draft, f.name) for f in fields(draft)})


def _short_error(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    first = msg[0] if msg else ""
    return f"{type(e).__name__}: {first}"[:500]


# ---------------------------------------------------------------- prepare
@dataclass
class PreparedCell:
    """Everything the first call, the check and the timing of one cell need, built once by
    ``prepare_cell``: the batch as the backend sees it, its KV cache, built metadata, the impl
    and NaN-filled output buffers."""

    backend: type[AttentionBackend]
    variant: dict[str, Any]
    config: AttentionConfig
    caps: Capabilities
    device: torch.device
    view: Batch  # the batch in the backend's order (decode-first where it asks for that)
    token_index: torch.Tensor | None  # view token -> batch token; None when the order is the batch's
    kv_cache: torch.Tensor  # in the backend's own layout
    common: CommonAttentionMetadata
    impl: Any
    metadata: Any
    out: torch.Tensor  # NaN-filled: elements the kernel leaves unwritten stay NaN
    lse: torch.Tensor | None
    cascade_rule: Any = None  # vLLM's cascade rule for this batch (cascade backends only)
    order: list[int] | None = None  # view request -> batch request, when reordered

    def forward(self, out: torch.Tensor | None = None, lse: torch.Tensor | None = None) -> None:
        """One forward call into ``out`` (default: the cell's output buffer)."""
        v = self.view
        self.impl.forward(v.query, v.key, v.value, self.kv_cache, self.metadata,
                          self.out if out is None else out, lse)

    def timed_call(self) -> None:
        """What timing repeats: a forward into the output buffer, no LSE."""
        self.forward()

    def graph_decision(self, enabled: bool = True) -> GraphDecision:
        """Whether timing may replay this cell from a CUDA graph: only where the backend's
        declared level covers this batch's shape (and the impl says the call is graph-safe)."""
        cuda = self.device.type == "cuda"
        safe = self.impl.graph_safe(self.metadata) if self.caps.cudagraph > 0 and cuda else None
        return graph_decision(self.caps.cudagraph, self.view.query_lens, safe, enabled=enabled,
                              device_type=self.device.type)


def prepare_cell(backend: type[AttentionBackend], variant: dict[str, Any], batch: Batch, device: torch.device,
                 trace: CellTrace | None = None) -> PreparedCell:
    """Turn a generated batch into a ready-to-call cell: reorder it if the backend asks,
    materialize the KV cache in its layout, build the metadata (timed: ``host.build_ms``).
    Raises ``CellUnsupported`` for a batch the backend declines; other exceptions are the
    backend's errors, ``trace.stage`` says where."""
    trace = trace or CellTrace(Stopwatch(device))
    sw = trace.stopwatch
    cfg = batch.config
    caps = backend.capabilities(variant)
    trace.stage = CellStage.PREPARE
    # Backends that want decodes first (FlashInfer) get the batch reordered, as vLLM's
    # model runner does; outputs are mapped back through token_index for the check.
    order = None
    if caps.reorder_batch_threshold is not None:
        order = decode_first_order(batch.query_lens, caps.reorder_batch_threshold)
        view, token_index = batch.reordered(order)
    else:
        view, token_index = batch, None
    # Each cell gets its own inputs, so a backend that writes into them is caught (see
    # ``changed_inputs``) and cannot hand the next backend of the case corrupted data.
    view = replace(view, query=view.query.clone(), key=view.key.clone(), value=view.value.clone())
    # Batch-dependent limits (e.g. cascade needs a shared prefix) are a status, not an error.
    batch_reason = backend.check_batch_support(view.common_metadata(), variant, config=cfg)
    if batch_reason:
        raise CellUnsupported(batch_reason)
    trace.stage = CellStage.KV_CACHE
    kv_cache = backend.materialize_kv_cache(view.kv_cache, cfg.kv_layout)
    if kv_cache.untyped_storage().data_ptr() == view.kv_cache.untyped_storage().data_ptr():
        kv_cache = kv_cache.clone()  # NHD materializes as the canonical tensor itself
    common = view.common_metadata()
    # What vLLM's rule would pick for this batch, recorded to compare with the measurement.
    rule = decide_cascade(common, cfg, device) if caps.cascade else None
    sw.lap("prepare")
    builder = backend.get_builder_cls()(cfg, variant, device)
    impl = backend.get_impl_cls()(cfg, variant, device, view.layer)
    sw.lap("setup")
    out = torch.full((view.num_tokens, cfg.num_heads, cfg.value_head_size), float("nan"), dtype=cfg.torch_dtype,
                     device=view.query.device)
    lse = torch.full((view.num_tokens, cfg.num_heads), float("nan"), device=device) if caps.returns_lse else None
    sw.lap("prepare")
    trace.stage = CellStage.BUILD
    metadata = builder.build(common)
    trace.host["build_ms"] = sw.lap("build")
    return PreparedCell(backend, variant, cfg, caps, device, view, token_index, kv_cache, common, impl, metadata,
                        out, lse, rule, order)


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equality (NaN-safe: adversarial cases put NaN in unused cache slots)."""
    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    width = ints[a.element_size()]
    return a.shape == b.shape and torch.equal(a.view(width), b.to(a.device).view(width))


def changed_inputs(prepared: PreparedCell, batch: Batch) -> str:
    """Which of the cell's own inputs no longer match the case's originals ("" when none)."""
    v, idx = prepared.view, prepared.token_index
    names = [n for n, mine, orig in (("query", v.query, batch.query), ("key", v.key, batch.key),
                                     ("value", v.value, batch.value))
             if not _same_bits(mine, orig if idx is None else orig[idx])]
    if not _same_bits(prepared.kv_cache, prepared.backend.materialize_kv_cache(batch.kv_cache, batch.config.kv_layout)):
        names.append("kv_cache")
    return ", ".join(names)


# ---------------------------------------------------------------- the stages of run_cell
Judge = Callable[..., Check]


def first_call(prepared: PreparedCell, draft: RowDraft, trace: CellTrace) -> None:
    """The first forward (JIT included) and what the backend says it called."""
    trace.stage = CellStage.FORWARD
    prepared.forward(lse=prepared.lse)
    trace.host["first_call_ms"] = trace.stopwatch.lap("first_call")
    facts = dict(prepared.impl.describe_call(prepared.metadata) or {})
    if prepared.cascade_rule is not None:
        facts.update(prepared.cascade_rule.call_fields())
    draft.call = Call.model_validate(facts)


def make_judge(prepared: PreparedCell, case_data: CaseContext) -> Judge:
    """The check of one output (and LSE) of this cell against the case's reference."""
    batch, cfg, view = case_data.batch, case_data.batch.config, prepared.view
    ref_out = case_data.ref_out
    # The LSE a backend's declared ALiBi convention gives (outputs are the same either way).
    ref_lse = reference_lse_for(batch, case_data.ref_lse, prepared.caps.alibi_lse)
    if prepared.token_index is not None:
        ref_out, ref_lse = ref_out[prepared.token_index], ref_lse[prepared.token_index]
    tol = tolerance_for(cfg.dtype, cfg.kv_cache_dtype)

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


def time_cell(prepared: PreparedCell, case_data: CaseContext, opts: RunOptions, draft: RowDraft,
              trace: CellTrace) -> None:
    """Timing (harness/timing/) and the work and roofline figures of the measured time."""
    sw, device = trace.stopwatch, opts.device
    trace.stage = CellStage.TIMING
    timing_opts = opts.timing or TimingOptions.for_device(device)
    graph = prepared.graph_decision(enabled=timing_opts.cuda_graph)
    measured = time_callable(prepared.timed_call, device, timing_opts, graph=graph, output=prepared.out)
    sw.lap("timing")
    enqueue_us = measured.pop("host_enqueue_us", None)
    timing = Timing.model_validate(measured)
    if enqueue_us is not None:
        trace.host["enqueue_us"] = enqueue_us  # host cost of launching one call, kept out of median_us
    work = layout_work(case_data.layout)
    t = timing.median_us * 1e-6
    ceilings, why_not = get_ceilings(device) if opts.roofline else (None, "disabled")
    draft.metrics = Metrics.model_validate(
        {**work.as_dict(), **roofline_metrics(work.flops, work.bytes, t, ceilings, why_not)})
    draft.timing = timing
    sw.lap("metrics")


def recheck(prepared: PreparedCell, cell: Cell, batch: Batch, judge: Judge, timed: bool, opts: RunOptions,
            draft: RowDraft, trace: CellTrace) -> None:
    """Check what was timed: the output the timed calls (graph replays included) left, then one
    more call into a NaN-poisoned buffer. Catches metadata that drifts after the first call and
    kernels that write only part of a reused buffer. Then the invariants (--invariants)."""
    assert draft.check is not None
    trace.stage = CellStage.CHECK
    later = []
    if timed:
        later.append(("after timing", prepared.out.clone(), None))
    poisoned = torch.full_like(prepared.out, float("nan"))
    lse2 = torch.full_like(prepared.lse, float("nan")) if prepared.lse is not None else None
    prepared.forward(out=poisoned, lse=lse2)
    _sync(opts.device)
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
        from harness.cell.invariants import check_invariants  # imports this module

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


def run_cell(cell: Cell, case_data: CaseContext, suite: Suite, opts: RunOptions) -> ResultRow:
    """Run one backend variant on one prepared case. Backend failures become an ``error`` row."""
    if cell.case.context_parallel is not None:  # KV sharded over ranks: harness/cell/context_parallel/
        from harness.cell.context_parallel.cell import run_cp_cell

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
        if timed:
            time_cell(prepared, case_data, opts, draft, trace)
        if judge is not None:
            recheck(prepared, cell, batch, judge, timed, opts, draft, trace)
        diagnose(prepared, cell, draft)
    except Exception as e:  # a backend that rejects or crashes costs only its own cell
        # Diagnostics of the stages that finished (call, check) stay; no number from a failed cell.
        draft.timing = draft.metrics = None
        draft.mark(Status.ERROR, f"{trace.stage}: {_short_error(e)}")
        draft.traceback = traceback.format_exc(limit=8)
    draft.host = Host.model_validate({**trace.host, **breakdown(trace.stopwatch, case_data)})
    return draft.finish(opts.check)
