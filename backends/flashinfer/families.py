"""FlashInfer's kernel families as variant values, each with the library's own support rules.

Axis ``decode_backend`` picks what runs the decode segment (the leading single-token requests):

- ``wrapper``: ``BatchDecodeWithPagedKVCacheWrapper`` (its kernel picked by ``decode_tensor_cores``),
  what vLLM's FlashInferImpl uses where it does not take the trtllm API;
- ``xqa`` / ``trtllm-gen``: ``flashinfer.decode.trtllm_batch_decode_with_kv_cache(backend=...)``,
  the names FlashInfer's ``backend=`` takes there (its ``auto`` is trtllm-gen on compute
  capability 10.x, xqa elsewhere);
- ``cudnn``: ``flashinfer.cudnn.cudnn_batch_decode_with_kv_cache`` (cuDNN SDPA through
  cudnn-frontend's Python graph API).

Axis ``prefill_backend`` keeps the paged prefill wrapper's ``backend=`` strings (auto, fa2, fa3)
and adds ``cudnn`` (prefill_kernels.py: the cuDNN paged prefill), ``cutlass`` and ``trtllm-gen``,
each declared with why it does not take a case. The rules below were read from
flashinfer-python 0.6.18.post1 (decode.py, xqa.py, jit/xqa.py, prefill.py, cudnn/decode.py,
cudnn/prefill.py): a reason quotes the file it comes from.

The non-default values are opt-in (``AttentionBackend.opt_in_axes``): a run without a filter
naming the axis runs what it ran before, so the main suites keep their cell counts.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from attn_contract import AttentionConfig

from backends.flashinfer.prefill_kernels import cudnn_prefill_reason

DECODE_BACKENDS = ("wrapper", "xqa", "trtllm-gen", "cudnn")
PREFILL_BACKENDS = ("auto", "fa2", "fa3", "cudnn", "cutlass", "trtllm-gen")
DEFAULT_PREFILL_BACKENDS = ("auto", "fa2", "fa3")
# The trtllm API's families (one call over a block table, no plan()).
TRTLLM_API = frozenset({"xqa", "trtllm-gen"})

XQA_PAGE_SIZES = (16, 32, 64, 128)  # jit/xqa.py: "only 16, 32, 64, 128 are supported"
XQA_ARCH_MAJORS = (9, 10, 12)  # xqa.py: "XQA is only supported on SM90, SM100, SM120/SM121 GPUs"
NO_LSE = "returns no LSE"

DECODE_FAMILY_NOTES = (
    "decode_backend=xqa (trtllm_batch_decode_with_kv_cache backend='xqa'): sm90/sm100/sm120, "
    "fp16/bf16 queries, KV in the query dtype or fp8_e4m3, pages 16/32/64/128, no softcap, no LSE",
    "decode_backend=trtllm-gen: Blackwell (compute capability 10.x) cubins only",
    "decode_backend=cudnn (flashinfer.cudnn.cudnn_batch_decode_with_kv_cache): bf16 only, no fp8, "
    "no window, no softcap, no LSE; needs cudnn-frontend (the `cudnn` module)",
    "prefill_backend=cutlass: sm100a/sm110a, ragged prefill wrapper only (encoder-style batches)",
    "prefill_backend=trtllm-gen: Blackwell (compute capability 10.x) only",
    "prefill_backend=cudnn (flashinfer.cudnn.cudnn_batch_prefill_with_kv_cache on the paged cache, element "
    "offsets): bf16, head dim 128, no fp8, no window, no softcap, no LSE; needs cudnn-frontend",
)


def decode_family_reason(config: AttentionConfig, decode_backend: str) -> str | None:
    """Why ``decode_backend`` cannot take this layer's decode segment (None if it can), by the
    library's rules that need no GPU. The architecture is ``arch_reason``'s."""
    if decode_backend == "wrapper":
        return None
    if decode_backend not in DECODE_BACKENDS:
        return f"unknown decode_backend {decode_backend!r}; expected one of {', '.join(DECODE_BACKENDS)}"
    if decode_backend in TRTLLM_API:
        if config.softcap:
            return (f"decode_backend={decode_backend}: trtllm_batch_decode_with_kv_cache takes no "
                    "logits soft-cap argument (flashinfer/decode.py)")
        if decode_backend == "xqa":
            if config.kv_cache_dtype == "fp8_e5m2":
                return ("decode_backend=xqa: XQA's cache element types are the query dtype, fp8_e4m3, int8 "
                        "and nvfp4 (CACHE_ELEM_ENUM in flashinfer/jit/xqa.py); fp8_e5m2 is not one")
            if config.block_size not in XQA_PAGE_SIZES:
                return (f"decode_backend=xqa: page size {config.block_size} not supported; "
                        f"FlashInfer's XQA build takes {', '.join(map(str, XQA_PAGE_SIZES))} (flashinfer/jit/xqa.py)")
            if config.head_size % 16 or not 16 <= config.head_size <= 512:
                return (f"decode_backend=xqa: head_dim {config.head_size} must be divisible by 16 and in "
                        "[16, 512] (flashinfer/jit/xqa.py)")
        return None
    # cudnn
    if config.dtype != "bfloat16":
        return (f"decode_backend=cudnn: FlashInfer's cuDNN decode graph declares q and o as BFLOAT16 "
                f"(flashinfer/cudnn/decode.py); dtype {config.dtype} not supported")
    if config.is_fp8_kv:
        return "decode_backend=cudnn: FlashInfer's cuDNN decode graph has no fp8 KV scales (flashinfer/cudnn/decode.py)"
    if config.sliding_window is not None or config.softcap:
        return ("decode_backend=cudnn: cudnn_batch_decode_with_kv_cache takes no window or soft-cap "
                "argument (flashinfer/cudnn/decode.py)")
    return None


def prefill_family_reason(config: AttentionConfig, prefill_backend: str) -> str | None:
    """Why ``prefill_backend`` cannot take this layer's prefill segment (None if it can)."""
    if prefill_backend not in PREFILL_BACKENDS:
        return f"unknown prefill_backend {prefill_backend!r}; expected one of {', '.join(PREFILL_BACKENDS)}"
    if prefill_backend == "cutlass" and (config.causal or config.is_fp8_kv):
        return ("prefill_backend=cutlass: in flashinfer 0.6.18 only BatchPrefillWithRaggedKVCacheWrapper "
                "takes backend='cutlass' (the paged wrapper does not); the harness runs the ragged wrapper "
                "for non-causal batches without cached context and a model-dtype cache only")
    if prefill_backend == "cudnn":
        return cudnn_prefill_reason(config)
    return None


