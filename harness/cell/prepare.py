"""A cell's inputs before it runs: the case's shared batch and reference (``CaseContext``), the
backend's own copy of the batch and its metadata (``prepare_cell`` -> ``PreparedCell``), the row
being filled (``RowDraft``, ``base_row``, ``status_row``) and where a failure happened
(``CellStage``, ``CellTrace``). harness/cell/run.py runs the stages; the invariants and the
context-parallel cell prepare their own calls from here."""


from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from enum import StrEnum
from typing import Any

import torch

from attn_contract import (
    AttentionBackend,
    AttentionConfig,
    Capabilities,
    CommonAttentionMetadata,
    decode_first_order,
)
from harness.cell.accounting import Stopwatch
from harness.cell.cascade import decide as decide_cascade
from harness.case.layout import CaseLayout, case_layout
from harness.plan.cells import Cell, RunOptions, reproducer
from harness.case.reference import reference_attention
from harness.records.graph_modes import GraphModes
from harness.records.results import (UNCHECKED_REASON, BatchSummary, Call, Check, Host, Metrics, ResultRow, RowConfig,
                             RowLayout, Status, Timing, VariantAxes, variant_label)
from harness.spec import CaseSpec, Suite
from harness.timing import GraphDecision, graph_decision
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
    graph_modes: GraphModes | None = None

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
        """The typed row; with checking on (``checked``), a row that ran must carry its check.
        Without it (--no-check) a row that ran is ``unchecked``, never a pass no check made."""
        if not checked and self.status == Status.PASS and self.check is None:
            self.mark(Status.UNCHECKED, UNCHECKED_REASON)
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


def short_error(e: BaseException) -> str:
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
    builder: Any = None  # the metadata builder, kept for rebuilding metadata between graph replays

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
                        out, lse, rule, order, builder)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equality (NaN-safe: adversarial cases put NaN in unused cache slots)."""
    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    width = ints[a.element_size()]
    return a.shape == b.shape and torch.equal(a.view(width), b.to(a.device).view(width))


def changed_inputs(prepared: PreparedCell, batch: Batch) -> str:
    """Which of the cell's own inputs no longer match the case's originals ("" when none)."""
    v, idx = prepared.view, prepared.token_index
    names = [n for n, mine, orig in (("query", v.query, batch.query), ("key", v.key, batch.key),
                                     ("value", v.value, batch.value))
             if not same_bits(mine, orig if idx is None else orig[idx])]
    if not same_bits(prepared.kv_cache, prepared.backend.materialize_kv_cache(batch.kv_cache, batch.config.kv_layout)):
        names.append("kv_cache")
    return ", ".join(names)
