"""Sustained sampling: the call's timed work on a GPU queue that never runs dry, sampled only once
the GPU has settled in the state a continuous loop of that work settles in.

Why the earlier sustained regime sampled near the boost clock (H200 2026-12-02: rows' median SM
clocks 1748-1980 MHz, a continuous loop of the same calls 1290-1545 MHz; H100: 1710 against
1395 MHz), read from that code and its rows:

- every sample ended with the host waiting on the sample's end event, so the GPU went idle for
  the host's statistics, stopping rule and NVML reads, and the sample's launch was hidden behind a
  spin kernel (one thread spinning, near idle power) that grew to 50-2300 us per sample
  (``launch.hold_us`` of reports/h200/2026-12-02/s5/clock-callforms rows): the GPU ran the call's
  work well under 100% of the time while sampling;
- Hopper's power controller acts on board power averaged over about a second (NVML's power
  reading rises linearly for ~0.9 s of load from idle, and the clock falls to its power-limited
  level only then: reports/h200/2026-12-02/probes/clocks.json), so a few ms of samples at a lower
  duty cycle, taken after other candidates' setups (graph captures, host syncs), sat in a state
  no continuous loop is in;
- the warm-up declared "steady" after 0.1-0.3 s when two reads of NVML's clock, which updates
  about every 0.1 s, repeated the same value: steadiness before the controller had acted.

Here, instead: samples are CUDA-event pairs around the timed work (a graph replay or the eager
calls), enqueued ``QUEUE_AHEAD_S`` of GPU time ahead of the one the host waits on, so the host's
work between samples overlaps queued work and the GPU never idles (a sample after which the
queue had run dry is not sustained: discarded). Before sampling, the same queue runs until
``settled_reason`` says the state is settled; samples taken before that are not sustained
samples and are discarded (counted in ``clocks.discard_reasons``). The candidates of one case
run in one stream back to back (``harness.timing.loop.time_in_turn``): the GPU stays busy from
one to the next.

Eager work whose host enqueue outlasts its GPU time (FA4's Python launcher on the callforms
mixed-step rows) cannot keep that queue ahead: most samples began on an idle GPU and timed the
host's rate, 238-927 us a call where burst read 75-494 us for the same calls (1.3-4.3x), and the
same call's rate moved 1.15-1.53x between the run's process and the cross-check's on one machine
(H100, reports/h100/2026-12-08). The regime is the GPU's state, not another quantity, so such work gets
a ``filler``: untimed replays of a CUDA graph of the same work (the loop captures it and checks
its output, ``harness.timing.loop``) queued before each sample (``fill_replays``), so the sample
times the eager launches as burst times them, with the host's enqueue hidden, and the GPU runs
the call's work back to back: the state the call's graph loop settles in, which is how issue 46
defines the settled clock. Where no graph of the call can be captured, the row stays its host's
rate and says so (``timing.contains.host_time``).

What "settled" is, from the 2026-12-06 probes (reports/h100/2026-12-06/loan3/clocks/probe.json,
reports/h200/2026-12-06/loan1/clocks/probe.json: NVML every ~38 ms over a 3 s graph loop after
1 s idle):

- At the 700 W limit the clock never settles to one value: the controller acts on the ~1 s
  power average, so the dip that brings the average to the limit (H100 FA3: 1725 -> 1170 MHz at
  0.84 s) stays in the average for a second and lets the clock climb back; it falls again when
  the dip leaves (1.77 s, 2.77 s): a cycle of about ``CONTROLLER_CYCLE_S`` whose swing shrinks
  (troughs 1170, 1380, 1440 MHz). The earlier rule (steady over 0.12 s) took a plateau of that
  cycle: 1680 MHz (H100) / 1410 MHz (H200) against the loop's last-second medians 1530 / 1365.
  Even a full one-second median taken right where the average reaches the limit is the first,
  hot cycle: 1.069x (H100) and 1.044x (H200) the last-second median; from one cycle later it is
  within 1.2% on all three power-limited traces (tests/timing/test_timing_sustained.py). So at
  the limit: settled once the power average holds only this call's work (``POWER_WINDOW_S`` of
  its own) and one cycle has passed since the average first reached the limit; then the row's
  samples are spread over one cycle (a sample every ``stride`` works, so that ``max_samples``
  span it; sampling goes on until the cycle is covered) and the settled clock
  (``timing.settled_sm_clock_mhz``) is the median NVML clock over that same stretch, read every
  ``READ_EVERY_S``: the row's clock and the settled clock describe the same second, no extra loop.
- Below the limit nothing throttles the call for power, so its sustained clock is its burst
  clock; a full power window is not needed to know that. With the clock at its maximum and the
  call's steady power predicted below ``BELOW_LIMIT_MARGIN`` of the limit, it is settled at once
  (after ``SETTLE_MIN_OWN_S``). The prediction: NVML's instantaneous power field where the driver
  has it (``NVML_FI_DEV_POWER_INSTANT``, the highest over the last ``SETTLE_WINDOW_S``), else the
  averaged power's linear ramp (the average of a step is a straight line for one window) fitted
  over readings whose window holds only this call's work and a load known to be flat before it
  (idle since the previous cell's queue ran out, or the previous call of the case), extrapolated
  to where the window holds only this call (``predicted_power``). H100 FlashInfer (592 W steady)
  fires; FA3 (clock 1680-1725 MHz before the limit, ramp towards ~750 W) and H200 FlashInfer
  (ramp towards 740-810 W: it does reach the limit) do not. Its settled clock: the median over
  the sampling and the settle's last ``SETTLE_WINDOW_S`` (a few ms of samples hold a reading or two).
- Otherwise (clock below maximum, power neither predictably low nor at the limit): busy for
  ``POWER_WINDOW_S``, this call's work for ``SETTLE_MIN_OWN_S`` and power and clock steady over
  ``SETTLE_WINDOW_S``, as before.

Cost (tests/timing/test_sustained_cost.py's model of reports/h100/2026-12-06/loan3/decode-sustained):
every power-limited row pays its own power window plus a cycle of sampling, about 2 s, 3 s after
idle: 83 of the main job's 251 timed rows on the H100, a floor of ~5.9x burst's wall (issue 46
asked for 2x; docs/measurement.md, "Clock regimes").

``settled_reason``, ``first_settled``, ``predicted_power`` and ``settled_clock`` are pure (CPU
tests drive them with the probes' traces); ``SustainedSampler`` needs a CUDA device.
"""

