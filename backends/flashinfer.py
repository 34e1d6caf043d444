"""FlashInfer through the backend interface, wrapped the way vLLM v1's FlashInferBackend does.

- The batch arrives decode-first (``reorder_batch_threshold=1``): the leading single-token
  requests go to ``BatchDecodeWithPagedKVCacheWrapper``, the rest (prefill, chunked prefill,
  speculative multi-token queries) to ``BatchPrefillWithPagedKVCacheWrapper``.
- Non-causal batches of pure prefills (no cached context: encoder style) use
  ``BatchPrefillWithRaggedKVCacheWrapper`` on the ``key``/``value`` arguments instead of the cache.
- ``plan()`` is host work (and, on first use of a kernel configuration, JIT compilation): the
  builder compiles in its constructor with a one-token dummy plan, then plans once per batch in
  ``build()``; ``forward()`` only launches kernels.

Facts below were read from the flashinfer-python 0.6.18.post1 sources (the version on the H200);
see docs/backends/flashinfer.md for what was verified where.
"""

from __future__ import annotations

import importlib.util
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

import torch

from attn_contract import (
    AttentionBackend,
    AttentionConfig,
    AttentionImpl,
    AttentionMetadataBuilder,
    Availability,
    Capabilities,
    CommonAttentionMetadata,
    CudaGraphSupport,
    HeadSizes,
    MultipleOf,
    SplitKV,
    split_decodes_and_prefills,
)
from attn_contract.engines import EngineName

from backends._flashinfer_nvfp4 import NVFP4, NVFP4_NOTE, nvfp4_reason
from backends._flashinfer_source import standalone_source

T = TypeVar("T")
MiB = 1 << 20
# Float workspace (split-KV partial outputs). 128 MB, FlashInfer's own example size, overflows in
# plan() on ordinary batches ("Buffer overflow when allocating memory for batch_prefill_tmp_v":
# a 6-request mixed batch, 16/2 heads, head 128); vLLM v1 allocates 256 MB. The builder starts
# at the larger of that and ``float_workspace_bound`` and grows (x2) and re-plans on overflow.
WORKSPACE_BYTES = 256 * MiB
MAX_WORKSPACE_BYTES = 4096 * MiB
# Measured on the H200, not attributed to a buffer yet: see FlashInferBackend.workspace_bytes.
UNATTRIBUTED_SCRATCH_BYTES = 96 * MiB
MASK_FILL = 5e4  # FlashInfer's finite "infinity" (include/flashinfer/math.cuh), used as -inf in masks
LN2 = math.log(2.0)  # FlashInfer LSE is base 2: lse_e = lse_2 * ln 2
# The CUDA-core decode kernel instantiates these GQA group sizes only (DISPATCH_GQA_GROUP_SIZE in
# include/flashinfer/utils.cuh); anything else raises "Unsupported group_size" at run time.
CUDA_CORE_DECODE_GROUPS = frozenset({1, 2, 3, 4, 6, 8})
VERIFIED_PAGE_SIZES = (1, 16, 32, 64, 128, 256, 512)  # decode, reports/h200/library-probe.txt
DEFAULT_VARIANT: dict[str, Any] = {"decode_tensor_cores": True, "prefill_backend": "auto", "call_form": "vllm"}
# call_form vllm: vLLM's FlashInferImpl (decode-first batch: decodes through the decode wrapper,
# the rest through the paged prefill wrapper, each run() with out=). fastest: a batch that mixes
# decodes with prefills goes through the paged prefill wrapper in ONE planned run() (one launch;
# the tensor-core decode path is that same prefill kernel). On one-kind batches the two are the
# same call, so the planner runs one cell for both.
CALL_FORMS = ("vllm", "fastest")

ALIBI_REASON = (
    "ALiBi not supported: FlashInfer adds slope*(kv_idx - q_idx) with a request-local q index "
    "(q_idx = 0 in decode) and its own built-in slopes; that equals the harness's "
    "-slope*|i + s - q - j| only up to a per-row constant (same causal output, LSE off by "
    "slope*context_len) and differs without causal - unverified, so not offered"
)
SINKS_REASON = (
    "attention sinks not supported: in flashinfer 0.6.x the fa2/fa3 paged kernels and the "
    "CUDA-core decode kernel drop the sinks argument (only trtllm-gen, Blackwell, reads it), "
    "which would give silently wrong results"
)
NONCAUSAL_WINDOW_REASON = (
    "non-causal sliding window not supported: FlashInfer's window is left-only (window_left); "
    "the right bound comes from causal (window_right exists only in the cute-dsl decode backend)"
)
FA3_FP8_REASON = (
    "prefill_backend=fa3 with an fp8 KV cache needs fp8 queries in FlashInfer's FA3 kernels; "
    "use prefill_backend=fa2 or auto (which resolves to fa2 here)"
)


