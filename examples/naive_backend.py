"""A complete, minimal attention backend for attn-harness: plain PyTorch, runs on the CPU
(and on a GPU). Copy it as the starting point of your own; docs/adding-a-backend.md explains
every part.

Run it (the module must be importable: its folder on PYTHONPATH, or an installed package):

    PYTHONPATH=examples harness run suites/conformance.yaml --backends naive_backend:NaiveBackend \\
        --device cpu --no-time

It imports only ``attn_contract`` (the contract between the harness and its backends) and torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from attn_contract import (
    AttentionBackend,
    AttentionImpl,
    AttentionMetadataBuilder,
    Availability,
    Capabilities,
    CommonAttentionMetadata,
    HeadSizes,
    MultipleOf,
)


@dataclass
class NaiveMetadata:
    """What ``forward`` needs, prepared once per batch by the builder (host work, timed apart)."""

    query_start_loc: list[int]
    seq_lens: list[int]
    block_table: torch.Tensor  # int32 [num_reqs, max_blocks]
    causal: bool


class NaiveMetadataBuilder(AttentionMetadataBuilder[NaiveMetadata]):
    def build(self, common: CommonAttentionMetadata) -> NaiveMetadata:
        return NaiveMetadata(common.query_start_loc_cpu.tolist(), common.seq_lens_cpu.tolist(),
                             common.block_table, common.causal)


class NaiveImpl(AttentionImpl[NaiveMetadata]):
    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor,
                metadata: NaiveMetadata, out: torch.Tensor, lse_out: torch.Tensor | None = None) -> torch.Tensor:
        cfg = self.config
        bs, hk, d = cfg.block_size, cfg.num_kv_heads, cfg.head_size
        group = cfg.num_heads // cfg.num_kv_heads
        dev = query.device
        for i, s_len in enumerate(metadata.seq_lens):
            lo, hi = metadata.query_start_loc[i], metadata.query_start_loc[i + 1]
            q_len = hi - lo
            # The request's K/V: its blocks, in block-table order, first s_len tokens. kv_cache is
            # [num_blocks, 2 (K, V), block_size, num_kv_heads, head_size] whatever its memory layout.
            blocks = metadata.block_table[i, : -(-s_len // bs)].long()
            kv = kv_cache[blocks]
            k = kv[:, 0].reshape(-1, hk, d)[:s_len].float().repeat_interleave(group, dim=1)  # [s, H, d]
            v = kv[:, 1].reshape(-1, hk, d)[:s_len].float().repeat_interleave(group, dim=1)
            q = query[lo:hi].float()  # [q, H, d]
            scores = torch.einsum("qhd,shd->hqs", q, k) * cfg.softmax_scale
            if metadata.causal:
                # Bottom-right aligned, as FlashAttention and FlashInfer: the last query token
                # is the last token of the sequence, so query j sits at s_len - q_len + j.
                pos = torch.arange(q_len, device=dev) + (s_len - q_len)
                hidden = torch.arange(s_len, device=dev)[None, :] > pos[:, None]
                scores = scores.masked_fill(hidden, float("-inf"))
            out[lo:hi] = torch.einsum("hqs,shd->qhd", scores.softmax(-1), v).to(out.dtype)
            if lse_out is not None:
                lse_out[lo:hi] = torch.logsumexp(scores, dim=-1).transpose(0, 1)  # natural log, [q, H]
        return out


class NaiveBackend(AttentionBackend):
    # Required: the one name used by --backends, result rows and reproducers. If you register
    # the class as an entry point, the entry-point name must be this same string.
    name = "naive"
    description = "per-request softmax(QK^T)V in fp32 over the paged KV cache (example backend)"

    @classmethod
    def availability(cls, variant: dict[str, Any] | None = None) -> Availability:
        # Say why not when a library is missing: Availability.no("mylib is not installed").
        return Availability.ok(torch=torch.__version__)

    @classmethod
    def capabilities(cls, variant: dict[str, Any] | None = None) -> Capabilities:
        # Everything not declared here is reported as `unsupported` with the reason, never called.
        return Capabilities(
            dtypes=frozenset({"float16", "bfloat16"}),
            kv_cache_dtypes=frozenset({"auto"}),       # no fp8 KV cache
            head_sizes=HeadSizes(min=1, max=1024, multiple_of=1),
            block_sizes=(MultipleOf(1),),
            kv_layouts=frozenset({"NHD", "HND"}),      # reads kv_cache by index: any stride order
            causal=True,
            non_causal=True,
            returns_lse=True,                          # forward fills lse_out; the harness checks it
            # The default is {"cuda"}: a backend that runs on the CPU must say so.
            devices=frozenset({"cpu", "cuda"}),
        )

    @classmethod
    def get_builder_cls(cls) -> type[NaiveMetadataBuilder]:
        return NaiveMetadataBuilder

    @classmethod
    def get_impl_cls(cls) -> type[NaiveImpl]:
        return NaiveImpl
