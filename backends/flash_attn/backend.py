"""FlashAttention 2, 3 and 4 behind one adapter, the way vLLM's FlashAttentionBackend wraps them.

One backend, one variant axis ``fa_version`` (``auto``, 2, 3, 4). Each generation's library,
limits, extra metadata and call live in its own class (fa2.py, fa3.py, fa4.py); ``auto``
resolves per case in selector.py like vLLM's ``get_flash_attn_version``.

The batch arrives decode-first (``reorder_batch_threshold=1``); the builder splits it into a
decode and a prefill segment with device tensors built once, and ``forward`` makes one kernel
call per non-empty segment into slices of ``out``. Libraries are imported lazily, so this
module imports (and ``harness list`` works) without any of them.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from attn_contract import (
    AttentionBackend,
    AttentionConfig,
    AttentionImpl,
    AttentionMetadataBuilder,
    Availability,
    Capabilities,
    CommonAttentionMetadata,
    split_decodes_and_prefills,
)
from attn_contract.engines import EngineName
from backends.flash_attn.common import CALL_FORMS, DOCUMENTED_CC, FASegment, FlashAttentionMetadata, cuda_capability
from backends.flash_attn.common import standalone_call as fa_standalone_call
from backends.flash_attn.selector import (
    GENERATIONS,
    MODULES,
    VERSIONS,
    availability_from,
    capabilities_for,
    detect_features,
    hardware_reason,
    resolve_version,
    support_reason,
    union_caps,
)


# ------------------------------------------------------------------ metadata
class FlashAttentionMetadataBuilder(AttentionMetadataBuilder[FlashAttentionMetadata]):
    """Splits the decode-first batch into segments; builds every device tensor the calls need."""

    def __init__(self, config: AttentionConfig, variant: dict[str, Any], device: torch.device):
        super().__init__(config, variant, device)
        version, why = resolve_version(variant, config, device=torch.device(device).type)
        if version is None:
            raise ValueError(f"flash-attn {variant}: {why}")
        self.fa_version, self.version_reason = version, why
        self.generation = GENERATIONS[version]

    def build(self, common: CommonAttentionMetadata) -> FlashAttentionMetadata:
        dev = torch.device(self.device)
        split = split_decodes_and_prefills(common, decode_threshold=1)
        qsl = common.query_start_loc_cpu.tolist()
        seq = common.seq_lens_cpu.tolist()
        bs = common.block_size
        form = call_form_of(self.variant)
        nd, n = split.num_decodes, common.num_reqs
        if form == "vllm":  # vLLM: one call over the whole (decode-first) batch
            whole = "decode" if nd == n else "prefill" if nd == 0 else "batch"
            bounds = [(whole, 0, n)]
        else:  # the decodes as one batched call, the rest as one varlen call
            bounds = [("decode", 0, nd), ("prefill", nd, n)]
        if "num_splits" in self.variant:  # an explicit variant (the split-KV invariant) wins
            splits, splits_note = int(self.variant["num_splits"]), "the variant's num_splits"
        elif form == "vllm":
            splits, splits_note = self.generation.vllm_num_splits(common.num_actual_tokens)
        else:
            splits, splits_note = 0, "0 (the library's heuristic)"
        segments: list[FASegment] = []
        notes: list[str] = []  # what each generation added to its segments (FA3: scheduler metadata)
        for kind, lo, hi in bounds:
            if hi <= lo:
                continue
            seg_qsl = [q - qsl[lo] for q in qsl[lo : hi + 1]]
            seg_seq = seq[lo:hi]
            max_seq = max(seg_seq)
            nblk = max(1, math.ceil(max_seq / bs))
            table = common.block_table[lo:hi, :nblk].to(device=dev, dtype=torch.int32).contiguous()
            max_q = max(b - a for a, b in zip(seg_qsl[:-1], seg_qsl[1:]))
            seg = FASegment(
                kind=kind, req_start=lo, req_end=hi, token_start=qsl[lo], token_end=qsl[hi],
                query_start_loc=torch.tensor(seg_qsl, dtype=torch.int32, device=dev),
                seq_lens=torch.tensor(seg_seq, dtype=torch.int32, device=dev),
                block_table=table, max_query_len=max_q, max_seq_len=max_seq, num_splits=splits,
                batched=form == "fastest" and kind == "decode",
            )
            segments.append(seg)
            notes.append(self.generation.prepare_segment(seg, seg_seq, self.config, dev))
        note = notes[0] if notes else ""
        qlens = common.query_lens_cpu.tolist()
        return FlashAttentionMetadata(
            fa_version=self.fa_version, version_reason=self.version_reason, segments=segments,
            causal=common.causal, block_size=bs, num_actual_tokens=common.num_actual_tokens,
            num_decodes=split.num_decodes, num_prefills=split.num_prefills,
            uniform_batch=len(set(qlens)) <= 1, scheduler_metadata_note=note,
            call_form=form, num_splits_note=splits_note,
        )


def call_form_of(variant: dict[str, Any] | None) -> str:
    """The variant's call form (default ``vllm``); an unknown value is a clear error."""
    form = str((variant or {}).get("call_form", "vllm"))
    if form not in CALL_FORMS:
        raise ValueError(f"unknown call_form {form!r}; expected one of {', '.join(CALL_FORMS)}")
    return form


