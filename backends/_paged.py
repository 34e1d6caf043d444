"""Helpers the torch backends share: reading a request's K/V back out of the paged cache."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attn_contract import AttentionMetadataBuilder, CommonAttentionMetadata, LayerParams


@dataclass
class HostLoopMetadata:
    """What the torch backends need: host lists to loop over and the device block table."""

    query_start_loc: list[int]
    seq_lens: list[int]
    block_table: torch.Tensor
    block_size: int
    causal: bool


class HostLoopMetadataBuilder(AttentionMetadataBuilder[HostLoopMetadata]):
    def build(self, common: CommonAttentionMetadata) -> HostLoopMetadata:
        return HostLoopMetadata(
            query_start_loc=common.query_start_loc_cpu.tolist(),
            seq_lens=common.seq_lens_cpu.tolist(),
            block_table=common.block_table,
            block_size=common.block_size,
            causal=common.causal,
        )


def gather_request_kv(
    kv_cache: torch.Tensor, block_table_row: torch.Tensor, seq_len: int, block_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """K, V ``[seq_len, Hk, D]`` of one request, read through its block table.

    ``kv_cache`` is the logical ``(num_blocks, 2, block_size, Hk, D)`` view in either stride
    order; indexing goes through the view, so HND memory works unchanged."""
    t = torch.arange(seq_len, device=kv_cache.device)
    blocks = block_table_row[t // block_size].long()
    offsets = t % block_size
    return kv_cache[blocks, 0, offsets], kv_cache[blocks, 1, offsets]


def dequantize(k: torch.Tensor, v: torch.Tensor, layer: LayerParams, out_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """fp8 cache entries back to real values (stored * scale); other dtypes just cast."""
    if k.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        return (k.float() * layer.k_scale).to(out_dtype), (v.float() * layer.v_scale).to(out_dtype)
    return k.to(out_dtype), v.to(out_dtype)
