"""Suite -> result rows: generate each case once, then for every backend variant decide
(available? supported? fits?), build metadata, run, check against the reference, time."""

from __future__ import annotations

import fnmatch
import shlex
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from attn_contract import AttentionBackend
from harness.cascade import decide as decide_cascade
from harness.check import check_output, tolerance_for
from attn_contract import decode_first_order
from harness.metrics import attention_work
from harness.reference import reference_attention
from harness.results import Call, Check, Host, Metrics, ResultRow, Status, Timing, variant_label
from harness.spec import CaseSpec, Suite
from harness.roofline import get_ceilings, roofline_metrics
from harness.timing import TimingOptions, graph_decision, time_callable
from harness.workload import Batch, draw_lengths, generate

SENTINEL = 3.0e4  # finite, exactly representable in fp16/bf16, far outside any attention output


@dataclass
class RunOptions:
    device: torch.device
    suite_path: str = ""
    seed: int | None = None
    case_patterns: list[str] = field(default_factory=list)
    variant_filters: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    check: bool = True
    time: bool = True
    timing: TimingOptions | None = None
    roofline: bool = True  # attach % of the measured device ceilings to each timed row
    cpu_max_gflop: float = 0.5  # the CLI defaults: keep them in step
    cpu_max_kv_mib: float = 128.0
    # Extra pre-run check (e.g. the memory planner of harness.memory): a reason to skip, or None.
    fit_check: Callable[["Cell"], str | None] | None = None


@dataclass
class Cell:
    case: CaseSpec
    backend: type[AttentionBackend]
    variant: dict[str, Any]


def select_cases(suite: Suite, opts: RunOptions) -> list[CaseSpec]:
    cases = suite.cases
    if opts.case_patterns:
        cases = [c for c in cases if any(c.name == p or fnmatch.fnmatchcase(c.name, p) for p in opts.case_patterns)]
    if opts.seed is not None:
        cases = [c.model_copy(update={"seed": opts.seed}) for c in cases]
    return cases


def select_variants(backend: type[AttentionBackend], suite: Suite, opts: RunOptions) -> list[dict[str, Any]]:
    """The backend's variants, narrowed by the suite's ``variants:`` and ``--variant`` filters."""
    filters = [suite.variants.get(backend.name, {}), opts.variant_filters.get(backend.name, {})]
    pool = backend.variants() if any(filters) else backend.default_variants()
    out = []
    for v in pool:
        if all(str(v.get(axis)) in {str(x) for x in allowed} for f in filters for axis, allowed in f.items()):
            out.append(v)
    return out


def plan_cells(suite: Suite, backends: list[type[AttentionBackend]], opts: RunOptions) -> list[Cell]:
    cells = []
    for case in select_cases(suite, opts):
        for b in backends:
            for v in select_variants(b, suite, opts):
                cells.append(Cell(case, b, v))
    return cells


def backend_spec(backend: type[AttentionBackend]) -> str:
    """How to name ``backend`` on the command line: its registered name, else module:Class."""
    from harness.registry import known_backends

    if backend.name in known_backends():
        return backend.name
    return f"{backend.__module__}:{backend.__qualname__}"


def reproducer(cell: Cell, opts: RunOptions) -> str:
    parts = ["harness", "run", opts.suite_path or "SUITE.yaml", "--case", cell.case.name,
             "--backends", backend_spec(cell.backend), "--seed", str(cell.case.seed)]
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
    return shlex.join(parts)


def case_work(case: CaseSpec) -> tuple[dict, Any]:
    """Exact FLOPs/bytes of the batch a case generates (lengths only: no tensors)."""
    _, qlens, clens = draw_lengths(case)
    prefix = case.shared_prefix.length if case.shared_prefix else 0
    seq = [prefix + c + q for c, q in zip(clens, qlens)]
    cfg = case.attention_config()
    work = attention_work(qlens, seq, num_heads=cfg.num_heads, num_kv_heads=cfg.num_kv_heads,
                          head_size=cfg.head_size, dtype=cfg.dtype, kv_cache_dtype=cfg.kv_cache_dtype,
                          block_size=cfg.block_size, causal=cfg.causal, sliding_window=cfg.sliding_window)
    return {"query_lens": qlens, "seq_lens": seq}, work


