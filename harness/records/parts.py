"""The nested parts of a result row (harness/records/results.py): one pydantic model per fixed shape.

Every part is strict (a bool is not an int, a string is not a number) and forbids unknown keys:
a new field must be declared here (optional, so older rows still load). Optional fields that
were not given are left out of the JSON, so a row read from an old file writes back with
exactly the keys it had (tests/test_results_rows.py checks every committed file).

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
# A status stored as its string, read back as the enum.
StatusValue = Annotated[Status, Field(strict=False), PlainSerializer(lambda s: s.value, return_type=str)]


class Part(BaseModel):
    """Base of the fixed-shape parts: strict, closed, optional fields written only when given."""

    model_config = ConfigDict(strict=True, extra="forbid")

    @model_serializer(mode="wrap")
    def _only_given(self, handler: Any) -> dict[str, Any]:
        d = handler(self)
        given = self.model_fields_set
        return {k: v for k, v in d.items() if k in given}


# ---------------------------------------------------------------- check
class RequestCheck(Part):
    """One request's verdict (harness.cell.check.check_output). Errors are None where not finite."""

    request: int
    kind: str  # decode | extend | prefill
    query_len: int
    seq_len: int
    passed: bool
    rel_l2_err: float | None
    rel_l2_limit: float | None
    max_abs_err: float | None
    mismatch_fraction: float | None
    lse_max_abs_err: float | None
    problems: str


class KindCheck(Part):
    """Requests of one segment kind: how many, how many failed, the worst rel L2 error."""

    requests: int
    failed: int
    max_rel_l2_err: float | None


class Recheck(Part):
    """The output checked again after timing, or of a repeated call into a poisoned buffer."""

    when: str  # "after timing" | "repeat call"
    passed: bool
    message: str | None = None
    rel_l2_err: float | None = None
    num_failed_requests: int | None = None


class InvariantResult(Part):
    """One metamorphic check (harness/cell/invariants.py)."""

    invariant: str
    status: StatusValue  # pass | mismatch | error | unsupported
    detail: str


# ---------------------------------------------------------------- timing
class CudaGraphInfo(Part):
    """Whether timing replayed the call from a CUDA graph, and why (not)."""

    used: bool
    reason: str
    required: str | None = None  # the support level the batch needs (CudaGraphSupport name)
    declared: str | None = None  # the level the backend declares
    calls_per_replay: int | None = None


class SmClock(Part):
    """GPU SM clock around the sampling (MHz); a probe that failed leaves its field None."""

    before: float | None = None
    after: float | None = None
    source: str | None = None
    during_first: float | None = None
    during_last: float | None = None
    throttled: bool | None = None


class ClockStats(Part):
    """min / median / max of one quantity over a cell's samples."""

    min: float
    median: float
    max: float


class ClockWarmup(Part):
    """Sustained regime: the continuous work run before sampling (harness.timing.clocks.warm_to_steady)."""

    seconds: float | None = None
    chunks: int | None = None
    reason: str | None = None
    previous_busy: bool | None = None  # the previous sustained cell ended within SUSTAIN_RECENT_S
    idle_before_s: float | None = None
    min_s: float | None = None
    sm_mhz_start: float | None = None
    sm_mhz_end: float | None = None
    power_w_start: float | None = None
    power_w_end: float | None = None


class ClockSettle(Part):
    """Sustained regime: the continuous work run until the state settled, before sampling
    (harness/timing/sustained.py)."""

    seconds: float | None = None  # this call's settle
    busy_s: float | None = None  # the GPU busy without a gap when it ended (any call's work)
    reason: str | None = None
    previous_busy: bool | None = None  # the queue still held earlier work when it started
    samples_before: int | None = None  # samples taken while settling (not sustained: discarded)
    reads: int | None = None
    queue_ahead_s: float | None = None
    sm_mhz_start: float | None = None
    sm_mhz_end: float | None = None
    power_w_start: float | None = None
    power_w_end: float | None = None


class Clocks(Part):
    """The GPU's clock state over a cell's samples and the regime it was sampled in
    (harness/timing/clocks.py): NVML's SM clock and board power read after every sample."""

    regime: str  # burst | sustained
    source: str | None = None  # None: no clock reader (``reason`` says why)
    reason: str | None = None
    sm_mhz: ClockStats | None = None
    power_w: ClockStats | None = None
    reads: int | None = None
    max_sm_mhz: float | None = None
    power_limit_w: float | None = None
    read_cost_us: float | None = None  # host time of one read (between samples)
    read_share: float | None = None  # all reads' cost over the sampling time
    discarded: int | None = None  # samples discarded as throttled (burst)
    discard_reasons: dict[str, int] | None = None
    throttled_kept: int | None = None  # throttled samples kept: no clean one within the time budget
    short_of_clean: bool | None = None  # fewer clean samples than min_samples
    idle_before_s: float | None = None  # since the previous timed cell on the device ended
    throttle_threshold: float | None = None  # burst: of max_sm_mhz
    recovery_s: float | None = None  # burst: idle after a discarded sample
    warmup: ClockWarmup | None = None  # sustained rows written before ``settle``
    pad: float | None = None  # those rows: samples' worth of work queued before each sample
    settle: ClockSettle | None = None  # sustained


class Launch(Part):
    """GPU launch hiding: the share of samples whose launches a spin kernel hid."""

    hidden_frac: float | None = None
    hold_us: float | None = None
    note: str | None = None


