"""The plain math path: pad the batch, gather the paged KV, softmax(QK^T)V in fp32.

Vectorized over requests (unlike the per-request reference), it supports every feature the
harness knows (sliding window, softcap, ALiBi, sinks, fp8 KV) and returns the LSE, so it is
the conformance baseline on machines without a GPU library."""

from __future__ import annotations


import torch

from backends._paged import (
    TORCH_MATH_CALL,
    HostLoopMetadata,
    HostLoopMetadataBuilder,
    MLA_CAPABILITIES,
    MLA_TORCH_KINDS,
    chunk_dims,
    gather_kv,
    padded_chunk,
    plan_chunks,
    scatter_rows,
)
from backends.mla.prefill import chunked_prefill
from backends._torch import TorchBackend, torch_capabilities
from attn_contract import MLA_EXPANDED, AttentionImpl, Capabilities, CudaGraphSupport

MAX_SCORE_ELEMS = 1 << 26  # padded score elements per chunk (256 MiB in fp32)
# MLA prefill: cached-context keys per chunk (CPU, CUDA); small on the CPU so its cells merge
# several chunks (the result does not depend on it: the merge is exact).
MLA_CONTEXT_CHUNK = (64, 8192)


# The torch backends share one host-side metadata (kept under these names for importers).
MathMetadata = HostLoopMetadata
MathMetadataBuilder = HostLoopMetadataBuilder


class MathImpl(AttentionImpl[MathMetadata]):
    def _chunk(self, query, key, value, kv_cache, md: MathMetadata, pc, out, lse_out):
        cfg, layer = self.config, self.layer
        b, qmax, smax = len(pc.segments), pc.qmax, pc.smax
        k, v = self.gather(kv_cache, key, value, pc)
        # Padded key positions read slots no request owns (NaN under --adversarial): zero them,
        # since 0 * NaN in P.V would poison the row even though P is 0 there.
        unseen = ~pc.keep.any(1)[..., None, None]  # [b, smax, 1, 1]
        k.masked_fill_(unseen, 0.0)  # in place: fresh gathered copies (MLA's absorbed V is a view of K)
        if not cfg.absorbed:
            v.masked_fill_(unseen, 0.0)
        hk = cfg.num_kv_heads
        group = cfg.num_heads // hk
        k = k.permute(0, 2, 1, 3)  # [b, Hk, smax, D]
        v = v.permute(0, 2, 1, 3)
        # GQA without copying K/V: a KV head's query heads and rows stack into one matmul.
        q = query[pc.tok].float().view(b, qmax, hk, group, -1).permute(0, 2, 3, 1, 4)  # [b, Hk, g, qmax, D]
        q = q.reshape(b, hk, group * qmax, -1)
        scores = torch.matmul(q, k.transpose(-1, -2)) * cfg.softmax_scale  # [b, Hk, g*qmax, smax]
        scores = scores.reshape(b, cfg.num_heads, qmax, smax)
        if cfg.softcap:
            scores = cfg.softcap * torch.tanh(scores / cfg.softcap)
        if layer.alibi_slopes is not None:
            dist = pc.dist.abs().float().unsqueeze(1)  # [b, 1, qmax, smax]
            scores = scores - layer.alibi_slopes.float().view(1, -1, 1, 1) * dist
        scores = scores.masked_fill(~pc.keep.unsqueeze(1), float("-inf"))
        if layer.sinks is not None:
            sink = layer.sinks.float().view(1, -1, 1, 1).expand(b, -1, qmax, 1)
            lse = torch.logsumexp(torch.cat([scores, sink], dim=-1), dim=-1)
        else:
            lse = torch.logsumexp(scores, dim=-1)  # [b, Hq, qmax]
        safe = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))
        p = torch.exp(scores - safe.unsqueeze(-1)).view(b, hk, group * qmax, smax)
        o = torch.matmul(p, v).reshape(b, cfg.num_heads, qmax, -1)  # [b, Hq, qmax, D]
        scatter_rows(out, o.transpose(1, 2), pc, md)
        if lse_out is not None:
            scatter_rows(lse_out, lse.transpose(1, 2), pc, md)

    def gather(self, kv_cache, key, value, pc):
        """K, V of a padded chunk in fp32 (``backends._paged.gather_kv``; MLA-aware)."""
        return gather_kv(kv_cache, key, value, pc, self.config, self.layer, torch.float32)

    def forward(self, query, key, value, kv_cache, metadata, out, lse_out=None):
        md = metadata
        if self.config.attention_kind == MLA_EXPANDED:  # vLLM's prefill: new tokens, then context chunks
            chunk = MLA_CONTEXT_CHUNK[query.device.type == "cuda"]
            chunked_prefill(query, key, value, md.query_start_loc, md.kv_start_loc, md.seq_lens,
                            self.config.softmax_scale, md.causal, chunk, out, lse_out)
            return out
        qlens = md.query_lens
        # Chunks bound the PADDED score matrix (harness.plan.memory estimates the same plan).
        for chunk in plan_chunks(qlens, md.seq_lens, self.config.num_heads, MAX_SCORE_ELEMS, md.causal):
            pc = padded_chunk(chunk, md, query.shape[0], self.config.sliding_window, query.device)
            self._chunk(query, key, value, kv_cache, md, pc, out, lse_out)
        return out

    @staticmethod
    def chunk_bytes(b: int, qmax: int, smax: int, cfg, cache_bytes: int) -> int:
        """Peak bytes of one chunk: fp32 score-sized tensors alive together (scores, the masked
        copy, exp's input and output; +1 with sinks for the cat, +1 with softcap, +1 ALiBi
        distances), the gathered K/V (cache dtype, then fp32; fp8 adds the scaled fp32 copy),
        the padded Q (model dtype gathered, fp32, permuted copy), output and LSE, index tensors."""
        hq, hk, d = cfg.num_heads, cfg.num_kv_heads, cfg.head_size
        score = b * hq * qmax * smax * 4
        n_scores = 4 + bool(cfg.sinks) + bool(cfg.softcap) + bool(cfg.alibi)
        kv = 2 * b * smax * hk * d * (cache_bytes + 4 + (4 if cache_bytes == 1 else 0))
        q = b * qmax * hq * d * (2 + 4 + 4)
        o = 3 * b * qmax * hq * d * 4 + 3 * b * hq * qmax * 4
        index = 4 * b * smax * 8 + 3 * b * qmax * smax + b * qmax * smax * 8  # blocks/offs, masks, dist
        return score * n_scores + kv + q + o + index


