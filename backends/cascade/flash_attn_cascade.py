"""Cascade attention through FlashAttention, as vLLM's (since removed) cascade path did it
(vLLM's `cascade_attention` in `vllm/v1/attention/backends/flash_attn.py` before 0.33.0), generalized to several prefix groups:

1. prefix pass: one paged call over the groups' shared prefix blocks, non-causal, with each
   group's query tokens as one sequence (several groups = a varlen batch of groups);
2. suffix pass: one paged call over each request's own blocks (its block table after the
   prefix blocks, ``seqused_k = seq_len - prefix_len``), causal bottom-right;
3. the exact LSE merge (attn_contract.merge_attn_states, in torch).

``fa_version=3``: ``flash_attn_interface.flash_attn_with_kvcache`` with ``page_table`` and
``cu_seqlens_q`` (returns 4 values; LSE ``(H, T)`` natural log). ``fa_version=4``:
``flash_attn.cute.flash_attn_varlen_func`` with ``page_table`` + ``seqused_k`` (returns
``(out, lse)``, LSE ``(H, T)``). Libraries are imported lazily.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from attn_contract import (
    AttentionMetadataBuilder,
    Availability,
    Capabilities,
    CommonAttentionMetadata,
    HeadSizes,
    group_layout,
    merge_attn_states,
)
from backends.cascade.base import GPU_BATCH_NOTE, CascadeBackend, CascadeImpl, shifted_block_table
from backends.flash_attn.backend import FlashAttentionBackend
from backends.flash_attn import GENERATIONS, availability_from, cuda_capability, detect_features

DEFAULT_VERSION = 3
# Library detection (import, version, GPU generation) and entry points are the flash_attn
# package's generation classes: one place knows the FlashAttention builds and their failure modes.


@dataclass
class FACascadeMetadata:
    # prefix pass: one "sequence" per group
    prefix_cu_q: torch.Tensor  # int32 [G+1], group boundaries in token space
    prefix_max_q: int
    prefix_table: torch.Tensor  # int32 [G, max prefix blocks], contiguous
    prefix_lens: torch.Tensor  # int32 [G]
    prefix_max_k: int
    # suffix pass: one sequence per request
    cu_q: torch.Tensor  # int32 [B+1]
    max_q: int
    suffix_table: torch.Tensor  # int32 [B, max suffix blocks], contiguous
    suffix_lens: torch.Tensor  # int32 [B]
    suffix_max_k: int
    num_groups: int
    prefix_len_values: list[int]


class FACascadeMetadataBuilder(AttentionMetadataBuilder[FACascadeMetadata]):
    def build(self, common: CommonAttentionMetadata) -> FACascadeMetadata:
        # check_batch_support guaranteed: groups contiguous and in order, every request grouped,
        # prefixes of whole blocks shared by every member's block table.
        lay = group_layout(common)
        bs = common.block_size
        dev = common.block_table.device
        qsl = common.query_start_loc_cpu.tolist()
        seq = common.seq_lens_cpu.tolist()
        firsts = [m[0] for m in lay.members]
        bounds = [qsl[f] for f in firsts] + [qsl[common.num_reqs]]
        nbs = [p // bs for p in lay.prefix_lens]
        max_nb = max(nbs)
        rows = common.block_table[torch.tensor(firsts, device=dev), :max_nb]
        keep = torch.arange(max_nb, device=dev).view(1, -1) < torch.tensor(nbs, device=dev).view(-1, 1)
        prefix_table = rows.masked_fill(~keep, 0).to(torch.int32).contiguous()
        suffix_lens = [s - p for s, p in zip(seq, lay.prefix_len_of_req)]
        max_sb = max(-(-s // bs) for s in suffix_lens)
        suffix_table = shifted_block_table(common.block_table, [p // bs for p in lay.prefix_len_of_req])
        i32 = dict(dtype=torch.int32, device=dev)
        return FACascadeMetadata(
            prefix_cu_q=torch.tensor(bounds, **i32),
            prefix_max_q=max(b - a for a, b in zip(bounds, bounds[1:])),
            prefix_table=prefix_table,
            prefix_lens=torch.tensor(lay.prefix_lens, **i32),
            prefix_max_k=max(lay.prefix_lens),
            cu_q=common.query_start_loc.to(torch.int32),
            max_q=common.max_query_len,
            suffix_table=suffix_table[:, :max_sb].to(torch.int32).contiguous(),
            suffix_lens=torch.tensor(suffix_lens, **i32),
            suffix_max_k=max(suffix_lens),
            num_groups=len(lay.members),
            prefix_len_values=sorted(set(lay.prefix_lens)),
        )


def _fa3_pass(fns: dict[str, Callable[..., Any]]) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    fn = fns["kvcache"]

    def run(q, k_cache, v_cache, cu_q, max_q, table, seqused, max_k, scale, causal):
        # with return_softmax_lse=True FA3 returns (out, lse, out_accum, lse_accum).
        o, lse, *_ = fn(q, k_cache, v_cache, cache_seqlens=seqused, page_table=table, cu_seqlens_q=cu_q,
                        max_seqlen_q=max_q, softmax_scale=scale, causal=causal, return_softmax_lse=True)
        return o, lse

    return run


def _fa4_pass(fns: dict[str, Callable[..., Any]]) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    fn = fns["varlen"]

    def run(q, k_cache, v_cache, cu_q, max_q, table, seqused, max_k, scale, causal):
        # page_table needs seqused_k and no cu_seqlens_k; num_splits stays 1 (sm90 has no split-KV).
        o, lse = fn(q, k_cache, v_cache, cu_seqlens_q=cu_q, max_seqlen_q=max_q, max_seqlen_k=max_k,
                    seqused_k=seqused, page_table=table, softmax_scale=scale, causal=causal, return_lse=True)
        return o, lse

    return run


# fa_version -> (the paged pass, the entry point named in describe_call)
PASSES = {3: (_fa3_pass, "flash_attn_with_kvcache"), 4: (_fa4_pass, "flash_attn.cute.flash_attn_varlen_func")}


class FACascadeImpl(CascadeImpl[FACascadeMetadata]):
    def __init__(self, config, variant, device, layer):
        super().__init__(config, variant, device, layer)
        self.fa_version = int((variant or {}).get("fa_version", DEFAULT_VERSION))
        # Resolved once here (lazily: only a GPU run with the library constructs the impl).
        make_pass, self.api = PASSES[self.fa_version]
        self._pass = make_pass(GENERATIONS[self.fa_version].load_entry_points())

    def forward(self, query, key, value, kv_cache, metadata, out, lse_out=None):
        md, scale = metadata, self.config.softmax_scale
        # Canonical cache (blocks, 2, page, Hk, D): K and V are strided (blocks, page, Hk, D) views.
        k_cache, v_cache = kv_cache[:, 0], kv_cache[:, 1]
        p_out, p_lse = self._pass(query, k_cache, v_cache, md.prefix_cu_q, md.prefix_max_q, md.prefix_table,
                                  md.prefix_lens, md.prefix_max_k, scale, False)
        s_out, s_lse = self._pass(query, k_cache, v_cache, md.cu_q, md.max_q, md.suffix_table,
                                  md.suffix_lens, md.suffix_max_k, scale, True)
        # LSEs come as (H, T); the merge takes (T, H) views.
        merge_attn_states(p_out, p_lse.t(), s_out, s_lse.t(), out=out, out_lse=lse_out)
        return out

    def describe_passes(self, metadata: FACascadeMetadata) -> dict[str, Any]:
        return {
            "path": f"FA{self.fa_version} {self.api}: paged prefix pass (non-causal, one sequence per group) "
                    "+ paged suffix pass (causal) + torch LSE merge",
            "fa_version": self.fa_version,
            "num_groups": metadata.num_groups,
            "prefix_lens": metadata.prefix_len_values,
        }


class FlashAttnCascadeBackend(CascadeBackend, library_of=FlashAttentionBackend):
    name = "flash-attn-cascade"
    plain_counterpart = "flash-attn"
    description = "cascade through FlashAttention 3/4 paged calls: shared-prefix pass + suffix pass + LSE merge"
    variant_axes = {"fa_version": (3, 4)}
    builder_cls = FACascadeMetadataBuilder
    impl_cls = FACascadeImpl

    @classmethod
    def availability(cls, variant=None) -> Availability:
        v = int((variant or {}).get("fa_version", DEFAULT_VERSION))
        return availability_from(v, detect_features(v), cuda_capability())

    @classmethod
    def capabilities(cls, variant=None) -> Capabilities:
        return cls.cascade_capabilities(
            head_sizes=HeadSizes(min=8, max=256, multiple_of=8),
            kv_layouts=frozenset({"NHD"}),  # FA3/FA4 paged calls take any page size, NHD pages only
            notes=(GPU_BATCH_NOTE, "the merge is torch elementwise code (several kernels), counted in the time"),
        )
