"""transformers' per-``model_type`` defaults for the attention fields of a config.json.

A published config.json leaves out every field whose value is the class default: Gemma-3's
``text_config`` has no ``head_dim``, ``query_pre_attn_scalar`` or ``sliding_window_pattern``,
and transformers fills them in when it loads the file. A parser that does not fill them in
reads another model (Gemma-3 12B: head size 240 instead of 256, every layer windowed).

The table is ours (the harness does not import transformers at run time). Each value was read
from transformers' ``models/<type>/configuration_<type>.py`` (the dataclass field defaults and
``__post_init__``), transformers 5.24.0; where an older release differs it is said. Only the
fields the attention parser reads are listed, and not the ones that say which model it is
(hidden_size, num_attention_heads, num_hidden_layers): a file without those is refused, not
read as the class's default model. A key present in the file, even as ``null``,
wins over the default (as in transformers: an explicit ``null`` becomes None, then the derived
rules apply: head_dim = hidden_size // num_attention_heads, num_key_value_heads =
num_attention_heads).
"""

from __future__ import annotations

from typing import Any

TRANSFORMERS_CHECKED = "5.24.0"

# model_type -> {field: default}. ``sliding_window_pattern`` is Gemma-3's period (5 local then
# 1 global; transformers reads it from the file's kwargs with default 6 and derives
# ``layer_types`` from it); ``alternate`` marks Gemma-2 / gpt-oss, whose default layer_types
# alternate sliding (even layers) and full (odd layers).
MODEL_TYPE_DEFAULTS: dict[str, dict[str, Any]] = {
    # Gemma2Config: hidden 2304, 8 heads, 4 KV heads, head_dim 256, query_pre_attn_scalar 256,
    # sliding_window 4096, attn_logit_softcapping 50.0, layer_types alternating.
    "gemma2": {"num_key_value_heads": 4,
               "head_dim": 256, "query_pre_attn_scalar": 256, "sliding_window": 4096,
               "attn_logit_softcapping": 50.0, "alternate": True},
    # Gemma3TextConfig: as Gemma-2 but no attention softcap, sliding_window_pattern 6.
    "gemma3_text": {"num_key_value_heads": 4,
                    "head_dim": 256, "query_pre_attn_scalar": 256, "sliding_window": 4096,
                    "attn_logit_softcapping": None, "sliding_window_pattern": 6},
    # LlamaConfig: head_dim and num_key_value_heads None (derived).
    "llama": {},
    # MistralConfig: 8 KV heads and a 4096 window by default (an absent sliding_window is 4096).
    "mistral": {"num_key_value_heads": 8,
                "sliding_window": 4096},
    # MixtralConfig: 8 KV heads, no window.
    "mixtral": {"num_key_value_heads": 8,
                "sliding_window": None},
    # Qwen2Config: 32 KV heads (not num_attention_heads), use_sliding_window False, max_window_layers 28.
    "qwen2": {"num_key_value_heads": 32,
              "use_sliding_window": False, "sliding_window": 4096, "max_window_layers": 28},
    # Qwen3Config: head_dim 128 by default (NOT hidden_size // heads), otherwise as Qwen2.
    "qwen3": {"num_key_value_heads": 32,
              "head_dim": 128, "use_sliding_window": False, "sliding_window": 4096, "max_window_layers": 28},
    # Phi3Config: num_key_value_heads None (derived), no window.
    "phi3": {"sliding_window": None},
    # GptOssConfig: 64 heads, 8 KV heads, head_dim 64, window 128, layer_types alternating.
    "gpt_oss": {"num_key_value_heads": 8,
                "head_dim": 64, "sliding_window": 128, "alternate": True},
}
# A Gemma3Config (multimodal) whose text_config has no model_type is a gemma3_text one.
_TEXT_MODEL_TYPES = {"gemma3": "gemma3_text"}


def model_type_of(cfg: dict[str, Any], top: dict[str, Any]) -> str:
    """The model_type whose defaults apply to ``cfg`` (the text_config, or the whole file)."""
    own = cfg.get("model_type")
    if isinstance(own, str) and own:
        return own
    outer = top.get("model_type")
    if not isinstance(outer, str):
        return ""
    return _TEXT_MODEL_TYPES.get(outer, outer) if cfg is not top else outer


def with_defaults(cfg: dict[str, Any], model_type: str) -> tuple[dict[str, Any], list[str]]:
    """``cfg`` with the model type's defaults under it, and a note per default that filled a
    field the parser reads (so the user sees what was assumed)."""
    table = MODEL_TYPE_DEFAULTS.get(model_type, {})
    filled = [k for k in table if k not in cfg and k != "alternate"]
    notes = [f"{k} absent: transformers' {model_type} default {table[k]!r}" for k in filled
             if table[k] is not None and k in ("head_dim", "query_pre_attn_scalar", "sliding_window_pattern", "sliding_window",
                      "num_key_value_heads", "attn_logit_softcapping")]
    return {**table, **cfg}, notes


def alternates(model_type: str) -> bool:
    """Whether the type's default layer pattern alternates sliding / full (Gemma-2, gpt-oss)."""
    return bool(MODEL_TYPE_DEFAULTS.get(model_type, {}).get("alternate"))