# ---------------------------------------------------------------- host-side pure functions
def float_workspace_bound(num_qo_heads: int, num_kv_heads: int, head_dim: int, num_sms: int,
                          blocks_per_sm: int = 2, cta_tile_q: int = 128) -> int:
    """Upper bound of the float workspace FlashInfer 0.6's split-KV plans allocate.

    ``PrefillPlan`` (include/flashinfer/attention/scheduler.cuh) takes, when it splits KV,
    ``tmp_v = num_qo_heads * padded_batch_size * cta_tile_q * head_dim * 4`` bytes plus
    ``tmp_s = num_qo_heads * padded_batch_size * cta_tile_q * 4``, where the split batch is at
    most ``max_grid_size / num_kv_heads`` work tiles (max_grid_size = blocks per SM x SMs).
    The tensor-core decode path plans through the same code; the CUDA-core decode needs less
    (cta_tile_q = 1). 16/2 heads, head 128 on 132 SMs: 138 MB, past the old 128 MB."""
    tiles = max(1, (num_sms * blocks_per_sm) // max(1, num_kv_heads))
    per_tile = num_qo_heads * cta_tile_q * (head_dim + 1) * 4
    return tiles * per_tile + 16 * MiB  # + alignment and the merge buffers


def is_workspace_overflow(exc: BaseException) -> bool:
    """Whether ``exc`` is FlashInfer's AlignedAllocator running out of (float) workspace."""
    return "Buffer overflow when allocating memory" in str(exc)


def plan_growing_workspace(plan: Callable[[], T], workspace_bytes: Callable[[], int],
                           remake: Callable[[int], None], max_bytes: int = MAX_WORKSPACE_BYTES) -> tuple[T, int]:
    """``plan()``; when it overflows FlashInfer's float workspace, ``remake(2 x size)`` (new buffer,
    wrappers re-created on it: they share it, so all are re-planned by ``plan``) and try again,
    up to ``max_bytes``. A supported batch is never an ``error`` for want of workspace.
    Returns (plan's result, times the workspace was doubled)."""
    grows = 0
    while True:
        try:
            return plan(), grows
        except RuntimeError as e:
            size = workspace_bytes()
            if not is_workspace_overflow(e) or size * 2 > max_bytes:
                raise
            remake(size * 2)
            grows += 1


@dataclass(frozen=True)
class PagedKVCSR:
    """FlashInfer's page metadata for a run of requests.

    ``indptr`` [B+1] and ``last_page_len`` [B] stay where ``seq_lens`` was (the CPU: plan() needs
    them on the host anyway, so no device sync); ``indices`` [indptr[-1]] stays on the block
    table's device. ``kv_len[b] = (indptr[b+1] - indptr[b] - 1) * page_size + last_page_len[b]``.
    """

    indptr: torch.Tensor
    indices: torch.Tensor
    last_page_len: torch.Tensor

    @property
    def num_reqs(self) -> int:
        return int(self.last_page_len.shape[0])

    def kv_lens(self, page_size: int) -> torch.Tensor:
        pages = self.indptr[1:] - self.indptr[:-1]
        return (pages - 1) * page_size + self.last_page_len


def paged_kv_csr(block_table: torch.Tensor, seq_lens: torch.Tensor, page_size: int) -> PagedKVCSR:
    """CSR page metadata of every request from a vLLM block table and sequence lengths.

    Vectorized: request b uses the first ceil(seq_len/page_size) entries of its block-table row,
    flattened in row order; the last page holds 1..page_size tokens."""
    if page_size < 1:
        raise ValueError(f"page_size must be >= 1, got {page_size}")
    if block_table.dim() != 2 or block_table.shape[0] != seq_lens.shape[0]:
        raise ValueError(
            f"block_table {tuple(block_table.shape)} does not match seq_lens {tuple(seq_lens.shape)}"
        )
    seq_lens = seq_lens.to(torch.int32)
    if seq_lens.numel() and int(seq_lens.min()) < 1:
        raise ValueError("every request needs at least one KV token (seq_len >= 1)")
    num_pages = (seq_lens + (page_size - 1)) // page_size
    if num_pages.numel() and int(num_pages.max()) > block_table.shape[1]:
        raise ValueError(
            f"a request needs {int(num_pages.max())} pages but the block table has {block_table.shape[1]} columns"
        )
    indptr = torch.zeros(seq_lens.shape[0] + 1, dtype=torch.int32, device=seq_lens.device)
    indptr[1:] = torch.cumsum(num_pages, 0)
    used = torch.arange(block_table.shape[1], device=block_table.device).unsqueeze(0) < num_pages.to(
        block_table.device
    ).unsqueeze(1)
    indices = block_table[used].to(torch.int32)  # boolean indexing keeps row-major order
    last_page_len = (seq_lens - (num_pages - 1) * page_size).to(torch.int32)
    return PagedKVCSR(indptr=indptr, indices=indices, last_page_len=last_page_len)


def segment_csr(csr: PagedKVCSR, lo: int, hi: int) -> PagedKVCSR:
    """The CSR of requests ``lo:hi`` alone (indptr rebased to 0, indices a view)."""
    start, stop = int(csr.indptr[lo]), int(csr.indptr[hi])
    return PagedKVCSR(
        indptr=csr.indptr[lo : hi + 1] - start,
        indices=csr.indices[start:stop],
        last_page_len=csr.last_page_len[lo:hi],
    )


def uses_ragged_path(config: AttentionConfig, context_lens: torch.Tensor) -> bool:
    """Encoder-style batches (non-causal, no cached context) run on the ragged wrapper over the
    new tokens' K/V. An fp8 cache keeps the paged path: the reference attends to the quantized
    cache values, which the ragged wrapper (reading model-dtype K/V) would not see."""
    return (not config.causal) and not config.is_fp8_kv and bool((context_lens == 0).all())


def _version_tuple(v: str | None) -> tuple[int, ...]:
    out = []
    for part in (v or "0").split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        if not digits:
            break
        out.append(int(digits))
    return tuple(out)


def hardware_reason(capability: tuple[int, int], cuda_version: str | None, prefill_backend: str) -> str | None:
    """Why this GPU cannot run the variant (None if it can)."""
    major, minor = capability
    if (major, minor) < (8, 0):
        return f"FlashInfer needs compute capability >= 8.0; this GPU is sm{major}{minor}"
    if prefill_backend == "fa3" and (major != 9 or _version_tuple(cuda_version) < (12, 3)):
        return (f"prefill_backend=fa3 needs Hopper (sm90a) and CUDA >= 12.3; this is sm{major}{minor} "
                f"with CUDA {cuda_version}")
    return None


# ---------------------------------------------------------------- metadata builder
@dataclass
class FlashInferMetadata:
    num_decodes: int
    num_decode_tokens: int
    num_prefills: int
    num_prefill_tokens: int
    decode: Any | None = None  # planned BatchDecodeWithPagedKVCacheWrapper, or None without decodes
    prefill: Any | None = None  # planned BatchPrefillWithPagedKVCacheWrapper
    ragged: Any | None = None  # planned BatchPrefillWithRaggedKVCacheWrapper (encoder style)
    plan_ms: dict[str, float] = field(default_factory=dict)
    jit_warmup_ms: float = 0.0
    decode_kernel: str | None = None
    prefill_backend: str | None = None  # resolved by plan(): fa2 / fa3
    workspace_bytes: int = 0  # float workspace the plans fit in
    workspace_grows: int = 0  # times plan() overflowed it and it was doubled
    call_form: str = "vllm"  # fastest on a mixed batch: one prefill-wrapper call for every request


def _resolved_backend(wrapper: Any) -> str | None:
    # 0.7.x exposes resolved_backend; 0.6.x overwrites _backend with the choice in plan().
    for attr in ("resolved_backend", "_backend"):
        if hasattr(wrapper, attr):
            value = getattr(wrapper, attr)
            if value is not None:
                return str(value)
    return None


def workspace_size(config: AttentionConfig, device: torch.device | None = None) -> int:
    """Initial float workspace for a layer: vLLM's 256 MB or the split-KV bound, if larger."""
    sms = 132  # H100/H200; the real count when a CUDA device is at hand
    if device is not None and device.type == "cuda":
        sms = torch.cuda.get_device_properties(device).multi_processor_count
    bound = float_workspace_bound(config.num_heads, config.num_kv_heads, config.head_size, sms)
    return max(WORKSPACE_BYTES, -(-bound // MiB) * MiB)


class FlashInferMetadataBuilder(AttentionMetadataBuilder[FlashInferMetadata]):
    """One workspace and one set of wrappers per builder; ``build`` plans them per batch."""

    def __init__(self, config: AttentionConfig, variant: dict[str, Any], device: torch.device):
        variant = {**DEFAULT_VARIANT, **(variant or {})}
        super().__init__(config, variant, device)
        self.workspace_grows = 0
        self._make_wrappers(workspace_size(config, device))
        self.jit_warmup_ms = self._warm_up()

    def _make_wrappers(self, nbytes: int) -> None:
        """(Re)create the wrappers on a fresh zeroed float workspace of ``nbytes``."""
        import flashinfer  # lazy: only a GPU run with the library reaches this

        config, variant = self.config, self.variant
        self.workspace = None  # let the old buffer go before allocating the new one
        self.workspace = torch.zeros(nbytes, dtype=torch.uint8, device=self.device)  # must start zeroed
        backend = variant["prefill_backend"]
        self.decode_wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
            self.workspace, kv_layout=config.kv_layout, use_tensor_cores=bool(variant["decode_tensor_cores"])
        )
        self.prefill_wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(
            self.workspace, kv_layout=config.kv_layout, backend=backend
        )
        # K/V handed to forward are [tokens, Hk, D]: NHD whatever the cache layout.
        self.ragged_wrapper = (
            flashinfer.BatchPrefillWithRaggedKVCacheWrapper(self.workspace, kv_layout="NHD", backend=backend)
            if not config.causal and not config.is_fp8_kv
            else None
        )

    # plan() arguments shared by the wrappers. q_data_type must be given: it defaults to fp16.
    def _common_plan_kwargs(self) -> dict[str, Any]:
        cfg = self.config
        return dict(
            sm_scale=cfg.softmax_scale,
            window_left=cfg.window_left,
            logits_soft_cap=cfg.softcap if cfg.softcap else None,
            q_data_type=cfg.torch_dtype,
            kv_data_type=cfg.cache_torch_dtype,
            o_data_type=cfg.torch_dtype,
        )

    def _plan_decode(self, csr: PagedKVCSR) -> None:
        cfg = self.config
        # Variant ``split_kv_pages`` (the split-kv invariant): 0 = disable_split_kv, N = a fixed
        # split of N pages (fixed_split_size, tensor-core decode only); absent = the heuristic.
        split = self.variant.get("split_kv_pages")
        kw = {} if split is None else {"disable_split_kv": True} if int(split) == 0 else {"fixed_split_size": int(split)}
        self.decode_wrapper.plan(
            csr.indptr, csr.indices, csr.last_page_len, cfg.num_heads, cfg.num_kv_heads, cfg.head_size,
            cfg.block_size, pos_encoding_mode="NONE", **self._common_plan_kwargs(), **kw,
        )

    def _plan_prefill(self, qo_indptr: torch.Tensor, csr: PagedKVCSR, causal: bool) -> None:
        cfg = self.config
        self.prefill_wrapper.plan(
            qo_indptr, csr.indptr, csr.indices, csr.last_page_len, cfg.num_heads, cfg.num_kv_heads,
            cfg.head_size, cfg.block_size, causal=causal, pos_encoding_mode="NONE", **self._common_plan_kwargs(),
        )

    def _plan_ragged(self, qo_indptr: torch.Tensor) -> None:
        cfg = self.config
        kw = self._common_plan_kwargs()
        kw["kv_data_type"] = cfg.torch_dtype
        self.ragged_wrapper.plan(
            qo_indptr, qo_indptr, cfg.num_heads, cfg.num_kv_heads, cfg.head_size, causal=False,
            pos_encoding_mode="NONE", **kw,
        )

    def _warm_up(self) -> float:
        """Plan each wrapper once on a one-token batch: FlashInfer JIT-compiles (or loads from
        $FLASHINFER_WORKSPACE_BASE/.cache/flashinfer) the kernel module inside plan(), so this
        keeps compilation out of build()'s timed plan. Returns the milliseconds it took."""
        t0 = time.perf_counter()
        one = torch.tensor([0, 1], dtype=torch.int32)
        csr = PagedKVCSR(indptr=one, indices=torch.zeros(1, dtype=torch.int32, device=self.device),
                         last_page_len=torch.ones(1, dtype=torch.int32))
        self._plan_decode(csr)
        self._plan_prefill(one, csr, causal=self.config.causal)
        if self.ragged_wrapper is not None:
            self._plan_ragged(one)
        return (time.perf_counter() - t0) * 1e3

    def build(self, common: CommonAttentionMetadata) -> FlashInferMetadata:
        # A plan that overflows the float workspace is retried on a doubled one (all wrappers
        # re-planned: they share the buffer), never reported as an error of a supported batch.
        md, grows = plan_growing_workspace(lambda: self._build(common), lambda: int(self.workspace.numel()),
                                           self._make_wrappers)
        self.workspace_grows += grows
        md.workspace_bytes = int(self.workspace.numel())
        md.workspace_grows = self.workspace_grows
        return md

    def _build(self, common: CommonAttentionMetadata) -> FlashInferMetadata:
        cfg = self.config
        split = split_decodes_and_prefills(common, decode_threshold=1)
        md = FlashInferMetadata(
            num_decodes=split.num_decodes, num_decode_tokens=split.num_decode_tokens,
            num_prefills=split.num_prefills, num_prefill_tokens=split.num_prefill_tokens,
            jit_warmup_ms=self.jit_warmup_ms,
        )
        md.call_form = str(self.variant.get("call_form", "vllm"))
        if md.call_form not in CALL_FORMS:
            raise ValueError(f"unknown call_form {md.call_form!r}; expected one of {', '.join(CALL_FORMS)}")
        if self.ragged_wrapper is not None and uses_ragged_path(cfg, common.context_lens_cpu):
            t0 = time.perf_counter()
            self._plan_ragged(common.query_start_loc_cpu.to(torch.int32))
            md.plan_ms["ragged"] = (time.perf_counter() - t0) * 1e3
            md.ragged = self.ragged_wrapper
            md.prefill_backend = _resolved_backend(self.ragged_wrapper)
            # Everything runs as one ragged prefill; no decode segment.
            md.num_decodes, md.num_decode_tokens = 0, 0
            md.num_prefills, md.num_prefill_tokens = common.num_reqs, common.num_actual_tokens
            return md

        csr = paged_kv_csr(common.block_table, common.seq_lens_cpu, common.block_size)
        nd = split.num_decodes
        if md.call_form == "fastest" and nd and split.num_prefills:
            nd = 0  # every request, decodes included, in the one prefill-wrapper call below
            md.num_prefill_tokens, md.num_decode_tokens = common.num_actual_tokens, 0
        if nd:
            t0 = time.perf_counter()
            self._plan_decode(segment_csr(csr, 0, nd))
            md.plan_ms["decode"] = (time.perf_counter() - t0) * 1e3
            md.decode = self.decode_wrapper
            md.decode_kernel = (
                f"tensor-core ({_resolved_backend(self.decode_wrapper)})"
                if self.decode_wrapper.use_tensor_cores else "cuda-core"
            )
        if nd < common.num_reqs:
            qsl = common.query_start_loc_cpu[nd:].to(torch.int32)
            t0 = time.perf_counter()
            # Bottom-right causal; with causal=False every cached and new key is visible.
            self._plan_prefill(qsl - qsl[0], segment_csr(csr, nd, common.num_reqs), causal=common.causal)
            md.plan_ms["prefill"] = (time.perf_counter() - t0) * 1e3
            md.prefill = self.prefill_wrapper
            md.prefill_backend = _resolved_backend(self.prefill_wrapper)
        return md


# ---------------------------------------------------------------- kernel call
def _run_into(run: Callable[..., Any], out: torch.Tensor, lse_out: torch.Tensor | None) -> None:
    """Call a wrapper's run() writing ``out`` (and FlashInfer's base-2 ``lse_out``) in place."""
    o = out if out.is_contiguous() else torch.empty(out.shape, dtype=out.dtype, device=out.device)
    if lse_out is None:
        run(out=o, lse=None, return_lse=False)
    else:
        lse = lse_out if lse_out.is_contiguous() else torch.empty(lse_out.shape, dtype=torch.float32, device=out.device)
        run(out=o, lse=lse, return_lse=True)  # base 2, as declared (Capabilities.lse_base)
        if lse is not lse_out:
            lse_out.copy_(lse)
    if o is not out:
        out.copy_(o)


class FlashInferImpl(AttentionImpl[FlashInferMetadata]):
    def forward(self, query, key, value, kv_cache, metadata, out, lse_out=None):
        md, cfg = metadata, self.config
        # fp8: FlashInfer folds k_scale into sm_scale and multiplies the output by v_scale.
        ks, vs = (float(self.layer.k_scale), float(self.layer.v_scale)) if cfg.is_fp8_kv else (None, None)
        if md.ragged is not None:
            _run_into(lambda **kw: md.ragged.run(query, key, value, **kw), out, lse_out)
            return out
        # The logical cache is (blocks, 2, page, Hk, D); HND memory is (blocks, 2, Hk, page, D),
        # which is the shape FlashInfer's HND layout expects. The permute is a view.
        cache = kv_cache if cfg.kv_layout == "NHD" else kv_cache.permute(0, 1, 3, 2, 4)
        nd = md.num_decode_tokens
        if md.decode is not None:
            q = query[:nd]
            _run_into(lambda **kw: md.decode.run(q, cache, k_scale=ks, v_scale=vs, **kw),
                      out[:nd], None if lse_out is None else lse_out[:nd])
        if md.prefill is not None:
            q = query[nd:]
            _run_into(lambda **kw: md.prefill.run(q, cache, k_scale=ks, v_scale=vs, **kw),
                      out[nd:], None if lse_out is None else lse_out[nd:])
        return out

    def graph_safe(self, metadata: FlashInferMetadata) -> str | None:
        if metadata.prefill is None and metadata.ragged is None:
            return None
        return ("FlashInfer's prefill plan is batch-specific; only uniform single-token decode batches "
                "are graph-capturable (UNIFORM_SINGLE_TOKEN_DECODE, as vLLM declares)")

    def describe_call(self, metadata: FlashInferMetadata) -> dict[str, Any]:
        md = metadata
        wrappers = [name for name, w in (("decode", md.decode), ("prefill", md.prefill), ("ragged", md.ragged)) if w]
        calls = [{"function": f"{type(w).__name__}.run", "num_tokens": n, "out_arg": True}
                 for w, n in ((md.ragged, md.num_prefill_tokens), (md.decode, md.num_decode_tokens),
                              (md.prefill, md.num_prefill_tokens)) if w is not None]
        return {
            "call_form": md.call_form,
            "wrappers": wrappers,
            "calls": calls,
            # the harness asks for the LSE on the checked call only; timed calls run without it
            "return_lse": "checked call only (timed calls: no)",
            "kv_layout": self.config.kv_layout,
            "num_decodes": md.num_decodes,
            "num_prefills": md.num_prefills,
            "decode_kernel": md.decode_kernel,
            "prefill_backend_requested": self.variant.get("prefill_backend", "auto"),
            "prefill_backend_resolved": md.prefill_backend,
            "plan_ms": {k: round(v, 3) for k, v in md.plan_ms.items()},
            "jit_warmup_ms": round(md.jit_warmup_ms, 1),
            "workspace_mib": md.workspace_bytes // MiB,
            "workspace_grows": md.workspace_grows,
        }


# ---------------------------------------------------------------- backend
class FlashInferBackend(AttentionBackend):
    name = "flashinfer"
    tested_versions = {"flashinfer-python": ">=0.6.18,<0.7"}  # measured: 0.6.18.post1
    # vLLM decodes with tensor cores and lets FlashInfer pick its prefill: other values have no switch.
    engine_names = {
        "vllm": EngineName("FLASHINFER", runs={"decode_tensor_cores": True, "prefill_backend": "auto"},
                           aliases=("flashinfer",)),
        "sglang": EngineName("flashinfer", runs={"prefill_backend": "auto"},
                             caveat="SGLang picks FlashInfer's tensor-core decode by its own GQA-group rule"),
    }
    description = "FlashInfer batch decode + paged/ragged prefill wrappers (plan/run), as vLLM v1 uses them"
    # All six combinations run by default: decode_tensor_cores only matters when a batch has
    # decodes and prefill_backend only when it has prefills ("auto" resolves to fa3 on Hopper for
    # bf16/fp16 KV, fa2 for fp8 KV), so some rows repeat a kernel; describe_call's
    # wrappers/prefill_backend_resolved say which ran.
    variant_axes = {"decode_tensor_cores": (True, False), "prefill_backend": ("auto", "fa2", "fa3"),
                    "call_form": CALL_FORMS}
    # Decodes (query length 1, reorder_batch_threshold) go to the decode wrapper, whose kernel
    # decode_tensor_cores picks; the rest go to the prefill wrappers prefill_backend picks. On a
    # batch of one kind the other axis cannot change a thing: the planner runs one of its values.
    variant_axis_kinds = {"decode_tensor_cores": frozenset({"decode"}),
                          "prefill_backend": frozenset({"prefill", "extend"}),
                          "call_form": frozenset({"decode", "prefill", "extend"})}

    @classmethod
    def applicable_axes(cls, segment_kinds: Any) -> tuple[str, ...]:
        # call_form changes the call only when decodes and prefills/extends share the batch.
        kinds = set(segment_kinds)
        mixed = "decode" in kinds and bool(kinds & {"prefill", "extend"})
        return tuple(a for a in super().applicable_axes(kinds) if a != "call_form" or mixed)

    @classmethod
    def availability(cls, variant: dict[str, Any] | None = None) -> Availability:
        if importlib.util.find_spec("flashinfer") is None:
            return Availability.no("flashinfer is not installed (pip install flashinfer-python)")
        try:
            import flashinfer
        except Exception as e:  # a broken install is a reason, not a crash
            return Availability.no(f"import flashinfer failed: {type(e).__name__}: {str(e).strip()[:200]}")
        version = str(getattr(flashinfer, "__version__", "unknown"))
        if not torch.cuda.is_available():
            return Availability.no("no CUDA device (FlashInfer runs on NVIDIA GPUs)", flashinfer=version)
        v = {**DEFAULT_VARIANT, **(variant or {})}
        reason = hardware_reason(torch.cuda.get_device_capability(), torch.version.cuda, v["prefill_backend"])
        if reason:
            return Availability.no(reason, flashinfer=version)
        return Availability.ok(flashinfer=version)

    @classmethod
    def capabilities(cls, variant: dict[str, Any] | None = None) -> Capabilities:
        return Capabilities(
            dtypes=frozenset({"float16", "bfloat16"}),
            kv_cache_dtypes=frozenset({"auto", "fp8_e4m3", "fp8_e5m2", NVFP4}),  # nvfp4: see check_support
            # JIT compiles per head dim; 64/128/256 are the dims FA3 and the AOT table cover.
            head_sizes=HeadSizes(values=(64, 128, 256)),
            block_sizes=(MultipleOf(1),),
            kv_layouts=frozenset({"NHD", "HND"}),
            causal=True,
            non_causal=True,
            sliding_window=True,
            softcap=True,
            alibi=False,
            sinks=False,
            cascade=False,
            gqa=True,
            returns_lse=True,
            lse_base=2,  # the library's own: decode run() has no natural-log option
            devices=frozenset({"cuda"}),
            cudagraph=CudaGraphSupport.UNIFORM_SINGLE_TOKEN_DECODE,
            reorder_batch_threshold=1,
            # fixed_split_size is honoured by the tensor-core decode only (FlashInfer's plan doc).
            split_kv=(SplitKV("split_kv_pages", 0, 1)
                      if {**DEFAULT_VARIANT, **(variant or {})}["decode_tensor_cores"] else None),
            notes=(
                "any page size >= 1; decode verified on H200 with pages " + ",".join(map(str, VERIFIED_PAGE_SIZES)),
                "decode_tensor_cores=False (CUDA-core decode) needs GQA group in {1,2,3,4,6,8}",
                "prefill_backend=fa3 needs sm90a and rejects fp8 KV (fp8 Q required); auto picks fa2 there",
                "non-causal: no sliding window; without cached context runs the ragged wrapper on key/value",
                "ALiBi and sinks declared unsupported (see check_support reasons)",
                NVFP4_NOTE,
                "plan() JIT-compiles on first use; the builder warms up so build() times plan only",
            ),
        )

    @classmethod
    def check_support(cls, config: AttentionConfig, variant: dict[str, Any], device: str) -> str | None:
        if config.kv_cache_dtype == NVFP4:
            return nvfp4_reason(device)
        v = {**DEFAULT_VARIANT, **(variant or {})}
        caps = cls.capabilities(v)
        if device not in caps.devices:
            return caps.unsupported_reason(config, device)
        if config.alibi:
            return ALIBI_REASON
        if config.sinks:
            return SINKS_REASON
        reason = caps.unsupported_reason(config, device)
        if reason:
            return reason
        if not config.causal and config.sliding_window is not None:
            return NONCAUSAL_WINDOW_REASON
        if not v["decode_tensor_cores"] and config.gqa_group not in CUDA_CORE_DECODE_GROUPS:
            return (f"decode_tensor_cores=False: the CUDA-core decode kernel supports GQA group sizes "
                    f"{sorted(CUDA_CORE_DECODE_GROUPS)}, not {config.gqa_group}")
        if v["prefill_backend"] == "fa3" and config.is_fp8_kv:
            return FA3_FP8_REASON
        return None

    @classmethod
    def workspace_bytes(cls, config: AttentionConfig, variant: dict[str, Any]) -> int:
        """Device scratch of one builder, for the memory planner (harness/memory.py): the shared
        float workspace, what each wrapper's constructor allocates in flashinfer 0.6.18 (an 8 MiB
        int workspace and a 32768-entry int32 kv_lens buffer; read from its prefill.py/decode.py),
        and an allowance for what plan()/run() and FlashInfer's process-wide cached buffers take
        that is not attributed yet. The allowance is measured, not derived: on the H200
        (ci/mem_diag.py, reports/h200/2026-11-30/evening) every variant of the memory test's case
        peaked at 578.7 MiB, 44 MiB over the counted terms for prefill_backend=fa2, and the first
        cell of a process 33 MiB higher again (611.8 MiB). The peak did not depend on the variant,
        so the allowance does not either. (0.6.18 has no vector-sparse index buffer: an earlier
        64 MiB term for fa3/auto counted one and hid the gap on those variants only.)"""
        prefill_wrappers = 1 + (0 if config.causal or config.is_fp8_kv else 1)  # paged (+ ragged)
        per_wrapper = 8 * MiB + 32768 * 4
        return workspace_size(config) + (1 + prefill_wrappers) * per_wrapper + UNATTRIBUTED_SCRATCH_BYTES

    @classmethod
    def diagnose_mismatch(cls, config: AttentionConfig, variant: dict[str, Any], layer: Any,
                          check: dict[str, Any]) -> str | None:
        """FlashInfer 0.6's fa2 prefill / tensor-core decode kernels fill masked logits with a
        finite -5e4 before sm_scale (into which run() folds k_scale) is applied: with a small
        k_scale the fill is only a few units after scaling and masked keys leak into the softmax
        (docs/backends/flashinfer.md, "Known findings"). Matches finite-valued fp8 mismatches
        where that scaled fill is above -20 (a masked key's weight > e^-20)."""
        if cls.get_impl_cls() is not FlashInferImpl or not config.is_fp8_kv:
            return None
        fill = MASK_FILL * config.softmax_scale * float(layer.k_scale)
        if fill > 20.0:
            return None
        failed = [p for p in check.get("per_request") or [] if not p.get("passed", True)]
        if not failed or any("NaN" in p.get("problems", "") or "Inf" in p.get("problems", "") for p in failed):
            return None
        return (f"known FlashInfer bug: masked logits are filled with a finite -5e4 before k_scale * sm_scale "
                f"= {config.softmax_scale * float(layer.k_scale):.3g} is applied, i.e. -{fill:.3g} after scaling, "
                "so masked keys leak into the softmax (docs/backends/flashinfer.md)")

    @classmethod
    def standalone_call(cls, config: AttentionConfig, variant: dict[str, Any],
                        call: dict[str, Any] | None = None) -> str | None:
        """What the builder plans and the impl runs (paged decode + paged prefill wrappers on one
        workspace); the ragged path of encoder-style batches is not offered."""
        if cls.get_impl_cls() is not FlashInferImpl or (not config.causal and not config.is_fp8_kv):
            return None
        v = {**DEFAULT_VARIANT, **(variant or {})}
        return standalone_source(workspace_size(config) // MiB, bool(v["decode_tensor_cores"]),
                                 str(v["prefill_backend"]), str(v["call_form"]))

    @classmethod
    def get_builder_cls(cls) -> type[FlashInferMetadataBuilder]:
        return FlashInferMetadataBuilder

    @classmethod
    def get_impl_cls(cls) -> type[FlashInferImpl]:
        return FlashInferImpl
