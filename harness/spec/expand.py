"""Parsed YAML -> a validated ``Suite``: defaults merged into each case, list-valued fields
expanded into named cases (cartesian product, or zip with ``sweep: zip``), each case validated
by the models; every error a ``SpecError`` naming the file, the case and the field."""

from __future__ import annotations

import copy
import itertools
import math
from typing import Any

from pydantic import ValidationError

from harness.spec.errors import SpecError
from harness.spec.limits import MAX_CASES, MAX_YAML_NODES, yaml_size
from harness.spec.suite_model import DIST_TAGS, CaseSpec, Suite
from harness.spec.shorthand import SHORTHAND_KEYS, expand_shorthand

_LIST_KEYS = {"batch", "values", "tags", "sizes"}  # keys whose value is a list by type, not a sweep axis
_EXPANSION_KEYS = {"group", "params"}  # filled in by expand_case
_CASE_KEYS = (set(CaseSpec.model_fields) - _EXPANSION_KEYS) | {"sweep"} | SHORTHAND_KEYS
# The file's top level: the Suite model's fields less those the loader fills in, plus defaults.
_SUITE_KEYS = (set(Suite.model_fields) - {"source", "notes"}) | {"defaults"}


def _check_keys(given: Any, allowed: set[str], where: str, what: str) -> None:
    """Unknown keys of the raw YAML, named with the allowed ones. The models forbid extra
    fields too, but only after sweeps and shorthands are expanded: an unknown list-valued key
    would be swept first and reported per expanded case, so the raw file is checked here."""
    unknown = set(given) - allowed
    if unknown:
        raise SpecError(f"{where}unknown {what} {sorted(map(str, unknown))}; allowed: {sorted(allowed)}")


def _find_axes(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], list[Any]]]:
    axes: list[tuple[tuple[Any, ...], list[Any]]] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(value, list) and key not in _LIST_KEYS:
                if not value:
                    raise SpecError(f"field {_fmt_path(path + (key,))}: an empty list sweeps over nothing")
                axes.append((path + (key,), value))
            elif key == "batch" and isinstance(value, list):
                for i, group in enumerate(value):
                    axes.extend(_find_axes(group, path + (key, i)))
            elif isinstance(value, dict):
                axes.extend(_find_axes(value, path + (key,)))
    return axes


def _set_path(node: Any, path: tuple[Any, ...], value: Any) -> None:
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value


def _fmt_path(path: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in path)


def _param(path: tuple[Any, ...], value: Any, short: bool) -> tuple[str, Any]:
    """A swept value's key and value as the case name shows them (a distribution flattened)."""
    key = str(path[-1]) if short else _fmt_path(path)
    if isinstance(value, dict):
        value = ",".join(f"{k}={v}" for k, v in value.items() if k != "dist") or value.get("dist")
    return key, value


def _label(path: tuple[Any, ...], value: Any, short: bool) -> str:
    key, value = _param(path, value, short)
    return f"{key}={value}"


def expand_case(raw: dict[str, Any]) -> list[dict[str, Any]]:
    """Expand the list-valued fields of one raw case into concrete raw cases."""
    raw = dict(raw)
    mode = raw.pop("sweep", "product")
    if mode not in ("product", "zip"):
        raise SpecError(f"field sweep: must be 'product' or 'zip', not {mode!r}")
    axes = _find_axes(raw)
    raw["group"] = raw.get("group") or raw.get("name", "case")  # a model or batch spec may have set it
    if not axes:
        return [raw]
    leaves = [str(p[-1]) for p, _ in axes]
    short = len(set(leaves)) == len(leaves)
    if mode == "zip":
        lengths = {len(v) for _, v in axes}
        if len(lengths) != 1:
            detail = ", ".join(f"{_fmt_path(p)}={len(v)}" for p, v in axes)
            raise SpecError(f"sweep: zip needs lists of one length; got {detail}")
        combos = list(zip(*(v for _, v in axes)))
    else:
        n = math.prod(len(v) for _, v in axes)
        if n > MAX_CASES or n * yaml_size(raw) > 10 * MAX_YAML_NODES:
            raise SpecError(f"sweep expands to {n:,} cases of {yaml_size(raw):,} YAML nodes each;"
                            f" at most {MAX_CASES:,} cases and {10 * MAX_YAML_NODES:,} nodes per suite")
        combos = list(itertools.product(*(v for _, v in axes)))
    out = []
    for combo in combos:
        case = copy.deepcopy(raw)  # plain data; 50x faster than a YAML round trip
        labels = []
        params: dict[str, Any] = {}
        for (path, _), value in zip(axes, combo):
            _set_path(case, path, value)
            labels.append(_label(path, value, short))
            key, shown = _param(path, value, short)
            params[key] = shown
        case["name"] = f"{raw.get('name', 'case')}[{','.join(labels)}]"
        case["params"] = {**raw.get("params", {}), **params}
        out.append(case)
    return out


_TYPE_TAGS = {"float", "int", "str", "bool", "none", "list", "dict"}


def _is_tag(x: Any) -> bool:
    """A location part that names a union member ("constrained-float", "literal['auto']"), not a field."""
    return isinstance(x, str) and (x in DIST_TAGS or x in _TYPE_TAGS or not x.isidentifier())


