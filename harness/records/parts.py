"""The nested parts of a result row (harness/records/results.py): one pydantic model per fixed shape.

Every part is strict (a bool is not an int, a string is not a number) and forbids unknown keys:
a new field must be declared here (optional, so older rows still load). Optional fields that
were not given are left out of the JSON, so a row read from an old file writes back with
exactly the keys it had (tests/records/test_results_rows.py checks every committed file).

Where a payload is defined by a backend rather than by the harness (``describe_call`` facts,
variant axes and their values), the row keeps a typed wrapper around a documented mapping
instead: the harness cannot know those keys, and a backend must not need a harness change to
record a new fact (harness/records/results.py ``Call``).
"""

from __future__ import annotations

from typing import Annotated, Any, Union

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer, model_serializer

from attn_contract.status import Status

# A variant axis value or a swept case parameter: what a YAML scalar can be.
Scalar = Union[bool, int, float, str]
# How the report writes a dtype in a layer's shape.
_DTYPE_SHORT = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
# A status stored as its string, read back as the enum.
StatusValue = Annotated[Status, Field(strict=False), PlainSerializer(lambda s: s.value, return_type=str)]


class Part(BaseModel):
    """Base of the fixed-shape parts: strict, closed, optional fields written only when given."""

    model_config = ConfigDict(strict=True, extra="forbid", use_attribute_docstrings=True)

    @model_serializer(mode="wrap")
    def _only_given(self, handler: Any) -> dict[str, Any]:
        d = handler(self)
        given = self.model_fields_set
        return {k: v for k, v in d.items() if k in given}


# ---------------------------------------------------------------- check
class RequestCheck(Part):
    """One request's verdict (harness.cell.check.check_output). Errors are None where not finite."""

    request: int
    """The request's index in the batch."""
    kind: str
    """decode | extend | prefill."""
    query_len: int
    """Its query tokens."""
    seq_len: int
    """Its KV length (context plus query)."""
    passed: bool
    """Its verdict."""
    rel_l2_err: float | None
    """Its relative L2 error; None where not finite."""
    rel_l2_limit: float | None
    """The limit it was held to."""
    max_abs_err: float | None
    """Its largest absolute error; None where not finite."""
    mismatch_fraction: float | None
    """Its share of elements out of tolerance."""
    lse_max_abs_err: float | None
    """Its largest LSE error; None where not checked or not finite."""
    problems: str
    """What failed, in words ('' if nothing)."""
    last_row_rel_l2_err: float | None = None
    """The relative L2 error of the request's last query row alone, held to the same limit
    (absent from rows written before the last-row gate)."""


class KindCheck(Part):
    """Requests of one segment kind: how many, how many failed, the worst rel L2 error."""

    requests: int
    """Requests of this kind."""
    failed: int
    """How many failed."""
    max_rel_l2_err: float | None
    """The worst relative L2 error among them."""


class Recheck(Part):
    """The output checked again after timing, or of a repeated call into a poisoned buffer."""

    when: str
    """'after timing' | 'repeat call'."""
    passed: bool
    """Its verdict."""
    message: str | None = None
    """The verdict in words."""
    rel_l2_err: float | None = None
    """The relative L2 error then."""
    num_failed_requests: int | None = None
    """Requests that failed then."""


class InvariantResult(Part):
    """One metamorphic check (harness/cell/invariants.py)."""

    invariant: str
    """The metamorphic check's name."""
    status: StatusValue
    """pass | mismatch | error | unsupported."""
    detail: str
    """What it found."""


# ---------------------------------------------------------------- metrics
class Roofline(Part):
    """The measured device ceilings and the share of them a timed row reached
    (harness.case.roofline); only ``reason`` where no ceilings were known."""

    reason: str | None = None
    """Why there are no ceilings (only field then)."""
    bound: str | None = None
    """compute | memory: which ceiling the row's intensity faces."""
    ridge_flop_per_byte: float | None = None
    """The intensity where the two ceilings meet."""
    ceiling_tbps: float | None = None
    """Measured memory ceiling, TB/s."""
    ceiling_tflops: float | None = None
    """Measured compute ceiling, TFLOP/s."""
    pct_of_bw: float | None = None
    """Achieved share of the memory ceiling, %."""
    pct_of_flops: float | None = None
    """Achieved share of the compute ceiling, %."""
    pct_of_ceiling: float | None = None
    """Achieved share of the bounding ceiling, %."""
    ceilings_key: str | None = None
    """The device key the ceilings were measured for."""


