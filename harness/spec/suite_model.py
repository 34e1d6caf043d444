"""The pydantic models of a suite: length distributions, request groups, a shared prefix, one
fully expanded case (``CaseSpec``) and the suite. Strict: YAML says what it means."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from harness.spec.limits import (
    NAME_RE,
    MAX_KV_TOKENS_PER_CASE,
    MAX_REQUESTS,
    MAX_SEED,
    MAX_TOKENS_PER_REQUEST,
)

if TYPE_CHECKING:
    import numpy as np

    from attn_contract import AttentionConfig


class _Strict(BaseModel):
    # strict: YAML says what it means; `true`, `2.5` or `"8"` never become the integer a field wants.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=True)


# ---------------------------------------------------------------- length distributions
# Each distribution draws its own lengths and knows its own range, so adding one is one class
# (and one member of ``Dist``). numpy is imported when lengths are drawn: validating a suite
# (``harness validate``, ``--help``) stays light.
class LengthDist(_Strict):
    def bounds(self) -> tuple[int, int]:
        """Smallest and largest value the distribution can produce."""
        raise NotImplementedError

    def sample(self, n: int, rng: "np.random.Generator") -> list[int]:
        """``n`` integer lengths drawn with ``rng``."""
        raise NotImplementedError


def _clipped(x: Any, low: int, high: int) -> list[int]:
    import numpy as np

    return np.clip(np.rint(x), low, high).astype(int).tolist()


class Fixed(LengthDist):
    dist: Literal["fixed"] = "fixed"
    value: Annotated[int, Field(ge=0, le=MAX_TOKENS_PER_REQUEST)]

    def bounds(self) -> tuple[int, int]:
        return self.value, self.value

    def sample(self, n: int, rng: "np.random.Generator") -> list[int]:
        return [self.value] * n


class Uniform(LengthDist):
    """Integers drawn uniformly from [low, high], both inclusive."""

    dist: Literal["uniform"]
    low: Annotated[int, Field(ge=0, le=MAX_TOKENS_PER_REQUEST)]
    high: Annotated[int, Field(ge=0, le=MAX_TOKENS_PER_REQUEST)]

    @model_validator(mode="after")
    def _order(self) -> "Uniform":
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) must not exceed high ({self.high})")
        return self

    def bounds(self) -> tuple[int, int]:
        return self.low, self.high

    def sample(self, n: int, rng: "np.random.Generator") -> list[int]:
        return rng.integers(self.low, self.high + 1, size=n).tolist()


class _Clipped(LengthDist):
    """A continuous distribution rounded and clipped to [min, max] (each subclass declares
    ``min`` and ``max`` after its own fields: the schema keeps its field order)."""

    if TYPE_CHECKING:  # not fields here: a base field would come first in the schema
        min: int
        max: int

    @model_validator(mode="after")
    def _order(self) -> "_Clipped":
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) must not exceed max ({self.max})")
        return self

    def bounds(self) -> tuple[int, int]:
        return self.min, self.max


class Normal(_Clipped):
    """Normal(mean, std), rounded and clipped to [min, max]."""

    dist: Literal["normal"]
    mean: Annotated[float, Field(ge=0, le=MAX_TOKENS_PER_REQUEST)]
    std: Annotated[float, Field(ge=0, le=MAX_TOKENS_PER_REQUEST)]
    min: Annotated[int, Field(ge=0, le=MAX_TOKENS_PER_REQUEST)] = 1
    max: Annotated[int, Field(ge=0, le=MAX_TOKENS_PER_REQUEST)]

    def sample(self, n: int, rng: "np.random.Generator") -> list[int]:
        return _clipped(rng.normal(self.mean, self.std, size=n), self.min, self.max)


class LogNormal(_Clipped):
    """exp(Normal(log(median), sigma)), rounded and clipped to [min, max]: long-tailed lengths."""

    dist: Literal["lognormal"]
    median: Annotated[float, Field(gt=0, le=MAX_TOKENS_PER_REQUEST)]
    sigma: Annotated[float, Field(ge=0, le=10)]
    min: Annotated[int, Field(ge=0, le=MAX_TOKENS_PER_REQUEST)] = 1
    max: Annotated[int, Field(ge=0, le=MAX_TOKENS_PER_REQUEST)]

    def sample(self, n: int, rng: "np.random.Generator") -> list[int]:
        import numpy as np

        return _clipped(np.exp(rng.normal(math.log(self.median), self.sigma, size=n)), self.min, self.max)


class Explicit(LengthDist):
    """Lengths given one per request, in order (cycled when there are more requests)."""

    dist: Literal["list"]
    values: Annotated[list[Annotated[int, Field(ge=0, le=MAX_TOKENS_PER_REQUEST)]], Field(min_length=1)]

    def bounds(self) -> tuple[int, int]:
        return min(self.values), max(self.values)

    def sample(self, n: int, rng: "np.random.Generator") -> list[int]:
        return [self.values[i % len(self.values)] for i in range(n)]


DISTRIBUTIONS: tuple[type[LengthDist], ...] = (Fixed, Uniform, Normal, LogNormal, Explicit)
Dist = Annotated[Union[Fixed, Uniform, Normal, LogNormal, Explicit], Field(discriminator="dist")]
# The ``dist:`` tags, read from the models (error messages name a union member by its tag).
DIST_TAGS: frozenset[str] = frozenset(get_args(m.model_fields["dist"].annotation)[0] for m in DISTRIBUTIONS)


def _coerce_dist(value: Any) -> Any:
    """A bare integer means a fixed length."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return {"dist": "fixed", "value": value}
    return value


