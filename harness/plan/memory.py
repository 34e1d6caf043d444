"""Device-memory planning: will a cell fit before we try it?

A cell that runs out of memory wastes minutes (and on some libraries leaves the CUDA context
unusable), so each cell's peak is estimated from the request lengths alone (no tensors) and
the cell is skipped with the numbers when it cannot fit.

The estimate (bytes; an upper bound by design, see docs/robustness.md). With
``e`` = model-dtype bytes (2), ``c`` = KV-cache element bytes (2, or 1 for fp8; both from the
case's ``CaseLayout``),
``f`` = reference compute bytes (8 on CPU: fp64, 4 on GPU: fp32),
``T`` = query tokens, ``S`` = sum of sequence lengths, ``N`` = KV blocks the generator
allocates (used blocks + max(2, used // 8) spares), ``B`` = block size:

    kv_cache   = N * 2 * B * Hk * D * c                 canonical paged cache
    logical    = 2 * S * Hk * D * c                      per-request K/V the reference reads
    qkv        = T * (Hq + 2 * Hk) * D * e               query and the new tokens' K/V
    ref        = T * Hq * (Dv + 1) * f                   reference output and LSE
    persistent = kv_cache + logical + qkv + ref + metadata

    generate   = max(N * 2 * B * Hk * D * 4,             fp32 noise before the cast
                     2 * S * Hk * D * c)                 concatenated K/V for the scatter
    reference  = T * Hq * (Dv + 1) * f                   per-request outputs and LSEs before torch.cat
               + s_max * Hk * (D + Dv) * 4               one request's K/V in fp32 (dequantized_kv)
               + [s_max * Hk * D * 4]                    fp8: the scaled copy made from it
               + [s_max * Hk * (D + Dv) * f]             CPU: the fp64 copies (fp32 on a GPU: none)
               + 2 * q_max * Hq * D * f                  the request's query, and one chunk's rows
               + n * r * Hq * s_max * f + r * s_max      n score-sized chunks alive together (scores,
                                                         masked copy, exp's input and output; +1 each
                                                         for sinks, softcap, ALiBi) and the mask,
                                                         r = min(q_max, max(1, 2**26 // (Hq * s_max)))
                                                         query rows per chunk (reference._CHUNK_ELEMS)

The reference reads each KV head once for its whole query-head group (harness/case/reference.py
stacks the group's rows into one matmul): no K/V is repeated per query head. A formula that did
(``2 * s_max * Hq * D * f``) charged MLA's 128-head decode 9 GB for what measured ~100 MB.
    cell       = prod(backend KV-cache shape) * c        the backend's own layout (a copy)
               + [T * (Hq + 2 * Hk) * D * e]             reordered Q/K/V (decode-first backends)
               + 2 * T * Hq * D * e + 2 * T * Hq * 4     output, NaN probe, LSE (both)
               + workspace                               backend.batch_workspace_bytes(cfg, variant,
                                                         lens, ...) (the padded chunks of the
                                                         torch backends), else
                                                         backend.workspace_bytes(cfg, variant)
                                                         if declared, else 256 MiB
               + 5 * T * Hq * D * 8                      the fp64 comparison in check_output

    peak = persistent + max(generate, reference, cell)

MLA (docs/mla.md; ``L`` = the latent width, 576): ``kv_cache = N * B * L * c`` (one latent vector
per token); ``metadata`` holds the layer's up-projections W_UK and W_UV; the expanded form adds its per-head K/V of every token, ``S * Hq * (D + Dv) * e``,
to ``logical`` and ``qkv`` (and the cell's copies), and its fp32 up-projection to ``generate``.

The budget is the device's free memory (``torch.cuda.mem_get_info`` plus what torch's caching
allocator holds but does not use) minus a 512 MiB margin for the CUDA context growth and
library handles, and the estimate is charged PEAK_MARGIN (10%) more for the allocator's
fragments (a cell whose exact sizes do not fit the cached blocks asks the driver for new ones).
A case's cells that are not timed (the references, e.g. torch-math on a GPU) run before its
timed cells are prepared and held for interleaved sampling (harness/cell/case.py), so their
peak never adds to the held cells' (``llama3-8b[count=256]`` torch-math ran out of memory on an
80 GB H100, 3.95 GiB short, behind four held FlashAttention/FlashInfer cells); on the CPU it is ``--memory-budget-mib`` (default: half the available RAM,
shared among the CPU workers). ``--memory-budget-mib`` also caps the GPU budget.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass
from typing import Any, Callable

import torch

from harness.case.layout import CaseLayout, case_layout
from harness.spec import CaseSpec

MiB = 1 << 20
DEFAULT_WORKSPACE_BYTES = 256 * MiB
GPU_MARGIN_BYTES = 512 * MiB
PEAK_MARGIN = 0.10  # the caching allocator's fragments, on top of the estimated peak
REFERENCE_CHUNK_ELEMS = 1 << 26  # harness.case.reference._CHUNK_ELEMS
CHECK_FP64_COPIES = 5  # out, ref, diff, where(), |ref| as float64 in check_output
# cuBLAS's workspace, which torch allocates through its caching allocator on the first matmul of a
# stream (":4096:8", 32 MiB, on sm90): a small torch-math decode cell on an H100 peaked at 56 MiB
# against an estimate of 23 MiB without it (reports/h100/2026-12-06, second loan, gpu-pytest).
CUBLAS_WORKSPACE_BYTES = 34 * MiB


@dataclass(frozen=True)
class MemoryEstimate:
    kv_cache: int
    logical: int
    qkv: int
    ref: int
    metadata: int
    generate: int
    reference: int
    cell: int

    @property
    def persistent(self) -> int:
        return self.kv_cache + self.logical + self.qkv + self.ref + self.metadata

    @property
    def peak(self) -> int:
        return self.persistent + max(self.generate, self.reference, self.cell)

    def as_dict(self) -> dict[str, int]:
        return {**asdict(self), "persistent": self.persistent, "peak": self.peak}


def backend_workspace(backend: Any, case: CaseSpec, variant: dict[str, Any], layout: CaseLayout | None = None,
                      device_type: str = "cuda") -> int:
    """A backend's scratch for this cell. It may declare
    ``batch_workspace_bytes(config, variant, query_lens, seq_lens, cache_bytes[, device_type])``
    (the torch backends: padded chunks, from the same chunk plan their forward uses), or
    ``workspace_bytes(config, variant) -> int`` (e.g. FlashInfer's planner buffers);
    otherwise a fixed allowance covers library scratch."""
    cfg = case.attention_config()
    fn = getattr(backend, "batch_workspace_bytes", None)
    if callable(fn):
        layout = layout or case_layout(case)
        c = layout.kv_elt_bytes
        try:
            return int(fn(cfg, variant, layout.query_lens, layout.seq_lens, c, device_type))
        except TypeError:  # declared without the device argument
            return int(fn(cfg, variant, layout.query_lens, layout.seq_lens, c))
    fn = getattr(backend, "workspace_bytes", None)
    if callable(fn):
        return int(fn(cfg, variant))
    return DEFAULT_WORKSPACE_BYTES


def estimate(case: CaseSpec, backend: Any | None = None, variant: dict[str, Any] | None = None,
             device_type: str = "cuda", check: bool = True, layout: CaseLayout | None = None) -> MemoryEstimate:
    """Peak bytes of one cell (see the module docstring for the formula). ``layout`` is the
    case's ``case_layout`` when the caller has it already."""
    layout = layout or case_layout(case)
    variant = variant or {}
    cfg = layout.config
    e, c = layout.elt_bytes, layout.kv_elt_bytes
    f = 8 if device_type == "cpu" else 4
    hq, hk, d, bs = cfg.num_heads, cfg.num_kv_heads, cfg.head_size, cfg.block_size
    T, S, N = layout.num_tokens, layout.total_kv_tokens, layout.num_blocks
    n = layout.num_reqs
    q_max, s_max = layout.max_query_len, layout.max_seq_len

    kv_cache = N * 2 * bs * hk * d * c
    logical = 2 * S * hk * d * c
    qkv = T * (hq + 2 * hk) * d * e
    if cfg.mla is not None:  # the latent cache; the expanded form's K/V cover every token, per head
        lat = cfg.mla.latent_dim
        kv_cache = N * bs * lat * c
        expanded = S * hq * (d + cfg.value_head_size) * e if not cfg.absorbed else 0
        logical = S * lat * c + expanded
        qkv = T * hq * d * e + (expanded or 2 * T * lat * e)
    dv = cfg.value_head_size
    ref = T * hq * (dv + 1) * f if check else 0
    max_blocks = -(-s_max // bs)
    # block table, slot mapping, prefix K/V kept by the generator, sinks/ALiBi are small
    metadata = n * max_blocks * 4 + T * 8 + 2 * layout.prefix_groups * layout.prefix_len * hk * d * e + 8 * hq
    if cfg.mla is not None:  # the layer's kv_b_proj halves W_UK, W_UV (LayerParams), kept with the batch
        metadata += hq * cfg.mla.kv_lora_rank * (cfg.mla.qk_nope_head_dim + cfg.mla.v_head_dim) * e
    generate = max(N * 2 * bs * hk * d * 4, 2 * S * hk * d * c)
    reference = 0
    if check:
        rows = min(q_max, max(1, REFERENCE_CHUNK_ELEMS // max(1, hq * s_max)))
        n_scores = 3 + bool(cfg.sinks) + bool(cfg.softcap) + bool(cfg.alibi)
        reference = (T * hq * (dv + 1) * f + s_max * hk * (d + dv) * 4
                     + (s_max * hk * d * 4 if layout.kv_elt_bytes == 1 else 0)
                     + (s_max * hk * (d + dv) * f if f != 4 else 0)
                     + 2 * q_max * hq * d * f + n_scores * rows * hq * s_max * f + rows * s_max)
    cell = 2 * T * hq * d * e + 2 * T * hq * 4
    if cfg.mla is not None:
        cell += qkv  # the cell's own copies of query, key and value
        if not cfg.absorbed:
            generate = max(generate, s_max * hq * (d + cfg.value_head_size) * 4 * 2)  # fp32 up-projection
    if backend is not None and cfg.mla is not None:
        cell += kv_cache  # the backend's latent cache (a copy)
        cell += backend_workspace(backend, case, variant, layout, device_type)
    elif backend is not None:
        cell += math.prod(backend.get_kv_cache_shape(N, bs, hk, d, cfg.kv_cache_dtype)) * c
        if backend.capabilities(variant).reorder_batch_threshold is not None:
            cell += qkv
        cell += backend_workspace(backend, case, variant, layout, device_type)
    else:
        cell += kv_cache + DEFAULT_WORKSPACE_BYTES
    if check:
        cell += CHECK_FP64_COPIES * T * hq * d * 8
    if device_type == "cuda":
        cell += CUBLAS_WORKSPACE_BYTES
    return MemoryEstimate(kv_cache, logical, qkv, ref, metadata, generate, reference, cell)


def available_bytes(device: torch.device, budget_mib: float | None = None, cpu_share: int = 1) -> int:
    """What a cell on ``device`` may use now: free device memory less a margin (GPU), or the
    CPU budget (``budget_mib``, default half the available RAM split over ``cpu_share`` workers)."""
    cap = int(budget_mib * MiB) if budget_mib else None
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        # Blocks torch's caching allocator holds but does not use are free to this process.
        free += torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        have = max(0, free - GPU_MARGIN_BYTES)
        return min(have, cap) if cap is not None else have
    if cap is not None:
        return cap
    try:
        avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        avail = 8 << 30
    return int(avail * 0.5 / max(1, cpu_share))


def fit_reason(est: MemoryEstimate, budget: int, device: torch.device) -> str | None:
    """None when the estimated peak fits, else a reason naming the numbers and the biggest term."""
    if est.peak * (1 + PEAK_MARGIN) <= budget:
        return None
    terms = {k: v for k, v in est.as_dict().items() if k not in ("peak", "persistent")}
    top = max(terms, key=lambda k: terms[k])
    where = "free GPU memory" if device.type == "cuda" else "the CPU memory budget (--memory-budget-mib)"
    return (f"does not fit: estimated peak {est.peak / MiB:,.0f} MiB (+{PEAK_MARGIN:.0%} margin) > "
            f"{budget / MiB:,.0f} MiB of {where}"
            f" (largest term: {top} {terms[top] / MiB:,.0f} MiB)")


def together_reason(ests: list[MemoryEstimate], budget: int, device: torch.device) -> str | None:
    """None when the cells of one case fit in memory all prepared at once (interleaved sampling
    holds them together), else why not. Asked once the case's batch and reference exist, so
    ``budget`` (what is free now) already lacks the shared part: every cell's own part counts."""
    if not ests:
        return None
    need = sum(e.cell for e in ests)
    if need * (1 + PEAK_MARGIN) <= budget:
        return None
    where = "free GPU memory" if device.type == "cuda" else "the CPU memory budget"
    return f"{len(ests)} cells together: estimated {need / MiB:,.0f} MiB > {budget / MiB:,.0f} MiB of {where}"


def make_fit_together(device: torch.device, check: bool, budget_mib: float | None = None,
                      cpu_share: int = 1) -> Callable[[list[Any]], str | None]:
    """A ``RunOptions.fit_together``: whether one case's cells fit prepared at once, in what is
    free now (the case's batch and reference already made)."""

    def fit_together(cells: list[Any]) -> str | None:
        if not cells:
            return None
        layout = case_layout(cells[0].case)
        ests = [estimate(c.case, c.backend, c.variant, device.type, check, layout) for c in cells]
        return together_reason(ests, available_bytes(device, budget_mib, cpu_share), device)

    return fit_together


def make_fit_check(device: torch.device, check: bool, budget_mib: float | None = None,
                   cpu_share: int = 1) -> Callable[[Any], str | None]:
    """A ``RunOptions.fit_check``: estimates each cell and compares it with memory free now."""
    layouts: dict[str, CaseLayout] = {}

    def fit_check(cell: Any) -> str | None:
        case = cell.case
        if case.name not in layouts:
            layouts.clear()  # cells arrive case by case; keep one
            layouts[case.name] = case_layout(case)
        est = estimate(case, cell.backend, cell.variant, device.type, check, layouts[case.name])
        return fit_reason(est, available_bytes(device, budget_mib, cpu_share), device)

    return fit_check