from __future__ import annotations

import collections
import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from harness.timing.clocks import CLOCK_TOL, POWER_TOL, ClockRead, ClockReader, below_max_reasons, clock_stats

POWER_WINDOW_S = 1.0  # NVML's board power (and the controller's input) averages about this long on Hopper
# The power controller's cycle at the limit: the clock's drops 0.84 -> 1.77 -> 2.77 s (H100 FA3),
# 0.81 -> 1.80 s (H200 FA3), 0.82 -> 1.81 -> 2.75 s (H200 FlashInfer) in the 2026-12-06 probes:
# 0.93-1.0 s, one power window (the dip that brought the average to the limit leaves it).
CONTROLLER_CYCLE_S = 1.0
SETTLE_MIN_OWN_S = 0.1  # this call's own work before its state counts, after another call kept the GPU busy
# Readings over this long judge "steady" and the below-limit shortcut: NVML's clock updates about
# every 0.1 s (the H200 probe's reads 50 ms apart came in equal pairs), so it spans an update.
SETTLE_WINDOW_S = 0.12
SETTLE_MAX_S = 4.0  # a settle that never settles stops here and says so (at the limit it takes ~2 s after idle)
POWER_LIMITED = 0.97  # power at or above this share of the enforced limit: the controller holds it
# Below-limit shortcut: predicted steady power under this share of the limit, the clock at its
# maximum. H100 FlashInfer's 592 W is 0.85 of 700 W; the ramp's prediction came out 2-4% high.
BELOW_LIMIT_MARGIN = 0.90
# The ramp fit needs this many of NVML's power updates (about every 0.1 s) spanning RAMP_MIN_S: with
# three, H100 FlashInfer's prediction came out 5% low (562 W for 592 W), with four 2-4% high.
RAMP_POINTS = 4
RAMP_MIN_S = 0.25
QUEUE_AHEAD_S = 0.003  # GPU time kept queued behind the sample the host waits on
# Eager work whose host enqueue outlasts its GPU time cannot keep the queue ahead by itself
# (``fill_replays``): untimed graph replays of the same work are queued before each sample so
# that the GPU time per sample is FILL_FACTOR x the host's enqueue of it; doubled after a sample
# that still started on an idle GPU, up to FILL_MAX.
FILL_FACTOR = 2.0
FILL_MAX = 256
LEAVE_AHEAD_S = 0.01  # work left queued at the end of a cell's sampling (covers the host's row-writing)
READ_EVERY_S = 0.01  # NVML reads while settling and over the settled clock's window
BEFORE_SETTLED = "taken before the settled state"
QUEUE_DRY = "the queue had run dry before it (it started on an idle GPU)"
AT_LIMIT = "at the power limit"
BELOW_LIMIT = "below the limit"
STEADY = "steady"


