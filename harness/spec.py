"""Suite YAML -> validated case specs.

A suite is a list of cases; any scalar field of a case may be given as a list, and the lists
of one case expand (cartesian product, or zip with ``sweep: zip``) into named cases. Errors
are raised as ``SpecError`` naming the file, the case and the field.
"""

from __future__ import annotations

import copy
import itertools
import math
import re
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from attn_contract import AttentionConfig

MAX_TOKENS_PER_REQUEST = 1 << 22  # 4M tokens: anything larger is a typo, not a workload
MAX_REQUESTS = 65536
# Input bounds: a suite is hand-written configuration, so anything past these is a mistake or
# hostile input, rejected before it can hang the loader or exhaust memory.
MAX_SUITE_BYTES = 4 << 20
MAX_YAML_NODES = 200_000  # nodes after alias expansion (billion-laughs guard)
MAX_YAML_DEPTH = 64
MAX_CASES = 10_000  # expanded cases in one suite
MAX_KV_TOKENS_PER_CASE = 1 << 28  # upper bound of sum(seq_len) over a case's requests
MAX_SEED = 2**63 - 1
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


class SpecError(Exception):
    """A suite that cannot be run, with a message naming the file and the field."""


class _Strict(BaseModel):
    # strict: YAML says what it means; `true`, `2.5` or `"8"` never become the integer a field wants.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=True)


# ---------------------------------------------------------------- length distributions
class Fixed(_Strict):
    dist: Literal["fixed"] = "fixed"
    value: Annotated[int, Field(ge=0, le=MAX_TOKENS_PER_REQUEST)]


class Uniform(_Strict):
    """Integers drawn uniformly from [low, high], both inclusive."""

    dist: Literal["uniform"]
    low: Annotated[int, Field(ge=0, le=MAX_TOKENS_PER_REQUEST)]
    high: Annotated[int, Field(ge=0, le=MAX_TOKENS_PER_REQUEST)]

    @model_validator(mode="after")
    def _order(self) -> "Uniform":
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) must not exceed high ({self.high})")
        return self


class Normal(_Strict):
    """Normal(mean, std), rounded and clipped to [min, max]."""

    dist: Literal["normal"]
    mean: Annotated[float, Field(ge=0, le=MAX_TOKENS_PER_REQUEST)]
    std: Annotated[float, Field(ge=0, le=MAX_TOKENS_PER_REQUEST)]
    min: Annotated[int, Field(ge=0, le=MAX_TOKENS_PER_REQUEST)] = 1
    max: Annotated[int, Field(ge=0, le=MAX_TOKENS_PER_REQUEST)]

    @model_validator(mode="after")
    def _order(self) -> "Normal":
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) must not exceed max ({self.max})")
        return self


class LogNormal(_Strict):
    """exp(Normal(log(median), sigma)), rounded and clipped to [min, max]: long-tailed lengths."""

    dist: Literal["lognormal"]
    median: Annotated[float, Field(gt=0, le=MAX_TOKENS_PER_REQUEST)]
    sigma: Annotated[float, Field(ge=0, le=10)]
    min: Annotated[int, Field(ge=0, le=MAX_TOKENS_PER_REQUEST)] = 1
    max: Annotated[int, Field(ge=0, le=MAX_TOKENS_PER_REQUEST)]

    @model_validator(mode="after")
    def _order(self) -> "LogNormal":
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) must not exceed max ({self.max})")
        return self


class Explicit(_Strict):
    """Lengths given one per request, in order (cycled when there are more requests)."""

    dist: Literal["list"]
    values: Annotated[list[Annotated[int, Field(ge=0, le=MAX_TOKENS_PER_REQUEST)]], Field(min_length=1)]


Dist = Annotated[Union[Fixed, Uniform, Normal, LogNormal, Explicit], Field(discriminator="dist")]


