"""Suite -> result rows: generate each case once, then for every backend variant decide
(available? supported? fits?), build metadata, run, check against the reference, time."""

from __future__ import annotations

import shlex
import time
import traceback
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from attn_contract import (
    AttentionBackend,
    AttentionConfig,
    Capabilities,
    CommonAttentionMetadata,
    decode_first_order,
    lse_to_natural,
)
from harness.cascade import decide as decide_cascade
from harness.check import check_output, tolerance_for
from harness.layout import CaseLayout, case_layout
from harness.metrics import layout_work
from harness.planning import (  # noqa: F401  (moved there; importers keep this path)
    _IMPORTED, Cell, collapse_variants, plan_cells, segment_kinds, select_cases, select_variants, warm_backend)
from harness.reference import reference_attention, reference_lse_for
from harness.results import Call, Check, Host, Metrics, ResultRow, Status, Timing, variant_label
from harness.spec import CaseSpec, Suite
from harness.roofline import get_ceilings, roofline_metrics
from harness.timing import GraphDecision, TimingOptions, graph_decision, time_callable
from harness.workload import Batch, generate

SENTINEL = 3.0e4  # finite, exactly representable in fp16/bf16, far outside any attention output


@dataclass
class RunOptions:
    device: torch.device
    suite_path: str = ""
    seed: int | None = None
    adversarial: bool = False  # --adversarial: NaN in every KV slot no request owns
    invariants: bool = False  # --invariants: metamorphic checks per cell (harness/invariants.py)
    case_patterns: list[str] = field(default_factory=list)
    variant_filters: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    check: bool = True
    time: bool = True
    # Time backends whose Capabilities declare them untimed here (role "reference"; --time-references).
    time_references: bool = False
    timing: TimingOptions | None = None
    roofline: bool = True  # attach % of the measured device ceilings to each timed row
    cpu_max_gflop: float = 0.5  # the CLI defaults: keep them in step
    cpu_max_kv_mib: float = 128.0
    collapse_variants: bool = True  # one cell where variant axes cannot apply (--all-variants: off)
    # Extra pre-run check (e.g. the memory planner of harness.memory): a reason to skip, or None.
    fit_check: Callable[["Cell"], str | None] | None = None


def backend_spec(backend: type[AttentionBackend]) -> str:
    """How to name ``backend`` on the command line: its registered name, else module:Class."""
    from harness.registry import known_backends

    if backend.name in known_backends():
        return backend.name
    return f"{backend.__module__}:{backend.__qualname__}"


def reproducer(cell: Cell, opts: RunOptions) -> str:
    parts = ["harness", "run", opts.suite_path or "SUITE.yaml", "--case", cell.case.name,
             "--backends", backend_spec(cell.backend), "--seed", str(cell.case.seed)]
    if cell.case.adversarial:
        parts.append("--adversarial")
    for k, v in sorted(cell.variant.items()):
        parts += ["--variant", f"{cell.backend.name}.{k}={v}"]
    if opts.device.type == "cpu":
        parts += ["--device", "cpu"]
    if opts.timing is not None and opts.timing.mode != "hot":
        parts += ["--timing-mode", opts.timing.mode]
    if opts.timing is not None and not opts.timing.cuda_graph:
        parts += ["--no-cuda-graph"]
    if opts.timing is not None and opts.timing.stop_criterion != "noise":
        parts += ["--stop", opts.timing.stop_criterion]
    if opts.timing is not None and opts.timing.cpu_clock != "wall" and opts.device.type == "cpu":
        parts += ["--cpu-clock", opts.timing.cpu_clock]
    return shlex.join(parts)


def case_work(case: CaseSpec, layout: CaseLayout | None = None) -> tuple[dict, Any]:
    """Exact FLOPs/bytes of the batch a case generates (lengths only: no tensors)."""
    layout = layout or case_layout(case)
    return {"query_lens": list(layout.query_lens), "seq_lens": list(layout.seq_lens)}, layout_work(layout)


def too_large_reason(case: CaseSpec, opts: RunOptions) -> str | None:
    """On the CPU, cases above the work/memory limits are skipped with this reason."""
    if opts.device.type != "cpu":
        return None
    layout = case_layout(case)
    _, work = case_work(case, layout)
    kv_mib = layout.logical_kv_bytes / 2**20
    if work.flops / 1e9 > opts.cpu_max_gflop:
        return (f"too large for the CPU: {work.flops / 1e9:.1f} GFLOP > --cpu-max-gflop {opts.cpu_max_gflop:g}"
                " (run on a GPU or raise the limit)")
    if kv_mib > opts.cpu_max_kv_mib:
        return (f"too large for the CPU: KV cache {kv_mib:.0f} MiB > --cpu-max-kv-mib {opts.cpu_max_kv_mib:g}"
                " (run on a GPU or raise the limit)")
    return None


