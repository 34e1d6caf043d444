"""FA2 (``flash_attn``): paged prefill through ``flash_attn_varlen_func(block_table=...)``, paged
decode through ``flash_attn_with_kvcache`` (its split-KV "flash-decoding" path)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

import torch

from attn_contract import AlibiLse, AttentionConfig, SplitKV, Capabilities, CudaGraphSupport, HeadSizes, MultipleOf
from backends.flash_attn.common import FAGeneration, FASegment, FlashAttentionMetadata, LibFeatures, lse_tokens, params


class FA2(FAGeneration):
    version = 2
    module = "flash_attn"
    kernels = {"decode": "flash_attn.flash_attn_with_kvcache", "prefill": "flash_attn.flash_attn_varlen_func"}
    batched_kernel = "flash_attn.flash_attn_with_kvcache"
    no_fp8 = "FA2 has no fp8 path"

    @classmethod
    def documented(cls, installed: bool = False, error: str = "") -> LibFeatures:
        return LibFeatures(2, installed, error, softcap=True, alibi=True, sinks=False)

    @classmethod
    def read_features(cls, mod: Any, base: LibFeatures) -> LibFeatures:
        varlen, kvc = getattr(mod, "flash_attn_varlen_func", None), getattr(mod, "flash_attn_with_kvcache", None)
        if varlen is None or kvc is None:
            return replace(base, installed=False, error="flash_attn has no flash_attn_varlen_func/flash_attn_with_kvcache")
        p = params(varlen)
        return replace(
            base, detected=True, lib_version=f"flash_attn {getattr(mod, '__version__', '?')}",
            softcap="softcap" in p, alibi="alibi_slopes" in p, sliding_window="window_size" in p,
            paged="block_table" in p,
        )

    @classmethod
    def load_entry_points(cls) -> dict[str, Callable[..., Any]]:
        import flash_attn

        return {"varlen": flash_attn.flash_attn_varlen_func, "kvcache": flash_attn.flash_attn_with_kvcache}

    @classmethod
    def gpu_reason(cls, cc: tuple[int, int], sm: str) -> str | None:
        return f"FA2 needs sm80 or newer, this GPU is {sm}" if cc[0] < 8 else None

    @classmethod
    def capabilities(cls, cc: tuple[int, int] | None, feats: LibFeatures) -> Capabilities:
        layouts, notes = cls.common_notes(feats)
        notes += ["paged KV needs block_size % 256 == 0 (upstream FA2; vLLM's fork allows 16)",
                  "decode segment: flash_attn_with_kvcache (split-KV); prefill: varlen + block_table"]
        return Capabilities(
            dtypes=frozenset({"float16", "bfloat16"}), kv_cache_dtypes=frozenset({"auto"}),
            head_sizes=HeadSizes(min=8, max=256, multiple_of=8), block_sizes=(MultipleOf(256),),
            kv_layouts=layouts, sliding_window=feats.sliding_window, softcap=feats.softcap,
            # alibi.h adds +slope*j on the causal path (drops the row constant): see AlibiLse.
            alibi=feats.alibi, alibi_lse=AlibiLse.KEY_INDEX_CAUSAL, sinks=False, returns_lse=True,
            # with_kvcache (the decode path) takes num_splits: 1 = no split-KV, 8 = forced.
            split_kv=SplitKV("num_splits", 1, 8),
            cudagraph=CudaGraphSupport.UNIFORM_BATCH,
            cudagraph_source=(
                'vLLM v0.25.1 FlashAttentionMetadataBuilder._cudagraph_support: '
                'UNIFORM_BATCH unless FA3'),
            reorder_batch_threshold=1, notes=tuple(notes),
        )

    @classmethod
    def prepare_segment(cls, seg: FASegment, seq_lens: list[int], config: AttentionConfig,
                        device: torch.device) -> str:
        if not seg.batched:  # the varlen call takes K offsets; batched decode goes through with_kvcache
            cu_k = [0]
            for s in seq_lens:
                cu_k.append(cu_k[-1] + s)
            seg.cu_seqlens_k = torch.tensor(cu_k, dtype=torch.int32, device=device)
        return ""

    def role(self, seg: FASegment) -> str:
        return "kvcache" if seg.batched else "varlen"

    @classmethod
    def kernel_of(cls, seg: FASegment) -> str:
        return cls.batched_kernel if seg.batched else cls.kernels["prefill"]

    def call(self, q, kc, vc, seg: FASegment, md: FlashAttentionMetadata, want_lse, q_scale, out=None):
        cfg = self.config
        common = dict(softmax_scale=cfg.softmax_scale, causal=md.causal, window_size=self.window_size,
                      softcap=self.softcap, alibi_slopes=self.alibi)
        if out is not None:
            common["out"] = self.q_for(out, seg)
        if seg.batched:
            # q_len 1 per request: the with_kvcache path splits the KV (flash-decoding).
            res = self.fn["kvcache"](self.q_for(q, seg), kc, vc, cache_seqlens=seg.seq_lens,
                                     block_table=seg.block_table, num_splits=seg.num_splits,
                                     return_softmax_lse=want_lse, **common)
            if want_lse:
                o, lse = res
                return self.from_batched(o, seg), lse_tokens(lse, seg)
            return self.from_batched(res, seg), None
        res = self.fn["varlen"](q, kc, vc, cu_seqlens_q=seg.query_start_loc, cu_seqlens_k=seg.cu_seqlens_k,
                                max_seqlen_q=seg.max_query_len, max_seqlen_k=seg.max_seq_len, dropout_p=0.0,
                                block_table=seg.block_table, return_attn_probs=want_lse, **common)
        if want_lse:
            o, lse, _ = res
            return o, lse.transpose(0, 1)  # (H, T) -> (T, H)
        return res, None

    @classmethod
    def standalone_source(cls, config: AttentionConfig) -> tuple[str, str]:
        w = cls.window(config)
        setup = f"""import flash_attn  # FA2

q_all = q
common = dict(softmax_scale=SCALE, causal=CAUSAL, window_size={w!r}, softcap=SOFTCAP, alibi_slopes=ALIBI_SLOPES)
"""
        call = """kw = dict(common)
if batched:  # decodes as one batched [B, 1, H, D] call: flash_attn_with_kvcache (split-KV)
    if takes_out(flash_attn.flash_attn_with_kvcache):
        kw["out"] = dst.view(qs4.shape)
    o = flash_attn.flash_attn_with_kvcache(qs4, key_cache, value_cache, cache_seqlens=seg_seq,
                                           block_table=seg_table, num_splits=seg_splits, **kw)
else:
    if takes_out(flash_attn.flash_attn_varlen_func):
        kw["out"] = dst
    cu_k = torch.zeros(hi - lo + 1, dtype=torch.int32, device=DEVICE)
    cu_k[1:] = torch.cumsum(seg_seq, 0)
    o = flash_attn.flash_attn_varlen_func(qs, key_cache, value_cache, cu_seqlens_q=seg_qsl, cu_seqlens_k=cu_k,
                                          max_seqlen_q=seg_max_q, max_seqlen_k=seg_max_k, dropout_p=0.0,
                                          block_table=seg_table, **kw)
"""
        return setup, call

    def describe(self, metadata: FlashAttentionMetadata) -> dict[str, Any]:
        return {"decode_num_splits": "0 (heuristic)" if any(s.batched for s in metadata.segments) else "n/a (varlen)"}
