"""Cascade attention in torch (CPU and GPU): per prefix group, one non-causal pass of all the
group's queries over the shared prefix K/V (read once through the prefix blocks), one causal
pass of each request over its own suffix, and the exact LSE merge of attn_contract.merge.

It is the executable statement of the algorithm the GPU cascade backends implement, checked
by the harness against plain attention over the full context."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from backends._paged import dequantize
from backends._torch import TORCH_CAPABILITIES, TorchBackend
from attn_contract import (
    AttentionMetadataBuilder,
    Capabilities,
    CommonAttentionMetadata,
    group_layout,
    index_kv,
    merge_attn_states,
)
from backends.cascade.base import CascadeBackend, CascadeImpl, shifted_block_table
from backends.torch_math import MathImpl, MathMetadata

_MAX_SCORE_ELEMS = 1 << 26  # scores per chunk of the prefix pass (256 MB in fp32)


@dataclass
class PrefixGroup:
    prefix_len: int
    blocks: torch.Tensor  # long [prefix_len // block_size], physical ids of the shared blocks
    token_index: torch.Tensor  # long [T_g], the group's query tokens in batch order


@dataclass
class TorchCascadeMetadata:
    groups: list[PrefixGroup]
    suffix: MathMetadata  # each request over its own blocks only (table shifted past the prefix)
    block_size: int


class TorchCascadeMetadataBuilder(AttentionMetadataBuilder[TorchCascadeMetadata]):
    def build(self, common: CommonAttentionMetadata) -> TorchCascadeMetadata:
        bs = common.block_size
        lay = group_layout(common)
        qsl = common.query_start_loc_cpu.tolist()
        dev = common.block_table.device
        groups = []
        for g, reqs in enumerate(lay.members):
            p = lay.prefix_lens[g]
            if not reqs or p == 0:
                continue
            # The group's first request's table names the shared blocks (all rows alias there).
            blocks = common.block_table[reqs[0], : p // bs].long()
            tok = torch.cat([torch.arange(qsl[r], qsl[r + 1]) for r in reqs]).to(dev)
            groups.append(PrefixGroup(p, blocks, tok))
        skip = [p // bs for p in lay.prefix_len_of_req]
        suffix_lens = [int(s) - p for s, p in zip(common.seq_lens_cpu.tolist(), lay.prefix_len_of_req)]
        suffix = MathMetadata(
            query_start_loc=qsl,
            seq_lens=suffix_lens,
            block_table=shifted_block_table(common.block_table, skip),
            block_size=bs,
            causal=common.causal,
        )
        return TorchCascadeMetadata(groups, suffix, bs)


def prefix_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, softcap: float = 0.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Non-causal attention of q ``[n, Hq, D]`` over k/v ``[P, Hk, D]`` (all in one float
    dtype) -> (out ``[n, Hq, D]``, natural-log lse ``[n, Hq]``). GQA without copying K/V: the
    query heads of a KV head stack into one matmul."""
    n, hq, d = q.shape
    hk = k.shape[1]
    g = hq // hk
    qh = q.view(n, hk, g, d).permute(1, 2, 0, 3).reshape(hk, g * n, d)
    scores = torch.matmul(qh, k.permute(1, 2, 0)) * scale  # [Hk, g*n, P]
    if softcap:
        scores = softcap * torch.tanh(scores / softcap)
    lse = torch.logsumexp(scores, dim=-1)  # [Hk, g*n]
    o = torch.matmul(torch.exp(scores - lse.unsqueeze(-1)), v.permute(1, 0, 2))  # [Hk, g*n, D]
    o = o.view(hk, g, n, -1).permute(2, 0, 1, 3).reshape(n, hq, -1)
    return o, lse.view(hk, g, n).permute(2, 0, 1).reshape(n, hq)


class TorchCascadeImpl(CascadeImpl[TorchCascadeMetadata]):
    def forward(self, query, key, value, kv_cache, metadata, out, lse_out=None):
        cfg, md = self.config, metadata
        t, hq = query.shape[0], cfg.num_heads
        compute = torch.float32
        p_out = torch.zeros((t, hq, cfg.head_size), dtype=compute, device=query.device)
        p_lse = torch.full((t, hq), float("-inf"), dtype=compute, device=query.device)
        for grp in md.groups:
            # One read of the shared prefix for all of the group's queries.
            k = index_kv(kv_cache, grp.blocks, 0).flatten(0, 1)  # [P, Hk, D]
            v = index_kv(kv_cache, grp.blocks, 1).flatten(0, 1)
            k, v = dequantize(k, v, self.layer, compute)
            rows = max(1, _MAX_SCORE_ELEMS // max(1, hq * grp.prefix_len))
            for lo in range(0, grp.token_index.numel(), rows):
                tok = grp.token_index[lo : lo + rows]
                o, l = prefix_attention(query[tok].to(compute), k, v, cfg.softmax_scale, cfg.softcap)
                p_out[tok] = o
                p_lse[tok] = l
        # Suffix: each request over its own blocks, causal bottom-right (sinks counted here only).
        s_out = torch.empty_like(p_out)
        s_lse = torch.empty_like(p_lse)
        MathImpl(cfg, {}, self.device, self.layer).forward(query, key, value, kv_cache, md.suffix, s_out, s_lse)
        merge_attn_states(p_out, p_lse, s_out, s_lse, out=out, out_lse=lse_out)
        return out

    def graph_safe(self, metadata: TorchCascadeMetadata) -> str | None:
        return "host loops over groups and requests (torch-math suffix pass)"

    def describe_passes(self, metadata: TorchCascadeMetadata) -> dict[str, Any]:
        return {
            "path": "torch: prefix pass per group (non-causal) + torch-math suffix pass (causal) + LSE merge",
            "num_groups": len(metadata.groups),
            "prefix_lens": sorted({g.prefix_len for g in metadata.groups}),
        }


class TorchCascadeBackend(CascadeBackend, TorchBackend):
    name = "torch-cascade"
    plain_counterpart = "torch-math"
    description = "cascade in torch: shared prefix once per group + per-request suffix, merged by LSE (CPU/GPU)"
    builder_cls = TorchCascadeMetadataBuilder
    impl_cls = TorchCascadeImpl
    contiguous_groups = False  # the prefix pass gathers each group's query tokens wherever they lie

    @classmethod
    def capabilities(cls, variant=None) -> Capabilities:
        return cls.cascade_capabilities(
            gpu=False,
            **TORCH_CAPABILITIES,
            non_causal=True,
            softcap=True,
            sinks=True,
            notes=(
                "needs a shared prefix (shared_prefix in the case) of whole blocks; batches without one are unsupported",
                "sinks are counted in the suffix pass only",
            ),
        )
