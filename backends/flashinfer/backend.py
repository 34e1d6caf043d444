"""The FlashInfer backend: FlashInfer's decode / paged prefill / ragged prefill wrappers wrapped
the way vLLM v1's FlashInferBackend does, plus its other kernel families as variant values
(families.py). Declarations here; host work in builder.py, the kernel call in impl.py."""

from __future__ import annotations

import importlib.util
from typing import Any

import torch

from attn_contract import (
    AttentionBackend,
    AttentionConfig,
    Availability,
    Capabilities,
    CommonAttentionMetadata,
    CudaGraphSupport,
    HeadSizes,
    MultipleOf,
    SplitKV,
)

from attn_contract.engines import EngineName

from backends._flashinfer_nvfp4 import NVFP4, NVFP4_NOTE, nvfp4_reason
from backends.flashinfer import families
from backends.flashinfer._host import (
    ALIBI_REASON,
    CALL_FORMS,
    CUDA_CORE_DECODE_GROUPS,
    DEFAULT_VARIANT,
    FA3_FP8_REASON,
    MASK_FILL,
    MiB,
    NONCAUSAL_WINDOW_REASON,
    SINKS_REASON,
    UNATTRIBUTED_SCRATCH_BYTES,
    VERIFIED_PAGE_SIZES,
    VERIFY_WRAPPERS,
    hardware_reason,
    verify_batch_reason,
    workspace_size,
)
from backends.flashinfer.builder import FlashInferMetadataBuilder
from backends.flashinfer.decode_kernels import workspace_bytes as family_workspace_bytes
from backends.flashinfer.prefill_kernels import workspace_bytes as prefill_family_workspace_bytes
from backends.flashinfer.impl import FlashInferImpl
from backends.flashinfer.standalone import standalone_source


VERIFY_CUDAGRAPH_SOURCE = (
    "the harness's own level for FlashInfer 0.6.18's BatchDecodeWithPagedKVCacheWrapper(use_tensor_cores=True, "
    "backend='fa2', use_cuda_graph=True) planned with q_len_per_req (flashinfer#3871: graph-safe on the fa2 path, "
    "one wrapper per batch size and q); not vLLM's FlashInfer backend, which verifies through the prefill wrapper "
    "and declares UNIFORM_SINGLE_TOKEN_DECODE on Hopper"
)


def verify_variant_reason(config: AttentionConfig, v: dict[str, Any]) -> str | None:
    """Why verify_wrapper=decode cannot take this layer (None if it can, or for the other value).
    The layer rules of the tensor-core decode (dtypes, fp8, window, soft-cap) are the ones
    check_support applies to the decode wrapper already; these are what q_len_per_req adds."""
    value = v.get("verify_wrapper", "prefill")
    if value not in VERIFY_WRAPPERS:
        return f"unknown verify_wrapper {value!r}; expected one of {', '.join(VERIFY_WRAPPERS)}"
    if value != "decode":
        return None
    if v.get("decode_backend") != "wrapper":
        return (f"verify_wrapper=decode runs BatchDecodeWithPagedKVCacheWrapper; decode_backend="
                f"{v.get('decode_backend')} is another decode family")
    if not v.get("decode_tensor_cores"):
        return ("verify_wrapper=decode: q_len_per_req > 1 needs use_tensor_cores=True (flashinfer decode.py); "
                "the CUDA-core decode kernel takes one query token per request")
    if not config.causal:
        return ("verify_wrapper=decode: the decode wrapper's q_len_per_req block is causal within each request "
                "(flashinfer decode.py); a non-causal layer is not one it can take")
    return None


