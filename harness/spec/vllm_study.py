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
    mla = [n for n in names if "MLA" in n.upper()]
    if mla:
        # vLLM's MLA studies describe the latent geometry in their own fields; read as a plain
        # layer they would silently time an MHA cell of head 576: refuse, and say what runs MLA
        raise SpecError(f"{source}: field backends: {', '.join(mla)} are MLA backends; an MLA study is not read from "
                        "vLLM's format: write a suite with `attention: mla` or `model: deepseek-v3` (docs/mla.md)")
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
    for key, value in model.items():
        if key in _MODEL_FIELDS:
            defaults[_MODEL_FIELDS[key]] = value
        else:
            notes.append(f"model.{key}: {_IGNORED.get(key, 'no counterpart in a case')}")
    sweep = data.get("model_parameter_sweep")
    geometries = _geometries(sweep, source, notes)
    for need in ("num_q_heads", "head_dim"):
        if geometries is not None:
            missing = [i for i, g in enumerate(geometries) if need not in g and need not in model]
            if missing:
                raise SpecError(f"{source}: field model_parameter_sweep.values[{missing[0]}].{need}: missing "
                                "(the layer's shape; neither the geometry nor model gives it)")
        elif need not in model and not (isinstance(sweep, dict) and sweep.get("param_name") == need):
            raise SpecError(f"{source}: field model.{need}: missing (the layer's shape)")
    if geometries is None:
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
