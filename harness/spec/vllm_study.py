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
    from harness.analysis.engines import from_vllm_name

    if names is None:
        return None
    if isinstance(names, str):
        names = [names]
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise SpecError(f"{source}: field backends: a list of vLLM backend names")
    mapped: list[str] = []
    missing = []
    for n in names:
        ours = from_vllm_name(n)
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
    for need in ("num_q_heads", "head_dim"):
        if need not in model and not (isinstance(data.get("model_parameter_sweep"), dict)
                                      and data["model_parameter_sweep"].get("param_name") == need):
            raise SpecError(f"{source}: field model.{need}: missing (the layer's shape)")
    defaults.setdefault("num_kv_heads", defaults.get("num_heads"))
    sweep = data.get("model_parameter_sweep")
    if sweep is not None:
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
    backends = _backends(data.get("backends", data.get("backend")), source, notes)
    handled = {"batch_specs", "model", "model_parameter_sweep", "backends", "backend", "description"}
    for key in data:
        if key not in handled:
            notes.append(f"{key}: {_IGNORED.get(str(key), 'not part of the study format as read here')}")
    suite: dict[str, Any] = {
        "suite": _suite_name(source),
        "description": str(data.get("description") or f"vLLM attention-benchmark study {source}"),
        "defaults": defaults,
        "cases": [{"batch": s} for s in specs],
    }
    if backends:
        suite["backends"] = backends
    return suite, notes