def arch_reason(capability: tuple[int, int], decode_backend: str, prefill_backend: str) -> str | None:
    """The families' GPU requirements, as FlashInfer 0.6.18 checks them (None if this GPU has them)."""
    major, minor = capability
    arch = f"sm{major}{minor}"
    if decode_backend == "xqa" and major not in XQA_ARCH_MAJORS:
        return f"decode_backend=xqa: XQA is only supported on SM90, SM100, SM120/SM121 GPUs (flashinfer/xqa.py); this is {arch}"
    if decode_backend == "trtllm-gen" and major != 10:
        return (f"decode_backend=trtllm-gen: FlashInfer's trtllm-gen FMHA cubins are for Blackwell "
                f"(compute capability 10.x; trtllm_batch_decode_with_kv_cache's auto picks xqa elsewhere); this is {arch}")
    if prefill_backend == "cutlass" and major not in (10, 11):
        return ("prefill_backend=cutlass: CUTLASS FMHA requires SM100a (B200/GB200) or SM110a "
                f"(flashinfer/prefill.py get_fmha_module); this is {arch}")
    if prefill_backend == "trtllm-gen" and major != 10:
        return f"prefill_backend=trtllm-gen: FlashInfer's trtllm-gen context kernels are for Blackwell (10.x); this is {arch}"
    return None


def library_reason(decode_backend: str, prefill_backend: str = "auto") -> str | None:
    """A Python module the family imports that is not installed (None if all are)."""
    for axis, value in (("decode_backend", decode_backend), ("prefill_backend", prefill_backend)):
        if value == "cudnn" and importlib.util.find_spec("cudnn") is None:
            return (f"{axis}=cudnn: cudnn-frontend is not installed (pip install nvidia-cudnn-frontend); "
                    "without it FlashInfer falls back to downloading cuDNN cubins")
    return None


def family_variants(axes: dict[str, tuple[Any, ...]]) -> list[dict[str, Any]]:
    """The backend's variants without the combinations that cannot differ: decode_tensor_cores
    picks the wrapper's kernel (the other decode families ignore it) and call_form=fastest sends
    a mixed batch through the prefill wrapper alone (no decode family runs). verify_wrapper=decode
    takes uniform verify batches only, through the tensor-core decode wrapper: no prefill wrapper
    and no mixed batch, so it is one variant (tensor cores, prefill_backend auto, call_form vllm)."""
    combos: list[dict[str, Any]] = [{}]
    for axis, values in axes.items():
        combos = [{**c, axis: v} for c in combos for v in values]

    def verify_ok(v: dict[str, Any]) -> bool:
        return v.get("verify_wrapper", "prefill") != "decode" or (
            v.get("decode_backend", "wrapper") == "wrapper" and v.get("decode_tensor_cores", True) is True
            and v.get("prefill_backend", "auto") == "auto" and v.get("call_form", "vllm") == "vllm")

    return [v for v in combos if verify_ok(v) and (
        v.get("decode_backend", "wrapper") == "wrapper"
        or (v.get("decode_tensor_cores", True) is True and v.get("call_form", "vllm") == "vllm"))]