# ------------------------------------------------------------------ the kernel calls
class FlashAttentionImpl(AttentionImpl[FlashAttentionMetadata]):
    def __init__(self, config: AttentionConfig, variant: dict[str, Any], device: torch.device, layer: Any):
        super().__init__(config, variant, device, layer)
        version, why = resolve_version(variant, config, device=torch.device(device).type)
        if version is None:
            raise ValueError(f"flash-attn {variant}: {why}")
        self.fa_version = version
        # The generation holds the layer's converted tensors and, on CUDA, its entry points.
        self.generation = GENERATIONS[version](config, layer, device, cuda_capability())

    def forward(self, query, key, value, kv_cache, metadata: FlashAttentionMetadata, out, lse_out=None):
        gen = self.generation
        if not gen.fn:
            raise RuntimeError(f"FA{self.fa_version} runs on CUDA only; tensors are on {query.device}")
        key_cache, value_cache = kv_cache.unbind(1)  # each (num_blocks, block_size, Hk, D), strided
        q_all, q_scale = gen.prepare_query(query)
        want_lse = lse_out is not None
        for seg in metadata.segments:
            q = q_all[seg.token_start : seg.token_end]
            dst = out[seg.token_start : seg.token_end]
            # out= where the entry point has it (as vLLM passes its output buffer); else one copy.
            direct = dst.is_contiguous() and gen.takes_out(seg)
            o, lse = gen.call(q, key_cache, value_cache, seg, metadata, want_lse, q_scale, dst if direct else None)
            if not direct:
                dst.copy_(o)
            if want_lse:
                lse_out[seg.token_start : seg.token_end].copy_(lse)
        return out

    def graph_safe(self, metadata: FlashAttentionMetadata) -> str | None:
        gen = GENERATIONS[metadata.fa_version]
        if gen.graph_safe_always(metadata) or metadata.uniform_batch:
            return None
        return f"FA{metadata.fa_version} ({gen.graph_unsafe_why}): a batch with mixed query lengths is not graph-safe"

    def describe_call(self, metadata: FlashAttentionMetadata) -> dict[str, Any]:
        gen = self.generation
        d: dict[str, Any] = {
            "fa_version": metadata.fa_version,
            "fa_version_requested": str(self.variant.get("fa_version", "auto")),
            "version_reason": metadata.version_reason,
            "call_form": metadata.call_form,
            # What each call was: the function, varlen or batched q, num_splits, out= or a copy.
            "segments": [{"kind": s.kind, "num_reqs": s.num_reqs, "num_tokens": s.num_tokens,
                          "max_query_len": s.max_query_len, "max_seq_len": s.max_seq_len,
                          "kernel": gen.kernel_of(s),
                          "q": (f"batched [{s.num_reqs}, {s.max_query_len}, H, D], cache_seqlens" if s.batched
                                else "varlen [T, H, D], cu_seqlens_q"),
                          "num_splits": s.num_splits,
                          "out_arg": gen.takes_out(s)} for s in metadata.segments],
            "num_splits_note": metadata.num_splits_note,
            "window_size": list(gen.window_size),
            "output_copy": any(not gen.takes_out(s) for s in metadata.segments),
            # The harness asks for the LSE on the checked call only; timed calls run without it.
            "return_lse": "checked call only (timed calls: no)",
            "graph_safe": self.graph_safe(metadata) or "yes",
        }
        d.update(gen.describe(metadata))
        return d


