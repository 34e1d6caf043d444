"""FlashInfer backend, host side: constants, the support reasons that need no library, the
float-workspace sizing and grow-and-retry, and FlashInfer's CSR page metadata. Pure functions
(no library import), shared with the cascade backend.

Facts below were read from the flashinfer-python 0.6.18.post1 sources (the version on the H200);
see docs/backends/flashinfer.md for what was verified where.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Hashable, TypeVar

import torch

from attn_contract import AttentionConfig

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
DEFAULT_VARIANT: dict[str, Any] = {"decode_tensor_cores": True, "prefill_backend": "auto", "call_form": "vllm",
                                   "decode_backend": "wrapper", "verify_wrapper": "prefill"}
# verify_wrapper: what runs a speculative-decode verify batch (every request q > 1 tokens over a
# cached context). prefill: the paged prefill wrapper, as vLLM does. decode: the tensor-core decode
# wrapper planned with q_len_per_req=q (flashinfer#3871, in 0.6.18), a uniform verify batch only.
VERIFY_WRAPPERS = ("prefill", "decode")
# call_form vllm: vLLM's FlashInferImpl (decode-first batch: decodes through the decode wrapper,
# the rest through the paged prefill wrapper, each run() with out=). fastest: a batch that mixes
# decodes with prefills goes through the paged prefill wrapper in ONE planned run() (one launch;
# the tensor-core decode path is that same prefill kernel). On one-kind batches the two are the
# same call, so the planner runs one cell for both.
from attn_contract.standalone import CALL_FORMS  # noqa: E402,F401  (vllm, fastest; this package imports it from here)

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
def verify_batch_reason(query_lens: torch.Tensor, seq_lens: torch.Tensor) -> str | None:
    """Why the decode wrapper's ``q_len_per_req`` cannot take this batch (None if it can). Its
    plan() takes one query length for every request (``q_len_per_req`` > 1 only with tensor
    cores on fa2) and each request's KV (``seq_lens``: cached context plus the new tokens) must
    be at least that long (flashinfer 0.6.18 decode.py, flashinfer#3871); a request without
    cached context is a prefill, which this variant leaves to no one."""
    qs = sorted({int(q) for q in query_lens.tolist()})
    if not qs:
        return "verify_wrapper=decode: empty batch"
    if qs[0] == 1:
        return ("verify_wrapper=decode: the batch holds single-token decodes (q = 1); the decode wrapper's "
                "q_len_per_req takes one query length > 1 for every request (a uniform verify batch)")
    if len(qs) > 1:
        return (f"verify_wrapper=decode: query lengths {qs} differ; the decode wrapper's q_len_per_req takes "
                "one length for every request (a uniform verify batch)")
    context = seq_lens - query_lens
    if bool((context <= 0).any()):
        return ("verify_wrapper=decode: a request has no cached context (a prefill); the decode wrapper "
                "takes verify batches only (each request's drafts over its cached context)")
    if bool((seq_lens < qs[0]).any()):
        return f"verify_wrapper=decode: every request needs kv_len >= q_len_per_req = {qs[0]} (flashinfer decode.py)"
    return None


class GraphWrappers:
    """``use_cuda_graph=True`` wrappers, one per shape the library freezes in one (the batch size,
    and q for a multi-token decode), each with the pages its fixed index buffer holds. The same
    wrapper is planned again while its buffer holds the batch's pages, so a graph captured on it
    stays valid for the next plan (``plan()`` fills the buffers in place; a plain wrapper's swaps
    in new ones, and a captured graph then reads freed memory: reports/h100/2026-12-06, loan2);
    a batch needing more pages gets a new one. The FlashInfer decode and MLA builders keep one;
    ``clear()`` when the workspace they share is remade."""

    def __init__(self) -> None:
        self._held: dict[Hashable, tuple[Any, int]] = {}

    def get(self, key: Hashable, pages: int, make: Callable[[int], Any]) -> Any:
        """The wrapper of ``key`` whose index buffer holds ``pages``; ``make(pages)`` builds one."""
        held = self._held.get(key)
        if held is None or held[1] < pages:
            held = (make(pages), pages)
            self._held[key] = held
        return held[0]

    def clear(self) -> None:
        self._held.clear()


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


def _cuda_below(v: str | None, floor: str) -> bool:
    """Whether torch's CUDA version ``v`` ("12.4", None on a CPU build) is below ``floor``."""
    from packaging.version import InvalidVersion, Version

    try:
        return Version(v or "0") < Version(floor)
    except InvalidVersion:
        return True  # an unreadable version cannot be shown to be new enough


def hardware_reason(capability: tuple[int, int], cuda_version: str | None, prefill_backend: str) -> str | None:
    """Why this GPU cannot run the variant (None if it can)."""
    major, minor = capability
    if (major, minor) < (8, 0):
        return f"FlashInfer needs compute capability >= 8.0; this GPU is sm{major}{minor}"
    if prefill_backend == "fa3" and (major != 9 or _cuda_below(cuda_version, "12.3")):
        return (f"prefill_backend=fa3 needs Hopper (sm90a) and CUDA >= 12.3; this is sm{major}{minor} "
                f"with CUDA {cuda_version}")
    return None


def resolved_backend(wrapper: Any) -> str | None:
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