class TorchMathBackend(TorchBackend):
    name = "torch-math"
    attention_kinds = MLA_TORCH_KINDS
    description = "padded, batched softmax(QK^T)V in fp32 over the gathered paged KV (all features, LSE)"
    untimed_on = frozenset({"cuda"})  # the correctness reference (see capabilities)

    @classmethod
    def capabilities(cls, variant=None) -> Capabilities:
        return torch_capabilities(
            sliding_window=True,
            softcap=True,
            alibi=True,
            sinks=True,
            returns_lse=True,
            cudagraph=CudaGraphSupport.NEVER,
            cudagraph_source='the reference: not captured',
            # The correctness reference: on a GPU it is 100-1000x slower than the kernels and
            # timing it took a third of the decode suite's time (docs/measurement.md §12); the timed torch
            # baseline is `sdpa` (batched). On CPU it stays timed.
            role="reference",
            **MLA_CAPABILITIES,
            untimed_on=cls.untimed_on,
            notes=("fp32 math with padding; requests chunked so each padded score matrix stays under 2**26 elements",
                   "MLA prefill (expanded form) as vLLM's MLACommonImpl: causal over the new tokens, then the cached "
                   "context in chunks, merged by LSE (backends/mla/prefill.py)"),
        )

    @classmethod
    def batch_workspace_bytes(cls, config, variant, query_lens, seq_lens, cache_bytes: int) -> int:
        """Peak scratch of a forward over this batch (harness.plan.memory): the largest chunk."""
        chunks = plan_chunks(list(query_lens), list(seq_lens), config.num_heads, MAX_SCORE_ELEMS, config.causal)
        return max((MathImpl.chunk_bytes(*chunk_dims(c), config, cache_bytes) for c in chunks), default=0)

    @classmethod
    def standalone_call(cls, config, variant, call=None) -> str | None:
        if config.is_mla:  # the reproducer's names describe the (K, V) cache, not the latent one
            return None
        # A subclass with its own impl makes a different call: it must say which itself.
        return TORCH_MATH_CALL if cls.get_impl_cls() is MathImpl else None

    @classmethod
    def get_builder_cls(cls):
        return MathMetadataBuilder

    @classmethod
    def get_impl_cls(cls):
        return MathImpl
