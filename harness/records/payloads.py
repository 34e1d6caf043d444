"""The payloads of a result row (harness/records/results.py ``ResultRow``): what the check, the
timing, the work and the host measured, and what the backend says it called. Each field's
docstring is what ``harness schema row`` says of it."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer

from harness.records.parts import (InvariantResult, KindCheck, Recheck, RequestCheck, Roofline)
from harness.records.timing_parts import (Clocks, ColdCheck, CudaGraphInfo, Energy, Launch, SmClock, TimeContents, TimingOptionsRecord)

# ---------------------------------------------------------------- payloads
class Payload(BaseModel):
    """A typed part of a row. Strict: a bool is not an int, a string is not a number.

    ``_omit_if_none`` names optional fields that did not exist in older files; they are left out
    of the JSON while unset, so rows written now have the same keys as rows written before."""

    # extra="forbid": a new measurement field must be declared here (optional, so old rows load),
    # never slipped in unnoticed; tests/records/test_results_rows.py loads every committed file.
    model_config = ConfigDict(strict=True, extra="forbid", use_attribute_docstrings=True)
    _omit_if_none: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _drop_unset_extensions(self, handler: Any) -> dict[str, Any]:
        d = handler(self)
        for k in self._omit_if_none:
            if d.get(k, 0) is None:
                del d[k]
        return d


class Check(Payload):
    """The output (and LSE) against the reference (what harness.cell.check.check_output returns). Error figures are
    None where they were not finite (a NaN/Inf output): JSON has no infinity."""

    passed: bool
    """Whether the output (and LSE, where checked) is within tolerance of the reference."""
    message: str
    """The verdict in words: the worst error against its limit, or what went wrong."""
    max_abs_err: float | None
    """Largest absolute difference from the reference; None where not finite."""
    max_rel_err: float | None
    """Largest relative difference from the reference; None where not finite."""
    rel_l2_err: float | None
    """||out - ref|| / ||ref|| over the whole output; None where not finite."""
    mismatch_fraction: float
    """Share of output elements outside atol + rtol * |ref|."""
    num_nan: int
    """NaN elements in the output."""
    num_inf: int
    """Infinite elements in the output."""
    num_unwritten: int
    """Output elements the backend never wrote (the poisoned buffer's value survived)."""
    lse_checked: bool
    """Whether the log-sum-exp output was checked too."""
    lse_max_abs_err: float | None
    """Largest absolute LSE difference from the reference; None where not checked or not finite."""
    atol: float
    """Absolute tolerance used."""
    rtol: float
    """Relative tolerance used."""
    lse_atol: float
    """Absolute tolerance of the LSE check."""
    max_mismatch_fraction: float
    """Share of elements allowed outside tolerance before the check fails."""
    # Per request (its index, errors, verdict), for localising a mismatch; newer rows only.
    num_requests: int | None = None
    """Requests in the batch the check looked at one by one (newer rows only)."""
    num_failed_requests: int | None = None
    """Requests whose own check failed."""
    per_request: list[RequestCheck] | None = None
    """Each request's verdict, for localising a mismatch."""
    worst_request: RequestCheck | None = None
    """The request with the largest relative L2 error."""
    per_kind: dict[str, KindCheck] | None = None
    """Summary per segment kind (decode, prefill, extend)."""
    rechecks: list[Recheck] | None = None
    """The output checked again after timing, or of a repeated call into a poisoned buffer."""
    inputs_modified: str | None = None
    """The inputs the backend wrote into (a mismatch whatever the output says)."""
    invariants: list[InvariantResult] | None = None
    """--invariants: each metamorphic check (harness/cell/invariants.py) with its status."""
    diagnosis: str | None = None
    """A known library bug the backend says this mismatch matches."""

    _omit_if_none = frozenset({"num_requests", "num_failed_requests", "per_request", "worst_request", "per_kind",
                               "rechecks", "inputs_modified", "invariants", "diagnosis"})


class Timing(Payload):
    """Per-call time in microseconds and how it was measured (harness.timing.time_callable)."""

    median_us: float
    """Median time per call, microseconds: the number every comparison uses."""
    min_us: float
    """Fastest sample per call, microseconds."""
    max_us: float
    """Slowest sample per call, microseconds."""
    mean_us: float
    """Mean of the samples per call, microseconds."""
    stdev_us: float
    """Standard deviation of the samples, microseconds."""
    q1_us: float
    """First quartile of the samples, microseconds."""
    q3_us: float
    """Third quartile of the samples, microseconds."""
    iqr_us: float
    """Interquartile range (q3 - q1), microseconds."""
    ci_low_us: float
    """Lower bound of the median's confidence interval, microseconds."""
    ci_high_us: float
    """Upper bound of the median's confidence interval, microseconds."""
    ci_coverage: float
    """The interval's confidence level (e.g. 0.95)."""
    rel_ci_half_width: float
    """Half the interval's width over the median: the row's measured noise."""
    samples: int
    """Samples taken (each of calls_per_sample calls)."""
    stop_criterion: str | None = None  # the stopping rule's name (harness.timing.stopping); newer rows
    """The stopping rule's name (harness/timing/stopping); newer rows."""
    stop_reason: str
    """Why sampling stopped (noise target met, sample or time budget reached, ...)."""
    stop: str
    """The stopping rule's verdict in words."""
    target_rel_noise: float
    """The relative CI half-width sampling aimed for."""
    sampling_s: float
    """Seconds spent sampling."""
    method: str
    """The timer: wall_clock (CPU) or cuda_event."""
    mode: str
    """L2 regime asked for: hot or cold."""
    l2: str
    """What the L2 cache held before each sample, in words."""
    cuda_graph: CudaGraphInfo
    """Whether the call was replayed from a CUDA graph, and why (not)."""
    calls_per_sample: int
    """Calls timed together in one sample (short calls are batched)."""
    sm_clock_mhz: SmClock | None
    """GPU SM clock around the sampling; None on the CPU."""
    options: TimingOptionsRecord
    """The timing options the row was measured with."""
    launch: Launch | None = None
    """GPU: how much of the launch overhead a spin kernel hid."""
    raw_us: list[float] | None = None
    """Every sample per call, microseconds (TimingOptions.keep_raw)."""
    cold_check: ColdCheck | None = None
    """Cold mode: how L2 flushing was verified."""
    cold_l2: str | None = None
    """Cold mode: the flush used, in words."""
    # Extensions: time per phase (e.g. {"plan": .., "kernel": ..}, microseconds) and energy.
    breakdown: dict[str, float] | None = None
    """Time per phase of the call, microseconds (e.g. plan, kernel)."""
    energy: Energy | None = None
    """NVML energy around the timing."""
    contains: TimeContents | None = None
    """What the time holds beside the call's own kernels (harness/timing/loop.py)."""
    clock_regime: Literal["burst", "sustained"] | None = None
    """GPU: the clock regime sampled in (burst | sustained), part of the row's identity: compare refuses rows of two regimes. Absent on CPU rows and older rows (burst, unrecorded)."""
    clocks: Clocks | None = None
    """GPU: the clocks over the row's samples (harness/timing/clocks.py)."""
    sampling: str | None = None
    """Whether the case's candidates were sampled in interleaved rounds or one after another."""
    warm_calls: int | None = None
    """GPU: untimed calls right before every timed sample (hot: a copy of the sample's work, calls_per_sample calls; cold: one call before the flush; 0 on the CPU). Absent on older rows (a hot sample then started with the L2 as the previous sample left it)."""
    rounds: int | None = None
    """Interleaved sampling: the case's complete rounds (= this row's samples; every candidate of the case has as many)."""
    settled_sm_clock_mhz: float | None = None
    """Sustained: the median SM clock of the call's own continuous loop over its sampling, read every 10 ms; at the power limit over one controller cycle, elsewhere with the settle's last 0.12 s (harness/timing/sustained.py). Rows before 2026-12-07: over the 0.12 s just before sampling."""

    _omit_if_none = frozenset({"stop_criterion", "launch", "raw_us", "cold_check", "cold_l2", "breakdown", "energy",
                               "contains", "clock_regime", "clocks", "sampling", "warm_calls", "rounds",
                               "settled_sm_clock_mhz"})


class Work(Payload):
    """The work of one call over a batch (harness/case/metrics.py ``attention_work``): its FLOPs
    and the bytes it must move. A row's ``Metrics`` is this plus what the measured time achieved;
    a field added here is one of the row's (a schema_version bump, harness/records/migrate.py)."""

    flops: float
    """Floating-point operations of one call (harness/case/metrics.py)."""
    bytes: float
    """Bytes one call must move: query, K/V, output and metadata."""
    bytes_q: float
    """Query bytes read."""
    bytes_kv: float
    """K/V cache bytes read (a shared prefix counted once per request reading it)."""
    bytes_o: float
    """Output bytes written."""
    bytes_meta: float
    """Index bytes read (block table, sequence lengths, offsets)."""
    visible_pairs: int
    """Query-key pairs the mask lets through (what the FLOPs count)."""
    kv_tokens_read: int
    """Distinct K/V tokens at least one query sees."""


class Metrics(Work):
    """The work of the call (``Work``'s fields) and what the measured time achieves
    (harness/case/roofline.py). Further fields are allowed but must be numbers (or null)."""

    model_config = ConfigDict(strict=True, extra="allow")
    __pydantic_extra__: dict[str, int | float | None] = Field(init=False)

    intensity: float | None
    """FLOP per byte; None without bytes."""
    tflops: float | None
    """Achieved TFLOP/s at the median time; None without a time."""
    tbps: float | None
    """Achieved TB/s at the median time; None without a time."""
    roofline: Roofline
    """The device ceilings and the share of them reached."""


class Host(Payload):
    """Host-side costs, milliseconds unless named otherwise. The cell's own stages are in
    ``breakdown_ms``; ``case_ms`` holds the case-level stages (generate, reference) it shared
    with ``case_cells`` cells. build/first_call are None on an error row that stopped earlier."""

    build_ms: float | None = None
    """Building the backend's call (metadata, plan); None on an error row that stopped earlier."""
    first_call_ms: float | None = None
    """The first call, JIT compilation included; None on an error row that stopped earlier."""
    enqueue_us: float | None = None
    """GPU: host time to launch one call, microseconds (kept out of median_us)."""
    breakdown_ms: dict[str, float] | None = None
    """The cell's own stages, milliseconds."""
    cell_ms: float | None = None
    """The whole cell, milliseconds."""
    case_ms: dict[str, float] | None = None
    """Case-level stages (generate, reference) shared with case_cells cells, milliseconds."""
    case_cells: int | None = None
    """Cells that shared the case-level stages."""

    _omit_if_none = frozenset({"build_ms", "first_call_ms", "enqueue_us", "breakdown_ms", "cell_ms", "case_ms",
                               "case_cells"})


class Call(Payload):
    """What the backend says it called (``describe_call``) plus what the harness adds beside it.

    The backend's facts are its own keys (kernel names, split counts, plan times, ...): the harness
    cannot know them and a backend must not need a harness change to record a new one, so they
    stay a mapping, ``facts`` (pydantic's extra fields, written at the top level of ``call`` as
    always). The keys the harness writes or reads itself are typed fields."""

    model_config = ConfigDict(strict=True, extra="allow")
    __pydantic_extra__: dict[str, Any] = Field(init=False)

    compare_with: str | None = None
    """Cascade backends: the plain backend to compare against."""
    # vLLM's cascade decision rule for the batch (harness/cell/cascade.py), on cascade backends' rows.
    rule_says_cascade: bool | None = None
    """vLLM's cascade decision rule's verdict on the batch (harness/cell/cascade.py), on cascade backends' rows."""
    rule_reason: str | None = None
    """Why the rule decided so."""
    rule_costs: dict[str, bool | int | float] | None = None
    """The rule's inputs and costs (min_prefix_len, requests_per_prefix, ...)."""
    # Context-parallel cells (harness/cell/context_parallel/): degree, combine, sharding, shard sizes.
    context_parallel: dict[str, Any] | None = None
    """Context-parallel cells: degree, combine, sharding, shard sizes."""
    untimed_work: str | None = None
    """Work an engine runs around this call that no backend's timed call includes, said on the row so
    its time is not read as the whole step (MLA prefill: the context's up-projection)."""

    _omit_if_none = frozenset({"compare_with", "rule_says_cascade", "rule_reason", "rule_costs", "context_parallel",
                               "untimed_work"})

    @property
    def facts(self) -> dict[str, Any]:
        """The backend's own ``describe_call`` keys (everything but the typed fields above)."""
        return dict(self.__pydantic_extra__ or {})


class Worker(Payload):
    """The worker process that produced the row (isolated runs only)."""

    pid: int | None
    """The worker's process id; None in-process."""
    device: str
    """The device the worker ran on."""


__all__ = ["Payload", "Check", "Timing", "Work", "Metrics", "Host", "Call", "Worker"]
