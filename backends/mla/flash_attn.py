"""FlashAttention's MLA path on the contract's two MLA forms (attn_contract/mla.py):

- ``mla_absorbed``: vLLM's FLASH_ATTN_MLA call, FA3 with the latent passed through ``qv``:
  ``q`` = q_pe (64), ``k`` = kpe, ``v`` = ckv (512), ``qv`` = the absorbed q_nope (512), the
  softmax scale given explicitly (FA3's default for qv is ``1/sqrt(64 + 512)``, not MLA's). The
  ``fa3-fwd`` wheel (module ``fa3_fwd_interface``) is built without paged KV
  (FLASHATTENTION_DISABLE_PAGEDKV), so ``forward`` first gathers the batch's latent vectors from
  the paged cache into one packed varlen cache (one index_select over the flattened cache, slot
  indices made by the builder) and then calls ``flash_attn_varlen_func``: the row's time includes
  the gather, and its call description says so. vLLM runs its own FA3 build on the paged cache.
- ``mla_expanded``: ``flash_attn_varlen_func`` with query/key head 192 and value head 128 over
  the packed expanded key/value, bottom-right causal (vLLM's MLA prefill).

Variant axis ``fa_build``: ``fa3-fwd`` (the wheel above), ``fa3`` (``flash_attn_interface``: the
kit's tokenspeed build compiles different value head sizes out, so it is ``unsupported`` with
its build flags as the reason; an upstream build with them runs the same calls) and ``fa4``
(``flash_attn.cute``: MLA's value head 512 only on sm100; ``unsupported`` on sm90). The LSE is
natural-log ``[H, T]``, transposed into the harness's ``[T, H]``.
"""

from __future__ import annotations

import importlib
import time
from dataclasses import dataclass
from typing import Any

import torch

from attn_contract import (
    BUILD_LIMIT,
    KERNEL_LIMIT,
    MLA_ABSORBED,
    AttentionConfig,
    AttentionImpl,
    AttentionMetadataBuilder,
    Availability,
    Capabilities,
    CommonAttentionMetadata,
    CudaGraphSupport,
    MultipleOf,
)
from attn_contract.engines import EngineName

from backends.mla.base import MLALibraryBackend
from backends.mla.common import (
    MLA_KINDS,
    cuda_capability,
    describe_form,
    import_reason,
    module_version,
    packed_slots,
    split_latent,
    split_query,
)

FA_BUILDS = ("fa3-fwd", "fa3", "fa4")
MODULES = {"fa3-fwd": "fa3_fwd_interface", "fa3": "flash_attn_interface", "fa4": "flash_attn.cute"}
CONFIG_MODULES = {"fa3-fwd": "fa3_fwd_config", "fa3": "flash_attn_config"}
INSTALL = {"fa3-fwd": "pip install fa3-fwd (FA3 forward with different value head sizes)",
           "fa3": "pip install an FA3 build of hopper/, e.g. tokenspeed-fa3", "fa4": "pip install flash-attn-4"}
DISTS = {"fa3-fwd": ("fa3-fwd", "fa3_fwd"), "fa3": ("tokenspeed_fa3", "tokenspeed-fa3", "flash_attn_3", "flash-attn-3"),
         "fa4": ("flash-attn-4", "flash_attn_4")}
# Build flags (hopper/setup.py -> *_config.CONFIG["build_flags"]) that remove what each form needs.
FORM_FLAGS = {MLA_ABSORBED: "FLASH_ATTENTION_DISABLE_HDIMDIFF64", "mla_expanded": "FLASH_ATTENTION_DISABLE_HDIMDIFF192"}
FP8_ABSORBED_REASON = ("fp8 latent with FA3's qv path: a 512-wide value head takes fp16/bf16 only (hopper/flash_api.cpp: "
                       f"d_v > 256 needs 16-bit inputs): {KERNEL_LIMIT}")
