"""FlashInfer's cuDNN paged prefill (variant ``prefill_backend=cudnn``): one
``flashinfer.cudnn.cudnn_batch_prefill_with_kv_cache`` call for the prefill segment, the function
``BatchPrefillWithPagedKVCacheWrapper(backend="cudnn").run()`` calls.

The function is called directly, not through the wrapper: the wrapper passes its ``qo_indptr``
through as cuDNN's ragged offsets, which FlashInfer 0.6.x reads in ELEMENTS (token offset x
heads x head dim) and later releases in tokens (``batch_offsets_units="tokens"``, with element
units still the default), so a token indptr is right in one release and wrong in the other.
Element offsets passed explicitly mean the same in both.

cuDNN builds one graph per (batch size, max query/key lengths, heads, head dims, causal) on
first use (``cudnn.graph_cache``), which is why the harness's untimed first call matters here.
The LSE is not asked for: cuDNN emits natural-log statistics and newer FlashInfer releases fold
them to base 2, so its base depends on the installed version (the probe in tools/mla_probe
records which)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from attn_contract import AttentionConfig

from backends.flashinfer._host import MiB

# "128 MB should be sufficient for most cases" (cudnn/prefill.py docstring); the family's own
# buffer, never the wrappers' shared float workspace.
CUDNN_PREFILL_WORKSPACE_BYTES = 128 * MiB
CUDNN_PREFILL_FUNCTION = "flashinfer.cudnn.cudnn_batch_prefill_with_kv_cache"
# cudnn_batch_prefill_with_kv_cache's docstring: "Head dimension of query and key must be 128 or
# 192; Head dimension of value and output must be 128" (192 only without a block table).
CUDNN_PREFILL_HEAD_SIZES = (128,)


@dataclass
class PrefillCall:
    """What the prefill segment's cuDNN call needs, prepared by the builder (host work)."""

    max_q: int
    max_kv: int
    seq_lens_q: torch.Tensor  # int32 [n, 1, 1, 1] on the device
    seq_lens_kv: torch.Tensor  # int32 [n, 1, 1, 1] on the device
    block_table: torch.Tensor  # int32 [n, pages of the longest request], contiguous, on the device
    offsets_q: torch.Tensor  # int32 [n + 1] element offsets of each request's query rows
    offsets_o: torch.Tensor  # int32 [n + 1] element offsets of each request's output rows
    causal: bool

    @property
    def num_reqs(self) -> int:
        return int(self.seq_lens_q.shape[0])


def cudnn_prefill_reason(config: AttentionConfig) -> str | None:
    """Why the cuDNN prefill cannot take this layer (None if it can), by the library's rules."""
    if config.dtype != "bfloat16":
        return (f"prefill_backend=cudnn: FlashInfer's cuDNN prefill graph declares q, k, v and o as BFLOAT16 "
                f"(flashinfer/cudnn/prefill.py); dtype {config.dtype} not supported")
    if config.is_fp8_kv:
        return ("prefill_backend=cudnn: FlashInfer's cuDNN prefill graph reads a BFLOAT16 cache (fp8 prefill is "
                "Blackwell-only in its tests); fp8 KV not supported")
    if config.sliding_window is not None or config.softcap:
        return ("prefill_backend=cudnn: cudnn_batch_prefill_with_kv_cache takes no window or soft-cap argument "
                "(flashinfer/cudnn/prefill.py)")
    if config.head_size not in CUDNN_PREFILL_HEAD_SIZES or config.value_head_size != config.head_size:
        return (f"prefill_backend=cudnn: with a paged cache cuDNN prefill takes head dim 128 for q/k/v "
                f"(cudnn_batch_prefill_with_kv_cache docstring); this layer has {config.head_size}/"
                f"{config.value_head_size}")
    return None


