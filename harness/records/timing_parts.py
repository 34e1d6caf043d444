"""The timing parts of a result row (harness/records/payloads.py ``Timing``): how a row was
sampled, the GPU's clocks over its samples, the cold-L2 check, energy and the timing options.
Strict and closed like every part (harness/records/parts.py)."""

from __future__ import annotations

from harness.records.parts import Part


class CudaGraphInfo(Part):
    """Whether timing replayed the call from a CUDA graph, and why (not)."""

    used: bool
    """Whether timing replayed the call from a CUDA graph."""
    reason: str
    """Why (not)."""
    required: str | None = None
    """The support level the batch needs (CudaGraphSupport name)."""
    declared: str | None = None
    """The level the backend declares."""
    calls_per_replay: int | None = None
    """Calls captured in one graph replay."""


class SmClock(Part):
    """GPU SM clock around the sampling (MHz); a probe that failed leaves its field None."""

    before: float | None = None
    """SM clock before sampling, MHz."""
    after: float | None = None
    """SM clock after sampling, MHz."""
    source: str | None = None
    """Where the reading came from."""
    during_first: float | None = None
    """SM clock at the first sample, MHz."""
    during_last: float | None = None
    """SM clock at the last sample, MHz."""
    throttled: bool | None = None
    """Whether the GPU was throttling."""


class ClockStats(Part):
    """min / median / max of one quantity over a cell's samples."""

    min: float
    """Smallest value."""
    median: float
    """Median value."""
    max: float
    """Largest value."""
    mean: float | None = None
    """Mean value (schema 6; absent before). At the power limit NVML's clock takes about ten levels
    a second, and a median can jump between neighbouring levels with a small change of weight;
    the mean does not."""


class ClockWarmup(Part):
    """Sustained regime: the continuous work run before sampling (harness.timing.clocks.warm_to_steady)."""

    seconds: float | None = None
    """Seconds of continuous work before sampling."""
    chunks: int | None = None
    """Work chunks run."""
    reason: str | None = None
    """Why it stopped."""
    previous_busy: bool | None = None
    """The previous sustained cell ended within SUSTAIN_RECENT_S."""
    idle_before_s: float | None = None
    """Idle seconds before the warm-up."""
    min_s: float | None = None
    """The least warm-up asked for, seconds."""
    sm_mhz_start: float | None = None
    """SM clock at its start, MHz."""
    sm_mhz_end: float | None = None
    """SM clock at its end, MHz."""
    power_w_start: float | None = None
    """Board power at its start, W."""
    power_w_end: float | None = None
    """Board power at its end, W."""


class ClockSettle(Part):
    """Sustained regime: the continuous work run until the state settled, before sampling
    (harness/timing/sustained.py)."""

    seconds: float | None = None
    """Seconds this call's own settle took."""
    busy_s: float | None = None
    """Seconds the GPU had been busy without a gap when the settle ended (any call's work)."""
    reason: str | None = None
    """Why the state counted as settled (power at the limit, power and clock steady, or a budget)."""
    previous_busy: bool | None = None
    """The queue still held earlier work when this call's settle started."""
    samples_before: int | None = None
    """Samples taken while settling: not sustained, discarded."""
    reads: int | None = None
    """NVML reads during the settle."""
    queue_ahead_s: float | None = None
    """Seconds of work kept queued ahead of the sample the host waits on."""
    sm_mhz_start: float | None = None
    """SM clock when the settle started, MHz."""
    sm_mhz_end: float | None = None
    """SM clock when it ended, MHz."""
    power_w_start: float | None = None
    """Board power when the settle started, W."""
    power_w_end: float | None = None
    """Board power when it ended, W."""


