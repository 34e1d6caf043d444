"""vLLM's attention-benchmark study files (``benchmarks/attention_benchmarks/configs/*.yaml``),
run unchanged: ``batch_specs``, ``model`` (num_q_heads, num_kv_heads, head_dim, block_size),
``model_parameter_sweep`` over those, and ``backends`` become a suite; every other field is
listed as ignored, with the reason, for the CLI to print."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from harness.spec.errors import SpecError

# The study's model fields that have a counterpart in a case.
_MODEL_FIELDS = {"num_q_heads": "num_heads", "num_kv_heads": "num_kv_heads", "head_dim": "head_size",
                 "block_size": "block_size"}
# An MLA study's latent geometry (vLLM's mla_*.yaml): these make the cases `attention: mla`.
_MLA_FIELDS = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
_IGNORED = {
    "num_layers": "one attention layer is timed per cell; a layer count scales every backend alike",
    "device": "the device comes from --device / --devices",
    "repeats": "timing stops on noise (--target-noise, --min-samples, --max-samples)",
    "warmup_iters": "warm-up is the harness's own (docs/measurement.md)",
    "profile_memory": "memory is recorded per cell by the harness",
    "benchmark": "timing stops on noise (--target-noise, --min-samples, --max-samples)",
    "output": "results go to --out (results.jsonl, report.html)",
    "parameter_sweep": "a backend knob sweep; the harness sweeps backend variants (--variant BACKEND.AXIS=V)",
    "batch_sizes": "batch sizes come from batch_specs here",
}


def is_study(data: Any) -> bool:
    """vLLM's study format: ``batch_specs`` and none of a suite's required keys."""
    return isinstance(data, dict) and "batch_specs" in data and "suite" not in data and "cases" not in data


def _suite_name(source: str) -> str:
    stem = Path(source).stem if not source.startswith("<") else "vllm-study"
    name = re.sub(r"[^A-Za-z0-9._-]", "-", stem).lstrip("._-")[:128]
    return name or "vllm-study"


def _backends(names: Any, source: str, notes: list[str]) -> list[str] | None:
    from harness.analysis.engines import TABLE_ONLY

    if names is None:
        return None
    if isinstance(names, str):
        names = [names]
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise SpecError(f"{source}: field backends: a list of vLLM backend names")
    mapped: list[str] = []
    missing = []
    for n in names:
        ours = TABLE_ONLY.from_vllm_name(n)  # the committed table: no runs read here
        if ours is None:
            missing.append(n)
        elif ours not in mapped:
            mapped.append(ours)
    if missing:
        notes.append(f"backends {', '.join(missing)}: no counterpart here (MLA, Triton and other vLLM-only kernels)")
    if not mapped:
        raise SpecError(f"{source}: field backends: none of {', '.join(names)} has a counterpart here"
                        " (the harness runs FLASH_ATTN and FLASHINFER's MHA/GQA kernels; MLA studies do not apply)")
    return mapped


def _geometries(sweep: Any, source: str, notes: list[str]) -> list[dict[str, Any]] | None:
    """A sweep whose values are whole geometries (dicts of num_q_heads, num_kv_heads, head_dim,
    num_layers, block_size: vLLM's production-mix studies), or None for a one-field sweep."""
    if not isinstance(sweep, dict) or not isinstance(sweep.get("values"), list):
        return None
    values = sweep["values"]
    if not values or not all(isinstance(v, dict) for v in values):
        if any(isinstance(v, dict) for v in values):
            raise SpecError(f"{source}: field model_parameter_sweep.values: all geometries (mappings) or all values")
        return None
    out = []
    for i, g in enumerate(values):
        unknown = sorted(str(k) for k in g if k not in _MODEL_FIELDS and k != "num_layers")
        if unknown:
            raise SpecError(f"{source}: field model_parameter_sweep.values[{i}].{unknown[0]}: no counterpart here "
                            f"(a geometry sets {', '.join(_MODEL_FIELDS)}, num_layers)")
        out.append(g)
    if any("num_layers" in g for g in values):
        notes.append(f"model_parameter_sweep.values[].num_layers: {_IGNORED['num_layers']}")
    return out


def _geometry_cases(geometries: list[dict[str, Any]], specs: list[str], label_format: str,
                    defaults: dict[str, Any]) -> list[dict[str, Any]]:
    """One case per geometry and batch spec, named by the study's label_format without its
    {backend} (the harness names backends itself), else by the geometry's fields."""
    cases = []
    for g in geometries:
        shape = {_MODEL_FIELDS[k]: v for k, v in g.items() if k in _MODEL_FIELDS}
        shape.setdefault("num_kv_heads", shape.get("num_heads", defaults.get("num_heads")))
        try:
            label = label_format.format(backend="", **g).strip("_-") if label_format else ""
        except (KeyError, IndexError, ValueError):
            label = ""
        if not label:
            merged = {**defaults, **shape}
            label = f"d{merged.get('head_size')}_h{merged.get('num_heads')}_kv{merged.get('num_kv_heads')}"
        label = re.sub(r"[^A-Za-z0-9._-]", "-", label)
        for spec in specs:
            cases.append({"name": label, "batch": spec, **shape})
    return cases


def _mla_defaults(model: dict[str, Any], source: str, defaults: dict[str, Any], notes: list[str]) -> None:
    """An MLA study's model fields -> the case's MLA fields (docs/mla.md). The KV heads and head
    size follow from the form (absorbed: 1 latent head of kv_lora_rank + qk_rope_head_dim;
    expanded: 192/128), checked against the study's; the yarn mscale, which a study does not
    give, from the built-in model its ``name`` names, else 1.0 with a note."""
    for key in _MLA_FIELDS:
        v = model.get(key)
        if v is None:
            notes.append(f"model.{key} absent: the MLA default (DeepSeek-V3's), docs/mla.md")
        else:
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise SpecError(f"{source}: field model.{key}: a positive integer, got {str(repr(v))[:40]}")
            defaults[key] = v
    defaults["attention"] = "mla"
    latent = defaults.get("kv_lora_rank", 512) + defaults.get("qk_rope_head_dim", 64)
    if model.get("head_dim") not in (None, latent):
        raise SpecError(f"{source}: field model.head_dim: {model['head_dim']!r} is not kv_lora_rank + qk_rope_head_dim"
                        f" ({latent}), the absorbed MLA head")
    if model.get("num_kv_heads") not in (None, 1):
        raise SpecError(f"{source}: field model.num_kv_heads: MLA has one latent KV head, got {model['num_kv_heads']!r}")
    notes.append(f"model.num_kv_heads, model.head_dim: taken from the MLA form (absorbed: 1 latent head of {latent}; "
                 "expanded prefill: qk_nope + qk_rope / v_head_dim per head)")
    name = str(model.get("name") or "")
    try:
        from harness.spec.models import builtin

        kind = builtin(name).kinds[0] if name else None
    except ValueError:
        kind = None
    if kind is not None and kind.mla is not None:
        defaults["mla_mscale"] = kind.mla.mscale
        notes.append(f"model.name {name}: the yarn mscale {kind.mla.mscale:.4g} of the built-in {name} (the study "
                     "gives no rope scaling)")
    else:
        notes.append(f"model.name {name or '(none)'}: no built-in MLA model of that name; mscale 1.0 (softmax scale "
                     "(qk_nope + qk_rope) ** -0.5, no yarn factor)")


def from_study(data: dict[str, Any], source: str) -> tuple[dict[str, Any], list[str]]:
    """A study's parsed YAML -> (suite data, notes on what was ignored and why)."""
    notes: list[str] = []
    specs = data["batch_specs"]
    if not isinstance(specs, list) or not specs or not all(isinstance(s, str) for s in specs):
        raise SpecError(f"{source}: field batch_specs: a non-empty list of batch-spec strings such as '32q1s1k'")
    defaults: dict[str, Any] = {}
    model = data.get("model") or {}
    if not isinstance(model, dict):
        raise SpecError(f"{source}: field model: a mapping (num_q_heads, num_kv_heads, head_dim, block_size)")
    names = data.get("backends", data.get("backend"))
    # MLA by its geometry fields, or by its backends (an MLA backend on a plain head-576 layer
    # would silently time an MHA cell): the absent fields then take DeepSeek-V3's values, noted.
    mla = any(k in model for k in _MLA_FIELDS) or any(
        "MLA" in n.upper() for n in ([names] if isinstance(names, str) else names if isinstance(names, list) else [])
        if isinstance(n, str))
    if mla:
        _mla_defaults(model, source, defaults, notes)
    for key, value in model.items():
        if mla and key in (*_MLA_FIELDS, "num_kv_heads", "head_dim"):
            continue  # read by _mla_defaults
        if key in _MODEL_FIELDS:
            defaults[_MODEL_FIELDS[key]] = value
        else:
            notes.append(f"model.{key}: {_IGNORED.get(key, 'no counterpart in a case')}")
    sweep = data.get("model_parameter_sweep")
    geometries = _geometries(sweep, source, notes)
    for need in ("num_q_heads",) if mla else ("num_q_heads", "head_dim"):
        if geometries is not None:
            missing = [i for i, g in enumerate(geometries) if need not in g and need not in model]
            if missing:
                raise SpecError(f"{source}: field model_parameter_sweep.values[{missing[0]}].{need}: missing "
                                "(the layer's shape; neither the geometry nor model gives it)")
        elif need not in model and not (isinstance(sweep, dict) and sweep.get("param_name") == need):
            raise SpecError(f"{source}: field model.{need}: missing (the layer's shape)")
    if geometries is None and not mla:
        defaults.setdefault("num_kv_heads", defaults.get("num_heads"))
    if geometries is not None:
        assert isinstance(sweep, dict)  # _geometries found a list of geometries in it
        cases = _geometry_cases(geometries, specs, str(sweep.get("label_format") or ""), defaults)
    elif sweep is not None:
        if not isinstance(sweep, dict) or "param_name" not in sweep or not isinstance(sweep.get("values"), list):
            raise SpecError(f"{source}: field model_parameter_sweep: needs param_name and a list of values")
        param = sweep["param_name"]
        if param not in _MODEL_FIELDS:
            raise SpecError(f"{source}: field model_parameter_sweep.param_name: {str(param)[:40]!r} has no counterpart"
                            f" here (one of {', '.join(_MODEL_FIELDS)})")
        defaults[_MODEL_FIELDS[param]] = sweep["values"]
        if "label_format" in sweep:
            notes.append("model_parameter_sweep.label_format: cases are named by the harness (the spec, then the"
                         " swept field and value)")
    if geometries is None:
        cases = [{"batch": s} for s in specs]
    backends = _backends(data.get("backends", data.get("backend")), source, notes)
    handled = {"batch_specs", "model", "model_parameter_sweep", "backends", "backend", "description"}
    for key in data:
        if key not in handled:
            notes.append(f"{key}: {_IGNORED.get(str(key), 'not part of the study format as read here')}")
    suite: dict[str, Any] = {
        "suite": _suite_name(source),
        "description": str(data.get("description") or f"vLLM attention-benchmark study {source}"),
        "defaults": defaults,
        "cases": cases,
    }
    if backends:
        suite["backends"] = backends
    return suite, notes