class ColdProbe(Part):
    """One cold-L2 flush probe (harness/timing/cold_l2.py)."""

    method: str | None = None
    flush: str | None = None
    verified: bool | None = None
    reason: str | None = None
    probe_mib: float | None = None
    hot_us: float | None = None
    cold_us: float | None = None
    ratio: float | None = None
    min_ratio: float | None = None
    hot_tbps: float | None = None
    cold_tbps: float | None = None


class ColdCheck(ColdProbe):
    """Cold mode: the flush chosen, why, and every probe made."""

    requested: str | None = None
    selection: str | None = None
    probes: dict[str, ColdProbe] | None = None


class Energy(Part):
    """NVML energy around the timing (harness/timing/energy.py)."""

    available: bool
    reason: str | None = None
    method: str | None = None
    source: str | None = None
    calls: int | None = None
    window_s: float | None = None
    energy_j: float | None = None
    j_per_call: float | None = None
    mean_w: float | None = None
    busy_frac: float | None = None


class TimeContents(Part):
    """What a row's time holds beside the call's own kernels (harness/timing/loop.py)."""

    timer: str
    kernels: bool
    launch_gaps: bool
    host_time: bool | None
    note: str


class TimingOptionsRecord(Part):
    """The timing options a row was measured with (harness.timing.TimingOptions as written).
    Options added later are optional: older rows lack them."""

    warmup: int
    min_samples: int
    max_samples: int
    target_rel_noise: float
    max_time_s: float
    host_bound_max_time_s: float | None = None
    long_call_ms: float | None = None
    mode: str
    cuda_graph: bool
    confidence: float
    min_sample_us: float
    max_calls_per_sample: int
    hide_launch: bool
    max_hold_ms: float
    flush_method: str
    keep_raw: bool
    stop_criterion: str | None = None
    cpu_clock: str | None = None
    energy_window_s: float | None = None
    clock_regime: str | None = None
    throttle_threshold: float | None = None
    throttle_recovery_s: float | None = None
    sampling: str | None = None
    warm_samples: int | None = None


# ---------------------------------------------------------------- metrics
class Roofline(Part):
    """The measured device ceilings and the share of them a timed row reached
    (harness.case.roofline); only ``reason`` where no ceilings were known."""

    reason: str | None = None
    bound: str | None = None  # compute | memory
    ridge_flop_per_byte: float | None = None
    ceiling_tbps: float | None = None
    ceiling_tflops: float | None = None
    pct_of_bw: float | None = None
    pct_of_flops: float | None = None
    pct_of_ceiling: float | None = None
    ceilings_key: str | None = None


# ---------------------------------------------------------------- the row's own parts
class RowConfig(Part):
    """The layer a cell ran (attn_contract.AttentionConfig as a dict) plus the case's seed and tags."""

    num_heads: int
    num_kv_heads: int
    head_size: int
    dtype: str
    kv_cache_dtype: str
    block_size: int
    kv_layout: str
    causal: bool
    sliding_window: int | None
    softcap: float
    scale: float | None
    alibi: bool
    sinks: bool
    seed: int
    tags: list[str]
    # MLA cells only (docs/mla.md): the value head size, the form and the latent dims.
    v_head_size: int | None = None
    attention_kind: str | None = None
    mla: dict[str, float | int] | None = None


class BatchSummary(Part):
    """The generated batch, in numbers (harness.case.workload.Batch.summary); empty on a row that
    did not get that far."""

    num_reqs: int | None = None
    num_tokens: int | None = None
    num_decode: int | None = None
    num_prefill: int | None = None
    num_extend: int | None = None
    max_query_len: int | None = None
    max_seq_len: int | None = None
    mean_seq_len: float | None = None
    total_kv_tokens: int | None = None
    num_blocks: int | None = None
    prefix_groups: int | None = None


class RowLayout(Part):
    """The case's layout facts (harness.case.layout.CaseLayout.as_dict)."""

    block_size: int
    num_reqs: int
    num_tokens: int
    max_query_len: int
    max_seq_len: int
    total_kv_tokens: int
    prefix_len: int
    prefix_groups: int
    num_blocks_used: int
    num_blocks: int
    max_blocks_per_req: int
    elt_bytes: int
    kv_elt_bytes: int
    logical_kv_bytes: int
    kv_cache_bytes: int


class VariantAxes(Part):
    """Which variant axes applied to the batch, and the variants one row stands for
    (harness.plan.cells.collapse_variants). Axis names and values are the backend's."""

    applied: list[str]
    segment_kinds: list[str]
    not_applied: dict[str, list[str]]
    stands_for: list[str]


class RowEnvironment(Part):
    """The isolated environment a `harness matrix` / `harness bisect` row ran in."""

    name: str
    versions: dict[str, str]  # requirement -> exact version (torch included)


__all__ = ["Part", "Scalar", "StatusValue", "RequestCheck", "KindCheck", "Recheck", "InvariantResult",
           "CudaGraphInfo", "ClockStats", "ClockSettle", "ClockWarmup", "Clocks", "SmClock", "Launch", "ColdProbe", "ColdCheck", "Energy", "TimeContents",
           "TimingOptionsRecord", "Roofline", "RowConfig", "BatchSummary", "RowLayout", "VariantAxes",
           "RowEnvironment"]