# ---------------------------------------------------------------- the row's own parts
class LayerFields(Part):
    """A layer's identity, the first fields of ``RowConfig``: what a ranking groups layers by
    (harness/analysis/recommend's buckets and the policies written from them, via ``layer_key``)."""

    num_heads: int
    """Query heads."""
    num_kv_heads: int
    """KV heads."""
    head_size: int
    """Head size (of Q and K)."""
    dtype: str
    """The model dtype."""
    kv_cache_dtype: str
    """The KV cache dtype (auto: the model's)."""
    block_size: int
    """Tokens per KV cache page."""
    kv_layout: str
    """NHD | HND."""

    def layer_key(self) -> tuple[Any, ...]:
        """These fields' values, in their order: hashable and ordered, a bucket's layer."""
        return tuple(getattr(self, f) for f in LayerFields.model_fields)

    @staticmethod
    def named(key: tuple[Any, ...]) -> dict[str, Any]:
        """A ``layer_key`` with its field names."""
        return dict(zip(LayerFields.model_fields, key))


class RowConfig(LayerFields):
    """The layer a cell ran (attn_contract.AttentionConfig as a dict) plus the case's seed and tags."""

    causal: bool
    """Causal masking."""
    sliding_window: int | None
    """Sliding-window size; None: full attention."""
    softcap: float
    """Logit soft-cap; 0: none."""
    scale: float | None
    """Softmax scale; None: 1/sqrt(head_size)."""
    alibi: bool
    """ALiBi slopes."""
    sinks: bool
    """Attention sinks."""
    seed: int
    """The case's random seed."""
    tags: list[str]
    """The case's tags."""
    # MLA cells only (docs/mla.md): the value head size, the form and the latent dims.
    v_head_size: int | None = None
    """MLA: the value head size."""
    attention_kind: str | None = None
    """MLA: mla_absorbed | mla_expanded (docs/mla.md)."""
    mla: dict[str, float | int] | None = None
    """MLA: the latent dims."""

    @property
    def shape(self) -> str:
        """The layer in a few words, as the report groups by it:
        ``H32/KV8 D128 bf16 · page 16`` plus what differs from the plain case (window, softcap, ...)."""
        s = f"H{self.num_heads}/KV{self.num_kv_heads} D{self.head_size} {_DTYPE_SHORT.get(self.dtype, self.dtype)}"
        if self.kv_cache_dtype != "auto":
            s += f" kv {self.kv_cache_dtype}"
        s += f" · page {self.block_size}"
        feats = []
        if self.kv_layout != "NHD":
            feats.append(self.kv_layout)
        if self.sliding_window is not None:
            feats.append(f"window {self.sliding_window:.0f}")
        if self.softcap != 0.0:
            feats.append(f"softcap {self.softcap:g}")
        if self.alibi:
            feats.append("alibi")
        if self.sinks:
            feats.append("sinks")
        if not self.causal:
            feats.append("non-causal")
        return s + (" · " + ", ".join(feats) if feats else "")

    @property
    def kind_of_attention(self) -> str:
        """``mha``, or the MLA form the cell ran (docs/mla.md)."""
        return self.attention_kind or "mha"

    def features(self, batch: BatchSummary) -> str:
        """What sets the layer apart beyond its shape, comma-separated (``-``: nothing): the MLA
        form, window, softcap, ALiBi, sinks, non-causal, a shared prefix in the batch."""
        f = []
        if self.kind_of_attention != "mha":
            f.append(self.kind_of_attention)
        if self.sliding_window:
            f.append(f"window={self.sliding_window}")
        if self.softcap:
            f.append(f"softcap={self.softcap:g}")
        if self.alibi:
            f.append("alibi")
        if self.sinks:
            f.append("sinks")
        if self.causal is False:
            f.append("non-causal")
        if (batch.prefix_groups or 0) > 0:
            f.append("shared-prefix")
        return ",".join(f) or "-"