def dist_bounds(d: Any) -> tuple[int, int]:
    """Smallest and largest value a distribution can produce."""
    if not isinstance(d, LengthDist):
        raise TypeError(d)
    return d.bounds()


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
    # Requests per group in batch order (default: as even as possible). A replayed trace step
    # has groups of different sizes (harness/spec/trace/replay.py).
    sizes: list[Annotated[int, Field(ge=1, le=MAX_REQUESTS)]] | None = None


class ContextParallel(_Strict):
    """Run the case context-parallel (harness/cell/context_parallel/, docs/context-parallel.md): each
    request's KV sharded over ``degree`` ranks, each rank's backend call merged by its LSE."""

    degree: Annotated[int, Field(ge=1, le=16)]
    combine: Literal["ag_rs", "a2a"] = "ag_rs"
    sharding: Literal["interleaved", "contiguous"] = "interleaved"
    ranks: Literal["simulated", "distributed"] = "simulated"
    # Tensor parallelism on top: each of tp_size head slices is its own CP group.
    tp_size: Annotated[int, Field(ge=1, le=64)] = 1


class CaseSpec(_Strict):
    """One fully expanded workload cell: an attention layer plus a batch of requests."""

    name: str
    num_heads: Annotated[int, Field(ge=1, le=1024)]
    num_kv_heads: Annotated[int, Field(ge=1, le=1024)]
    head_size: Annotated[int, Field(ge=1, le=1024)]
    dtype: Literal["float16", "bfloat16"] = "bfloat16"
    # nvfp4: 4-bit values with one fp8 scale per 16 (FlashInfer, Blackwell). Accepted so a
    # backend can say why it does not serve it; no generator makes an nvfp4 cache yet.
    kv_cache_dtype: Literal["auto", "fp8_e4m3", "fp8_e5m2", "nvfp4"] = "auto"
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
    # Adversarial inputs (``--adversarial``): unused KV slots (spare pages and the tail
    # of each request's last page) hold NaN, which a correct kernel never reads; ``magnitude``
    # multiplies q and k (logits grow with its square).
    adversarial: bool = False
    magnitude: Annotated[float, Field(gt=0, le=1000)] = 1.0
    context_parallel: ContextParallel | None = None
    # MLA (docs/mla.md, attn_contract/mla.py): `attention: mla` makes the case a DeepSeek-style
    # latent-attention layer in one of vLLM's two forms: `absorbed` (decode: 576/512 over the
    # latent cache, one KV head) or `expanded` (prefill: 192/128 over up-projected K/V).
    # num_kv_heads and head_size follow from the form and the dims (leave them out).
    attention: Literal["mha", "mla"] = "mha"
    # auto: absorbed when every request group is a decode (vLLM's decode path), else expanded.
    mla_form: Literal["auto", "absorbed", "expanded"] = "auto"
    kv_lora_rank: Annotated[int, Field(ge=1, le=4096)] = 512
    qk_rope_head_dim: Annotated[int, Field(ge=1, le=1024)] = 64
    qk_nope_head_dim: Annotated[int, Field(ge=1, le=1024)] = 128
    v_head_dim: Annotated[int, Field(ge=1, le=1024)] = 128
    # yarn_get_mscale(rope_scaling.factor, mscale_all_dim); the softmax scale takes its square.
    mla_mscale: Annotated[float, Field(gt=0, le=100)] = 1.0
    tags: list[str] = []
    # Set by the sweep expansion, not written in YAML: the suite case this one came from and
    # its swept values (e.g. {"block_size": 16, "count": 1}), so rows need not parse names.
    group: str = ""
    params: dict[str, Any] = {}

    @model_validator(mode="before")
    @classmethod
    def _mla_geometry(cls, data: Any) -> Any:
        """An MLA case's num_kv_heads and head_size, from its form and dims."""
        if not isinstance(data, dict) or data.get("attention") != "mla":
            return data
        data = dict(data)
        form = data.get("mla_form", "auto")
        if form == "auto":
            kinds = [g.get("kind") if isinstance(g, dict) else getattr(g, "kind", None) for g in data.get("batch") or []]
            form = "absorbed" if kinds and all(k == "decode" for k in kinds) else "expanded"
            data["mla_form"] = form
        ints = {k: data.get(k, d) for k, d in (("kv_lora_rank", 512), ("qk_rope_head_dim", 64),
                                                ("qk_nope_head_dim", 128), ("num_heads", None))}
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in ints.values()):
            return data  # the field validators name the bad one
        if form == "absorbed":
            want = {"num_kv_heads": 1, "head_size": ints["kv_lora_rank"] + ints["qk_rope_head_dim"]}
        else:
            want = {"num_kv_heads": ints["num_heads"], "head_size": ints["qk_nope_head_dim"] + ints["qk_rope_head_dim"]}
        for key, value in want.items():
            if key in data and data[key] != value:
                raise ValueError(f"field {key}: an MLA {form} layer has {value} (from its dims); leave {key} out")
            data[key] = value
        return data

    @model_validator(mode="after")
    def _shapes(self) -> "CaseSpec":
        self._mla_rules()
        if self.num_heads % self.num_kv_heads != 0:
            raise ValueError(
                f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})"
            )
        cp = self.context_parallel
        if cp is not None and (self.num_heads % cp.tp_size or (self.num_kv_heads % cp.tp_size and cp.tp_size % self.num_kv_heads)):
            raise ValueError(f"context_parallel.tp_size ({cp.tp_size}) must divide num_heads ({self.num_heads}) and"
                             f" divide or be a multiple of num_kv_heads ({self.num_kv_heads})")
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
            if sp.sizes is not None and (len(sp.sizes) != sp.groups or sum(sp.sizes) != total):
                raise ValueError(f"shared_prefix.sizes ({sp.sizes}) must list {sp.groups} group sizes adding up to"
                                 f" the {total} requests")
        return self

    def _mla_rules(self) -> None:
        mla_fields = ("mla_form", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "mla_mscale")
        if self.attention != "mla":
            # Fields at their defaults are fine (a dumped case writes every field).
            given = [f for f in mla_fields if getattr(self, f) != type(self).model_fields[f].default]
            if given:
                raise ValueError(f"field {given[0]}: only with attention: mla")
            return
        unsupported = {"sliding_window": self.sliding_window is not None, "softcap": bool(self.softcap),
                       "alibi": self.alibi, "sinks": self.sinks, "shared_prefix": self.shared_prefix is not None,
                       "context_parallel": self.context_parallel is not None, "kv_layout": self.kv_layout != "NHD",
                       "kv_cache_dtype": self.kv_cache_dtype == "nvfp4"}
        bad = [k for k, v in unsupported.items() if v]
        if bad:
            raise ValueError(f"field {bad[0]}: not supported with attention: mla (MLA cases have one latent"
                             " cache, NHD, no window/softcap/ALiBi/sinks/shared prefix/context parallelism/nvfp4)")
        k, v = self.kv_scales
        if k != v:
            raise ValueError("fields k_scale/v_scale: an MLA latent cache has one fp8 scale (use kv_scale)")

    @property
    def mla_dims(self) -> Any:
        """The case's ``attn_contract.MLADims`` (None unless ``attention: mla``)."""
        if self.attention != "mla":
            return None
        from attn_contract import MLADims

        return MLADims(self.kv_lora_rank, self.qk_rope_head_dim, self.qk_nope_head_dim, self.v_head_dim,
                       self.mla_mscale)

    @property
    def attention_kind(self) -> str:
        """The contract's attention kind: "mha", "mla_absorbed" or "mla_expanded"."""
        return "mha" if self.attention != "mla" else f"mla_{self.mla_form}"

    @property
    def v_head_size(self) -> int:
        if self.attention != "mla":
            return self.head_size
        return self.kv_lora_rank if self.mla_form == "absorbed" else self.v_head_dim

    @property
    def kv_scales(self) -> tuple[float | str, float | str]:
        """(k_scale, v_scale), each a number or "auto"; unset ones fall back to ``kv_scale``."""
        return (self.kv_scale if self.k_scale is None else self.k_scale,
                self.kv_scale if self.v_scale is None else self.v_scale)

    @property
    def num_requests(self) -> int:
        return sum(g.count for g in self.batch)

    def attention_config(self) -> AttentionConfig:
        from attn_contract import AttentionConfig  # torch: not needed to load or validate a suite

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
            v_head_size=None if self.v_head_size == self.head_size else self.v_head_size,
            attention_kind=self.attention_kind,
            mla=self.mla_dims,
        )

    @property
    def kv_element_bytes(self) -> float:
        """Bytes of one KV-cache element (the project's one dtype table: harness.case.layout)."""
        from harness.spec.dtypes import kv_element_bytes  # torch: loaded only when asked

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
            flops += g.count * 2.0 * q * s * self.num_heads * (self.head_size + self.v_head_size)
            tokens += g.count * s
        return flops, tokens * self.kv_bytes_per_token()

    def kv_bytes_per_token(self) -> float:
        """KV-cache bytes one token takes: MLA absorbed, one latent vector shared by all heads
        (its values are the first L entries); else per KV head a key and a value."""
        if self.attention == "mla" and self.mla_form == "absorbed":
            return self.head_size * self.kv_element_bytes
        return self.num_kv_heads * (self.head_size + self.v_head_size) * self.kv_element_bytes


