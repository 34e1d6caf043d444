"""A suite case's ``model:`` (and ``tp:``) -> one raw case per model, TP degree and kind of
layer, named after it (``gemma-2-9b/tp2/local``). The case's own fields (batch, block size,
dtype, ...) are kept; the attention geometry comes from the model."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

from harness.spec.models.catalog import resolve
from harness.spec.models.config import ModelError, tp_slice

# The fields a model sets; a case naming both a model and one of these is ambiguous.
GEOMETRY_KEYS = ("num_heads", "num_kv_heads", "head_size", "sliding_window", "softcap", "sinks", "scale",
                 "attention", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "mla_mscale")


def _as_list(v: Any, field: str) -> list[Any]:
    items = v if isinstance(v, list) else [v]
    if not items:
        raise ModelError(f"field {field}: an empty list names nothing")
    return items


def _tps(v: Any) -> list[int]:
    if isinstance(v, str):  # "1,2" as on the command line
        try:
            v = [int(x) for x in v.split(",") if x.strip()]
        except ValueError:
            raise ModelError(f"field tp: {v[:40]!r} is not a list of integers") from None
    out = _as_list(v, "tp")
    for t in out:
        if isinstance(t, bool) or not isinstance(t, int) or t < 1:
            raise ModelError(f"field tp: must be a positive integer (or a list of them), got {str(repr(t))[:40]}")
    return out


def model_cases(raw: dict[str, Any], base_dir: Path | None = None) -> list[dict[str, Any]]:
    """``raw`` holds ``model`` (an ID, a config.json path, or a list of them) and maybe ``tp``."""
    raw = dict(raw)
    models = _as_list(raw.pop("model"), "model")
    tps = _tps(raw.pop("tp", 1))
    clash = [k for k in GEOMETRY_KEYS if k in raw]
    if clash:
        raise ModelError(f"field {clash[0]}: the model sets it; give either model or {', '.join(clash)}")
    prefix = raw.pop("name", None)
    out = []
    for m in models:
        model = resolve(m, base_dir)
        for tp in tps:
            for shape in tp_slice(model, tp):
                k = shape.kind
                case = copy.deepcopy(raw)
                if k.mla is not None:  # MLA: the form (from the batch unless given) sets KV heads and head size
                    case.update(num_heads=shape.num_heads, attention="mla", kv_lora_rank=k.mla.kv_lora_rank,
                                qk_rope_head_dim=k.mla.qk_rope_head_dim, qk_nope_head_dim=k.mla.qk_nope_head_dim,
                                v_head_dim=k.mla.v_head_dim, mla_mscale=k.mla.mscale)
                else:
                    case.update(num_heads=shape.num_heads, num_kv_heads=shape.num_kv_heads, head_size=k.head_size,
                                sliding_window=k.sliding_window, softcap=k.softcap, sinks=k.sinks, scale=k.scale)
                case.setdefault("dtype", model.dtype)
                case["name"] = f"{prefix}/{shape.name}" if prefix else shape.name
                case["group"] = case["name"]
                # layer_count: how many of the model's layers are of this kind (recommend weights
                # a per-model setting by it); model_layers: all of them.
                case["params"] = {"model": shape.name, "model_id": model.id, "tp": tp, "layers": k.name,
                                  "layer_count": k.layers, "model_layers": sum(x.layers for x in model.kinds),
                                  "config_source": model.origin or model.source,
                                  # one string: a list in a raw case would be swept
                                  **({"config_notes": "; ".join(model.notes)} if model.notes else {})}
                tags = list(case.get("tags") or [])
                case["tags"] = tags + [f"model={model.id}", f"tp={tp}"] + ([f"layers={k.name}"] if shape.multi_kind else [])
                out.append(case)
    return out


def model_origins(cases: list[Any]) -> dict[str, str]:
    """model ID -> where its config came from (``config_source``), for run.json's ``models``."""
    out: dict[str, str] = {}
    for c in cases:
        p = c.params or {}
        if p.get("model_id") and p.get("config_source"):
            out.setdefault(str(p["model_id"]), str(p["config_source"]))
    return out


def _mla_scale_text(case: Any) -> str:
    """An MLA model's real softmax scale: 192 ** -0.5 times the yarn mscale squared."""
    d = case.mla_dims
    yarn = f" x mscale {d.mscale:.4g}^2" if d.mscale != 1.0 else ""
    return f"{d.softmax_scale:.4f} (1/sqrt({d.qk_head_dim}){yarn})"


def _scale_text(scale: float | None, head_size: int) -> str:
    """'1/16' for 1/sqrt(256); '1/sqrt(168) = 0.0772' otherwise."""
    inv_sq = round((scale ** -2) if scale else head_size, 6)
    root = math.isqrt(round(inv_sq)) if float(inv_sq).is_integer() else None
    if root is not None and root * root == inv_sq:
        return f"1/{root}"
    return f"1/sqrt({inv_sq:g}) = {(scale or head_size ** -0.5):.4g}"


def model_summary(cases: list[Any]) -> list[str]:
    """One line per model and TP degree of a suite's cases made from ``model:``: head size,
    softmax scale, window and how many layers of each kind (what ``harness validate`` prints)."""
    by_model: dict[tuple[str, int], dict[str, Any]] = {}
    for c in cases:
        p = c.params or {}
        if "model_id" not in p or "layer_count" not in p:
            continue
        by_model.setdefault((p["model_id"], p["tp"]), {}).setdefault(p["layers"], c)
    out = []
    seen: set[tuple[str, str]] = set()
    for (mid, tp), kinds in by_model.items():
        first = next(iter(kinds.values()))
        split = " + ".join(f"{c.params['layer_count']} {name}" for name, c in kinds.items()) if len(kinds) > 1 else (
            f"all {first.params['layer_count']}")
        windows = sorted({c.sliding_window for c in kinds.values() if c.sliding_window})
        extra = "".join([f", window {windows[0]}" if windows else "", f", softcap {first.softcap:g}" if first.softcap else "",
                         ", sinks" if first.sinks else ""])
        if first.attention == "mla":
            d = first.mla_dims
            head = (f"MLA latent {d.latent_dim} ({d.kv_lora_rank}+{d.qk_rope_head_dim}, one per token for all heads), "
                    f"q/k {d.qk_head_dim} v {d.v_head_dim} expanded")
            out.append(f"model {mid} tp{tp}: heads {first.num_heads} per rank, {head}, "
                       f"scale {_mla_scale_text(first)}; layers: {split}")
        else:
            out.append(f"model {mid} tp{tp}: heads {first.num_heads}/{first.num_kv_heads} per rank, head {first.head_size}, "
                       f"scale {_scale_text(first.scale, first.head_size)}{extra}; layers: {split}")
        src = first.params.get("config_source")
        notes = first.params.get("config_notes")
        if src and (mid, "src") not in seen:
            seen.add((mid, "src"))
            out.append(f"  config: {src}" + (f"; assumed: {notes}" if notes else ""))
    return out


def with_model(raw: dict[str, Any], model: str, tp: str | None) -> dict[str, Any]:
    """A suite case with the command line's ``--model`` / ``--tp`` in place of its geometry."""
    raw = {k: v for k, v in raw.items() if k not in GEOMETRY_KEYS}
    raw["model"] = [m for m in model.split(",") if m.strip()] if "," in model else model
    if tp is not None:
        raw["tp"] = tp
    return raw
