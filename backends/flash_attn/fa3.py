"""FA3 (``flash_attn_interface``): ``flash_attn_with_kvcache(page_table=..., cu_seqlens_q=...)`` for
both segments, with ahead-of-time scheduler metadata built in the metadata builder. The
build on the H200 (tokenspeed FA3) compiles softcap out, adds ``sinks=`` and has fp8 e4m3."""

from __future__ import annotations

import importlib
from dataclasses import replace
from typing import Any, Callable

import torch

from attn_contract import AttentionConfig, Capabilities, CudaGraphSupport, HeadSizes, MultipleOf, SplitKV
from backends.flash_attn.common import (
    DOCUMENTED_CC,
    VLLM_MAX_CUDAGRAPH_TOKENS,
    VLLM_MAX_NUM_SPLITS_FOR_CUDA_GRAPH,
    lse_tokens,
    FA3_HEAD_BUCKETS,
    FP8_E4M3_MAX,
    FAGeneration,
    FASegment,
    FlashAttentionMetadata,
    LibFeatures,
    dist_version,
    params,
)


class FA3(FAGeneration):
    version = 3
    module = "flash_attn_interface"
    kernels = {"decode": "flash_attn_interface.flash_attn_with_kvcache",
               "prefill": "flash_attn_interface.flash_attn_with_kvcache"}
    batched_kernel = "flash_attn_interface.flash_attn_with_kvcache"
    sinks_dtype = torch.bfloat16  # FA3 (tokenspeed) insists on bf16 sinks
    graph_unsafe_why = "no AOT scheduler metadata"

    @classmethod
    def documented(cls, installed: bool = False, error: str = "") -> LibFeatures:
        # tokenspeed_fa3: forward only, softcap compiled out, sinks= added, fp8 e4m3.
        return LibFeatures(3, installed, error, softcap=False, sinks=True, fp8=True, scheduler_metadata=True,
                           head_buckets=(64, 128, 192, 256))

    @classmethod
    def read_features(cls, mod: Any, base: LibFeatures) -> LibFeatures:
        kvc = getattr(mod, "flash_attn_with_kvcache", None)
        if kvc is None:
            return replace(base, installed=False, error="flash_attn_interface has no flash_attn_with_kvcache")
        p = params(kvc)
        flags: dict[str, bool] = {}
        try:  # FA3's setup.py writes its build flags (features compiled out) into flash_attn_config
            cfg = importlib.import_module("flash_attn_config")
            flags = {str(k): bool(v) for k, v in dict(getattr(cfg, "CONFIG", {}).get("build_flags", {})).items()}
        except Exception:
            pass

        def disabled(feature: str) -> bool:
            return any(k.endswith(f"DISABLE_{feature}") and v for k, v in flags.items())

        buckets = tuple(b for b in FA3_HEAD_BUCKETS if not disabled(f"HDIM{b}")) if flags else FA3_HEAD_BUCKETS
        return replace(
            base, detected=True, build_flags=flags,
            lib_version=dist_version(cls.module, ("tokenspeed_fa3", "tokenspeed-fa3", "flash_attn_3", "flash-attn-3"))
            or "flash_attn_interface ?",
            softcap="softcap" in p and not disabled("SOFTCAP"), sinks="sinks" in p,
            sliding_window="window_size" in p and not disabled("LOCAL"),
            fp16=not disabled("FP16"), fp8="q_descale" in p and not disabled("FP8"),
            paged="page_table" in p and not disabled("PAGEDKV"),
            scheduler_metadata=hasattr(mod, "get_scheduler_metadata") and "scheduler_metadata" in p,
            head_buckets=buckets,
        )

    @classmethod
    def load_entry_points(cls) -> dict[str, Callable[..., Any]]:
        import flash_attn_interface

        return {"kvcache": flash_attn_interface.flash_attn_with_kvcache}

    @classmethod
    def gpu_reason(cls, cc: tuple[int, int], sm: str) -> str | None:
        return f"FA3 runs on Hopper (sm90) only, this GPU is {sm}" if cc[0] != 9 else None

    @classmethod
    def capabilities(cls, cc: tuple[int, int] | None, feats: LibFeatures) -> Capabilities:
        cc = cc or DOCUMENTED_CC
        layouts, notes = cls.common_notes(feats)
        dtypes = {"bfloat16"} | ({"float16"} if feats.fp16 else set())
        kv = {"auto"} | ({"fp8_e4m3"} if feats.fp8 and cc[0] == 9 else set())
        # a head dim runs on the smallest compiled kernel at least as large: the largest bounds it
        heads = HeadSizes(min=8, max=max(feats.head_buckets, default=0), multiple_of=8)
        notes += ["fp8: e4m3 only, Hopper only; q is quantized to e4m3 in forward (per-tensor dynamic scale), "
                  "descales (num_reqs, num_kv_heads), output bf16: needs dtype bfloat16 and head_size % 16 == 0",
                  f"head dims rounded up to compiled kernels {list(feats.head_buckets)}",
                  "no ALiBi", "sinks passed as bf16 (H,) (tokenspeed build)"]
        if not feats.softcap:
            notes.append("softcap compiled out of this build (FLASHATTENTION_DISABLE_SOFTCAP)")
        cg = CudaGraphSupport.ALWAYS if feats.scheduler_metadata else CudaGraphSupport.UNIFORM_BATCH
        notes.append("CUDA graphs: ALWAYS with AOT scheduler metadata (vLLM), else UNIFORM_BATCH")
        return Capabilities(
            dtypes=frozenset(dtypes), kv_cache_dtypes=frozenset(kv),
            head_sizes=heads, block_sizes=(MultipleOf(1),), kv_layouts=layouts,
            sliding_window=feats.sliding_window, softcap=feats.softcap, alibi=False, sinks=feats.sinks,
            returns_lse=True, cudagraph=cg,
            cudagraph_source=(
                'vLLM v0.25.1 FlashAttentionMetadataBuilder._cudagraph_support: '
                'ALWAYS with FA3 (AOT scheduler metadata)'),
            reorder_batch_threshold=1, notes=tuple(notes),
            # FA3's kernel has softcap and local (window) attention; a build may compile them out.
            build_lacks=frozenset(f for f, has in (("softcap", feats.softcap), ("sliding_window", feats.sliding_window))
                                  if not has),
            # num_splits (scheduler metadata and call alike): 1 = no split-KV, 8 = forced.
            split_kv=SplitKV("num_splits", 1, 8),
        )

    @classmethod
    def fp8_reason(cls, config: AttentionConfig, cc: tuple[int, int] | None, feats: LibFeatures) -> str:
        if config.kv_cache_dtype == "fp8_e4m3" and (cc or DOCUMENTED_CC)[0] != 9:
            return "FA3 fp8 runs on Hopper (sm90) only"
        why = "FA3 supports fp8 e4m3 only (no e5m2)" if feats.fp8 else "fp8 compiled out of this FA3 build"
        return f"kv_cache_dtype {config.kv_cache_dtype} not supported: {why}"

    @classmethod
    def extra_reason(cls, config: AttentionConfig) -> str | None:
        if config.is_fp8_kv:
            if config.dtype != "bfloat16":
                return f"FA3 fp8 attention writes bf16 output; model dtype {config.dtype} with fp8 KV is unsupported"
            if config.head_size % 16:
                return f"FA3 fp8 needs head_size % 16 == 0, got {config.head_size}"
        return None

    @classmethod
    def prepare_segment(cls, seg: FASegment, seq_lens: list[int], config: AttentionConfig,
                        device: torch.device) -> str:
        seg.scheduler_metadata, note = cls.scheduler_metadata(seg, config, device)
        return note

    @classmethod
    def scheduler_metadata(cls, seg: FASegment, cfg: AttentionConfig,
                           device: torch.device) -> tuple[torch.Tensor | None, str]:
        """FA3 AOT scheduler metadata for one segment; every argument mirrors the later call."""
        if torch.device(device).type != "cuda":
            return None, "not built: no CUDA device"
        if not cls.features().scheduler_metadata:
            return None, "not built: this FA3 has no get_scheduler_metadata"
        import flash_attn_interface as fa3

        qkv_dtype = torch.float8_e4m3fn if cfg.is_fp8_kv else cfg.torch_dtype
        md = fa3.get_scheduler_metadata(
            batch_size=seg.num_reqs, max_seqlen_q=seg.max_query_len,
            # with a page table and no cu_seqlens_k, the call's seqlen_k is pages_per_seq * page_size
            max_seqlen_k=seg.block_table.shape[1] * cfg.block_size,
            num_heads_q=cfg.num_heads, num_heads_kv=cfg.num_kv_heads, headdim=cfg.head_size,
            cache_seqlens=seg.seq_lens, qkv_dtype=qkv_dtype, headdim_v=cfg.head_size,
            cu_seqlens_q=None if seg.batched else seg.query_start_loc, page_size=cfg.block_size, causal=cfg.causal,
            window_size=cls.window(cfg), has_softcap=cfg.softcap > 0, num_splits=seg.num_splits,
            pack_gqa=None, sm_margin=0,
        )
        return md, "built in the builder with get_scheduler_metadata, once per call"

    @classmethod
    def vllm_num_splits(cls, num_tokens: int) -> tuple[int, str]:
        # vLLM's builder: under full CUDA graphs (its default) a batch that fits the largest
        # capture size gets the split bound that the graphs' buffers were sized for.
        if num_tokens <= VLLM_MAX_CUDAGRAPH_TOKENS:
            return VLLM_MAX_NUM_SPLITS_FOR_CUDA_GRAPH, (
                f"{VLLM_MAX_NUM_SPLITS_FOR_CUDA_GRAPH} (vLLM's flash_attn_max_num_splits_for_cuda_graph: "
                f"{num_tokens} tokens <= max_cudagraph_capture_size {VLLM_MAX_CUDAGRAPH_TOKENS})")
        return 0, f"0 (heuristic: {num_tokens} tokens > vLLM's max_cudagraph_capture_size {VLLM_MAX_CUDAGRAPH_TOKENS})"

    @classmethod
    def graph_safe_always(cls, metadata: FlashAttentionMetadata) -> bool:
        return metadata.scheduler_metadata_used  # vLLM: ALWAYS with AOT scheduling

    def prepare_query(self, query: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """q -> e4m3 with a dynamic per-tensor scale (device ops only: no host sync, graph-safe).
        Done in forward because the builder never sees q; it is timed, as in vLLM."""
        if not self.config.is_fp8_kv:
            return query, None
        scale = (query.abs().amax().float() / FP8_E4M3_MAX).clamp_min(1e-12)
        q8 = (query.float() / scale).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn)
        return q8, scale.reshape(1, 1)

    def call(self, q, kc, vc, seg: FASegment, md: FlashAttentionMetadata, want_lse, q_scale, out=None):
        cfg = self.config
        kw: dict[str, Any] = {}
        if q_scale is not None:
            shape = (seg.num_reqs, cfg.num_kv_heads)  # FA3 descales are per (request, KV head)
            kw.update(q_descale=q_scale.expand(shape), k_descale=self.k_scale.expand(shape),
                      v_descale=self.v_scale.expand(shape))
        if self.sinks is not None:
            kw["sinks"] = self.sinks
        if self.softcap:
            kw["softcap"] = self.softcap
        if out is not None:
            kw["out"] = self.q_for(out, seg)
        if not seg.batched:
            kw.update(cu_seqlens_q=seg.query_start_loc, max_seqlen_q=seg.max_query_len)
        res = self.fn["kvcache"](
            self.q_for(q, seg), kc, vc, cache_seqlens=seg.seq_lens, page_table=seg.block_table,
            softmax_scale=cfg.softmax_scale, causal=md.causal, window_size=self.window_size,
            scheduler_metadata=seg.scheduler_metadata, num_splits=seg.num_splits, pack_gqa=None,
            sm_margin=0, return_softmax_lse=want_lse, **kw,
        )
        if want_lse:
            o, lse, *_ = res  # 4 values: out, lse ((H, T) varlen, (B, H, Lq) batched), split partials
            return self.from_batched(o, seg), lse_tokens(lse, seg)
        return self.from_batched(res, seg), None

    @classmethod
    def standalone_source(cls, config: AttentionConfig) -> tuple[str, str]:
        w = cls.window(config)
        setup = f"""import flash_attn_interface as fa3  # FA3

extra = {{}}
if SINKS is not None:
    extra["sinks"] = SINKS.to(torch.bfloat16)  # the tokenspeed FA3 build takes bf16 sinks
if SOFTCAP:
    extra["softcap"] = SOFTCAP
q_all, q_scale = q, None
if FP8:  # q to e4m3 with a dynamic per-tensor scale, as the adapter does in forward
    q_scale = (q.abs().amax().float() / 448.0).clamp_min(1e-12)
    q_all = (q.float() / q_scale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    q_scale = q_scale.reshape(1, 1)
WINDOW = {w!r}
"""
        call = """kw = dict(extra)
if q_scale is not None:  # descales per (request, KV head)
    shape = (hi - lo, NUM_KV_HEADS)
    kw.update(q_descale=q_scale.expand(shape),
              k_descale=torch.full((1, 1), K_SCALE, device=DEVICE).expand(shape),
              v_descale=torch.full((1, 1), V_SCALE, device=DEVICE).expand(shape))
if not batched:  # varlen q [T, H, D]; batched q [B, 1, H, D] has no cu_seqlens_q
    kw.update(cu_seqlens_q=seg_qsl, max_seqlen_q=seg_max_q)
if takes_out(fa3.flash_attn_with_kvcache):
    kw["out"] = dst.view(qs4.shape)
sched = BUILT.get(i)  # the builder's (both forms): made by the first call, reused by the rest
if sched is None and hasattr(fa3, "get_scheduler_metadata"):  # AOT scheduling
    sched = fa3.get_scheduler_metadata(
        batch_size=hi - lo, max_seqlen_q=seg_max_q, max_seqlen_k=seg_table.shape[1] * BLOCK_SIZE,
        num_heads_q=NUM_HEADS, num_heads_kv=NUM_KV_HEADS, headdim=HEAD_SIZE, cache_seqlens=seg_seq,
        qkv_dtype=torch.float8_e4m3fn if FP8 else DTYPE, headdim_v=HEAD_SIZE,
        cu_seqlens_q=None if batched else seg_qsl, page_size=BLOCK_SIZE, causal=CAUSAL, window_size=WINDOW,
        has_softcap=SOFTCAP > 0, num_splits=seg_splits, pack_gqa=None, sm_margin=0)
    BUILT[i] = sched
o = fa3.flash_attn_with_kvcache(
    qs4, key_cache, value_cache, cache_seqlens=seg_seq, page_table=seg_table, softmax_scale=SCALE,
    causal=CAUSAL, window_size=WINDOW, scheduler_metadata=sched, num_splits=seg_splits, pack_gqa=None,
    sm_margin=0, return_softmax_lse=False, **kw)
"""
        return setup, call

    def describe(self, metadata: FlashAttentionMetadata) -> dict[str, Any]:
        d: dict[str, Any] = {"scheduler_metadata": metadata.scheduler_metadata_used,
                             "num_splits": sorted({s.num_splits for s in metadata.segments}),
                             "scheduler_metadata_note": metadata.scheduler_metadata_note}
        if self.config.is_fp8_kv:
            d["q_quantization"] = "e4m3, dynamic per-tensor scale computed in forward (timed)"
        return d