class BatchSummary(Part):
    """The generated batch, in numbers (harness.case.workload.Batch.summary); empty on a row that
    did not get that far."""

    num_reqs: int | None = None
    """Requests."""
    num_tokens: int | None = None
    """Query tokens."""
    num_decode: int | None = None
    """Decode requests."""
    num_prefill: int | None = None
    """Prefill requests."""
    num_extend: int | None = None
    """Extend (chunked-prefill) requests."""
    max_query_len: int | None = None
    """Longest query."""
    max_seq_len: int | None = None
    """Longest KV length."""
    mean_seq_len: float | None = None
    """Mean KV length."""
    total_kv_tokens: int | None = None
    """KV tokens over all requests."""
    num_blocks: int | None = None
    """KV pages used."""
    prefix_groups: int | None = None
    """Groups of requests sharing a prefix."""

    @property
    def given(self) -> bool:
        """The row got as far as its batch (an unsupported row's summary is empty)."""
        return bool(self.model_fields_set)

    @property
    def workload(self) -> str:
        """The batch's requests in words, as the report groups by them: ``decode + prefill``,
        ``, shared prefix (N groups)``; ``workload unknown`` on a row without a batch."""
        counts = (("decode", self.num_decode), ("extend", self.num_extend), ("prefill", self.num_prefill))
        if all(n is None for _, n in counts):
            return "workload unknown"
        s = " + ".join(name for name, n in counts if n is not None and n > 0) or "empty"
        g = self.prefix_groups
        if g is not None and g > 0:
            s += f", shared prefix ({g} group{'s' if g > 1 else ''})"
        return s

    @property
    def kind(self) -> str:
        """The batch's workload kind: decode, prefill or extend where it holds one kind of
        request, mixed where several, ? where none (recommend's buckets, the per-model answers)."""
        kinds = [k for k, n in (("decode", self.num_decode), ("prefill", self.num_prefill),
                                ("extend", self.num_extend)) if (n or 0) > 0]
        return kinds[0] if len(kinds) == 1 else ("mixed" if kinds else "?")


class RowLayout(Part):
    """The case's layout facts (harness.case.layout.CaseLayout.as_dict)."""

    block_size: int
    """Tokens per page."""
    num_reqs: int
    """Requests."""
    num_tokens: int
    """Query tokens."""
    max_query_len: int
    """Longest query."""
    max_seq_len: int
    """Longest KV length."""
    total_kv_tokens: int
    """KV tokens over all requests."""
    prefix_len: int
    """Shared prefix length."""
    prefix_groups: int
    """Groups sharing a prefix."""
    num_blocks_used: int
    """Pages the batch uses."""
    num_blocks: int
    """Pages allocated."""
    max_blocks_per_req: int
    """Most pages one request uses."""
    elt_bytes: int
    """Bytes per model-dtype element."""
    kv_elt_bytes: int
    """Bytes per KV-cache element."""
    logical_kv_bytes: int
    """KV bytes the requests hold."""
    kv_cache_bytes: int
    """KV cache bytes allocated."""


class VariantAxes(Part):
    """Which variant axes applied to the batch, and the variants one row stands for
    (harness.plan.cells.collapse_variants). Axis names and values are the backend's."""

    applied: list[str]
    """Variant axes that applied to the batch."""
    segment_kinds: list[str]
    """The batch's segment kinds."""
    not_applied: dict[str, list[str]]
    """Axes that could not change the result, with the values this row stands for."""
    stands_for: list[str]
    """The variants this row stands for."""


class RowEnvironment(Part):
    """The isolated environment a `harness matrix` / `harness bisect` row ran in."""

    name: str
    """The environment's name."""
    versions: dict[str, str]
    """Requirement -> its exact version (torch included)."""


__all__ = ["Part", "Scalar", "StatusValue", "LayerFields", "RequestCheck", "KindCheck", "Recheck", "InvariantResult",
           "Roofline", "RowConfig", "BatchSummary", "RowLayout", "VariantAxes",
           "RowEnvironment"]