def _coerce_dist(value: Any) -> Any:
    """A bare integer means a fixed length."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return {"dist": "fixed", "value": value}
    return value


def dist_bounds(d: Any) -> tuple[int, int]:
    """Smallest and largest value a distribution can produce."""
    if isinstance(d, Fixed):
        return d.value, d.value
    if isinstance(d, Uniform):
        return d.low, d.high
    if isinstance(d, (Normal, LogNormal)):
        return d.min, d.max
    if isinstance(d, Explicit):
        return min(d.values), max(d.values)
    raise TypeError(d)


# ---------------------------------------------------------------- requests and cases
class RequestGroup(_Strict):
    """``count`` requests of one kind.

    - ``decode``: one new token (or ``query_len`` for speculative decode) over ``context_len``
      cached tokens.
    - ``prefill``: ``query_len`` new tokens, nothing cached.
    - ``extend``: chunked prefill, ``query_len`` new tokens on top of ``context_len`` cached ones.
    """

    kind: Literal["decode", "prefill", "extend"]
    count: Annotated[int, Field(ge=1, le=MAX_REQUESTS)] = 1
    query_len: Dist | None = None
    context_len: Dist | None = None

    @model_validator(mode="before")
    @classmethod
    def _ints_are_fixed(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data = dict(data)
            for key in ("query_len", "context_len"):
                if key in data:
                    data[key] = _coerce_dist(data[key])
        return data

    @model_validator(mode="after")
    def _kind_rules(self) -> "RequestGroup":
        if self.kind == "prefill":
            if self.context_len is not None and dist_bounds(self.context_len)[1] != 0:
                raise ValueError("a prefill request has no cached context; use kind: extend")
            if self.query_len is None:
                raise ValueError("prefill needs query_len")
        if self.kind == "extend" and (self.query_len is None or self.context_len is None):
            raise ValueError("extend needs query_len and context_len")
        if self.kind == "decode" and self.context_len is None:
            raise ValueError("decode needs context_len")
        if self.query_len is not None and dist_bounds(self.query_len)[0] < 1:
            raise ValueError("query_len must be at least 1")
        return self

    @property
    def query_dist(self) -> Any:
        return self.query_len if self.query_len is not None else Fixed(value=1)

    @property
    def context_dist(self) -> Any:
        return self.context_len if self.context_len is not None else Fixed(value=0)


class SharedPrefix(_Strict):
    """Requests split into ``groups`` contiguous groups; each group's requests share the first
    ``length`` tokens of their context, stored once in the paged cache (prefix caching)."""

    length: Annotated[int, Field(ge=0, le=MAX_TOKENS_PER_REQUEST)]
    groups: Annotated[int, Field(ge=1, le=MAX_REQUESTS)] = 1


class CaseSpec(_Strict):
    """One fully expanded workload cell: an attention layer plus a batch of requests."""

    name: str
    num_heads: Annotated[int, Field(ge=1, le=1024)]
    num_kv_heads: Annotated[int, Field(ge=1, le=1024)]
    head_size: Annotated[int, Field(ge=1, le=1024)]
    dtype: Literal["float16", "bfloat16"] = "bfloat16"
    kv_cache_dtype: Literal["auto", "fp8_e4m3", "fp8_e5m2"] = "auto"
    kv_scale: Annotated[float, Field(gt=0)] | Literal["auto"] = "auto"
    # Per-layer fp8 dequantization scales of K and V; each defaults to ``kv_scale`` (the shorthand
    # for both). Unequal values catch a kernel that swaps them.
    k_scale: Annotated[float, Field(gt=0)] | Literal["auto"] | None = None
    v_scale: Annotated[float, Field(gt=0)] | Literal["auto"] | None = None
    block_size: Annotated[int, Field(ge=1, le=65536)] = 16
    kv_layout: Literal["NHD", "HND"] = "NHD"
    causal: bool = True
    sliding_window: Annotated[int, Field(ge=1, le=2**31 - 1)] | None = None
    softcap: Annotated[float, Field(ge=0)] = 0.0
    alibi: bool = False
    sinks: bool = False
    scale: Annotated[float, Field(gt=0)] | None = None
    batch: Annotated[list[RequestGroup], Field(min_length=1)]
    shared_prefix: SharedPrefix | None = None
    seed: Annotated[int, Field(ge=0, le=MAX_SEED)] = 0
    tags: list[str] = []
    # Set by the sweep expansion, not written in YAML: the suite case this one came from and
    # its swept values (e.g. {"block_size": 16, "count": 1}), so rows need not parse names.
    group: str = ""
    params: dict[str, Any] = {}

    @model_validator(mode="after")
    def _shapes(self) -> "CaseSpec":
        if self.num_heads % self.num_kv_heads != 0:
            raise ValueError(
                f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})"
            )
        total = sum(g.count for g in self.batch)
        if total > MAX_REQUESTS:
            raise ValueError(f"batch has {total} requests; at most {MAX_REQUESTS}")
        prefix = self.shared_prefix.length if self.shared_prefix else 0
        kv_tokens = sum(g.count * (prefix + dist_bounds(g.context_dist)[1] + dist_bounds(g.query_dist)[1])
                        for g in self.batch)
        if kv_tokens > MAX_KV_TOKENS_PER_CASE:
            raise ValueError(f"batch may hold up to {kv_tokens:,} KV tokens; at most {MAX_KV_TOKENS_PER_CASE:,} per case")
        if self.shared_prefix is not None:
            sp = self.shared_prefix
            if sp.length % self.block_size != 0:
                raise ValueError(
                    f"shared_prefix.length ({sp.length}) must be a multiple of block_size ({self.block_size}):"
                    " prefix caching shares whole blocks"
                )
            if sp.groups > total:
                raise ValueError(f"shared_prefix.groups ({sp.groups}) exceeds the number of requests ({total})")
        return self

    @property
    def kv_scales(self) -> tuple[float | str, float | str]:
        """(k_scale, v_scale), each a number or "auto"; unset ones fall back to ``kv_scale``."""
        return (self.kv_scale if self.k_scale is None else self.k_scale,
                self.kv_scale if self.v_scale is None else self.v_scale)

    @property
    def num_requests(self) -> int:
        return sum(g.count for g in self.batch)

    def attention_config(self) -> AttentionConfig:
        return AttentionConfig(
            num_heads=self.num_heads,
            num_kv_heads=self.num_kv_heads,
            head_size=self.head_size,
            dtype=self.dtype,
            kv_cache_dtype=self.kv_cache_dtype,
            block_size=self.block_size,
            kv_layout=self.kv_layout,
            causal=self.causal,
            sliding_window=self.sliding_window,
            softcap=self.softcap,
            alibi=self.alibi,
            sinks=self.sinks,
            scale=self.scale,
        )

    @property
    def kv_element_bytes(self) -> int:
        """Bytes of one KV-cache element (the project's one dtype table: harness.layout)."""
        from harness.layout import kv_element_bytes  # harness.layout imports this module

        return kv_element_bytes(self.dtype, self.kv_cache_dtype)

    def max_seq_len_bound(self) -> int:
        prefix = self.shared_prefix.length if self.shared_prefix else 0
        return prefix + max(dist_bounds(g.context_dist)[1] + dist_bounds(g.query_dist)[1] for g in self.batch)

    def work_bound(self) -> tuple[float, float]:
        """Upper bounds of (FLOPs, KV-cache bytes) for sizing decisions before generation."""
        prefix = self.shared_prefix.length if self.shared_prefix else 0
        flops = 0.0
        tokens = 0.0
        for g in self.batch:
            q = dist_bounds(g.query_dist)[1]
            s = prefix + dist_bounds(g.context_dist)[1] + q
            flops += g.count * 4.0 * q * s * self.num_heads * self.head_size
            tokens += g.count * s
        kv_bytes = tokens * 2 * self.num_kv_heads * self.head_size * self.kv_element_bytes
        return flops, kv_bytes


class Suite(_Strict):
    suite: str
    description: str = ""
    backends: list[str] | None = None
    variants: dict[str, dict[str, list[Any]]] = {}
    cases: list[CaseSpec]
    source: str = ""

    @field_validator("suite")
    @classmethod
    def _safe_name(cls, v: str) -> str:
        # The suite name becomes part of the default results folder: no path separators.
        if not _NAME_RE.fullmatch(v):
            raise ValueError(f"{v[:60]!r} must be 1-128 letters, digits, '.', '_' or '-' (it names the results folder)")
        return v

    @field_validator("backends")
    @classmethod
    def _registered_names(cls, v: list[str] | None) -> list[str] | None:
        # A suite file must not make the harness import arbitrary modules: module:Class specs
        # are accepted on the command line only.
        for name in v or []:
            if not _NAME_RE.fullmatch(name):
                raise ValueError(f"{name[:60]!r} is not a registered backend name"
                                 " (module:Class specs go on the command line, --backends)")
        return v


# ---------------------------------------------------------------- loading and expansion
_LIST_KEYS = {"batch", "values", "tags"}  # keys whose value is a list by type, not a sweep axis
_EXPANSION_KEYS = {"group", "params"}  # filled in by expand_case
_CASE_KEYS = (set(CaseSpec.model_fields) - _EXPANSION_KEYS) | {"sweep"}
_SUITE_KEYS = {"suite", "description", "defaults", "cases", "backends", "variants"}


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
    raw["group"] = raw.get("name", "case")
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
        case["params"] = params
        out.append(case)
    return out


def _format_validation_error(err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        loc = ".".join(str(x) for x in e["loc"] if not (isinstance(x, str) and x in {"fixed", "uniform", "normal", "lognormal", "list"}))
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"].endswith("_type") and not isinstance(e.get("input"), (dict, list)):
            msg += f", got {str(repr(e.get('input')))[:40]}"  # e.g. `true` for an int: say what was read
        lines.append(f"field {loc or '(case)'}: {msg}")
    return "; ".join(lines)


def parse_suite(data: Any, source: str = "<suite>") -> Suite:
    """Validate a suite's parsed YAML and expand its sweeps."""
    if not isinstance(data, dict):
        raise SpecError(f"{source}: a suite must be a mapping with 'suite' and 'cases' keys")
    unknown = set(data) - _SUITE_KEYS
    if unknown:
        raise SpecError(f"{source}: unknown top-level key(s) {sorted(map(str, unknown))}; allowed: {sorted(_SUITE_KEYS)}")
    for key in ("suite", "cases"):
        if key not in data:
            raise SpecError(f"{source}: missing required key '{key}'")
    defaults = data.get("defaults") or {}
    if not isinstance(defaults, dict):
        raise SpecError(f"{source}: 'defaults' must be a mapping")
    bad_defaults = set(defaults) - _CASE_KEYS
    if bad_defaults:
        raise SpecError(f"{source}: defaults: unknown field(s) {sorted(map(str, bad_defaults))}")
    raw_cases = data["cases"]
    if not isinstance(raw_cases, list) or not raw_cases:
        raise SpecError(f"{source}: 'cases' must be a non-empty list")
    cases: list[CaseSpec] = []
    seen: set[str] = set()
    for i, raw in enumerate(raw_cases):
        if not isinstance(raw, dict):
            raise SpecError(f"{source}: cases[{i}] must be a mapping")
        label = raw.get("name", f"cases[{i}]")
        unknown_case = set(raw) - _CASE_KEYS
        if unknown_case:
            raise SpecError(
                f"{source}: case '{label}': unknown field(s) {sorted(map(str, unknown_case))}; allowed: {sorted(_CASE_KEYS)}"
            )
        merged = {**defaults, **raw}
        merged.setdefault("name", f"case{i}")
        try:
            expanded = expand_case(merged)
        except SpecError as e:
            raise SpecError(f"{source}: case '{label}': {e}") from None
        for one in expanded:
            try:
                case = CaseSpec.model_validate(one)
            except ValidationError as e:
                raise SpecError(f"{source}: case '{one.get('name', label)}': {_format_validation_error(e)}") from None
            if case.name in seen:
                raise SpecError(f"{source}: duplicate case name '{case.name}'")
            seen.add(case.name)
            cases.append(case)
    try:
        return Suite(
            suite=data["suite"],
            description=data.get("description", "") or "",
            backends=data.get("backends"),
            variants=data.get("variants") or {},
            cases=cases,
            source=source,
        )
    except ValidationError as e:
        raise SpecError(f"{source}: {_format_validation_error(e)}") from None


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key given twice in one mapping is an error naming
    both lines (plain PyYAML keeps the last one silently: `num_heads: 8` then `num_heads: 16`
    would run 16). Keys brought in by a `<<:` merge may still be overridden, as YAML intends."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            first_line: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    earlier = first_line.get(key)
                except TypeError:  # an unhashable key: the base class reports it
                    continue
                line = key_node.start_mark.line + 1
                if earlier is not None:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r} at lines {earlier} and {line}", key_node.start_mark)
                first_line[key] = line
        return super().construct_mapping(node, deep=deep)


def load_suite(path: str | Path) -> Suite:
    """Read and validate a suite file; every failure is a ``SpecError``."""
    p = Path(path)
    if p.is_dir():
        inside = sorted(str(f) for f in p.glob("*.yaml"))[:6]
        hint = f", e.g. {', '.join(inside)}" if inside else ""
        raise SpecError(f"{path}: is a directory, not a suite file; give one YAML file{hint}")
    if not p.is_file():
        raise SpecError(f"{path}: no such suite file")
    try:
        size = p.stat().st_size
        if size > MAX_SUITE_BYTES:
            raise SpecError(f"{path}: {size:,} bytes; a suite file is at most {MAX_SUITE_BYTES:,}")
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError(f"{path}: cannot read: {e}") from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)
    except RecursionError:
        raise SpecError(f"{path}: malformed YAML: nested too deeply") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(e, "problem", None) or str(e).strip().splitlines()[0]
        if isinstance(e, yaml.reader.ReaderError):
            where = f" (character {e.position + 1})"
        raise SpecError(f"{path}: malformed YAML{where}: {' '.join(str(problem).split())}") from None
    yaml_size(data, str(path))
    try:
        return parse_suite(data, str(path))
    except SpecError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError, IndexError, RecursionError) as e:
        # Last line of defence so a user never sees a traceback; tests/test_fuzz_suites.py
        # fails on this message, so every input that reaches it gets a proper check.
        raise SpecError(f"{path}: invalid suite (unexpected {type(e).__name__}: {str(e)[:200]})") from None