class Clocks(Part):
    """The GPU's clock state over a cell's samples and the regime it was sampled in
    (harness/timing/clocks.py): NVML's SM clock and board power read after every sample."""

    regime: str
    """burst | sustained."""
    source: str | None = None
    """The clock reader; None: none (reason says why)."""
    reason: str | None = None
    """Why there is no reader."""
    sm_mhz: ClockStats | None = None
    """SM clock over the samples, MHz."""
    power_w: ClockStats | None = None
    """Board power over the samples, W."""
    below_max_reasons: dict[str, int] | None = None
    """Over the samples' readings below ``max_sm_mhz``: how many had each of NVML's clock-event
    reasons set (``sw_power_cap``, ``hw_slowdown``, ``sw_thermal_slowdown``, ...; ``none``: no
    bit set). None: no reading below the maximum, or a driver without the query (schema 7)."""
    reads: int | None = None
    """Readings taken."""
    max_sm_mhz: float | None = None
    """The GPU's maximum SM clock, MHz."""
    power_limit_w: float | None = None
    """The board's power limit, W."""
    read_cost_us: float | None = None
    """Host time of one read (between samples), microseconds."""
    read_share: float | None = None  # all reads' cost over the sampling time
    """All reads' cost over the sampling time."""
    discarded: int | None = None
    """Samples discarded as throttled (burst)."""
    discard_reasons: dict[str, int] | None = None
    """Discarded samples per reason."""
    throttled_kept: int | None = None
    """Throttled samples kept: no clean one within the time budget."""
    short_of_clean: bool | None = None
    """Fewer clean samples than min_samples."""
    idle_before_s: float | None = None
    """Seconds since the previous timed cell on the device ended."""
    throttle_threshold: float | None = None
    """Burst: the share of max_sm_mhz below which a sample counts as throttled."""
    recovery_s: float | None = None
    """Burst: idle seconds after a discarded sample."""
    warmup: ClockWarmup | None = None
    """Sustained rows written before ``settle``: the work run before sampling."""
    pad: float | None = None
    """Sustained rows written before ``settle``: samples' worth of work queued before each sample."""
    settle: ClockSettle | None = None
    """Sustained: how the GPU's state settled before sampling (harness/timing/sustained.py)."""
    window_sm_mhz: ClockStats | None = None
    """Sustained (schema 6): the SM clock read at a fixed time step over the stretch the settled
    clock is taken from (``timing.settled_sm_clock_mhz`` is its median); ``sm_mhz`` is read once
    a sample, so it weighs the same stretch by work, not by time."""
    raw_sm_mhz: list[float | None] | None = None
    """Sustained: the SM clock read after each kept sample, in the samples' order (MHz; None: no
    reading; ``--keep-raw`` only, schema 6)."""


class Launch(Part):
    """GPU launch hiding: the share of samples whose launches a spin kernel hid."""

    hidden_frac: float | None = None
    """Share of samples whose launches a spin kernel hid."""
    hold_us: float | None = None
    """How long the spin kernel held the stream, microseconds."""
    note: str | None = None
    """Why it was (not) used."""
    fill_replays: int | None = None
    """Sustained eager rows whose host enqueue outlasts the work (schema 9): untimed replays of a
    CUDA graph of the same work queued before each sample, so the sample times the GPU's work
    with the host's enqueue hidden (harness/timing/sustained.py); None: no filler."""
    raw_hold_mhz: list[float | None] | None = None
    """``--keep-raw``, samples behind a spin kernel (schema 8): the SM clock over each kept
    sample's hold, right before its timed work (the spin's cycles over its event-timed length),
    in the samples' order (MHz; None: that sample had no hold)."""


class ColdProbe(Part):
    """One cold-L2 flush probe (harness/timing/cold_l2.py)."""

    method: str | None = None
    """How L2 was flushed."""
    l2_factor: int | None = None
    """The flush streamed this many times the L2 (absent before schema 5: 2)."""
    flush: str | None = None
    """The flush, in words."""
    verified: bool | None = None
    """Whether the probe saw it work."""
    reason: str | None = None
    """Why (not)."""
    probe_mib: float | None = None
    """The probe's buffer, MiB."""
    hot_us: float | None = None
    """The probe read with L2 hot, microseconds."""
    cold_us: float | None = None
    """The probe read after a flush, microseconds."""
    ratio: float | None = None
    """cold_us / hot_us."""
    min_ratio: float | None = None
    """The ratio that counts as flushed."""
    reference_us: float | None = None
    """The probe read after the coldest reference flush (8x the L2, read or write), microseconds."""
    coldness: float | None = None
    """(cold_us - hot_us) / (reference_us - hot_us): how much of what the reference evicts this flush evicts."""
    min_coldness: float | None = None
    """The coldness that counts as flushed (with the ratio)."""
    hot_tbps: float | None = None
    """Hot read bandwidth, TB/s."""
    cold_tbps: float | None = None
    """Cold read bandwidth, TB/s."""