Reading = tuple[float, ClockRead]  # (seconds on the host clock, the reading)


def _moved(xs: Sequence[float]) -> float:
    lo, hi = min(xs), max(xs)
    return (hi - lo) / hi if hi > 0 else 0.0


def _fit(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares line (slope, intercept) through (t, y) points."""
    n = len(points)
    mt = sum(t for t, _ in points) / n
    my = sum(y for _, y in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    slope = sum((t - mt) * (y - my) for t, y in points) / var if var > 0 else 0.0
    return slope, my - slope * mt


def predicted_power(reads: Sequence[Reading], now: float, *, own_since: float,
                    flat_since: float | None, window_s: float = SETTLE_WINDOW_S) -> tuple[float, str] | None:
    """The board power this call's continuous loop settles at, predicted early, and how; None when
    it cannot be told yet. ``flat_since``: since when the load before ``own_since`` was one flat
    load (idle, or the previous call's work; None: unknown).

    NVML's instantaneous power (``ClockRead.power_instant_w``) where read: the highest over the last
    ``window_s`` of this call's work. Else the averaged power: while its ~1 s window holds only the
    flat load and this call's, it is a straight line reaching the call's power when the window
    holds only this call (at ``own_since + POWER_WINDOW_S``). The line is fitted through the
    readings where a new value appeared (about when the driver updated it: a held value's later
    readings would bend the fit), RAMP_POINTS or more spanning RAMP_MIN_S; none of them while the
    window still reaches back before ``flat_since``. On the probes' traces it came out 2-4% above
    the steady power (H100 FlashInfer: 604-615 W for 592 W)."""
    recent = [r for t, r in reads if now - window_s <= t <= now and t >= own_since]
    inst = [r.power_instant_w for r in recent if r.power_instant_w is not None]
    if inst:
        return max(inst), "instantaneous power"
    if flat_since is None:
        return None
    fit_from = max(own_since, flat_since + POWER_WINDOW_S)  # the average's window no older than the flat load
    pts: list[tuple[float, float]] = []  # where a new value appeared: about when the driver updated it
    prev: float | None = None
    for t, r in reads:
        if t < own_since or t > min(now, own_since + POWER_WINDOW_S) or r.power_w is None:
            continue
        if prev is not None and r.power_w != prev and t >= fit_from:
            pts.append((t, r.power_w))
        prev = r.power_w
    if len(pts) < RAMP_POINTS or pts[-1][0] - pts[0][0] < RAMP_MIN_S:
        return None
    slope, at0 = _fit(pts)
    return at0 + slope * (own_since + POWER_WINDOW_S), "the averaged power's ramp"


def _limit_reached(reads: Sequence[Reading], own_since: float, power_limit_w: float) -> float | None:
    """When the averaged power first read at the limit during this call's work."""
    return next((t for t, r in reads if t >= own_since and r.power_w is not None
                 and r.power_w >= POWER_LIMITED * power_limit_w), None)


def settled_reason(reads: Sequence[Reading], now: float, *, busy_since: float, own_since: float,
                   power_limit_w: float | None, max_sm_mhz: float | None = None, flat_since: float | None = None,
                   min_busy_s: float = POWER_WINDOW_S, min_own_s: float = SETTLE_MIN_OWN_S,
                   window_s: float = SETTLE_WINDOW_S, cycle_s: float = CONTROLLER_CYCLE_S) -> str | None:
    """Why the GPU's state at ``now`` is the settled state of the work it runs, or None.

    ``reads``: NVML readings taken while the work ran, oldest first; ``busy_since``: since when
    the GPU has been busy without a gap (any call's work); ``own_since``: since when it has run
    this call's work; ``flat_since``: see ``predicted_power``. Settled (readings covering the last
    ``window_s``, this call's work for ``min_own_s``), the first that holds:

    - below the limit: the clock at ``max_sm_mhz`` (within CLOCK_TOL) and the predicted steady
      power under BELOW_LIMIT_MARGIN of ``power_limit_w``: nothing will throttle it for power;
    - at the power limit: the power at POWER_LIMITED of the limit over the window, this call's
      own work for ``min_busy_s`` (the average holds only it) and ``cycle_s`` since the average
      first reached the limit during it (the first cycle after reaching it runs hot); the
      sampler then samples over one cycle (``needs_cycle``);
    - steady: busy for ``min_busy_s``, power (< POWER_TOL) and clock (< CLOCK_TOL) steady over
      the window, the power below the limit."""
    if now - own_since < min_own_s:
        return None
    start = now - window_s
    if not reads or reads[0][0] > start:
        return None  # the window is not covered by readings yet
    recent = [r for t, r in reads if start <= t <= now and t >= own_since]
    if len(recent) < 2:
        return None
    watts = [r.power_w for r in recent if r.power_w is not None]
    mhz = [r.sm_mhz for r in recent if r.sm_mhz is not None]
    if power_limit_w and max_sm_mhz and mhz and min(mhz) >= (1 - CLOCK_TOL) * max_sm_mhz:
        got = predicted_power(reads, now, own_since=own_since, flat_since=flat_since, window_s=window_s)
        if got is not None and got[0] < BELOW_LIMIT_MARGIN * power_limit_w:
            return (f"{BELOW_LIMIT}: SM clock at its maximum {max_sm_mhz:g} MHz and steady power predicted "
                    f"{got[0]:.0f} W from {got[1]} (< {BELOW_LIMIT_MARGIN:.0%} of {power_limit_w:g} W) "
                    f"after {now - own_since:.2f} s of its own work")
    if power_limit_w and watts and min(watts) >= POWER_LIMITED * power_limit_w:
        reached = _limit_reached(reads, own_since, power_limit_w)
        if now - own_since < min_busy_s or reached is None or now - reached < cycle_s:
            return None
        return (f"{AT_LIMIT}: power >= {POWER_LIMITED:.0%} of {power_limit_w:g} W, {now - own_since:.2f} s of its "
                f"own work, {now - reached:.2f} s since the average reached the limit; samples and the settled "
                f"clock over the next {cycle_s:g} s (one controller cycle)")
    if now - busy_since < min_busy_s:
        return None
    if (not watts or _moved(watts) < POWER_TOL) and (not mhz or _moved(mhz) < CLOCK_TOL):
        return (f"{STEADY}: over {window_s:g} s the SM clock moved < {CLOCK_TOL:.0%} and power < {POWER_TOL:.0%} "
                f"after {now - busy_since:.2f} s busy")
    return None


def needs_cycle(reason: str) -> bool:
    """Whether a state settled for ``reason`` is sampled over one controller cycle (at the limit)."""
    return reason.startswith(AT_LIMIT)


def first_settled(reads: Sequence[Reading], *, busy_since: float, own_since: float,
                  power_limit_w: float | None, **kw: Any) -> float | None:
    """The host time of the first reading at which ``settled_reason`` says settled, or None.
    A sample that ended before it is not a sustained sample."""
    for i, (t, _) in enumerate(reads):
        if settled_reason(reads[:i + 1], t, busy_since=busy_since, own_since=own_since,
                          power_limit_w=power_limit_w, **kw):
            return t
    return None


def fill_replays(host_s: float, work_s: float, factor: float = FILL_FACTOR, cap: int = FILL_MAX) -> int:
    """Untimed replays of a graph of the work to queue before each eager sample of it, so that the
    GPU time queued per sample (the sample's own work and the replays) is ``factor`` x ``host_s``,
    the host's seconds to enqueue one sample's work: 0 when the work alone covers that (``work_s``
    its GPU seconds), at most ``cap``."""
    if host_s <= 0 or factor * host_s <= work_s:
        return 0
    if work_s <= 0:
        return cap
    return min(cap, math.ceil(factor * host_s / work_s) - 1)


def settled_clock(reads: Sequence[Reading], since: float, until: float = math.inf) -> float | None:
    """Median SM clock over the readings from ``since`` to ``until``: over a sustained row's
    sampling, which at the limit spans one controller cycle."""
    xs = [r.sm_mhz for t, r in reads if since <= t <= until and r.sm_mhz is not None]
    return statistics.median(xs) if xs else None


@dataclass
class Stream:
    """The device's queue as sustained cells leave it: the end event of the last work enqueued,
    since when the GPU has been busy without a gap, since when the last cell ran its own work and
    when its queued work was to run out (host clock). One per process (a worker owns its device);
    consecutive cells of a case continue it."""

    tail: Any = None
    busy_since: float | None = None
    own_since: float | None = None
    idle_from: float | None = None


STREAMS: dict[str, Stream] = {}


@dataclass
class SustainedSampler:
    """One cell's sustained sampling on its device's stream (CUDA). ``work`` runs the timed work
    (``calls`` forwards), ``est_s`` is its rough GPU time; ``flush`` (cold mode) runs before each
    sample; ``max_samples`` (the stopping rule's cap) sets how sparsely samples are taken over a
    controller cycle; ``filler`` (eager work whose host enqueue outlasts it: a replay of a CUDA
    graph of the same work) is queued ``fill`` times, untimed, before each sample, so the host's
    enqueue of the sample overlaps queued work and the sample times the GPU's work alone, in the
    state the call's graph loop settles in. ``settle()`` then ``take()`` per sample (seconds per
    call, or None: discarded) while the loop also asks ``window_open()``."""

    device: Any
    work: Callable[[], None]
    calls: int
    est_s: float
    reader: ClockReader | None
    max_time_s: float
    flush: Callable[[], None] | None = None
    max_samples: int = 500
    filler: Callable[[], None] | None = None
    fill: int = 0  # filler replays before each sample (raised while samples still start on an idle GPU)
    clock: Callable[[], float] = time.perf_counter
    trace: list[Reading] = field(default_factory=list)  # settle readings
    window: list[Reading] = field(default_factory=list)  # readings every READ_EVERY_S while sampling
    sample_reads: list[ClockRead] = field(default_factory=list)
    discarded: dict[str, int] = field(default_factory=dict)
    kept_dry: int = 0
    settle: dict[str, Any] | None = None
    settled_sm_clock_mhz: float | None = None
    cycle: bool = False  # settled at the limit: samples spread over one controller cycle
    stride: int = 1  # works per sample while sampling (the sample is the last one)
    extra_reads: int = 0  # reads after a sample that fell between two window reads
    works_sampled: int = 0  # works run while sampling, the untimed ones between spread samples included
    kept_mhz: list[float | None] = field(default_factory=list)  # the clock after each kept sample

    def __post_init__(self) -> None:
        import torch

        self._torch = torch
        self.stream = STREAMS.setdefault(str(self.device), Stream())
        if self.filler is None:
            self.fill = 0
        self.fill_raised = 0
        self._set_depth()
        self.pending: collections.deque[tuple[Any, Any, bool]] = collections.deque()
        self.sampling_from: float | None = None
        self.enqueued = 0
        self.gaps = 0

    def _set_depth(self) -> None:
        """``sample_s``: one sample's GPU time, its filler replays included; ``depth``: samples kept
        queued behind the one waited on."""
        self.sample_s = max(self.est_s, 1e-6) * (1 + self.fill)
        self.depth = max(2, math.ceil(QUEUE_AHEAD_S / self.sample_s))

    @property
    def host_bound(self) -> bool:
        """Most samples started on an idle GPU: the host cannot enqueue the call as fast as the GPU
        runs it (eager host-bound work), so a continuous loop of it has these gaps too."""
        return self.enqueued >= 10 and self.gaps > self.enqueued / 2

    # -------------------------------------------------------------- the queue
    def _enqueue(self) -> None:
        """Queue one sample. It followed a gap when the GPU had reached its start event before the
        host finished enqueueing it (everything queued before had run: the GPU idled while the
        host caught up, or waited on the host's launches inside the sample); then the busy span
        restarts, unless the call is host-bound (its own loop has these gaps)."""
        ev = self._torch.cuda.Event
        fresh = self.stream.tail is None
        if self.filler is not None:
            for _ in range(self.fill):
                self.filler()
            if self.sampling_from is not None:
                self.works_sampled += self.fill
        if self.flush is not None:
            self.flush()
        e0, e1 = ev(enable_timing=True), ev(enable_timing=True)
        e0.record()
        self.work()
        e1.record()
        gap = fresh or e0.query()
        self.enqueued += 1
        self.gaps += gap
        if gap and self.pending and self.filler is not None and self.fill < FILL_MAX:
            # queued behind earlier samples and still started on an idle GPU: the host's enqueue outran them
            self.fill = min(FILL_MAX, 2 * max(1, self.fill))
            self.fill_raised += 1
            self._set_depth()
        if gap and not self.host_bound:
            self.stream.busy_since = self.clock()
        self.pending.append((e0, e1, gap))
        self.stream.tail = e1

    def _next(self) -> tuple[float, bool]:
        """The oldest queued sample's GPU seconds once done, and whether it followed a gap."""
        while len(self.pending) <= self.depth:
            self._enqueue()
        e0, e1, gap = self.pending.popleft()
        e1.synchronize()
        return e0.elapsed_time(e1) / 1e3, gap

    def _start(self) -> tuple[float, bool, float | None]:
        """This call's start on the stream, whether earlier work was still queued (then its own
        work begins once that has run: at most LEAVE_AHEAD_S later), and since when the load
        before it was flat: the previous call's own start, or when the queue last ran out."""
        now = self.clock()
        tail = self.stream.tail
        if tail is None or self.stream.busy_since is None or tail.query():
            self.stream.busy_since = now  # the GPU has nothing queued: a busy span starts here
            return now, False, (self.stream.idle_from if tail is not None else -math.inf)
        return now + LEAVE_AHEAD_S, True, self.stream.own_since

    # -------------------------------------------------------------- the phases
    def run_settle(self) -> None:
        """Run the work back to back until ``settled_reason`` says settled (at most SETTLE_MAX_S)."""
        own, previous_busy, flat_since = self._start()
        first = self.reader.read() if self.reader is not None else None
        last_read = -math.inf
        before = 0
        reason = ""
        while True:
            self._next()
            before += 1
            now = self.clock()
            if self.reader is None:
                if now - (self.stream.busy_since or own) >= POWER_WINDOW_S and now - own >= SETTLE_MIN_OWN_S:
                    reason = f"no clock reader: {now - own:.2f} s of work, settledness unknown"
                    break
            elif now - last_read >= READ_EVERY_S:
                self.trace.append((now, self.reader.read()))
                last_read = now
                why = settled_reason(self.trace, now, busy_since=self.stream.busy_since or own, own_since=own,
                                     power_limit_w=self.reader.power_limit_w, max_sm_mhz=self.reader.max_sm_mhz,
                                     flat_since=flat_since)
                if why:
                    reason = why
                    break
            if now - own >= SETTLE_MAX_S:
                reason = f"time cap {SETTLE_MAX_S:g} s (not settled: clock or power still moving)"
                break
        end = max(self.clock(), own)
        self.stream.own_since = own
        if before:
            self.discarded[BEFORE_SETTLED] = before
        self.cycle = needs_cycle(reason)
        if self.cycle:  # max_samples samples span the cycle; a noise rule met earlier waits for it
            self.stride = max(1, math.floor(CONTROLLER_CYCLE_S / (self.max_samples * self.sample_s)))
        last = self.trace[-1][1] if self.trace else None
        if self.host_bound:
            reason += f"; host-bound: {self.gaps} of {self.enqueued} samples started on an idle GPU"
        self.settle = {"seconds": end - own, "busy_s": end - (self.stream.busy_since or own), "reason": reason,
                       "previous_busy": previous_busy, "samples_before": before, "reads": len(self.trace),
                       "queue_ahead_s": self.depth * self.sample_s,
                       "sm_mhz_start": first.sm_mhz if first else None, "sm_mhz_end": last.sm_mhz if last else None,
                       "power_w_start": first.power_w if first else None,
                       "power_w_end": last.power_w if last else None}
        self.sampling_from = end

    def window_open(self) -> bool:
        """Sampling must go on: settled at the limit and one controller cycle not yet covered."""
        return self.cycle and self.sampling_from is not None and self.clock() - self.sampling_from < CONTROLLER_CYCLE_S

    def _read_window(self, now: float) -> ClockRead | None:
        if self.reader is None:
            return None
        if self.window and now - self.window[-1][0] < READ_EVERY_S:
            return None
        r = self.reader.read()
        self.window.append((now, r))
        return r

    def take(self) -> float | None:
        """One sustained sample (seconds per call), or None: the queue ran dry before it (kept for a
        host-bound call, or once the time budget is spent; counted in ``kept_dry``). At the limit
        the sample is the last of ``stride`` works, so the row's samples spread over the cycle."""
        if self.settle is None:
            self.run_settle()
        for _ in range(self.stride - 1):  # untimed: the loop's continuous work between spread samples
            self._next()
            self._read_window(self.clock())
        gpu_s, dry = self._next()
        self.works_sampled += self.stride
        r = None
        if self.reader is not None:
            r = self._read_window(self.clock())
            if r is None:
                r = self.reader.read()
                self.extra_reads += 1
            self.sample_reads.append(r)
        if dry:  # the sample started on an idle GPU
            if not (self.host_bound or (self.sampling_from is not None
                                        and self.clock() - self.sampling_from > self.max_time_s)):
                self.discarded[QUEUE_DRY] = self.discarded.get(QUEUE_DRY, 0) + 1
                return None
            self.kept_dry += 1
        self.kept_mhz.append(r.sm_mhz if r is not None else None)
        return gpu_s / self.calls

    __call__ = take  # the sampler is the loop's ``take``

    def leave(self) -> None:
        """End of sampling: LEAVE_AHEAD_S more work queued (untimed), which runs on while the host
        finishes this row, so the next call of the case continues a busy GPU."""
        for _ in range(math.ceil(LEAVE_AHEAD_S / max(self.est_s, 1e-6))):
            (self.filler or self.work)()
        end = self._torch.cuda.Event()
        end.record()
        self.stream.tail = end
        self.stream.idle_from = self.clock() + LEAVE_AHEAD_S  # about when the queued work runs out
        self.pending.clear()

    def record(self, base: dict[str, Any], sampling_s: float) -> dict[str, Any]:
        """The row's ``clocks`` (``base``: the regime's common fields) with this sampling's reads,
        discards and settle."""
        reads = self.sample_reads
        window = None
        if self.sampling_from is not None:  # below the limit also the settle's last window, where it was judged
            since = self.sampling_from - (0.0 if self.cycle else SETTLE_WINDOW_S)
            self.settled_sm_clock_mhz = settled_clock(self.trace + self.window, since)
            window = clock_stats([r.sm_mhz for t, r in self.trace + self.window if t >= since and r.sm_mhz is not None])
        out = dict(base)
        cost = out.get("read_cost_us")
        n_reads = len(self.window) + self.extra_reads
        out["read_share"] = cost * n_reads / (sampling_s * 1e6) if cost is not None and sampling_s > 0 else None
        out.update(sm_mhz=clock_stats([r.sm_mhz for r in reads if r.sm_mhz is not None]),
                   power_w=clock_stats([r.power_w for r in reads if r.power_w is not None]),
                   below_max_reasons=below_max_reasons(reads), reads=n_reads + len(self.trace), discarded=sum(self.discarded.values()),
                   discard_reasons=dict(self.discarded), throttled_kept=self.kept_dry, settle=self.settle,
                   warmup=None, pad=None, window_sm_mhz=window)
        return out


__all__ = ["AT_LIMIT", "BEFORE_SETTLED", "BELOW_LIMIT", "BELOW_LIMIT_MARGIN", "CONTROLLER_CYCLE_S", "POWER_LIMITED",
           "FILL_FACTOR", "FILL_MAX", "POWER_WINDOW_S", "QUEUE_AHEAD_S", "QUEUE_DRY", "SETTLE_MAX_S", "SETTLE_MIN_OWN_S", "SETTLE_WINDOW_S",
           "STEADY", "STREAMS", "Stream", "SustainedSampler", "fill_replays", "first_settled", "needs_cycle", "predicted_power",
           "settled_clock", "settled_reason"]