def yaml_size(data: Any, source: str = "<suite>") -> int:
    """Nodes ``data`` has once its YAML aliases are expanded; raises SpecError for recursive
    aliases, nesting deeper than MAX_YAML_DEPTH or more than MAX_YAML_NODES nodes (a "billion
    laughs" document is a few lines of aliases that expand to billions of nodes).
    Linear in the document: shared (aliased) nodes are measured once."""
    sizes: dict[int, int] = {}
    depths: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[Any, bool]] = [(data, False)]
    while stack:
        node, done = stack.pop()
        if not isinstance(node, (dict, list)):
            continue
        kids = [k for kv in node.items() for k in kv] if isinstance(node, dict) else node
        nid = id(node)
        if done:
            on_path.discard(nid)
            sizes[nid] = 1 + sum(sizes.get(id(k), 1) for k in kids)
            depths[nid] = 1 + max((depths.get(id(k), 0) for k in kids), default=0)
            if sizes[nid] > MAX_YAML_NODES:
                raise SpecError(f"{source}: the suite expands to more than {MAX_YAML_NODES:,} YAML nodes"
                                " (YAML aliases repeated too often?)")
            if depths[nid] > MAX_YAML_DEPTH:
                raise SpecError(f"{source}: YAML nested deeper than {MAX_YAML_DEPTH} levels")
            continue
        if nid in sizes:
            continue
        if nid in on_path:
            raise SpecError(f"{source}: recursive YAML alias (a node that contains itself)")
        on_path.add(nid)
        stack.append((node, True))
        stack.extend((k, False) for k in kids if isinstance(k, (dict, list)) and id(k) not in sizes)
    return sizes.get(id(data), 1)


def estimated_requests_tokens(case: CaseSpec) -> float:
    """Rough expected total KV tokens, for progress estimates."""
    total = 0.0
    for g in case.batch:
        lo, hi = dist_bounds(g.context_dist)
        qlo, qhi = dist_bounds(g.query_dist)
        total += g.count * ((lo + hi) / 2 + (qlo + qhi) / 2)
    return total if math.isfinite(total) else 0.0