class ColdCheck(ColdProbe):
    """Cold mode: the flush chosen, why, and every probe made."""

    requested: str | None = None
    """The flush method asked for."""
    selection: str | None = None
    """How the flush was chosen."""
    probes: dict[str, ColdProbe] | None = None
    """Every probe made, by method."""


class Energy(Part):
    """NVML energy around the timing (harness/timing/energy.py)."""

    available: bool
    """Whether NVML energy could be read."""
    reason: str | None = None
    """Why not."""
    method: str | None = None
    """How it was measured."""
    source: str | None = None
    """The counter read."""
    calls: int | None = None
    """Calls in the window."""
    window_s: float | None = None
    """The measuring window, seconds."""
    energy_j: float | None = None
    """Energy over the window, J."""
    j_per_call: float | None = None
    """Energy per call, J."""
    mean_w: float | None = None
    """Mean power, W."""
    busy_frac: float | None = None
    """Share of the window the GPU was busy."""


class TimeContents(Part):
    """What a row's time holds beside the call's own kernels (harness/timing/loop.py)."""

    timer: str
    """The timer used."""
    kernels: bool
    """Whether the time includes the call's kernels."""
    launch_gaps: bool
    """Whether it includes gaps between launches."""
    host_time: bool | None
    """Whether it includes host time (None: unknown)."""
    note: str
    """What it holds, in words."""


class TimingOptionsRecord(Part):
    """The timing options a row was measured with (harness.timing.TimingOptions as written).
    Options added later are optional: older rows lack them."""

    warmup: int
    """Untimed calls first."""
    min_samples: int
    """Fewest samples."""
    max_samples: int
    """Most samples."""
    target_rel_noise: float
    """Relative CI half-width aimed for."""
    max_time_s: float
    """Sampling time budget, seconds."""
    host_bound_max_time_s: float | None = None
    """The budget for host-bound calls, seconds."""
    long_call_ms: float | None = None
    """A call at least this long is timed one per sample, ms."""
    mode: str
    """hot | cold L2."""
    cuda_graph: bool
    """Whether CUDA graph replay was allowed."""
    confidence: float
    """The CI's confidence level."""
    min_sample_us: float
    """Calls are batched until a sample takes at least this long, microseconds."""
    max_calls_per_sample: int
    """Most calls batched into one sample."""
    hide_launch: bool
    """Whether a spin kernel hid launch overhead."""
    max_hold_ms: float
    """Longest spin-kernel hold, ms."""
    flush_method: str
    """The cold-L2 flush asked for."""
    keep_raw: bool
    """Whether every sample was kept (raw_us)."""
    stop_criterion: str | None = None
    """The stopping rule asked for."""
    cpu_clock: str | None = None
    """The CPU timer asked for."""
    energy_window_s: float | None = None
    """The energy window, seconds."""
    clock_regime: str | None = None
    """The clock regime asked for."""
    throttle_threshold: float | None = None
    """Burst: throttle threshold asked for."""
    throttle_recovery_s: float | None = None
    """Burst: idle after a throttled sample, seconds."""
    sampling: str | None = None
    """interleaved | sequential, as asked."""
    warm_samples: int | None = None
    """Untimed copies of the sample's work (hot) or calls before the flush (cold) before every timed sample,
    as asked; None: the default (since 2026-12-07: 2 before a work under 1 ms hot in interleaved rounds, else 1;
    before: 1). The row's ``warm_calls`` says how many calls ran."""


__all__ = ["CudaGraphInfo", "SmClock", "ClockStats", "ClockWarmup", "ClockSettle", "Clocks", "Launch", "ColdProbe", "ColdCheck", "Energy", "TimeContents", "TimingOptionsRecord"]
