"""FlashMLA (DeepSeek's MLA decode kernel; vLLM's FLASHMLA, its default MLA backend on Hopper)
on the contract's absorbed MLA form (attn_contract/mla.py), through the ``tokenspeed-flashmla``
wheel (module ``flash_mla``):

``get_mla_metadata()`` gives an empty scheduler-metadata object that the first
``flash_mla_with_kvcache`` call fills (the harness's untimed first call) and later calls with the
same shapes and lengths reuse; ``flash_mla_with_kvcache(q [B, s_q, H, 576], k_cache [blocks, 64,
1, 576], block_table, cache_seqlens, head_dim_v=512, ...)``. The latent cache is the contract's
canonical one with a unit head axis (a view). Dense decode only: page 64, a bf16 cache (this
release's fp8 cache is the packed 656-byte sparse layout), one query length for the whole batch
(q is ``[batch, s_q, ...]``; speculative decode with 2-8 tokens per request fits). The LSE is
natural-log ``[B, H, s_q]``.

The wheel is built against torch 2.14; where its binary does not load, ``availability`` says
so with the import's error (tried in a child process first, so a crash on import is a reason
too).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch

from attn_contract import (
    BUILD_LIMIT,
    MLA_ABSORBED,
    AttentionConfig,
    AttentionImpl,
    AttentionMetadataBuilder,
    Availability,
    Capabilities,
    CommonAttentionMetadata,
    CudaGraphSupport,
    HeadSizes,
)
from attn_contract.engines import EngineName

from backends.mla.base import MLALibraryBackend
from backends.mla.common import (
    cuda_capability,
    describe_form,
    import_reason,
    module_version,
)

PAGE = 64  # FlashMLA's dense kernels take page_block_size 64
FP8_REASON = ("tokenspeed-flashmla's dense decode takes no fp8 cache: flash_mla_with_kvcache hands is_fp8_kvcache to "
              "the sparse path only (its fp8 layout is the packed 656-byte one: fp8 nope, 4 fp32 scales, bf16 rope), "
              f"dense_decode_fwd gets no fp8 flag or scale (vLLM's own FlashMLA build reads an fp8 dense cache): "
              f"{BUILD_LIMIT}")


@dataclass
class FlashMLAMetadata:
    batch: int
    q_len: int
    block_table: torch.Tensor  # int32 [B, pages], contiguous, device
    cache_seqlens: torch.Tensor  # int32 [B], device
    sched: Any  # FlashMLASchedMeta, filled by the first call
    causal: bool
    build_ms: float


def uniform_query_len(query_lens: torch.Tensor) -> int | None:
    """The batch's one query length, or None when the requests differ."""
    if query_lens.numel() == 0:
        return None
    first = int(query_lens[0])
    return first if bool((query_lens == first).all()) else None