def prefill_call_args(query_start_loc: torch.Tensor, seq_lens: torch.Tensor, block_table: torch.Tensor,
                      block_size: int, num_heads: int, head_size: int, value_head_size: int, causal: bool,
                      device: torch.device) -> PrefillCall:
    """The cuDNN call's metadata for the prefill segment: ``query_start_loc`` [n + 1] (any start,
    rebased to 0), ``seq_lens`` [n] key lengths (context + new tokens), ``block_table`` [n, pages]
    of the segment's requests. Element offsets: token offset x heads x head dim (query) and x
    heads x value head dim (output), see the module docstring."""
    qsl = query_start_loc.to(torch.int64)
    qsl = qsl - qsl[0]
    q_lens = (qsl[1:] - qsl[:-1]).to(torch.int32)
    kv = seq_lens.to(torch.int32)
    if q_lens.numel() != kv.numel() or block_table.shape[0] != kv.numel():
        raise ValueError(f"segment of {kv.numel()} requests: query_start_loc has {q_lens.numel()} lengths and "
                         f"block_table {block_table.shape[0]} rows")
    if kv.numel() and bool((q_lens > kv).any()):
        raise ValueError("a request has more query tokens than keys (seq_len must include the new tokens)")
    max_kv = int(kv.max()) if kv.numel() else 0
    pages = -(-max_kv // block_size)
    if pages > block_table.shape[1]:
        raise ValueError(f"the longest request needs {pages} pages; the block table has {block_table.shape[1]}")

    def offsets(width: int) -> torch.Tensor:
        return (qsl * (num_heads * width)).to(device=device, dtype=torch.int32)

    return PrefillCall(
        max_q=int(q_lens.max()) if q_lens.numel() else 0, max_kv=max_kv,
        seq_lens_q=q_lens.to(device).view(-1, 1, 1, 1), seq_lens_kv=kv.to(device).view(-1, 1, 1, 1),
        block_table=block_table[:, :pages].to(device=device, dtype=torch.int32).contiguous(),
        offsets_q=offsets(head_size), offsets_o=offsets(value_head_size), causal=bool(causal))


class CudnnPrefill:
    """One builder's cuDNN prefill: its workspace and the library function."""

    name = "cudnn"

    def __init__(self, config: AttentionConfig, device: torch.device):
        from flashinfer.cudnn import cudnn_batch_prefill_with_kv_cache  # lazy: GPU runs only

        self.config, self.device = config, device
        self._fn = cudnn_batch_prefill_with_kv_cache
        self.workspace = torch.zeros(CUDNN_PREFILL_WORKSPACE_BYTES, dtype=torch.uint8, device=device)

    def plan(self, query_start_loc: torch.Tensor, seq_lens: torch.Tensor, block_table: torch.Tensor,
             causal: bool) -> PrefillCall:
        cfg = self.config
        return prefill_call_args(query_start_loc, seq_lens, block_table, cfg.block_size, cfg.num_heads,
                                 cfg.head_size, cfg.value_head_size, causal, self.device)

    def run(self, call: PrefillCall, query: torch.Tensor, cache: torch.Tensor, out: torch.Tensor) -> None:
        """Write ``out`` [n_tokens, H, D]. ``cache`` is [pages, 2, page, Hk, D] (NHD) or
        [pages, 2, Hk, page, D] (HND); cuDNN reads K and V as [pages, Hk, page, D] with any
        strides (the graph takes the tensors' own), so both are views."""
        k, v = cache[:, 0], cache[:, 1]
        if self.config.kv_layout == "NHD":
            k, v = k.transpose(1, 2), v.transpose(1, 2)
        o = out if out.is_contiguous() else torch.empty(out.shape, dtype=out.dtype, device=out.device)
        self._fn(query.contiguous(), k, v, self.config.softmax_scale, self.workspace,
                 max_token_per_sequence=call.max_q, max_sequence_kv=call.max_kv,
                 actual_seq_lens_q=call.seq_lens_q, actual_seq_lens_kv=call.seq_lens_kv,
                 block_tables=call.block_table, causal=call.causal, return_lse=False,
                 batch_offsets_q=call.offsets_q, batch_offsets_o=call.offsets_o, out=o)
        if o is not out:
            out.copy_(o)


def make_prefill_family(variant: dict[str, Any], config: AttentionConfig, device: torch.device) -> CudnnPrefill | None:
    """The variant's prefill family when it is not one of the paged wrapper's backends."""
    return CudnnPrefill(config, device) if variant.get("prefill_backend") == "cudnn" else None


def workspace_bytes(prefill_backend: str) -> int:
    """Device scratch the prefill family adds to a builder (0 for the wrapper's backends)."""
    return CUDNN_PREFILL_WORKSPACE_BYTES if prefill_backend == "cudnn" else 0