def too_large_reason(case: CaseSpec, opts: RunOptions) -> str | None:
    """On the CPU, cases above the work/memory limits are skipped with this reason."""
    if opts.device.type != "cpu":
        return None
    lens, work = case_work(case)
    kv_mib = sum(lens["seq_lens"]) * 2 * case.num_kv_heads * case.head_size * 2 / 2**20
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
        "reproducer": reproducer(cell, opts),
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
        self.batch: Batch = generate(case, device)
        sw.lap("generate")
        self.ref_out: torch.Tensor | None = None
        self.ref_lse: torch.Tensor | None = None
        if want_reference:
            self.ref_out, self.ref_lse = reference_attention(self.batch)
            sw.lap("reference")
        # Case-level stages, made once and shared by the case's cells (rows say by how many).
        self.case_ms = sw.ms
        self.num_cells = 1


def run_cell(cell: Cell, ctx: CaseContext, suite: Suite, opts: RunOptions) -> ResultRow:
    """Run one backend variant on one prepared case. Backend failures become an ``error`` row."""
    row = _base_row(cell, suite, opts)
    batch = ctx.batch
    backend, variant, cfg = cell.backend, cell.variant, batch.config
    caps = backend.capabilities(variant)
    device = opts.device
    row["batch"] = batch.summary()
    stage = "prepare"
    sw = Stopwatch(device)
    host: dict[str, Any] = {}
    try:
        # Backends that want decodes first (FlashInfer) get the batch reordered, as vLLM's
        # model runner does; outputs are mapped back through token_index for the check.
        if caps.reorder_batch_threshold is not None:
            order = decode_first_order(batch.query_lens, caps.reorder_batch_threshold)
            bview, token_index = batch.reordered(order)
        else:
            bview, token_index = batch, None
        # Batch-dependent limits (e.g. cascade needs a shared prefix) are a status, not an error.
        batch_reason = backend.check_batch_support(bview.common_metadata(), variant)
        if batch_reason:
            row["status"], row["reason"] = Status.UNSUPPORTED, batch_reason
            return _validated(row, opts)
        stage = "kv cache"
        kv_cache = backend.materialize_kv_cache(bview.kv_cache, cfg.kv_layout)
        common = bview.common_metadata()
        # What vLLM's rule would pick for this batch, recorded to compare with the measurement.
        rule = decide_cascade(common, cfg, device) if caps.cascade else None
        sw.lap("prepare")
        builder = backend.get_builder_cls()(cfg, variant, device)
        impl = backend.get_impl_cls()(cfg, variant, device, bview.layer)
        sw.lap("setup")
        out = torch.full_like(bview.query, float("nan"), dtype=cfg.torch_dtype)
        lse = torch.full((bview.num_tokens, cfg.num_heads), float("nan"), device=device) if caps.returns_lse else None
        sw.lap("prepare")
        stage = "metadata build"
        metadata = builder.build(common)
        host["build_ms"] = sw.lap("build")
        stage = "forward"
        impl.forward(bview.query, bview.key, bview.value, kv_cache, metadata, out, lse)
        host["first_call_ms"] = sw.lap("first_call")  # includes JIT compilation
        call_fields = dict(impl.describe_call(metadata) or {})
        if rule is not None:
            call_fields.update(rule.call_fields())
        row["call"] = Call.model_validate(call_fields)

        status, reason = Status.PASS, ""
        if opts.check and ctx.ref_out is not None:
            stage = "check"
            ref_out, ref_lse = ctx.ref_out, ctx.ref_lse
            if token_index is not None:
                ref_out, ref_lse = ref_out[token_index], ref_lse[token_index]
            unwritten = None
            if torch.isnan(out).any():
                # Second run with a finite sentinel tells unwritten elements from computed NaNs.
                probe = torch.full_like(out, SENTINEL)
                impl.forward(bview.query, bview.key, bview.value, kv_cache, metadata, probe, None)
                unwritten = probe == SENTINEL
            result = check_output(out, ref_out, tolerance_for(cfg.dtype, cfg.is_fp8_kv), lse, ref_lse, unwritten)
            row["check"] = Check.model_validate(result.as_dict())
            if not result.passed:
                status, reason = Status.MISMATCH, result.message
            sw.lap("check")

        if opts.time:
            stage = "timing"
            topts = opts.timing or TimingOptions.for_device(device)

            def call() -> None:
                impl.forward(bview.query, bview.key, bview.value, kv_cache, metadata, out, None)

            # Graph-timed only where the declared level covers this batch's shape.
            gd = graph_decision(caps.cudagraph, bview.query_lens,
                                impl.graph_safe(metadata) if caps.cudagraph > 0 and device.type == "cuda" else None,
                                enabled=topts.cuda_graph, device_type=device.type)
            measured = time_callable(call, device, topts, graph=gd, output=out)
            sw.lap("timing")
            enqueue_us = measured.pop("host_enqueue_us", None)
            timing = Timing.model_validate(measured)
            if enqueue_us is not None:
                host["enqueue_us"] = enqueue_us  # host cost of launching one call, kept out of median_us
            work = attention_work(bview.query_lens, bview.seq_lens, num_heads=cfg.num_heads,
                                  num_kv_heads=cfg.num_kv_heads, head_size=cfg.head_size, dtype=cfg.dtype,
                                  kv_cache_dtype=cfg.kv_cache_dtype, block_size=cfg.block_size,
                                  causal=cfg.causal, sliding_window=cfg.sliding_window)
            t = timing.median_us * 1e-6
            ceilings, why_not = get_ceilings(device) if opts.roofline else (None, "disabled")
            row["metrics"] = Metrics.model_validate(
                {**work.as_dict(), **roofline_metrics(work.flops, work.bytes, t, ceilings, why_not)})
            row["timing"] = timing
            sw.lap("metrics")
        row["status"], row["reason"] = status, reason
    except Exception as e:  # a backend that rejects or crashes costs only its own cell
        # Diagnostics of the stages that finished (call, check) stay; no number from a failed cell.
        row.pop("timing", None)
        row.pop("metrics", None)
        row["status"] = Status.ERROR
        row["reason"] = f"{stage}: {_short_error(e)}"
        row["traceback"] = traceback.format_exc(limit=8)
    row["host"] = Host.model_validate({**host, **breakdown(sw, ctx)})
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


