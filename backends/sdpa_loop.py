"""torch SDPA one request at a time: reads each request's K/V by block table and makes one
``scaled_dot_product_attention`` call per request. A correctness cross-check, not a baseline
worth timing (a Python loop of B calls; ``sdpa`` is the batched call a PyTorch user makes),
so no suite lists it by default. Runs on CPU and GPU."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from backends._paged import HostLoopMetadata, HostLoopMetadataBuilder, dequantize, gather_request_kv
from backends._torch import TorchBackend, torch_capabilities
from attn_contract import AttentionImpl, Capabilities, CudaGraphSupport


SDPAMetadata = HostLoopMetadata
SDPAMetadataBuilder = HostLoopMetadataBuilder


def _sdpa_mask(q_len: int, s_len: int, causal: bool, window: int | None, alibi: torch.Tensor | None,
               device: torch.device, dtype: torch.dtype) -> Any:
    """None, a boolean mask, or an additive float mask [H|1, q, s] (bottom-right aligned)."""
    if not causal and window is None and alibi is None:
        return None
    diag = torch.arange(q_len, device=device).unsqueeze(1) + (s_len - q_len)
    j = torch.arange(s_len, device=device).unsqueeze(0)
    keep = torch.ones((q_len, s_len), dtype=torch.bool, device=device)
    if causal:
        keep &= j <= diag
    if window is not None:
        keep &= (diag - j) < window
        if not causal:
            keep &= (j - diag) < window
    if alibi is None:
        return keep
    bias = -alibi.view(-1, 1, 1).to(dtype) * (diag - j).abs().to(dtype)
    return bias.masked_fill(~keep, float("-inf"))


class SDPALoopImpl(AttentionImpl[SDPAMetadata]):
    def forward(self, query, key, value, kv_cache, metadata, out, lse_out=None):
        cfg = self.config
        # CPU SDPA in reduced precision is slow and loose; compute in fp32 there.
        compute = torch.float32 if query.device.type == "cpu" else query.dtype
        group = cfg.num_heads // cfg.num_kv_heads
        qsl = metadata.query_start_loc
        for i, s_len in enumerate(metadata.seq_lens):
            lo, hi = qsl[i], qsl[i + 1]
            q_len = hi - lo
            k, v = gather_request_kv(kv_cache, metadata.block_table[i], s_len, metadata.block_size)
            k, v = dequantize(k, v, self.layer, compute)
            q = query[lo:hi].to(compute).transpose(0, 1).unsqueeze(0)  # [1, Hq, q, D]
            k = k.repeat_interleave(group, dim=1).transpose(0, 1).unsqueeze(0)
            v = v.repeat_interleave(group, dim=1).transpose(0, 1).unsqueeze(0)
            mask = _sdpa_mask(q_len, s_len, metadata.causal, cfg.sliding_window, self.layer.alibi_slopes,
                              query.device, compute)
            if mask is not None and mask.dtype == torch.bool:
                # SDPA gives NaN for rows with no visible key; FA semantics are output 0.
                empty = ~mask.any(-1)
            else:
                empty = None
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=cfg.softmax_scale)
            o = o.squeeze(0).transpose(0, 1)
            if empty is not None and empty.any():
                o = o.masked_fill(empty.view(-1, 1, 1), 0.0)
            out[lo:hi] = o.to(out.dtype)
        return out


class SDPALoopBackend(TorchBackend):
    name = "sdpa-loop"
    description = "torch SDPA per request in a Python loop over the gathered paged KV (cross-check, not a baseline)"

    @classmethod
    def capabilities(cls, variant=None) -> Capabilities:
        return torch_capabilities(
            sliding_window=True,
            alibi=True,
            softcap=False,
            sinks=False,
            returns_lse=False,
            cudagraph=CudaGraphSupport.NEVER,
            notes=("one SDPA call per request (host loop): a correctness baseline, not a fast path",),
        )

    @classmethod
    def get_builder_cls(cls):
        return SDPAMetadataBuilder

    @classmethod
    def get_impl_cls(cls):
        return SDPALoopImpl
