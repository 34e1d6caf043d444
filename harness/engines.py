"""Serving engines' names for this harness's backends and variants: data tables, keyed by
backend name + variant axis, that turn a measured winner into the flags to paste.

vLLM (one attention backend per process):
    ``--attention-backend FLASH_ATTN|FLASHINFER`` (releases with the flag); older releases read
    ``VLLM_ATTENTION_BACKEND``. FlashAttention's version: ``--attention-config
    '{"flash_attn_version": N}'`` where ``--attention-config`` exists, else the
    ``VLLM_FLASH_ATTN_VERSION`` environment variable.
SGLang (prefill and decode may differ):
    ``--attention-backend fa3|fa4|flashinfer|torch_native`` for both, or
    ``--prefill-attention-backend X --decode-attention-backend Y``.

The vLLM side reuses ``harness.selection_rules.VLLM_BACKENDS`` (the table the vLLM-default
comparison already uses); the SGLang table is below. A candidate with no entry has no setting.
"""

from __future__ import annotations

from typing import Any

from harness.selection_rules import VLLM_BACKENDS

ENGINES = ("vllm", "sglang")

# vLLM backend names as its attention-benchmark study files spell them -> the harness backend.
_VLLM_STUDY_ALIASES = {"flash": "flash-attn", "flash_attn": "flash-attn", "fa": "flash-attn",
                       "flashinfer": "flashinfer"}

# harness backend -> (variant axis carrying the kernel version or None, {axis value: SGLang
# name}, variant values SGLang runs, caveat). FA2 has no SGLang backend; FA4 in SGLang takes
# page size 128 only and no sliding window (its docs' support matrix).
SGLANG_BACKENDS: dict[str, tuple[str | None, dict[Any, str], dict[str, Any], str]] = {
    "flash-attn": ("fa_version", {3: "fa3", 4: "fa4"}, {}, ""),
    "flashinfer": (None, {None: "flashinfer"}, {"prefill_backend": "auto"},
                   "SGLang picks FlashInfer's tensor-core decode by its own GQA-group rule"),
    "sdpa": (None, {None: "torch_native"}, {}, "SGLang's torch_native runs torch SDPA per request, unpaged"),
}


def from_vllm_name(name: str) -> str | None:
    """A vLLM backend name (``FLASH_ATTN``, ``flashinfer``, ...) -> this harness's backend, or
    None when there is no counterpart (MLA kernels, Triton, FlexAttention...)."""
    key = name.strip()
    for ours, (vllm_name, _axis, _fixed) in VLLM_BACKENDS.items():
        if key.upper() == vllm_name:
            return ours
    return _VLLM_STUDY_ALIASES.get(key.lower())


def sglang_setting(backend: str, variant: dict[str, Any]) -> dict[str, Any] | None:
    """SGLang's backend name for one harness backend+variant, with whether SGLang runs exactly
    that variant; None when SGLang has no such backend."""
    if backend not in SGLANG_BACKENDS:
        return None
    axis, names, fixed, caveat = SGLANG_BACKENDS[backend]
    v = variant.get(axis) if axis else None
    try:
        v = int(v) if v is not None else None
    except (TypeError, ValueError):
        return None  # "auto": not a version SGLang can be told
    if v not in names:
        return None
    exact = all(str(variant.get(k, want)) == str(want) for k, want in fixed.items())
    out: dict[str, Any] = {"attention_backend": names[v], "exact": exact}
    if caveat:
        out["caveat"] = caveat
    if not exact:
        out["caveat"] = (caveat + "; " if caveat else "") + "SGLang does not run this variant (" + ",".join(
            f"{k}={variant.get(k)}" for k in fixed) + ")"
    return out


def sglang_flags(prefill: str | None, decode: str | None) -> str:
    """The flags for a prefill and a decode backend (one flag when they agree)."""
    if prefill and decode and prefill != decode:
        return f"--prefill-attention-backend {prefill} --decode-attention-backend {decode}"
    one = prefill or decode
    return f"--attention-backend {one}" if one else ""


def vllm_flags(setting: dict[str, Any]) -> str:
    """CLI flags, then the environment variables for releases without them."""
    env = " ".join(f"{k}={v}" for k, v in setting.get("env", {}).items())
    return f"{setting['cli']} (older releases: {env})" if env else setting["cli"]