class FlashInferBackend(AttentionBackend):
    name = "flashinfer"
    tested_versions = {"flashinfer-python": ">=0.6.18,<0.7"}  # measured: 0.6.18.post1
    library_modules = ("flashinfer",)
    # vLLM (v0.25.1) decodes through the wrapper with tensor cores and lets FlashInfer pick its
    # prefill: other values have no switch there. Both engines verify drafts through the prefill
    # wrapper (verify_wrapper=decode is no engine's call yet).
    engine_names = {
        "vllm": EngineName("FLASHINFER", runs={"decode_tensor_cores": True, "prefill_backend": "auto",
                                               "decode_backend": "wrapper", "verify_wrapper": "prefill"},
                           aliases=("flashinfer",)),
        "sglang": EngineName("flashinfer", runs={"prefill_backend": "auto", "decode_backend": "wrapper",
                                                 "verify_wrapper": "prefill"},
                             caveat="SGLang picks FlashInfer's tensor-core decode by its own GQA-group rule"),
    }
    description = "FlashInfer batch decode + paged/ragged prefill wrappers (plan/run), as vLLM v1 uses them"
    # The default run is the wrapper families' twelve variants: decode_tensor_cores only matters
    # when a batch has decodes and prefill_backend only when it has prefills ("auto" resolves to
    # fa3 on Hopper for bf16/fp16 KV, fa2 for fp8 KV), so some rows repeat a kernel;
    # describe_call's decode_kernel / prefill_backend_resolved say which ran. The other kernel
    # families (families.py) are opt-in values: a suite or --variant filter naming the axis runs them.
    # verify_wrapper=decode (the tensor-core decode wrapper with q_len_per_req, uniform verify
    # batches only) is opt-in too (suites/spec_decode.yaml names it).
    variant_axes = {"decode_tensor_cores": (True, False), "prefill_backend": families.PREFILL_BACKENDS,
                    "call_form": CALL_FORMS, "decode_backend": families.DECODE_BACKENDS,
                    "verify_wrapper": VERIFY_WRAPPERS}
    opt_in_axes = frozenset({"prefill_backend", "decode_backend", "verify_wrapper"})
    # Decodes (query length 1, reorder_batch_threshold) go to the decode family (the wrapper's
    # kernel picked by decode_tensor_cores); the rest go to the prefill wrappers prefill_backend
    # picks. On a batch of one kind the other axes cannot change a thing: the planner runs one.
    # verify_wrapper changes only requests of q > 1 over a cached context (segment kind extend).
    variant_axis_kinds = {"decode_tensor_cores": frozenset({"decode"}),
                          "decode_backend": frozenset({"decode"}),
                          "verify_wrapper": frozenset({"extend"}),
                          "prefill_backend": frozenset({"prefill", "extend"}),
                          "call_form": frozenset({"decode", "prefill", "extend"})}

    @classmethod
    def variants(cls) -> list[dict[str, Any]]:
        return families.family_variants(cls.variant_axes)

    @classmethod
    def default_variants(cls) -> list[dict[str, Any]]:
        return [v for v in cls.variants() if v["decode_backend"] == "wrapper"
                and v["prefill_backend"] in families.DEFAULT_PREFILL_BACKENDS and v["verify_wrapper"] == "prefill"]

    @classmethod
    def applicable_axes(cls, segment_kinds: Any) -> tuple[str, ...]:
        # call_form changes the call only when decodes and prefills/extends share the batch.
        kinds = set(segment_kinds)
        mixed = "decode" in kinds and bool(kinds & {"prefill", "extend"})
        return tuple(a for a in super().applicable_axes(kinds) if a != "call_form" or mixed)

    @classmethod
    def availability(cls, variant: dict[str, Any] | None = None) -> Availability:
        if importlib.util.find_spec("flashinfer") is None:
            return Availability.no("flashinfer is not installed (pip install flashinfer-python)")
        try:
            import flashinfer
        except Exception as e:  # a broken install is a reason, not a crash
            return Availability.no(f"import flashinfer failed: {type(e).__name__}: {str(e).strip()[:200]}")
        version = str(getattr(flashinfer, "__version__", "unknown"))
        if not torch.cuda.is_available():
            return Availability.no("no CUDA device (FlashInfer runs on NVIDIA GPUs)", flashinfer=version)
        v = {**DEFAULT_VARIANT, **(variant or {})}
        major, minor = torch.cuda.get_device_capability()
        cap = (major, minor)
        reason = (hardware_reason(cap, torch.version.cuda, v["prefill_backend"])
                  or families.arch_reason(cap, str(v["decode_backend"]), str(v["prefill_backend"]))
                  or families.library_reason(str(v["decode_backend"]), str(v["prefill_backend"])))
        if reason:
            return Availability.no(reason, flashinfer=version)
        return Availability.ok(flashinfer=version)

    @classmethod
    def capabilities(cls, variant: dict[str, Any] | None = None) -> Capabilities:
        v = {**DEFAULT_VARIANT, **(variant or {})}
        wrapper = v["decode_backend"] == "wrapper"
        cudnn_prefill = v["prefill_backend"] == "cudnn"
        verify = v["verify_wrapper"] == "decode"
        return Capabilities(
            dtypes=frozenset({"float16", "bfloat16"}),
            kv_cache_dtypes=frozenset({"auto", "fp8_e4m3", "fp8_e5m2", NVFP4}),  # nvfp4: see check_support
            # JIT compiles per head dim; 64/128/256 are the dims FA3 and the AOT table cover.
            head_sizes=HeadSizes(values=(64, 128, 256)),
            block_sizes=(MultipleOf(1),),
            kv_layouts=frozenset({"NHD", "HND"}),
            causal=True,
            non_causal=True,
            sliding_window=True,
            softcap=True,
            alibi=False,
            sinks=False,
            cascade=False,
            gqa=True,
            # xqa, trtllm-gen (here), cuDNN decode and cuDNN prefill (its LSE base changed across
            # FlashInfer releases: prefill_kernels.py) return no LSE
            returns_lse=wrapper and not cudnn_prefill,
            lse_base=2,  # the library's own: decode run() has no natural-log option
            devices=frozenset({"cuda"}),
            cudagraph=CudaGraphSupport.UNIFORM_BATCH if verify else CudaGraphSupport.UNIFORM_SINGLE_TOKEN_DECODE,
            cudagraph_source=VERIFY_CUDAGRAPH_SOURCE if verify else 'vLLM v0.25.1 FlashInferMetadataBuilder.get_cudagraph_support: UNIFORM_SINGLE_TOKEN_DECODE without trtllm-gen (Hopper), UNIFORM_BATCH with it (Blackwell)',
            reorder_batch_threshold=1,
            # fixed_split_size is honoured by the tensor-core decode only (FlashInfer's plan doc);
            # with q_len_per_req > 1 not declared until a GPU run has checked it.
            split_kv=SplitKV("split_kv_pages", 0, 1) if wrapper and v["decode_tensor_cores"] and not verify else None,
            notes=(
                "any page size >= 1; decode verified on H200 with pages " + ",".join(map(str, VERIFIED_PAGE_SIZES)),
                "decode_tensor_cores=False (CUDA-core decode) needs GQA group in {1,2,3,4,6,8}",
                "prefill_backend=fa3 needs sm90a and rejects fp8 KV (fp8 Q required); auto picks fa2 there",
                "non-causal: no sliding window; without cached context runs the ragged wrapper on key/value",
                "ALiBi and sinks declared unsupported (see check_support reasons)",
                NVFP4_NOTE,
                *families.DECODE_FAMILY_NOTES,
                "verify_wrapper=decode: uniform verify batches (every request the same q > 1 over a cached "
                "context) through the tensor-core decode wrapper (fa2) with q_len_per_req=q, on a "
                "use_cuda_graph=True wrapper per (batch size, q); checked and replayed on an H200 (docs/spec_decode.md)",
                "plan() JIT-compiles on first use; the builder warms up so build() times plan only",
            ),
        )

    @classmethod
    def check_support(cls, config: AttentionConfig, variant: dict[str, Any], device: str) -> str | None:
        if config.kv_cache_dtype == NVFP4:
            return nvfp4_reason(device)
        v = {**DEFAULT_VARIANT, **(variant or {})}
        caps = cls.capabilities(v)
        if device not in caps.devices:
            return caps.unsupported_reason(config, device)
        if config.alibi:
            return ALIBI_REASON
        if config.sinks:
            return SINKS_REASON
        reason = caps.unsupported_reason(config, device)
        if reason:
            return reason
        if not config.causal and config.sliding_window is not None:
            return NONCAUSAL_WINDOW_REASON
        if not v["decode_tensor_cores"] and config.gqa_group not in CUDA_CORE_DECODE_GROUPS:
            return (f"decode_tensor_cores=False: the CUDA-core decode kernel supports GQA group sizes "
                    f"{sorted(CUDA_CORE_DECODE_GROUPS)}, not {config.gqa_group}")
        if v["prefill_backend"] == "fa3" and config.is_fp8_kv:
            return FA3_FP8_REASON
        reason = verify_variant_reason(config, v)
        if reason:
            return reason
        return (families.decode_family_reason(config, str(v["decode_backend"]))
                or families.prefill_family_reason(config, str(v["prefill_backend"])))

    @classmethod
    def check_batch_support(cls, common: CommonAttentionMetadata, variant: dict[str, Any],
                            config: AttentionConfig | None = None) -> str | None:
        v = {**DEFAULT_VARIANT, **(variant or {})}
        if v["verify_wrapper"] == "decode":
            return verify_batch_reason(common.query_lens_cpu, common.seq_lens_cpu)
        if v["prefill_backend"] == "cutlass" and not bool((common.context_lens_cpu == 0).all()):
            return ("prefill_backend=cutlass: only the ragged prefill wrapper takes it (flashinfer 0.6.18), "
                    "which needs a batch without cached context")
        return None

    @classmethod
    def workspace_bytes(cls, config: AttentionConfig, variant: dict[str, Any]) -> int:
        """Device scratch of one builder, for the memory planner (harness/plan/memory.py): the shared
        float workspace, what each wrapper's constructor allocates in flashinfer 0.6.18 (an 8 MiB
        int workspace and a 32768-entry int32 kv_lens buffer; read from its prefill.py/decode.py),
        and an allowance for what plan()/run() and FlashInfer's process-wide cached buffers take
        that is not attributed yet. The allowance is measured, not derived, and does not depend on
        the variant because the measured peak did not (docs/measurement.md §12). (0.6.18 has no vector-sparse index
        buffer: an earlier 64 MiB term for fa3/auto counted one and hid the gap on those variants.)"""
        v = {**DEFAULT_VARIANT, **(variant or {})}
        ragged = not (config.causal or config.is_fp8_kv or v["prefill_backend"] == "cudnn")
        prefill_wrappers = 1 + (1 if ragged else 0)  # paged (+ ragged)
        per_wrapper = 8 * MiB + 32768 * 4
        family = (family_workspace_bytes(str(v["decode_backend"]))
                  + prefill_family_workspace_bytes(str(v["prefill_backend"])))
        return workspace_size(config) + (1 + prefill_wrappers) * per_wrapper + UNATTRIBUTED_SCRATCH_BYTES + family

    @classmethod
    def diagnose_mismatch(cls, config: AttentionConfig, variant: dict[str, Any], layer: Any,
                          check: dict[str, Any]) -> str | None:
        """FlashInfer 0.6's fa2 prefill / tensor-core decode kernels fill masked logits with a
        finite -5e4 before sm_scale (into which run() folds k_scale) is applied: with a small
        k_scale the fill is only a few units after scaling and masked keys leak into the softmax
        (docs/backends/flashinfer.md, "Known findings"). Matches finite-valued fp8 mismatches
        where that scaled fill is above -20 (a masked key's weight > e^-20)."""
        if cls.get_impl_cls() is not FlashInferImpl or not config.is_fp8_kv:
            return None
        fill = MASK_FILL * config.softmax_scale * float(layer.k_scale)
        if fill > 20.0:
            return None
        failed = [p for p in check.get("per_request") or [] if not p.get("passed", True)]
        if not failed or any("NaN" in p.get("problems", "") or "Inf" in p.get("problems", "") for p in failed):
            return None
        return (f"known FlashInfer bug: masked logits are filled with a finite -5e4 before k_scale * sm_scale "
                f"= {config.softmax_scale * float(layer.k_scale):.3g} is applied, i.e. -{fill:.3g} after scaling, "
                "so masked keys leak into the softmax (docs/backends/flashinfer.md)")

    @classmethod
    def standalone_call(cls, config: AttentionConfig, variant: dict[str, Any],
                        call: dict[str, Any] | None = None) -> str | None:
        """What the builder plans and the impl runs (paged decode + paged prefill wrappers on one
        workspace); the ragged path of encoder-style batches is not offered."""
        v = {**DEFAULT_VARIANT, **(variant or {})}
        if cls.get_impl_cls() is not FlashInferImpl or (not config.causal and not config.is_fp8_kv):
            return None
        if v["decode_backend"] != "wrapper" or v["prefill_backend"] == "cudnn":
            return None  # the reproducer covers the wrapper families only
        if v["verify_wrapper"] == "decode":
            # The template plans vLLM's call forms (decode wrapper for q = 1, prefill wrapper for the
            # rest); the q_len_per_req decode plan is not in it, and a reproducer of a call never run
            # on a GPU would only repeat the adapter's guesses.
            return None
        return standalone_source(workspace_size(config) // MiB, bool(v["decode_tensor_cores"]),
                                 str(v["prefill_backend"]), str(v["call_form"]))

    @classmethod
    def get_builder_cls(cls) -> type[FlashInferMetadataBuilder]:
        return FlashInferMetadataBuilder

    @classmethod
    def get_impl_cls(cls) -> type[FlashInferImpl]:
        return FlashInferImpl
