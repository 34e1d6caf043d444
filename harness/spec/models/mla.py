"""The MLA fields of a config.json (DeepSeek-V2/V3/R1, Kimi-K2 and their kin) -> one layer kind.

Kept apart from config.py's per-model_type rules: a config with ``kv_lora_rank`` is MLA, and
its attention geometry comes from these fields alone, as vLLM's DeepseekV2MLAAttention reads
them (vllm/model_executor/models/deepseek_v2.py):

- ``num_attention_heads`` query heads; TP splits them (128 -> 16 at TP 8); the latent cache,
  one 576-wide vector per token, is replicated on every rank (one "KV head");
- ``kv_lora_rank``, ``qk_rope_head_dim``, ``qk_nope_head_dim``, ``v_head_dim``;
- the softmax scale ``(qk_nope + qk_rope) ** -0.5``, times ``yarn_get_mscale(factor,
  mscale_all_dim) ** 2`` when ``rope_scaling`` (or ``rope_parameters``) is not the default
  type (vLLM then runs it as ``deepseek_yarn``; ``mscale_all_dim`` missing counts as 0).
"""

from __future__ import annotations

import math
from typing import Any

from attn_contract.mla import MLADims, yarn_get_mscale

MLA_FIELDS = ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")


def is_mla(cfg: dict[str, Any]) -> bool:
    return cfg.get("kv_lora_rank") is not None


def _positive_int(cfg: dict[str, Any], key: str, where: str, error: type[ValueError]) -> int:
    v = cfg.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise error(f"{where}: field {key}: must be a positive integer (an MLA config needs it), got {str(repr(v))[:40]}")
    return v


def mla_notes(cfg: dict[str, Any]) -> list[str]:
    """What the MLA parse assumed because a field was absent (``harness validate`` prints them)."""
    rope = cfg.get("rope_scaling", cfg.get("rope_parameters"))
    if rope is None:
        return ["rope_scaling absent: no yarn mscale (softmax scale (qk_nope + qk_rope) ** -0.5)"]
    if not isinstance(rope, dict):
        return []
    notes = []
    kind = rope.get("rope_type", rope.get("type"))
    if kind is None:
        notes.append("rope_scaling.type absent: default (no yarn mscale)")
    elif kind != "default" and "mscale_all_dim" not in rope:
        notes.append("rope_scaling.mscale_all_dim absent: 0, as vLLM reads it (mscale 1, no change to the scale)")
    return notes


def mla_mscale(cfg: dict[str, Any], where: str, error: type[ValueError]) -> float:
    """The yarn attention factor whose square multiplies the softmax scale (1.0 without one)."""
    rope = cfg.get("rope_scaling", cfg.get("rope_parameters"))
    if rope is None:
        return 1.0
    if not isinstance(rope, dict):
        raise error(f"{where}: field rope_scaling: must be an object or null")
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind == "default" or not rope.get("apply_yarn_scaling", True):
        return 1.0
    factor = rope.get("factor")
    all_dim = rope.get("mscale_all_dim", 0) or 0

    def number(key: str, v: Any) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise error(f"{where}: field rope_scaling.{key}: must be a number, got {str(repr(v))[:40]}")
        return float(v)

    return yarn_get_mscale(number("factor", factor), number("mscale_all_dim", all_dim))


def mla_dims(cfg: dict[str, Any], where: str, error: type[ValueError]) -> tuple[int, MLADims]:
    """(query heads, MLADims) of an MLA config; ``error`` (ModelError) names the bad field."""
    heads = _positive_int(cfg, "num_attention_heads", where, error)
    lora, rope, nope, v = (_positive_int(cfg, k, where, error) for k in MLA_FIELDS)
    return heads, MLADims(lora, rope, nope, v, mscale=mla_mscale(cfg, where, error))
