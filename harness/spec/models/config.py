"""A Hugging Face ``config.json`` -> the attention geometry of each kind of layer, and its
tensor-parallel slice as vLLM shards it.

Only the fields that shape an attention call are read: heads, KV heads, head size, sliding
window (and which layers use it), logit softcapping, attention sinks, the query scale and the
dtype. Every way a file can be wrong is a ``ModelError`` (a ValueError) naming the field.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, overload

from harness.spec.models.defaults import alternates, model_type_of, with_defaults
from harness.spec.models.mla import is_mla, mla_dims, mla_notes

MAX_CONFIG_BYTES = 4 * 1024 * 1024

# Models whose every layer adds a learned per-head sink to the softmax denominator; config.json
# has no field for it, the architecture implies it.
_SINK_MODEL_TYPES = {"gpt_oss"}


class ModelError(ValueError):
    """A config.json that cannot be turned into attention cases, with the field named."""


@dataclass(frozen=True)
class LayerKind:
    """The attention geometry shared by a set of a model's layers (before TP slicing)."""

    name: str  # "all", or "local" / "global" when the layers differ
    num_heads: int
    num_kv_heads: int
    head_size: int
    sliding_window: int | None = None
    softcap: float = 0.0
    sinks: bool = False
    scale: float | None = None  # None: 1/sqrt(head_size)
    layers: int = 0  # how many layers of the model are of this kind (0 = unknown)
    # MLA (attn_contract.MLADims): num_kv_heads 1 (the latent), head_size the latent's width.
    mla: Any = None


@dataclass(frozen=True)
class ModelAttention:
    """A model's attention layers, grouped into kinds; ``unsupported`` says why none can run."""

    id: str
    source: str  # where the fields came from: a file path or "HF repo <id>"
    dtype: str
    kinds: tuple[LayerKind, ...]
    unsupported: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)
    # Where the config came from, for run.json: "file PATH sha256 H", "hf REPO revision R sha256 H"
    # or "built-in ID (REPO) sha256 H" (H: the first 16 hex digits of the config's sha256).
    origin: str = ""


@dataclass(frozen=True)
class RankShape:
    """One attention layer kind as one tensor-parallel rank runs it."""

    model: str
    tp: int
    kind: LayerKind
    num_heads: int
    num_kv_heads: int
    multi_kind: bool

    @property
    def name(self) -> str:
        """'gemma-2-9b/tp2/local'; a model whose layers are all alike has no kind suffix."""
        return f"{self.model}/tp{self.tp}" + (f"/{self.kind.name}" if self.multi_kind else "")


@overload
def _int(cfg: dict[str, Any], key: str, where: str, required: Literal[True] = ...) -> int: ...
@overload
def _int(cfg: dict[str, Any], key: str, where: str, required: bool) -> int | None: ...
def _int(cfg: dict[str, Any], key: str, where: str, required: bool = True) -> int | None:
    v = cfg.get(key)
    if v is None:
        if required:
            raise ModelError(f"{where}: field {key}: missing (needed for the attention shape)")
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ModelError(f"{where}: field {key}: must be a positive integer, got {str(repr(v))[:40]}")
    return v


def _dtype(cfg: dict[str, Any], where: str) -> tuple[str, list[str]]:
    raw = cfg.get("torch_dtype", cfg.get("dtype"))
    if raw is None:
        return "bfloat16", ["torch_dtype missing: bfloat16 assumed"]
    if raw in ("bfloat16", "float16"):
        return raw, []
    if raw == "float32":
        # vLLM's dtype "auto" serves a float32 checkpoint in 16 bits (bfloat16 for Gemma); the
        # attention kernels compared here take 16-bit inputs only.
        return "bfloat16", ["torch_dtype float32: attention runs in bfloat16, as a server would"]
    raise ModelError(f"{where}: field torch_dtype: {str(raw)[:40]!r} is not float16, bfloat16 or float32")


def _layer_pattern(cfg: dict[str, Any], top: dict[str, Any], n_layers: int | None, where: str) -> list[bool] | None:
    """Per layer: does it use the sliding window? None when every layer does (or none)."""
    types = cfg.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or not types or not all(isinstance(t, str) for t in types):
            raise ModelError(f"{where}: field layer_types: must be a non-empty list of strings")
        bad = sorted({t for t in types if t not in ("sliding_attention", "full_attention")})
        if bad:
            raise ModelError(f"{where}: field layer_types: unknown layer type(s) {bad[:3]}"
                             " (expected sliding_attention / full_attention)")
        return [t == "sliding_attention" for t in types]
    pattern = cfg.get("sliding_window_pattern")
    if pattern is not None:
        if isinstance(pattern, bool) or not isinstance(pattern, int) or pattern < 1:
            raise ModelError(f"{where}: field sliding_window_pattern: must be a positive integer, got {pattern!r}")
        n = n_layers or pattern
        return [(i + 1) % pattern != 0 for i in range(n)]
    if alternates(model_type_of(cfg, top)):
        n = n_layers or 2
        return [i % 2 == 0 for i in range(n)]
    if "use_sliding_window" in cfg:
        if not cfg["use_sliding_window"]:
            return [False] * (n_layers or 1)
        mwl = cfg.get("max_window_layers")
        if mwl is not None and n_layers:
            # Qwen2's rule: layers below max_window_layers use full attention.
            return [i >= mwl for i in range(n_layers)]
    return None


