"""The two shorthands a suite case may use before the sweep expansion: ``model:`` (with ``tp:``),
which fills in the attention geometry from a config.json (harness/spec/models), and a ``batch:``
written in vLLM's batch-spec grammar (harness/spec/batch_spec.py), a string or a list of
strings (one case per spec, named by it). Errors name the file, the case and the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.spec.batch_spec import BatchSpecError, parse_batch_spec
from harness.spec.errors import SpecError

SHORTHAND_KEYS = {"model", "tp"}


def _base_dir(source: str) -> Path | None:
    return None if source.startswith("<") else Path(source).parent


def _is_spec(batch: Any) -> bool:
    return isinstance(batch, str) or (isinstance(batch, list) and bool(batch) and all(isinstance(b, str) for b in batch))


def _spec_cases(case: dict[str, Any], source: str, label: str) -> list[dict[str, Any]]:
    batch = case.get("batch")
    if isinstance(batch, str):
        specs = [batch]
    elif isinstance(batch, list) and batch and all(isinstance(b, str) for b in batch):
        specs = batch
    else:
        if isinstance(batch, list) and any(isinstance(b, str) for b in batch):
            raise SpecError(f"{source}: case '{label}': field batch: mixes batch-spec strings and request groups;"
                            " give one or the other")
        return [case]
    out = []
    for i, spec in enumerate(specs):
        try:
            groups = parse_batch_spec(spec)
        except BatchSpecError as e:
            where = "batch" if isinstance(batch, str) else f"batch[{i}]"
            raise SpecError(f"{source}: case '{label}': field {where}: {e}") from None
        one = {**case, "batch": groups}
        name = case.get("name")
        one["name"] = f"{name}/{spec.strip()}" if name else spec.strip()
        one["group"] = case.get("group") or name or spec.strip()
        one["params"] = {**case.get("params", {}), "batch_spec": spec.strip()}
        out.append(one)
    return out


def expand_shorthand(case: dict[str, Any], source: str, label: str, named: bool) -> list[dict[str, Any]]:
    """``case`` (defaults merged) -> raw cases without ``model``/``tp`` and with request-group
    batches. ``named``: the suite gave the case a name (else a model or a spec names it)."""
    from harness.spec.models.cases import model_cases
    from harness.spec.models.config import ModelError

    cases = [case]
    if "model" in case:
        if not named:
            case = {k: v for k, v in case.items() if k != "name"}
        try:
            cases = model_cases(case, _base_dir(source))
        except ModelError as e:
            raise SpecError(f"{source}: case '{label}': {e}") from None
    elif "tp" in case:
        raise SpecError(f"{source}: case '{label}': field tp: needs model (tp slices a model's heads)")
    elif not named and _is_spec(case.get("batch")):
        cases = [{k: v for k, v in case.items() if k != "name"}]
    return [one for c in cases for one in _spec_cases(c, source, label)]