# FA3's split-KV partials (out_accum / lse_accum, fp32) for num_splits=0 on a decode batch; FA3
# caps the splits at 256 and picks them so that the grid fills the SMs: bounded, not derived.
SPLIT_ALLOWANCE_BYTES = 128 << 20
FA4_SM90_REASON = ("fa_build=fa4: FA4 (flash_attn.cute) runs MLA's 512-wide value head / qv only on sm100; on sm90 "
                   f"its head dims are 8..256: {KERNEL_LIMIT}")


def build_flags(fa_build: str) -> dict[str, bool]:
    """The build's compiled-out features (empty when the build has no config module)."""
    name = CONFIG_MODULES.get(fa_build)
    if name is None:
        return {}
    try:
        cfg = importlib.import_module(name)
        return {str(k): bool(v) for k, v in dict(getattr(cfg, "CONFIG", {}).get("build_flags", {})).items()}
    except Exception:
        return {}


def build_reason(fa_build: str, flags: dict[str, bool], kind: str | None = None) -> str | None:
    """Why this build cannot run MLA (form ``kind``, or either form when None) from its flags."""
    kinds = [kind] if kind else list(FORM_FLAGS)
    off = [FORM_FLAGS[k] for k in kinds if flags.get(FORM_FLAGS[k], False)]
    if kind is None and len(off) < len(kinds):
        return None  # one form is left
    if off:
        return (f"fa_build={fa_build}: the installed {MODULES[fa_build]} build has different value head sizes "
                f"compiled out ({', '.join(off)} in {CONFIG_MODULES[fa_build]}): no MLA "
                f"{'qv (64/512)' if kind == MLA_ABSORBED else '192/128' if kind else 'qv or 192/128'}: {BUILD_LIMIT}")
    return None


@dataclass
class FlashAttnMLAMetadata:
    kind: str
    cu_seqlens_q: torch.Tensor  # int32 [n + 1], device
    cu_seqlens_k: torch.Tensor  # int32 [n + 1], device (packed latent / expanded K/V offsets)
    max_seqlen_q: int
    max_seqlen_k: int
    causal: bool
    slots: torch.Tensor | None  # absorbed: int64 [sum(seq_lens)] flat cache slots to gather
    num_tokens: int
    cached_tokens: int
    build_ms: float


class FlashAttnMLAMetadataBuilder(AttentionMetadataBuilder[FlashAttnMLAMetadata]):
    def build(self, common: CommonAttentionMetadata) -> FlashAttnMLAMetadata:
        t0 = time.perf_counter()
        cfg, dev = self.config, self.device
        slots = None
        if cfg.attention_kind == MLA_ABSORBED:
            slots = packed_slots(common.block_table, common.seq_lens_cpu, common.block_size, dev)
        qlens = common.query_lens_cpu
        return FlashAttnMLAMetadata(
            kind=cfg.attention_kind,
            cu_seqlens_q=common.query_start_loc_cpu.to(device=dev, dtype=torch.int32),
            cu_seqlens_k=common.kv_start_loc_cpu.to(device=dev, dtype=torch.int32),
            max_seqlen_q=int(qlens.max()) if qlens.numel() else 0,
            max_seqlen_k=int(common.seq_lens_cpu.max()) if common.num_reqs else 0,
            causal=common.causal, slots=slots, num_tokens=common.num_actual_tokens,
            cached_tokens=int(common.seq_lens_cpu.sum()), build_ms=(time.perf_counter() - t0) * 1e3)


