"""Per-layer attention configuration and the batch metadata every backend receives.

``CommonAttentionMetadata`` mirrors vLLM v1's structure of the same name: the backend's
metadata builder turns it into whatever its kernel needs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import torch

from attn_contract.mla import MHA, MLA_ABSORBED, MLA_KINDS, MLADims


@dataclass(frozen=True)
class AttentionConfig:
    """The attention layer being run: what a backend is asked to support."""

    num_heads: int
    num_kv_heads: int
    head_size: int
    dtype: str = "bfloat16"  # model dtype of q, k, v and the output
    kv_cache_dtype: str = "auto"  # "auto" (= dtype), "fp8_e4m3", "fp8_e5m2", "nvfp4" (no torch dtype)
    block_size: int = 16
    kv_layout: str = "NHD"
    causal: bool = True
    sliding_window: int | None = None  # tokens a query sees, itself included (HF style)
    softcap: float = 0.0
    alibi: bool = False
    sinks: bool = False
    scale: float | None = None
    # The value head size when it differs from ``head_size`` (None: equal). MLA's expanded form
    # has 192/128, its absorbed form 576/512; the output is [num_tokens, num_heads, v_head_size].
    v_head_size: int | None = None
    # "mha" (the K/V paged cache), or an MLA form, "mla_absorbed" / "mla_expanded"
    # (attn_contract/mla.py says what each passes to ``forward``); MLA sets ``mla`` too.
    attention_kind: str = MHA
    mla: MLADims | None = None

    def __post_init__(self) -> None:
        if (self.attention_kind in MLA_KINDS) != (self.mla is not None):
            raise ValueError(f"attention_kind {self.attention_kind!r} with mla={self.mla!r}: an MLA form needs"
                             " its MLADims and only an MLA form has them")

    @property
    def softmax_scale(self) -> float:
        """``scale`` if set; MLA's ``(qk_nope + qk_rope) ** -0.5 * mscale ** 2`` (never from the
        576-wide absorbed head); else ``1/sqrt(head_size)``."""
        if self.scale is not None:
            return self.scale
        if self.mla is not None:
            return self.mla.softmax_scale
        return 1.0 / math.sqrt(self.head_size)

    @property
    def value_head_size(self) -> int:
        return self.head_size if self.v_head_size is None else self.v_head_size

    @property
    def is_mla(self) -> bool:
        return self.mla is not None

    @property
    def latent_cache(self) -> bool:
        """True when the cache is MLA's latent ``(num_blocks, block_size, kv_lora_rank +
        qk_rope_head_dim)`` rather than the (K, V) ``(num_blocks, 2, block_size, Hk, D)``."""
        return self.mla is not None

    @property
    def absorbed(self) -> bool:
        return self.attention_kind == MLA_ABSORBED

    @property
    def torch_dtype(self) -> torch.dtype:
        return TORCH_DTYPES[self.dtype]

    @property
    def cache_torch_dtype(self) -> torch.dtype:
        return TORCH_DTYPES[self.dtype] if self.kv_cache_dtype == "auto" else TORCH_DTYPES[self.kv_cache_dtype]

    @property
    def is_fp8_kv(self) -> bool:
        return self.kv_cache_dtype.startswith("fp8")

    @property
    def gqa_group(self) -> int:
        return self.num_heads // self.num_kv_heads

    @property
    def window_left(self) -> int:
        """Keys to the left of the diagonal a query may see (FA's ``window_size[0]``); -1 = all."""
        return -1 if self.sliding_window is None else self.sliding_window - 1


TORCH_DTYPES: dict[str, torch.dtype] = {
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "fp8_e4m3": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2,
}
FP8_DTYPES: frozenset[torch.dtype] = frozenset({torch.float8_e4m3fn, torch.float8_e5m2})


def index_kv(t: torch.Tensor, *index: Any) -> torch.Tensor:
    """``t[index]`` (advanced indexing, e.g. a paged cache read through block/offset tensors) for
    any dtype: fp8 goes through its bytes, since torch 2.5-2.9 have no CPU index kernel for fp8
    ("index_cpu" not implemented for 'Float8_e4m3fn'); a byte copy is bit-exact."""
    if t.dtype in FP8_DTYPES:
        return t.view(torch.uint8)[index].view(t.dtype)
    return t[index]


@dataclass
class LayerParams:
    """Per-layer tensors a real model would hold (vLLM keeps them on the Attention layer)."""

    k_scale: float = 1.0  # fp8 KV dequantization scales: real value = stored value * scale
    v_scale: float = 1.0
    sinks: torch.Tensor | None = None  # float32 [num_heads], natural-log units, unscaled
    alibi_slopes: torch.Tensor | None = None  # float32 [num_heads]
    # MLA's up-projection (kv_b_proj split per head, model dtype): ``k_nope = ckv @ mla_w_uk[h].T``,
    # ``v = ckv @ mla_w_uv[h]``; W_UK [num_heads, qk_nope_head_dim, kv_lora_rank], W_UV
    # [num_heads, kv_lora_rank, v_head_dim]. The harness has already applied them where the
    # contract passes expanded keys/values; a backend that up-projects from the latent cache
    # itself (vLLM's _compute_prefill_context) reads them here. None outside MLA.
    mla_w_uk: torch.Tensor | None = None
    mla_w_uv: torch.Tensor | None = None


@dataclass
class CommonAttentionMetadata:
    """Batch description shared by all backends (vLLM v1's CommonAttentionMetadata).

    Requests are in batch order; request ``i`` owns query tokens
    ``query_start_loc[i]:query_start_loc[i+1]`` and its K/V are the first ``seq_lens[i]``
    logical tokens addressed through ``block_table[i]`` (the last ``query_len`` of them are
    the new tokens whose cache slots ``slot_mapping`` lists).
    """

    query_start_loc: torch.Tensor  # int32 [num_reqs + 1], on device
    query_start_loc_cpu: torch.Tensor  # same, on CPU
    seq_lens: torch.Tensor  # int32 [num_reqs], context + new tokens
    seq_lens_cpu: torch.Tensor
    block_table: torch.Tensor  # int32 [num_reqs, max_blocks_per_req]
    slot_mapping: torch.Tensor  # int64 [num_actual_tokens]
    num_reqs: int
    num_actual_tokens: int
    max_query_len: int
    max_seq_len: int
    causal: bool = True
    block_size: int = 16
    # Shared-prefix (cascade) description: length in tokens of the prefix shared by each group
    # and which requests belong to it; empty when the batch has no shared prefix.
    prefix_group_lens: tuple[int, ...] = ()
    prefix_group_of_req: tuple[int, ...] = ()

    @property
    def query_lens_cpu(self) -> torch.Tensor:
        return self.query_start_loc_cpu[1:] - self.query_start_loc_cpu[:-1]

    @property
    def context_lens_cpu(self) -> torch.Tensor:
        return self.seq_lens_cpu - self.query_lens_cpu

    @property
    def kv_start_loc_cpu(self) -> torch.Tensor:
        """int32 [num_reqs + 1]: where each request's keys start in MLA's expanded ``key`` /
        ``value`` (all of a request's tokens, packed in batch order): cumsum of seq_lens."""
        return torch.cat([self.seq_lens_cpu.new_zeros(1), torch.cumsum(self.seq_lens_cpu, 0).to(torch.int32)])

    def with_causal(self, causal: bool) -> "CommonAttentionMetadata":
        return replace(self, causal=causal)


@dataclass(frozen=True)
class DecodePrefillSplit:
    num_decodes: int
    num_prefills: int
    num_decode_tokens: int
    num_prefill_tokens: int


def split_decodes_and_prefills(common: CommonAttentionMetadata, decode_threshold: int = 1) -> DecodePrefillSplit:
    """Count the leading decode requests (query_len <= threshold) of a decode-first batch.

    Like vLLM's helper, it assumes the batch was reordered so decodes come first and stops at
    the first request longer than the threshold.
    """
    qlens = common.query_lens_cpu.tolist()
    num_decodes = 0
    for q in qlens:
        if q > decode_threshold:
            break
        num_decodes += 1
    num_decode_tokens = int(sum(qlens[:num_decodes]))
    return DecodePrefillSplit(
        num_decodes=num_decodes,
        num_prefills=common.num_reqs - num_decodes,
        num_decode_tokens=num_decode_tokens,
        num_prefill_tokens=common.num_actual_tokens - num_decode_tokens,
    )


def decode_first_order(query_lens: list[int], threshold: int) -> list[int]:
    """Stable permutation of request indices putting decodes (query_len <= threshold) first."""
    decodes = [i for i, q in enumerate(query_lens) if q <= threshold]
    rest = [i for i, q in enumerate(query_lens) if q > threshold]
    return decodes + rest