def _base_row(cell: Cell, suite: Suite, opts: RunOptions) -> dict[str, Any]:
    cfg = cell.case.attention_config()
    return {
        "suite": suite.suite,
        "case": cell.case.name,
        "backend": cell.backend.name,
        "variant": cell.variant,
        "variant_label": variant_label(cell.variant),
        "device": str(opts.device),
        "config": {**asdict(cfg), "seed": cell.case.seed, "tags": cell.case.tags},
        "case_group": cell.case.group or cell.case.name,
        "case_params": dict(cell.case.params),
        "reproducer": reproducer(cell, opts),
        **({"variant_axes": cell.axes} if cell.axes else {}),
    }


def _short_error(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    first = msg[0] if msg else ""
    return f"{type(e).__name__}: {first}"[:500]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Stopwatch:
    """Milliseconds per named stage of one cell (or case); the device is synchronised at each
    stage end so GPU work lands in the stage that queued it."""

    def __init__(self, device: torch.device):
        self.device = device
        self.ms: dict[str, float] = {}
        self.start = self._last = time.perf_counter()

    def lap(self, stage: str) -> float:
        _sync(self.device)
        now = time.perf_counter()
        ms = (now - self._last) * 1e3
        self.ms[stage] = self.ms.get(stage, 0.0) + ms
        self._last = now
        return ms

    def skip(self) -> None:
        """Start the next stage now (time since the last lap belongs to no stage: overhead)."""
        self._last = time.perf_counter()

    def total_ms(self) -> float:
        return (time.perf_counter() - self.start) * 1e3


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
    (``stopwatch``) and the host-side figures of the row (``host``)."""

    stopwatch: Stopwatch
    stage: CellStage = CellStage.PREPARE
    host: dict[str, Any] = field(default_factory=dict)


class CellUnsupported(Exception):
    """The backend cannot run this batch (``check_batch_support``): a status, not an error."""


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
    batch_reason = backend.check_batch_support(view.common_metadata(), variant)
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
    out = torch.full_like(view.query, float("nan"), dtype=cfg.torch_dtype)
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


def run_cell(cell: Cell, case_data: CaseContext, suite: Suite, opts: RunOptions) -> ResultRow:
    """Run one backend variant on one prepared case. Backend failures become an ``error`` row."""
    if cell.case.context_parallel is not None:  # KV sharded over ranks: harness/context_parallel/
        from harness.context_parallel.cell import run_cp_cell

        return run_cp_cell(cell, case_data, suite, opts)
    row = _base_row(cell, suite, opts)
    batch = case_data.batch
    cfg = batch.config
    device = opts.device
    row["batch"] = batch.summary()
    row["layout"] = case_data.layout.as_dict()
    trace = CellTrace(Stopwatch(device))
    sw, host = trace.stopwatch, trace.host
    try:
        try:
            prepared = prepare_cell(cell.backend, cell.variant, batch, device, trace)
        except CellUnsupported as e:
            row["status"], row["reason"] = Status.UNSUPPORTED, str(e)
            return _validated(row, opts)
        trace.stage = CellStage.FORWARD
        prepared.forward(lse=prepared.lse)
        host["first_call_ms"] = sw.lap("first_call")  # includes JIT compilation
        call_fields = dict(prepared.impl.describe_call(prepared.metadata) or {})
        if prepared.cascade_rule is not None:
            call_fields.update(prepared.cascade_rule.call_fields())
        row["call"] = Call.model_validate(call_fields)

        status, reason = Status.PASS, ""
        checking = opts.check and case_data.ref_out is not None
        if checking:
            trace.stage = CellStage.CHECK
            ref_out = case_data.ref_out
            # The LSE a backend's declared ALiBi convention gives (outputs are the same either way).
            ref_lse = reference_lse_for(batch, case_data.ref_lse, prepared.caps.alibi_lse)
            if prepared.token_index is not None:
                ref_out, ref_lse = ref_out[prepared.token_index], ref_lse[prepared.token_index]
            tol = tolerance_for(cfg.dtype, cfg.kv_cache_dtype)
            view = prepared.view

            def judge(o: torch.Tensor, l: torch.Tensor | None, unwritten: torch.Tensor | None = None):
                # Each request (and segment kind) judged on its own; see harness/check.py. The
                # LSE is read in the base the backend declares: a wrong declaration fails here.
                l = lse_to_natural(l, prepared.caps.lse_base) if l is not None else None
                return check_output(o, ref_out, tol, l, ref_lse if l is not None else None, unwritten,
                                    query_start_loc=view.query_start_loc, kinds=view.kinds,
                                    seq_lens=view.seq_lens, request_ids=prepared.order)

            unwritten = None
            if torch.isnan(prepared.out).any():
                # Second run with a finite sentinel tells unwritten elements from computed NaNs.
                probe = torch.full_like(prepared.out, SENTINEL)
                prepared.forward(out=probe)
                unwritten = probe == SENTINEL
            result = judge(prepared.out, prepared.lse, unwritten)
            row["check"] = result.model_dump()
            if not result.passed:
                status, reason = Status.MISMATCH, result.message
            touched = changed_inputs(prepared, batch)
            if touched:
                status, reason = Status.MISMATCH, f"backend wrote into its inputs ({touched}); {reason}".rstrip("; ")
                row["check"]["inputs_modified"] = touched
            sw.lap("check")

        timed = opts.time
        skipped = timing_skip_reason(prepared.caps, device.type, opts)
        if skipped:
            timed, row["timing_skipped"] = False, skipped
        if timed:
            trace.stage = CellStage.TIMING
            timing_opts = opts.timing or TimingOptions.for_device(device)
            graph = prepared.graph_decision(enabled=timing_opts.cuda_graph)
            measured = time_callable(prepared.timed_call, device, timing_opts, graph=graph, output=prepared.out)
            sw.lap("timing")
            enqueue_us = measured.pop("host_enqueue_us", None)
            timing = Timing.model_validate(measured)
            if enqueue_us is not None:
                host["enqueue_us"] = enqueue_us  # host cost of launching one call, kept out of median_us
            work = layout_work(case_data.layout)
            t = timing.median_us * 1e-6
            ceilings, why_not = get_ceilings(device) if opts.roofline else (None, "disabled")
            row["metrics"] = Metrics.model_validate(
                {**work.as_dict(), **roofline_metrics(work.flops, work.bytes, t, ceilings, why_not)})
            row["timing"] = timing
            sw.lap("metrics")

        if checking:
            # Check what was timed: the output the timed calls (graph replays included) left,
            # then one more call into a NaN-poisoned buffer. Catches metadata that drifts after
            # the first call and kernels that write only part of a reused buffer.
            trace.stage = CellStage.CHECK
            later = []
            if timed:
                later.append(("after timing", prepared.out.clone(), None))
            poisoned = torch.full_like(prepared.out, float("nan"))
            lse2 = torch.full_like(prepared.lse, float("nan")) if prepared.lse is not None else None
            prepared.forward(out=poisoned, lse=lse2)
            _sync(device)
            later.append(("repeat call", poisoned, lse2))
            rechecks = []
            for when, o2, l2 in later:
                r2 = judge(o2, l2)
                rechecks.append({"when": when, "passed": r2.passed, "message": r2.message,
                                 "rel_l2_err": r2.rel_l2_err, "num_failed_requests": r2.num_failed_requests})
                if not r2.passed and status == Status.PASS:
                    status, reason = Status.MISMATCH, f"{when}: {r2.message}"
            row["check"]["rechecks"] = rechecks
            if opts.invariants:
                from harness.invariants import check_invariants  # imports this module

                row["check"]["invariants"] = inv = check_invariants(cell.backend, cell.variant, batch, device)
                broken = [r for r in inv if r["status"] in ("mismatch", "error")]
                if broken and status == "pass":
                    status, reason = "mismatch", f"invariant {broken[0]['invariant']}: {broken[0]['detail']}"
            touched = changed_inputs(prepared, batch)
            if touched and "inputs_modified" not in row["check"]:
                status, reason = Status.MISMATCH, f"backend wrote into its inputs ({touched}); {reason}".rstrip("; ")
                row["check"]["inputs_modified"] = touched
            sw.lap("check")
        if status == Status.MISMATCH and row.get("check"):
            # A mismatch the backend recognises as a known library bug gets its one-line diagnosis.
            diagnosis = cell.backend.diagnose_mismatch(cfg, cell.variant, prepared.view.layer, row["check"])
            if diagnosis:
                reason = f"{reason}; {diagnosis}"
                row["check"]["diagnosis"] = diagnosis
        row["status"], row["reason"] = status, reason
    except Exception as e:  # a backend that rejects or crashes costs only its own cell
        # Diagnostics of the stages that finished (call, check) stay; no number from a failed cell.
        row.pop("timing", None)
        row.pop("metrics", None)
        row["status"] = Status.ERROR
        row["reason"] = f"{trace.stage}: {_short_error(e)}"
        row["traceback"] = traceback.format_exc(limit=8)
    row["host"] = Host.model_validate({**host, **breakdown(sw, case_data)})
    return _validated(row, opts)


def _validated(row: dict[str, Any], opts: RunOptions) -> ResultRow:
    """The typed row; with checking on, a row that ran must carry its check."""
    return ResultRow.model_validate(row, context={"checked": opts.check})


def sum_breakdown(rows: list[Any]) -> dict[str, float]:
    """Seconds per stage summed over ``rows`` (``host.breakdown_ms``), with the case-level
    stages (``host.case_ms``) counted once per case and the cells' own wall time."""
    total: dict[str, float] = {}
    seen_cases: set[str] = set()
    for r in rows:
        host = r.host or {}
        for k, v in (host.get("breakdown_ms") or {}).items():
            total[k] = total.get(k, 0.0) + v / 1e3
        if "cell_ms" in host:
            total["cells"] = total.get("cells", 0.0) + host["cell_ms"] / 1e3
        if host.get("case_ms") and r.case not in seen_cases:
            seen_cases.add(r.case)
            for k, v in host["case_ms"].items():
                total[k] = total.get(k, 0.0) + v / 1e3
    return {k: round(v, 3) for k, v in total.items()}


def timing_skip_reason(caps: Any, device_type: str, opts: RunOptions) -> str | None:
    """Why a cell ``opts`` would time is not timed (a reference backend on ``device_type``
    without ``--time-references``), or None; None too when ``opts`` times nothing."""
    if not opts.time or opts.time_references or caps is None:
        return None
    return caps.timing_skip_reason(device_type)


def cell_timed(cell: Cell, device_type: str, opts: RunOptions) -> bool:
    """Whether ``cell`` will be timed on ``device_type`` (for cost estimates, before it runs),
    from the backend's declared ``untimed_on``: the parent plans without importing a library
    (``capabilities()`` may need one; the cell itself obeys its capabilities' same set)."""
    if not opts.time:
        return False
    return opts.time_references or device_type not in cell.backend.untimed_on


def row_busy_s(row: Any, case_seen: set[str]) -> float:
    """Seconds a worker spent on ``row``: its cell, its precheck/import and, once per case
    (``case_seen`` remembers), the case's generate/reference."""
    host = row.host if isinstance(row.host, dict) else (row.host.model_dump() if row.host is not None else {})
    ms = host.get("cell_ms") or 0.0
    b = host.get("breakdown_ms") or {}
    ms += b.get("precheck", 0.0) + b.get("import", 0.0)
    if host.get("case_ms") and row.case not in case_seen:
        case_seen.add(row.case)
        ms += sum(host["case_ms"].values())
    return ms / 1e3


def breakdown(sw: Stopwatch, case_data: "CaseContext | None" = None) -> dict[str, Any]:
    """Where a cell's wall time went (``host.breakdown_ms``: prepare = batch view, KV-cache
    layout copy and output buffers, setup = builder/impl construction (library warm-up),
    build = metadata/plan, first_call = first forward incl. JIT, check,
    timing, metrics, other = the rest of run_cell), plus the case-level stages it shared
    (``host.case_ms``: generate, reference, made once per case for ``case_cells`` cells)."""
    ms = dict(sw.ms)
    total = sw.total_ms()
    ms["other"] = max(0.0, total - sum(ms.values()))
    out: dict[str, Any] = {"breakdown_ms": ms, "cell_ms": total}
    if case_data is not None:
        out["case_ms"] = dict(case_data.case_ms)
        out["case_cells"] = case_data.num_cells
    return out


def group_by_case(cells: list[Cell]) -> list[list[Cell]]:
    """Cells grouped by case, cases in first-seen order."""
    by_case: dict[str, list[Cell]] = {}
    for c in cells:
        by_case.setdefault(c.case.name, []).append(c)
    return list(by_case.values())


def status_row(cell: Cell, suite: Suite, opts: RunOptions, status: Status, reason: str) -> ResultRow:
    """A row for a cell that did not run (or whose worker died): no measurements."""
    row = _base_row(cell, suite, opts)
    row.update(status=status, reason=reason)
    return ResultRow.model_validate(row)


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
        first = cell.backend not in _IMPORTED
        t0 = time.perf_counter()
        reason, status = _precheck(cell, opts)
        _IMPORTED.add(cell.backend)
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
            yield status_row(cell, suite, opts, Status.ERROR, f"generate/reference: {_short_error(e)}")
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


def _precheck(cell: Cell, opts: RunOptions) -> tuple[str | None, Status | None]:
    avail = cell.backend.availability(cell.variant)
    if not avail.available:
        return f"backend unavailable: {avail.reason}", Status.SKIPPED
    cfg = cell.case.attention_config()
    reason = cell.backend.check_support(cfg, cell.variant, opts.device.type)
    if reason:
        return reason, Status.UNSUPPORTED
    big = too_large_reason(cell.case, opts)
    if big:
        return big, Status.SKIPPED
    if opts.fit_check is not None:
        reason = opts.fit_check(cell)
        if reason:
            return reason, Status.SKIPPED
    return None, None


def default_out_dir(suite: Suite) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path("results") / f"{suite.suite}-{stamp}"