class FlashAttnMLAImpl(AttentionImpl[FlashAttnMLAMetadata]):
    def __init__(self, config, variant, device, layer):
        super().__init__(config, variant, device, layer)
        build = str((variant or {}).get("fa_build", "fa3-fwd"))
        if build not in ("fa3-fwd", "fa3"):
            raise ValueError(f"fa_build={build} has no MLA call here (see check_support)")
        self._fa = importlib.import_module(MODULES[build])  # lazy: GPU runs only

    def forward(self, query, key, value, kv_cache, metadata, out, lse_out=None):
        md, cfg = metadata, self.config
        want_lse = lse_out is not None
        if md.kind == MLA_ABSORBED:
            L = cfg.mla.kv_lora_rank
            # The gather the paged-less build needs: [sum(seq_lens), 1, L + R], timed with the call.
            packed = kv_cache.reshape(-1, kv_cache.shape[-1]).index_select(0, md.slots).unsqueeze(1)
            ckv, kpe = split_latent(packed, L)
            q_nope, q_pe = split_query(query, L)
            res = self._fa.flash_attn_varlen_func(
                q_pe, kpe, ckv, md.cu_seqlens_q, md.cu_seqlens_k, md.max_seqlen_q, md.max_seqlen_k, qv=q_nope,
                softmax_scale=cfg.softmax_scale, causal=md.causal, num_splits=0, return_attn_probs=want_lse)
        else:
            res = self._fa.flash_attn_varlen_func(
                query, key, value, md.cu_seqlens_q, md.cu_seqlens_k, md.max_seqlen_q, md.max_seqlen_k,
                softmax_scale=cfg.softmax_scale, causal=md.causal, return_attn_probs=want_lse)
        o, lse = (res[0], res[1]) if want_lse else (res, None)
        out.copy_(o)  # the varlen API allocates its output: the copy is part of the timed call
        if want_lse:
            lse_out.copy_(lse.transpose(0, 1))  # FA's varlen LSE is [H, T], natural log
        return out

    def graph_safe(self, metadata: FlashAttnMLAMetadata) -> str | None:
        return None  # device metadata made by the builder; no host sync in forward

    def describe_call(self, metadata: FlashAttnMLAMetadata) -> dict[str, Any]:
        md = metadata
        build = str(self.variant.get("fa_build", "fa3-fwd"))
        d = {**describe_form(self.config), "fa_build": build, "num_tokens": md.num_tokens,
             "build_ms": round(md.build_ms, 3), "return_lse": "checked call only (timed calls: no)"}
        if md.kind == MLA_ABSORBED:
            d.update(function=f"{MODULES[build]}.flash_attn_varlen_func(q=q_pe, k=kpe, v=ckv, qv=q_nope, num_splits=0)",
                     cache=("gathered: the paged latent is copied into one contiguous varlen cache in forward "
                            f"({md.cached_tokens} tokens x 576, timed with the call); the build has no paged KV"))
        else:
            d.update(function=f"{MODULES[build]}.flash_attn_varlen_func (head 192, value head 128)",
                     cache="packed expanded key/value")
        return d


