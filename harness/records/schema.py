"""The JSON Schemas of the file formats (``harness schema row|suite|run``); their versions are
harness/records/formats.py's.

The suite schema describes the YAML file as written (before sweeps expand): every field may
also be a non-empty list (a sweep axis), ``sweep: product|zip``; usable as
``# yaml-language-server: $schema=suite.schema.json`` at the top of a suite.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from harness.records.formats import ROW_SCHEMA_VERSION, RUN_SCHEMA_VERSION

def row_schema() -> dict[str, Any]:
    from harness.records.results import ResultRow  # pydantic models: not for `harness --help`

    s = ResultRow.model_json_schema()  # the validation side: the serializer only drops empty keys
    s["$comment"] = f"attn-harness result row (results.jsonl), schema_version {ROW_SCHEMA_VERSION}"
    return s


def run_schema() -> dict[str, Any]:
    from harness.records.results import RunHeader

    s = RunHeader.model_json_schema(mode="serialization")
    s["$comment"] = f"attn-harness run.json, schema_version {RUN_SCHEMA_VERSION}"
    return s


def _type_text(tp: Any, seen: tuple[type, ...]) -> str:
    """A type annotation as text: nested models inlined as their fields, enums and literals as
    their values (what a file holds), other classes by name."""
    import enum
    import types
    import typing

    from pydantic import BaseModel

    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Literal:
        return f"Literal[{', '.join(map(repr, args))}]"
    if origin is typing.Annotated:
        return f"Annotated[{_type_text(args[0], seen)}, {', '.join(map(repr, args[1:]))}]"
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_text(a, seen) for a in args)
    if origin is not None:
        return f"{getattr(origin, '__name__', repr(origin))}[{', '.join(_type_text(a, seen) for a in args)}]"
    if tp is type(None):
        return "None"
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return tp.__name__ if tp in seen else json.dumps(_fields(tp, seen), sort_keys=True)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return f"Enum[{', '.join(repr(m.value) for m in tp)}]"
    return getattr(tp, "__name__", repr(tp))


def _fields(model: type[Any], seen: tuple[type, ...] = ()) -> dict[str, Any]:
    """Each field of a pydantic model: its type as text, default and constraints (no docstrings)."""
    from pydantic_core import PydanticUndefined

    seen = (*seen, model)
    out: dict[str, Any] = {"_extra": repr(model.model_config.get("extra"))}  # no field name starts with _
    for name, f in model.model_fields.items():
        if f.default_factory is not None:
            default = f"factory {getattr(f.default_factory, '__name__', repr(f.default_factory))}"
        else:
            default = "required" if f.default is PydanticUndefined else repr(f.default)
        # A serializer's repr holds its function's address: the address changes from run to run.
        meta = [re.sub(r" at 0x[0-9a-f]+", "", repr(m)) for m in f.metadata]
        out[name] = [_type_text(f.annotation, seen), default, meta,
                     f.alias, repr(f.discriminator), f.exclude]
    return out


def fingerprint(model: type[Any]) -> str:
    """A short hash of a record model's fields (name, type as text, default, constraints; nested
    models recursively), its words left out: a docstring may change freely, a field may not without
    a schema_version bump (harness/records/migrate.py; tests/records/schema_fingerprints.json keeps
    one per version). Taken from the fields, not from the JSON Schema, which pydantic renders
    differently from one release to the next (2.8 and 2.13 do)."""
    import hashlib

    return hashlib.sha256(json.dumps(_fields(model), sort_keys=True).encode()).hexdigest()[:16]


_LIST_KEYS = ("batch", "values", "tags", "sizes")  # lists by type, not sweep axes (harness/spec/expand.py)


def _sweepable(obj: dict[str, Any]) -> None:
    """Each property of an object schema may also be a non-empty list of its values (a sweep)."""
    for name, prop in list(obj.get("properties", {}).items()):
        if name in _LIST_KEYS:
            continue
        obj["properties"][name] = {"anyOf": [prop, {"type": "array", "minItems": 1, "items": prop}],
                                   **({"description": prop["description"]} if "description" in prop else {})}


def _int_shorthand(node: Any) -> Any:
    """A length distribution may be written as a plain integer (``context_len: 128`` = fixed)."""
    if isinstance(node, dict):
        node = {k: _int_shorthand(v) for k, v in node.items()}
        if node.get("discriminator", {}).get("propertyName") == "dist":
            return {"anyOf": [node, {"type": "integer", "minimum": 0}]}
    elif isinstance(node, list):
        return [_int_shorthand(v) for v in node]
    return node


def suite_schema() -> dict[str, Any]:
    from harness.spec.suite_model import CaseSpec, Suite

    case = _int_shorthand(CaseSpec.model_json_schema())
    defs = case.pop("$defs", {})
    for d in defs.values():
        if d.get("type") == "object":
            _sweepable(d)
    for k in ("group", "params"):  # filled in by the expansion, not written in a file
        case.get("properties", {}).pop(k, None)
    # Any field may come from the suite's defaults: a case itself needs only its name.
    case["required"] = [k for k in case.get("required", []) if k == "name"]
    _sweepable(case)
    props = case.setdefault("properties", {})
    props["sweep"] = {"enum": ["product", "zip"], "default": "product",
                      "description": "how list-valued fields combine: cartesian product or zipped"}
    spec = {"type": "string", "description": "vLLM's batch grammar, e.g. 2q1k_32q1s1k (docs/models.md)"}
    if "batch" in props:  # request groups, a trace source (docs/traces.md), or vLLM batch strings
        props["batch"] = {"anyOf": [props["batch"], {"type": "object"}, spec,
                                    {"type": "array", "minItems": 1, "items": spec}]}
    # The model shorthand (harness/spec/shorthand.py): the geometry from a config.json, sliced by
    # TP; such a case is named after its model (so it needs no name).
    one_model = {"type": "string", "description": "a built-in model id or a config.json path"}
    props["model"] = {"anyOf": [one_model, {"type": "array", "minItems": 1, "items": one_model}]}
    one_tp = {"type": "integer", "minimum": 1}
    props["tp"] = {"anyOf": [one_tp, {"type": "array", "minItems": 1, "items": one_tp}]}
    case["required"] = []  # a name, a model or a batch string names the case (checked on load)
    defaults = copy.deepcopy(case)
    defaults.pop("required", None)
    defaults.pop("title", None)
    top = Suite.model_json_schema()["properties"]
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$comment": "attn-harness suite file (YAML), as written: list-valued fields are sweeps",
        "title": "attn-harness suite",
        "type": "object",
        "additionalProperties": False,
        "required": ["suite", "cases"],
        "properties": {
            "suite": top["suite"],
            "description": top.get("description", {"type": "string"}),
            "backends": top["backends"],
            "backends_for": top["backends_for"],
            "variants": top["variants"],
            "graph_modes": top["graph_modes"],
            "defaults": defaults,
            "cases": {"type": "array", "minItems": 1, "items": case},
        },
        "$defs": defs,
    }


SCHEMAS = {"row": row_schema, "suite": suite_schema, "run": run_schema}