class FlashMLAMetadataBuilder(AttentionMetadataBuilder[FlashMLAMetadata]):
    def build(self, common: CommonAttentionMetadata) -> FlashMLAMetadata:
        import flash_mla  # lazy: GPU runs only

        t0 = time.perf_counter()
        q_len = uniform_query_len(common.query_lens_cpu)
        if q_len is None:  # check_batch_support refuses these batches first
            raise ValueError("FlashMLA needs one query length for the whole batch")
        pages = -(-int(common.seq_lens_cpu.max()) // common.block_size)
        sched, _ = flash_mla.get_mla_metadata()
        return FlashMLAMetadata(
            batch=common.num_reqs, q_len=q_len,
            block_table=common.block_table[:, :pages].to(device=self.device, dtype=torch.int32).contiguous(),
            cache_seqlens=common.seq_lens_cpu.to(device=self.device, dtype=torch.int32),
            sched=sched, causal=common.causal, build_ms=(time.perf_counter() - t0) * 1e3)


class FlashMLAImpl(AttentionImpl[FlashMLAMetadata]):
    def __init__(self, config, variant, device, layer):
        super().__init__(config, variant, device, layer)
        import flash_mla  # lazy: GPU runs only

        self._fn = flash_mla.flash_mla_with_kvcache

    def forward(self, query, key, value, kv_cache, metadata, out, lse_out=None):
        md, cfg = metadata, self.config
        q = query.reshape(md.batch, md.q_len, cfg.num_heads, cfg.head_size)
        o, lse = self._fn(q, kv_cache.unsqueeze(2), md.block_table, md.cache_seqlens, cfg.value_head_size, md.sched,
                          softmax_scale=cfg.softmax_scale, causal=md.causal)
        out.copy_(o.reshape(out.shape))  # FlashMLA allocates its output: the copy is part of the timed call
        if lse_out is not None:
            lse_out.copy_(lse.transpose(1, 2).reshape(lse_out.shape))  # [B, H, s_q] -> [T, H]
        return out

    def graph_safe(self, metadata: FlashMLAMetadata) -> str | None:
        return None  # vLLM captures FlashMLA decode; the scheduler metadata is filled by the first call

    def describe_call(self, metadata: FlashMLAMetadata) -> dict[str, Any]:
        return {**describe_form(self.config), "function": "flash_mla.flash_mla_with_kvcache (dense, bf16 cache)",
                "q_shape": [metadata.batch, metadata.q_len, self.config.num_heads, self.config.head_size],
                "scheduler_metadata": "get_mla_metadata(), filled by the first (untimed) call and reused",
                "build_ms": round(metadata.build_ms, 3)}


class FlashMLABackend(MLALibraryBackend):
    name = "flashmla"
    attention_kinds = frozenset({MLA_ABSORBED})
    description = "FlashMLA dense decode (tokenspeed-flashmla wheel) on the paged latent cache, page 64, bf16"
    tested_versions = {"tokenspeed-flashmla": ">=1.0.0"}
    # Not imported on the worker's background thread: its binary is built for another torch and
    # is tried in a child process first (availability), so a crash on import is a reason.
    library_modules = ()
    engine_names = {
        "vllm": EngineName("FLASHMLA", attention_kinds=frozenset({MLA_ABSORBED}),
                           caveat="vLLM calls its own FlashMLA build (vllm._flashmla_C); this row runs the "
                                  "tokenspeed-flashmla wheel's kernel"),
        "sglang": EngineName("flashmla", attention_kinds=frozenset({MLA_ABSORBED}),
                             caveat="SGLang calls sgl-kernel's FlashMLA build"),
    }

    @classmethod
    def availability(cls, variant: dict[str, Any] | None = None) -> Availability:
        reason = import_reason("flash_mla", "pip install tokenspeed-flashmla", probe_first=True)
        if reason:
            return Availability.no(reason)
        version = module_version("flash_mla", ("tokenspeed-flashmla", "tokenspeed_flashmla"))
        cap = cuda_capability()
        if cap is None:
            return Availability.no("no CUDA device (FlashMLA runs on NVIDIA GPUs)", flashmla=version)
        if cap[0] not in (9, 10):
            return Availability.no(f"FlashMLA's dense decode kernels are for sm90 and sm100; this GPU is "
                                   f"sm{cap[0]}{cap[1]}", flashmla=version)
        return Availability.ok(flashmla=version)

    @classmethod
    def capabilities(cls, variant: dict[str, Any] | None = None) -> Capabilities:
        return cls.mla_capabilities(
            dtypes=frozenset({"bfloat16"}), kv_cache_dtypes=frozenset({"auto"}),
            head_sizes=HeadSizes(values=(576,)), v_head_sizes=HeadSizes(values=(512,)), block_sizes=(PAGE,),
            lse_base="e", cudagraph=CudaGraphSupport.UNIFORM_BATCH,
            cudagraph_source='vLLM v0.25.1 FlashMLAMetadataBuilder._cudagraph_support: UNIFORM_BATCH',
            notes=("absorbed form only (the expanded 192/128 prefill is another library's)",
                   f"page {PAGE}; one query length per batch (q is [batch, s_q, heads, 576])",
                   "fp8: " + FP8_REASON),
        )

    @classmethod
    def check_support(cls, config: AttentionConfig, variant: dict[str, Any], device: str) -> str | None:
        if config.is_fp8_kv and config.attention_kind == MLA_ABSORBED:
            return FP8_REASON  # before the table: its own reason, not the generic dtype line
        return super().check_support(config, variant, device)

    @classmethod
    def check_batch_support(cls, common: CommonAttentionMetadata, variant: dict[str, Any],
                            config: AttentionConfig | None = None) -> str | None:
        if uniform_query_len(common.query_lens_cpu) is None:
            lens = sorted(set(common.query_lens_cpu.tolist()))
            return (f"FlashMLA takes one query length for the whole batch (q is [batch, s_q, heads, 576]); this batch "
                    f"has {', '.join(map(str, lens[:6]))}{' ...' if len(lens) > 6 else ''}")
        return None

    @classmethod
    def workspace_bytes(cls, config: AttentionConfig, variant: dict[str, Any]) -> int:
        """The output FlashMLA allocates before the copy and its split-KV partials: a bounded
        allowance (the batch is not known here)."""
        return 256 << 20

    @classmethod
    def get_builder_cls(cls) -> type[FlashMLAMetadataBuilder]:
        return FlashMLAMetadataBuilder

    @classmethod
    def get_impl_cls(cls) -> type[FlashMLAImpl]:
        return FlashMLAImpl
