"""FA4 (``flash_attn.cute``, CuTe DSL, JIT-compiled): ``flash_attn_varlen_func(page_table=...,
seqused_k=...)`` for both segments."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

import torch

from attn_contract import AttentionConfig, Capabilities, CudaGraphSupport, HeadSizes, MultipleOf
from backends.flash_attn.common import (
    DOCUMENTED_CC,
    FAGeneration,
    FASegment,
    FlashAttentionMetadata,
    LibFeatures,
    dist_version,
    lse_tokens,
    params,
)


class FA4(FAGeneration):
    version = 4
    module = "flash_attn.cute"
    kernels = {"decode": "flash_attn.cute.flash_attn_varlen_func", "prefill": "flash_attn.cute.flash_attn_varlen_func"}
    batched_kernel = "flash_attn.cute.flash_attn_varlen_func"  # 4-D q, no cu_seqlens_q
    no_fp8 = "FA4 has no public fp8 path (sm100 private API only; none on sm90)"

    @classmethod
    def documented(cls, installed: bool = False, error: str = "") -> LibFeatures:
        return LibFeatures(4, installed, error, softcap=True, sinks=True)

    @classmethod
    def read_features(cls, mod: Any, base: LibFeatures) -> LibFeatures:
        varlen = getattr(mod, "flash_attn_varlen_func", None)
        if varlen is None:
            return replace(base, installed=False, error="flash_attn.cute has no flash_attn_varlen_func")
        p = params(varlen)
        return replace(
            base, detected=True,
            lib_version=dist_version(cls.module, ("flash-attn-4", "flash_attn_4"))
            or f"flash_attn.cute {getattr(mod, '__version__', '?')}",
            softcap="softcap" in p, sinks="learnable_sink" in p, sliding_window="window_size" in p,
            # FA2's sdist ships an old flash_attn/cute without paged KV; it can shadow the FA4 wheel.
            paged="page_table" in p and "seqused_k" in p,
        )

    @classmethod
    def load_entry_points(cls) -> dict[str, Callable[..., Any]]:
        from flash_attn.cute import flash_attn_varlen_func

        return {"varlen": flash_attn_varlen_func}

    @classmethod
    def gpu_reason(cls, cc: tuple[int, int], sm: str) -> str | None:
        return f"FA4 paged KV needs sm90/sm100/sm110, this GPU is {sm}" if cc[0] not in (9, 10, 11) else None

    @classmethod
    def capabilities(cls, cc: tuple[int, int] | None, feats: LibFeatures) -> Capabilities:
        cc = cc or DOCUMENTED_CC
        layouts, notes = cls.common_notes(feats)
        if cc[0] == 9:
            heads = HeadSizes(min=8, max=256, multiple_of=8)
            notes += ["sm90: no split-KV (num_splits=1), no fp8"]
        else:
            heads = HeadSizes(values=tuple(range(8, 129, 8)) + (256,))
            notes += ["sm100/sm110: head <= 128 or 256; split-KV by heuristic (unverified here)"]
        notes += ["fp8 only through a private sm100 entry point: not used", "no ALiBi",
                  "vLLM picks FA4 for head > 256 on Blackwell (its vendored FA4); PyPI FA4 stops at 256",
                  "sinks via learnable_sink (fp32 (H,)); JIT-compiles each variant on first call"]
        return Capabilities(
            dtypes=frozenset({"float16", "bfloat16"}), kv_cache_dtypes=frozenset({"auto"}),
            head_sizes=heads, block_sizes=(MultipleOf(1),), kv_layouts=layouts,
            sliding_window=feats.sliding_window, softcap=feats.softcap, alibi=False, sinks=feats.sinks,
            returns_lse=True, cudagraph=CudaGraphSupport.UNIFORM_BATCH,
            cudagraph_source=(
                'vLLM v0.25.1 FlashAttentionMetadataBuilder._cudagraph_support: '
                'UNIFORM_BATCH unless FA3'),
            reorder_batch_threshold=1,
            notes=tuple(notes),
        )

    @classmethod
    def window(cls, config: AttentionConfig) -> tuple[Any, Any]:
        # FA4 reads a lone -1 as a real window: unbounded is None.
        left = config.window_left
        if left < 0:
            return (None, None)
        return (left, 0) if config.causal else (left, left)

    def __init__(self, config: AttentionConfig, layer: Any, device: torch.device, cc: tuple[int, int] | None):
        super().__init__(config, layer, device, cc)
        # FA4 on sm90 has no split-KV; elsewhere let its heuristic choose.
        self.num_splits = 1 if (cc is None or cc[0] == 9) else 0

    def call(self, q, kc, vc, seg: FASegment, md: FlashAttentionMetadata, want_lse, q_scale, out=None):
        cfg = self.config
        kw: dict[str, Any] = {} if seg.batched else {"cu_seqlens_q": seg.query_start_loc,
                                                     "max_seqlen_q": seg.max_query_len}
        if out is not None:
            kw["out"] = self.q_for(out, seg)
        o, lse = self.fn["varlen"](
            self.q_for(q, seg), kc, vc, seqused_k=seg.seq_lens, page_table=seg.block_table,
            softmax_scale=cfg.softmax_scale, causal=md.causal, window_size=self.window_size,
            learnable_sink=self.sinks, softcap=self.softcap, num_splits=self.num_splits,
            return_lse=want_lse, **kw,
        )
        return self.from_batched(o, seg), (lse_tokens(lse, seg) if want_lse else None)

    @classmethod
    def standalone_source(cls, config: AttentionConfig) -> tuple[str, str]:
        w = cls.window(config)
        setup = """from flash_attn.cute import flash_attn_varlen_func  # FA4

q_all = q
NUM_SPLITS = 1 if torch.cuda.get_device_capability()[0] == 9 else 0  # sm90: no split-KV
"""
        call = f"""kw = {{}} if batched else dict(cu_seqlens_q=seg_qsl, max_seqlen_q=seg_max_q)
if takes_out(flash_attn_varlen_func):
    kw["out"] = dst.view(qs4.shape)
o, _ = flash_attn_varlen_func(
    qs4, key_cache, value_cache, seqused_k=seg_seq, page_table=seg_table, softmax_scale=SCALE,
    causal=CAUSAL, window_size={w!r}, learnable_sink=SINKS, softcap=SOFTCAP, num_splits=NUM_SPLITS,
    return_lse=False, **kw)
"""
        return setup, call

    def describe(self, metadata: FlashAttentionMetadata) -> dict[str, Any]:
        return {"num_splits": self.num_splits,
                "num_splits_why": "sm90: FA4 has no split-KV" if self.num_splits == 1 else "the library's heuristic"}