# ------------------------------------------------------------------ the backend
class FlashAttentionBackend(AttentionBackend):
    name = "flash-attn"
    # Measured: flash_attn 2.8.3.post2, tokenspeed_fa3 3.0.0.post20260810, flash-attn-4 4.0.0b36
    # (FA4's betas change its API, so only the one tested).
    tested_versions = {"flash-attn": ">=2.8.3,<2.9", "tokenspeed_fa3": "==3.0.0.post20260810",
                       "flash-attn-4": "==4.0.0b36"}
    description = "FlashAttention 2/3/4 (flash_attn, flash_attn_interface, flash_attn.cute) over vLLM's paged KV cache"
    library_modules = tuple(MODULES.values())  # FA4's (the CuTe DSL) took 10.8 s of an H200 worker's start
    # call_form: vLLM's call or the library's fastest documented call (common.CALL_FORMS).
    variant_axes = {"fa_version": ("auto", 2, 3, 4), "call_form": CALL_FORMS}
    # vLLM: one backend, the FA version a setting; SGLang names FA3 and FA4 apart and has no FA2.
    engine_names = {
        "vllm": EngineName("FLASH_ATTN", version_axis="fa_version", aliases=("flash", "flash_attn", "fa"),
                           version_tag="fa"),
        "sglang": EngineName(version_axis="fa_version", version_names={3: "fa3", 4: "fa4"}),
    }

    @classmethod
    def default_variants(cls) -> list[dict[str, Any]]:
        # auto aliases one of these; it runs only when asked for
        return [{"fa_version": v, "call_form": f} for v in VERSIONS for f in CALL_FORMS]

    @classmethod
    def availability(cls, variant: dict[str, Any] | None = None) -> Availability:
        v = (variant or {}).get("fa_version", "auto")
        cc = cuda_capability()
        if str(v) == "auto":
            per = {n: availability_from(n, detect_features(n), cc) for n in VERSIONS}
            versions = {k: s for a in per.values() for k, s in a.versions.items()}
            if any(a.available for a in per.values()):
                return Availability.ok(**versions)
            return Availability.no("; ".join(f"FA{n}: {a.reason}" for n, a in per.items()), **versions)
        n, why = resolve_version(variant)
        if n is None:
            return Availability.no(why)
        return availability_from(n, detect_features(n), cc)

    @classmethod
    def capabilities(cls, variant: dict[str, Any] | None = None) -> Capabilities:
        cc = cuda_capability()
        v = (variant or {}).get("fa_version", "auto")
        if str(v) == "auto":
            caps = [capabilities_for(n, cc, detect_features(n)) for n in VERSIONS if hardware_reason(n, cc or DOCUMENTED_CC) is None]
            return union_caps(caps, "auto: union of the versions this GPU runs; resolved per case (see describe_call)")
        n, why = resolve_version(variant)
        if n is None:
            raise ValueError(why)
        return capabilities_for(n, cc, detect_features(n))

    @classmethod
    def check_support(cls, config: AttentionConfig, variant: dict[str, Any], device: str) -> str | None:
        if device != "cuda":
            return f"runs on cuda, not {device}"
        cc = cuda_capability()
        n, why = resolve_version(variant, config, cc, device)
        if n is None:
            return f"auto: {why}" if str(variant.get("fa_version", "auto")) == "auto" else why
        return support_reason(n, config, cc, detect_features(n), device)

    @classmethod
    def standalone_call(cls, config: AttentionConfig, variant: dict[str, Any],
                        call: dict[str, Any] | None = None) -> str | None:
        if cls.get_impl_cls() is not FlashAttentionImpl:
            return None  # a subclass with its own impl makes a different call
        v = variant.get("fa_version", "auto")
        if str(v) == "auto":  # the version the row resolved to, as describe_call recorded it
            v = (call or {}).get("fa_version")
        if v is None or int(v) not in GENERATIONS:
            return None
        return fa_standalone_call(GENERATIONS[int(v)], config, call_form_of(variant), call)

    @classmethod
    def get_builder_cls(cls) -> type[AttentionMetadataBuilder]:
        return FlashAttentionMetadataBuilder

    @classmethod
    def get_impl_cls(cls) -> type[AttentionImpl]:
        return FlashAttentionImpl