def _format_validation_error(err: ValidationError) -> str:
    # One message per field: a union's members each fail (kv_scale: "> 0", "'auto'"); join them
    # with "or" instead of showing pydantic's member names.
    by_loc: dict[str, list[str]] = {}
    got: dict[str, str] = {}
    for e in err.errors():
        loc = ".".join(str(x) for x in e["loc"] if not _is_tag(x))
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"].endswith("_type") or any(_is_tag(x) for x in e["loc"][-1:]):
            if not isinstance(e.get("input"), (dict, list)):
                got[loc] = f", got {str(repr(e.get('input')))[:40]}"  # e.g. `true` for an int: say what was read
        msgs = by_loc.setdefault(loc, [])
        if msg not in msgs:
            msgs.append(msg)
    lines = []
    for loc, msgs in by_loc.items():
        first, rest = msgs[0], [m.removeprefix("Input should be ") for m in msgs[1:]]
        lines.append(f"field {loc or '(case)'}: {' or '.join([first, *rest])}{got.get(loc, '')}")
    return "; ".join(lines)


def _expand_trace(case: dict[str, Any], src: dict[str, Any], source: str, label: str) -> list[dict[str, Any]]:
    """A case whose ``batch`` is a ``trace:`` source -> its sampled steps (harness/spec/trace/source.py)."""
    from pathlib import Path

    from harness.spec.trace.readers import TraceError
    from harness.spec.trace.source import expand_trace_case

    if "trace" not in src:
        raise SpecError(f"{source}: case '{label}': field batch: a mapping must name a trace file"
                        " (batch: {trace: FILE, ...}); otherwise batch is a list of request groups")
    suite_dir = None if source.startswith("<") else Path(source).parent
    try:
        steps = expand_trace_case({**case, "batch": src}, suite_dir)
    except TraceError as e:
        raise SpecError(f"{source}: case '{label}': field batch.trace: {e}") from None
    except ValidationError as e:
        msg = _format_validation_error(e).replace("field ", "field batch.")
        raise SpecError(f"{source}: case '{label}': {msg}") from None
    except (ValueError, OSError) as e:
        field = "block_size" if "block_size" in str(e) else "batch"
        raise SpecError(f"{source}: case '{label}': field {field}: {e}") from None
    for one in steps:
        one["params"] = {**case.get("params", {}), "step": int(one["name"].rsplit("-", 1)[1])}
    return steps


def parse_suite(data: Any, source: str = "<suite>", override: dict[str, Any] | None = None,
                notes: list[str] | None = None) -> Suite:
    """Validate a suite's parsed YAML and expand its sweeps. ``override``: fields the command
    line sets in every case (``--model``/``--tp``, ``--batch-spec``); ``notes``: what a converted
    file (a vLLM study) left out, kept on the suite for the CLI to print."""
    if not isinstance(data, dict):
        raise SpecError(f"{source}: a suite must be a mapping with 'suite' and 'cases' keys")
    _check_keys(data, _SUITE_KEYS, f"{source}: ", "top-level key(s)")
    for key in ("suite", "cases"):
        if key not in data:
            raise SpecError(f"{source}: missing required key '{key}'")
    defaults = data.get("defaults") or {}
    if not isinstance(defaults, dict):
        raise SpecError(f"{source}: 'defaults' must be a mapping")
    _check_keys(defaults, _CASE_KEYS, f"{source}: defaults: ", "field(s)")
    raw_cases = data["cases"]
    if not isinstance(raw_cases, list) or not raw_cases:
        raise SpecError(f"{source}: 'cases' must be a non-empty list")
    cases: list[CaseSpec] = []
    seen: set[str] = set()
    for i, raw in enumerate(raw_cases):
        if not isinstance(raw, dict):
            raise SpecError(f"{source}: cases[{i}] must be a mapping")
        label = raw.get("name", f"cases[{i}]")
        _check_keys(raw, _CASE_KEYS, f"{source}: case '{label}': ", "field(s)")
        merged = {**defaults, **raw}
        if override:
            from harness.spec.models.cases import with_model

            if "model" in override:
                merged = with_model(merged, override["model"], override.get("tp"))
            if "batch" in override:
                merged["batch"] = override["batch"]
        named = "name" in merged
        merged.setdefault("name", f"case{i}")
        name = merged["name"]
        if not isinstance(name, str) or not name.strip():
            # A list here would otherwise be swept like any list field and fail as "field group".
            got = "a list (a name is not swept: give each case its own entry)" if isinstance(name, list) \
                else repr(name)
            raise SpecError(f"{source}: cases[{i}]: field name: must be a non-empty string; got {got}")
        trace_src = merged.pop("batch") if isinstance(merged.get("batch"), dict) else None
        try:
            expanded = [one for short in expand_shorthand(merged, source, label, named) for one in expand_case(short)]
        except SpecError as e:
            msg = str(e)
            raise SpecError(msg if msg.startswith(f"{source}:") else f"{source}: case '{label}': {msg}") from None
        if trace_src is not None:
            expanded = [one for sweep_case in expanded
                        for one in _expand_trace(sweep_case, trace_src, source, label)]
        for one in expanded:
            try:
                case = CaseSpec.model_validate(one)
            except ValidationError as e:
                raise SpecError(f"{source}: case '{one.get('name', label)}': {_format_validation_error(e)}") from None
            if case.name in seen:
                if override and "batch" in override and case in cases:
                    continue  # --batch-spec replaced the batches that told these cases apart
                raise SpecError(f"{source}: duplicate case name '{case.name}'")
            seen.add(case.name)
            cases.append(case)
    try:
        return Suite(
            suite=data["suite"],
            description=data.get("description", "") or "",
            backends=data.get("backends"),
            backends_for=data.get("backends_for") or {},
            variants=data.get("variants") or {},
            clock_regime=data.get("clock_regime"),
            graph_modes=data.get("graph_modes", False),
            cases=cases,
            source=source,
            notes=notes or [],
        )
    except ValidationError as e:
        raise SpecError(f"{source}: {_format_validation_error(e)}") from None