class FlashAttnMLABackend(MLALibraryBackend):
    name = "flash-attn-mla"
    description = ("FlashAttention MLA: FA3 through qv on a contiguous (gathered) latent cache (absorbed) and FA3 "
                   "varlen at 192/128 (expanded); build axis fa3-fwd / fa3 / fa4")
    tested_versions = {"fa3-fwd": "==0.0.3"}
    library_modules = ("fa3_fwd_interface",)
    variant_axes = {"fa_build": FA_BUILDS}
    engine_names = {
        # vLLM's FLASH_ATTN_MLA is the decode backend; its MLA prefill FLASH_ATTN (FA3 varlen at
        # 192/128) is chosen apart (vLLM PR #32623), the same call as this backend's expanded form.
        "vllm": EngineName("FLASH_ATTN_MLA", attention_kinds=frozenset({MLA_ABSORBED}), mla_prefill="FLASH_ATTN",
                           runs={"fa_build": "fa3-fwd"},
                           caveat="vLLM calls its own FA3 build on the paged latent cache (block_table); this row "
                                  "gathers the latent into a contiguous cache first, and its time includes that copy"),
        "sglang": EngineName("fa3", attention_kinds=MLA_KINDS, runs={"fa_build": "fa3-fwd"},
                             caveat="SGLang's fa3 backend calls sgl-kernel's FA3 with qv on the paged cache; this row "
                                    "gathers the latent first"),
    }

    @classmethod
    def default_variants(cls) -> list[dict[str, Any]]:
        return cls.variants()  # the unsupported builds are rows with their reasons

    @classmethod
    def availability(cls, variant: dict[str, Any] | None = None) -> Availability:
        build = str((variant or {}).get("fa_build", "fa3-fwd"))
        if build not in FA_BUILDS:
            return Availability.no(f"unknown fa_build {build!r}; expected one of {', '.join(FA_BUILDS)}")
        reason = import_reason(MODULES[build], INSTALL[build])
        if reason:
            return Availability.no(f"fa_build={build}: {reason}")
        version = module_version(MODULES[build], DISTS[build])
        cap = cuda_capability()
        if cap is None:
            return Availability.no("no CUDA device (FlashAttention runs on NVIDIA GPUs)", **{build: version})
        if build == "fa4":
            if cap[0] == 9:
                return Availability.no(FA4_SM90_REASON, **{build: version})
            return Availability.no(f"fa_build=fa4: the FA4 MLA call (qv, value head 512) is not wired here yet "
                                   f"(sm{cap[0]}{cap[1]})", **{build: version})
        if cap[0] != 9:
            return Availability.no(f"fa_build={build}: FA3's different-value-head kernels (qv, 192/128) are Hopper "
                                   f"(sm90) only; this GPU is sm{cap[0]}{cap[1]}", **{build: version})
        reason = build_reason(build, build_flags(build))
        return Availability.no(reason, **{build: version}) if reason else Availability.ok(**{build: version})

    @classmethod
    def capabilities(cls, variant: dict[str, Any] | None = None) -> Capabilities:
        build = str((variant or {}).get("fa_build", "fa3-fwd"))
        return cls.mla_capabilities(
            # fa3-fwd is built with FLASHATTENTION_DISABLE_FP16
            dtypes=frozenset({"bfloat16"} if build == "fa3-fwd" else {"float16", "bfloat16"}),
            kv_cache_dtypes=frozenset({"auto", "fp8_e4m3"}),  # fp8: expanded form only (check_support)
            block_sizes=(MultipleOf(1),), lse_base="e", cudagraph=CudaGraphSupport.UNIFORM_BATCH,
            cudagraph_source='vLLM v0.25.1 FlashAttnMLAMetadataBuilder._cudagraph_support: UNIFORM_BATCH',
            notes=("absorbed: the paged latent is gathered into a contiguous varlen cache in forward (timed); "
                   "flash_attn_varlen_func(q=q_pe, k=kpe, v=ckv, qv=q_nope), num_splits=0",
                   "expanded: flash_attn_varlen_func at 192/128 over the packed key/value",
                   "fp8 latent: expanded form only (its key/value arrive in the model dtype); absorbed: "
                   + FP8_ABSORBED_REASON,
                   "fa_build=fa3 (flash_attn_interface) runs where its build keeps different value head sizes; "
                   "fa4: " + FA4_SM90_REASON),
        )

    @classmethod
    def mla_support_reason(cls, config: AttentionConfig, variant: dict[str, Any]) -> str | None:
        build = str((variant or {}).get("fa_build", "fa3-fwd"))
        if config.is_fp8_kv and config.attention_kind == MLA_ABSORBED:
            return FP8_ABSORBED_REASON
        if build in CONFIG_MODULES:
            return build_reason(build, build_flags(build), config.attention_kind)
        return None

    @classmethod
    def batch_workspace_bytes(cls, config, variant, query_lens, seq_lens, cache_bytes: int,
                              device_type: str = "cuda") -> int:
        """Scratch of this batch (harness.plan.memory): the gathered latent (absorbed: every cached token's
        576 values again, plus its int64 slot index), the output FA allocates before the copy, the
        LSE, and an allowance for FA3's split-KV partials (fp32)."""
        rows, keys = int(sum(query_lens)), int(sum(seq_lens))
        e = 2
        gather = keys * (config.head_size * cache_bytes + 8) if config.attention_kind == MLA_ABSORBED else 0
        out = rows * config.num_heads * (config.value_head_size * e + 4)
        return gather + out + SPLIT_ALLOWANCE_BYTES

    @classmethod
    def get_builder_cls(cls) -> type[FlashAttnMLAMetadataBuilder]:
        return FlashAttnMLAMetadataBuilder

    @classmethod
    def get_impl_cls(cls) -> type[FlashAttnMLAImpl]:
        return FlashAttnMLAImpl