def parse_config(data: Any, model_id: str, source: str) -> ModelAttention:
    """The attention layer kinds of one parsed config.json."""
    where = source
    if not isinstance(data, dict):
        raise ModelError(f"{where}: a config.json is a JSON object")
    top = data
    text = data.get("text_config")
    cfg: dict[str, Any] = text if isinstance(text, dict) else data
    model_type = model_type_of(cfg, top)
    cfg, notes = with_defaults(cfg, model_type)
    if is_mla(cfg):  # multi-head latent attention: harness/spec/models/mla.py
        heads, dims = mla_dims(cfg, where, ModelError)
        dtype, dtype_notes = _dtype({**top, **cfg} if "torch_dtype" not in cfg else cfg, where)
        n_layers = _int(cfg, "num_hidden_layers", where, required=False)
        # One latent vector per token shared by all heads: one "KV head", replicated under TP.
        latent = LayerKind("all", heads, 1, dims.latent_dim, layers=n_layers or 0, mla=dims)
        return ModelAttention(model_id, source, dtype, (latent,), notes=tuple(notes + dtype_notes + mla_notes(cfg)))
    heads = _int(cfg, "num_attention_heads", where)
    kv = _int(cfg, "num_key_value_heads", where, required=False) or heads
    head = _int(cfg, "head_dim", where, required=False)
    if head is None:
        hidden = _int(cfg, "hidden_size", where)
        if hidden % heads:
            raise ModelError(f"{where}: field head_dim: missing, and hidden_size ({hidden}) is not a multiple of"
                             f" num_attention_heads ({heads})")
        head = hidden // heads
    if heads % kv:
        raise ModelError(f"{where}: field num_key_value_heads: {kv} does not divide num_attention_heads ({heads})")
    dtype, dtype_notes = _dtype({**top, **cfg} if "torch_dtype" not in cfg else cfg, where)
    notes += dtype_notes
    window = cfg.get("sliding_window")
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
        raise ModelError(f"{where}: field sliding_window: must be a positive integer or null, got {window!r}")
    softcap = cfg.get("attn_logit_softcapping")
    if softcap is not None and (isinstance(softcap, bool) or not isinstance(softcap, (int, float))
                                or not math.isfinite(softcap) or softcap < 0):
        raise ModelError(f"{where}: field attn_logit_softcapping: must be a non-negative number or null")
    softcap = float(softcap or 0.0)
    scale = None
    qpas = cfg.get("query_pre_attn_scalar")
    if isinstance(qpas, (int, float)) and not isinstance(qpas, bool) and qpas > 0 and qpas != head:
        scale = float(qpas) ** -0.5  # Gemma scales queries by this, not by the head size
    sinks = model_type in _SINK_MODEL_TYPES
    n_layers = _int(cfg, "num_hidden_layers", where, required=False)
    pattern = _layer_pattern(cfg, top, n_layers, where) if window is not None else None
    if pattern is not None and n_layers is not None and len(pattern) != n_layers:
        raise ModelError(f"{where}: field layer_types: {len(pattern)} entries for {n_layers} num_hidden_layers")

    def kind(name: str, w: int | None, count: int) -> LayerKind:
        return LayerKind(name, heads, kv, head, w, softcap, sinks, scale, count)

    if window is None or pattern is None or all(pattern):
        kinds: tuple[LayerKind, ...] = (kind("all", window, n_layers or 0),)
    elif not any(pattern):
        kinds = (kind("all", None, n_layers or 0),)
        notes.append(f"sliding_window {window} is set but no layer uses it")
    else:
        kinds = (kind("local", window, sum(pattern)), kind("global", None, len(pattern) - sum(pattern)))
    return ModelAttention(model_id, source, dtype, kinds, notes=tuple(notes))


def read_config(path: str | Path, model_id: str | None = None) -> ModelAttention:
    """A config.json on disk (or a folder holding one) -> its attention geometry."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    if not p.is_file():
        raise ModelError(f"{path}: no such config.json")
    try:
        if p.stat().st_size > MAX_CONFIG_BYTES:
            raise ModelError(f"{p}: larger than {MAX_CONFIG_BYTES:,} bytes; not a config.json")
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelError(f"{p}: cannot read as JSON: {e}") from None
    name = model_id or (p.parent.name if p.name == "config.json" else p.stem)
    digest = hashlib.sha256(p.read_bytes()).hexdigest()[:16]
    return dataclasses.replace(parse_config(data, name, str(p)), origin=f"file {p.resolve()} sha256 {digest}")


def tp_slice(model: ModelAttention, tp: int) -> list[RankShape]:
    """Each layer kind as one rank of a ``tp``-way tensor-parallel model runs it: query heads
    split evenly; KV heads split too, or, when there are fewer KV heads than ranks, each rank
    holds one replicated KV head (vLLM's QKVParallelLinear)."""
    if model.unsupported:
        raise ModelError(f"model {model.id}: unsupported: {model.unsupported}")
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise ModelError(f"model {model.id}: field tp: must be a positive integer, got {tp!r}")
    out = []
    for k in model.kinds:
        if k.num_heads % tp:
            raise ModelError(f"model {model.id}: field tp: {tp} does not divide its {k.num_heads} query heads")
        if k.num_kv_heads >= tp and k.num_kv_heads % tp:
            raise ModelError(f"model {model.id}: field tp: {tp} does not divide its {k.num_kv_heads} KV heads")
        if k.num_kv_heads < tp and tp % k.num_kv_heads:
            raise ModelError(f"model {model.id}: field tp: {tp} is not a multiple of its {k.num_kv_heads} KV heads"
                             " (needed to replicate them)")
        out.append(RankShape(model.id, tp, k, k.num_heads // tp, max(1, k.num_kv_heads // tp), len(model.kinds) > 1))
    return out