def breakdown(sw: Stopwatch, ctx: "CaseContext | None" = None) -> dict[str, Any]:
    """Where a cell's wall time went (``host.breakdown_ms``: prepare = batch view, KV-cache
    layout copy and output buffers, setup = builder/impl construction (library warm-up),
    build = metadata/plan, first_call = first forward incl. JIT, check,
    timing, metrics, other = the rest of run_cell), plus the case-level stages it shared
    (``host.case_ms``: generate, reference, made once per case for ``case_cells`` cells)."""
    ms = dict(sw.ms)
    total = sw.total_ms()
    ms["other"] = max(0.0, total - sum(ms.values()))
    out: dict[str, Any] = {"breakdown_ms": ms, "cell_ms": total}
    if ctx is not None:
        out["case_ms"] = dict(ctx.case_ms)
        out["case_cells"] = ctx.num_cells
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
    for cell in case_cells:
        if on_start:
            on_start(cell)
        t0 = time.perf_counter()
        reason, status = _precheck(cell, opts)
        precheck_ms[id(cell)] = (time.perf_counter() - t0) * 1e3
        if reason and status is not None:
            yield status_row(cell, suite, opts, status, reason)
        else:
            runnable.append(cell)
    if not runnable:
        return
    if on_event:
        on_event("prepare", None)
    try:
        ctx = CaseContext(case, opts.device, want_reference=opts.check)
        ctx.num_cells = len(runnable)
    except Exception as e:
        for cell in runnable:
            yield status_row(cell, suite, opts, Status.ERROR, f"generate/reference: {_short_error(e)}")
        return
    try:
        for cell in runnable:
            if on_event:
                on_event("cell", cell)
            row = run_cell(cell, ctx, suite, opts)
            if row.host is not None and row.host.breakdown_ms is not None:
                # availability/support/memory checks, made before the case's batch existed
                row.host.breakdown_ms["precheck"] = precheck_ms.get(id(cell), 0.0)
            yield row
    finally:
        del ctx
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