class Suite(_Strict):
    suite: str
    description: str = ""
    backends: list[str] | None = None
    # Backends per attention family of the cases ("mha", "mla": a case's ``attention:``), used
    # when --backends is not given: a list of names, or "auto" (every registered backend whose
    # class declares a kind of that family, ``AttentionBackend.attention_kinds``). A backend
    # picked here runs only the cases of its family; one under ``backends:`` runs every case.
    backends_for: dict[Literal["mha", "mla"], list[str] | Literal["auto"]] = {}
    variants: dict[str, dict[str, list[Any]]] = {}
    cases: list[CaseSpec]
    source: str = ""
    notes: list[str] = []  # what a converted file (a vLLM study) left out, and why
    # The GPU clock regime its cells are timed in (burst | sustained; --clock-regime overrides it).
    clock_regime: Literal["burst", "sustained"] | None = None
    # On a GPU, time every cell under full-graph replay and eagerly (vLLM's piecewise) and check
    # graph replays with metadata updated in place (harness/cell/graph_replay.py, docs/spec_decode.md).
    graph_modes: bool = False

    @field_validator("suite")
    @classmethod
    def _safe_name(cls, v: str) -> str:
        # The suite name becomes part of the default results folder: no path separators.
        if not NAME_RE.fullmatch(v):
            raise ValueError(f"{v[:60]!r} must be 1-128 letters, digits, '.', '_' or '-' (it names the results folder)")
        return v

    @field_validator("backends")
    @classmethod
    def _registered_names(cls, v: list[str] | None) -> list[str] | None:
        # A suite file must not make the harness import arbitrary modules: module:Class specs
        # are accepted on the command line only.
        for name in v or []:
            if not NAME_RE.fullmatch(name):
                raise ValueError(f"{name[:60]!r} is not a registered backend name"
                                 " (module:Class specs go on the command line, --backends)")
        return v

    @field_validator("backends_for")
    @classmethod
    def _registered_family_names(cls, v: dict[str, Any]) -> dict[str, Any]:
        for family, names in v.items():
            for name in [] if names == "auto" else names:
                if not NAME_RE.fullmatch(name):
                    raise ValueError(f"{family}: {name[:60]!r} is not a registered backend name"
                                     " (module:Class specs go on the command line, --backends)")
        return v

    def families(self) -> list[str]:
        """The attention families of its cases ("mha", "mla"), in case order."""
        return list(dict.fromkeys(c.attention for c in self.cases))
