"""The plain math path: pad the batch, gather the paged KV, softmax(QK^T)V in fp32.

Vectorized over requests (unlike the per-request reference), it supports every feature the
harness knows (sliding window, softcap, ALiBi, sinks, fp8 KV) and returns the LSE, so it is
the conformance baseline on machines without a GPU library."""

from __future__ import annotations


import torch

from backends._paged import HostLoopMetadata, HostLoopMetadataBuilder, dequantize
from attn_contract import (
    AttentionBackend,
    AttentionImpl,
    Availability,
    Capabilities,
    CudaGraphSupport,
    HeadSizes,
    MultipleOf,
)

_MAX_SCORE_ELEMS = 1 << 26  # per chunk of requests


# The torch backends share one host-side metadata (kept under these names for importers).
MathMetadata = HostLoopMetadata
MathMetadataBuilder = HostLoopMetadataBuilder


class MathImpl(AttentionImpl[MathMetadata]):
    def _chunk(self, query, kv_cache, md: MathMetadata, reqs: list[int], out, lse_out):
        cfg, layer, dev = self.config, self.layer, query.device
        qsl = md.query_start_loc
        qlens = torch.tensor([qsl[r + 1] - qsl[r] for r in reqs], device=dev)
        slens = torch.tensor([md.seq_lens[r] for r in reqs], device=dev)
        qmax, smax = int(qlens.max()), int(slens.max())
        b = len(reqs)
        # Gather K/V padded to smax: positions past a request's length read block 0 and are masked.
        t = torch.arange(smax, device=dev)
        table = md.block_table[torch.tensor(reqs, device=dev)].long()
        nblk = table.shape[1]
        blocks = table[:, (t // md.block_size).clamp_max(nblk - 1)]  # [b, smax]
        offs = (t % md.block_size).expand(b, smax)
        k, v = dequantize(kv_cache[blocks, 0, offs], kv_cache[blocks, 1, offs], layer, torch.float32)
        hk = cfg.num_kv_heads
        group = cfg.num_heads // hk
        k = k.permute(0, 2, 1, 3)  # [b, Hk, smax, D]
        v = v.permute(0, 2, 1, 3)
        # Padded Q: row r of request b is its query token r (rows past q_len are junk and dropped).
        rows = torch.arange(qmax, device=dev)
        starts = torch.tensor([qsl[r] for r in reqs], device=dev)
        tok = (starts.unsqueeze(1) + rows).clamp_max(query.shape[0] - 1)
        # GQA without copying K/V: a KV head's query heads and rows stack into one matmul.
        q = query[tok].float().view(b, qmax, hk, group, -1).permute(0, 2, 3, 1, 4)  # [b, Hk, g, qmax, D]
        q = q.reshape(b, hk, group * qmax, -1)
        scores = torch.matmul(q, k.transpose(-1, -2)) * cfg.softmax_scale  # [b, Hk, g*qmax, smax]
        scores = scores.reshape(b, cfg.num_heads, qmax, smax)
        if cfg.softcap:
            scores = cfg.softcap * torch.tanh(scores / cfg.softcap)
        diag = rows.view(1, qmax, 1) + (slens - qlens).view(b, 1, 1)  # [b, qmax, 1]
        j = t.view(1, 1, smax)
        keep = j < slens.view(b, 1, 1)
        if md.causal:
            keep = keep & (j <= diag)
        if cfg.sliding_window is not None:
            keep = keep & (diag - j < cfg.sliding_window)
            if not md.causal:
                keep = keep & (j - diag < cfg.sliding_window)
        if layer.alibi_slopes is not None:
            dist = (diag - j).abs().float().unsqueeze(1)  # [b, 1, qmax, smax]
            scores = scores - layer.alibi_slopes.float().view(1, -1, 1, 1) * dist
        scores = scores.masked_fill(~keep.unsqueeze(1), float("-inf"))
        if layer.sinks is not None:
            sink = layer.sinks.float().view(1, -1, 1, 1).expand(b, -1, qmax, 1)
            lse = torch.logsumexp(torch.cat([scores, sink], dim=-1), dim=-1)
        else:
            lse = torch.logsumexp(scores, dim=-1)  # [b, Hq, qmax]
        safe = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))
        p = torch.exp(scores - safe.unsqueeze(-1)).view(b, hk, group * qmax, smax)
        o = torch.matmul(p, v).reshape(b, cfg.num_heads, qmax, -1)  # [b, Hq, qmax, D]
        for n, r in enumerate(reqs):
            lo, hi = qsl[r], qsl[r + 1]
            out[lo:hi] = o[n, :, : hi - lo].transpose(0, 1).to(out.dtype)
            if lse_out is not None:
                lse_out[lo:hi] = lse[n, :, : hi - lo].transpose(0, 1)

    def forward(self, query, key, value, kv_cache, metadata, out, lse_out=None):
        md = metadata
        reqs: list[int] = []
        qsl = md.query_start_loc
        budget = _MAX_SCORE_ELEMS // max(1, self.config.num_heads)
        used = 0
        for r in range(len(md.seq_lens)):
            cost = (qsl[r + 1] - qsl[r]) * md.seq_lens[r]
            if reqs and used + cost > budget:
                self._chunk(query, kv_cache, md, reqs, out, lse_out)
                reqs, used = [], 0
            reqs.append(r)
            used += cost
        if reqs:
            self._chunk(query, kv_cache, md, reqs, out, lse_out)
        return out


class TorchMathBackend(AttentionBackend):
    name = "torch-math"
    description = "padded, batched softmax(QK^T)V in fp32 over the gathered paged KV (all features, LSE)"

    @classmethod
    def availability(cls, variant=None) -> Availability:
        return Availability.ok(torch=torch.__version__)

    @classmethod
    def capabilities(cls, variant=None) -> Capabilities:
        return Capabilities(
            dtypes=frozenset({"float16", "bfloat16"}),
            kv_cache_dtypes=frozenset({"auto", "fp8_e4m3", "fp8_e5m2"}),
            head_sizes=HeadSizes(min=1, max=1024, multiple_of=1),
            block_sizes=(MultipleOf(1),),
            kv_layouts=frozenset({"NHD", "HND"}),
            sliding_window=True,
            softcap=True,
            alibi=True,
            sinks=True,
            returns_lse=True,
            devices=frozenset({"cpu", "cuda"}),
            cudagraph=CudaGraphSupport.NEVER,
            notes=("fp32 math with padding; memory grows with max_query_len x max_seq_len per chunk",),
        )

    @classmethod
    def get_builder_cls(cls):
        return MathMetadataBuilder

    @classmethod
    def get_impl_cls(cls):
        return MathImpl
