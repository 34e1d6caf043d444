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
``settled_reason`` says the state is settled: the GPU continuously busy for at least
``POWER_WINDOW_S`` (the power average holds only this load) and this call's own work for at
least ``SETTLE_MIN_OWN_S``, and over the last ``SETTLE_WINDOW_S`` either the power at the
enforced limit (the controller holds it there: the clock it sets is the state) or power and
clock steady. Samples taken before that are not sustained samples and are discarded (counted
in ``clocks.discard_reasons``). The candidates of one case run in one stream back to back
(``harness.timing.loop.time_in_turn``): the GPU stays busy from one to the next, so
only the first pays the full power window after idle.

The row records the clock of the plain continuous loop just before sampling
(``timing.settled_sm_clock_mhz``: the median NVML clock over the settle's last window) beside
the clocks read while sampling (``clocks.sm_mhz``), and the settle itself (``clocks.settle``).

``settled_reason`` and ``first_settled`` are pure (CPU tests drive them with synthetic traces);
``SustainedSampler`` needs a CUDA device.
"""

from __future__ import annotations

import collections
import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from harness.timing.clocks import CLOCK_TOL, POWER_TOL, ClockRead, ClockReader

POWER_WINDOW_S = 1.0  # NVML's board power (and the controller's input) averages about this long on Hopper
SETTLE_MIN_OWN_S = 0.1  # this call's own work before its state counts, after another call kept the GPU busy
# Steady over this long: NVML's clock updates about every 0.1 s (the H200 probe's reads 50 ms apart
# came in equal pairs), so the window spans at least one update; each candidate after the first
# of a case pays about this much (the case's first pays the power window).
SETTLE_WINDOW_S = 0.12
SETTLE_MAX_S = 3.0  # a settle that never steadies stops here and says so
POWER_LIMITED = 0.97  # power at or above this share of the enforced limit: the controller holds it
# At the limit the controller moves the clock in steps (1230-1440 MHz on the H200 probe, about a
# second apart); a clock still moving more than this over the window is a transition, e.g. from the
# previous call's clock to this one's.
LIMITED_CLOCK_BAND = 0.03
QUEUE_AHEAD_S = 0.003  # GPU time kept queued behind the sample the host waits on
LEAVE_AHEAD_S = 0.01  # work left queued at the end of a cell's sampling (covers the host's row-writing)
READ_EVERY_S = 0.01  # NVML reads while settling (every sample while sampling)
BEFORE_SETTLED = "taken before the settled state"
QUEUE_DRY = "the queue had run dry before it (it started on an idle GPU)"


Reading = tuple[float, ClockRead]  # (seconds on the host clock, the reading)


def _moved(xs: Sequence[float]) -> float:
    lo, hi = min(xs), max(xs)
    return (hi - lo) / hi if hi > 0 else 0.0


def settled_reason(reads: Sequence[Reading], now: float, *, busy_since: float, own_since: float,
                   power_limit_w: float | None, min_busy_s: float = POWER_WINDOW_S,
                   min_own_s: float = SETTLE_MIN_OWN_S, window_s: float = SETTLE_WINDOW_S) -> str | None:
    """Why the GPU's state at ``now`` is the settled state of the work it runs, or None.

    ``reads``: NVML readings taken while the work ran, oldest first; ``busy_since``: since when
    the GPU has been busy without a gap (any call's work); ``own_since``: since when it has run
    this call's work. Settled: busy for ``min_busy_s`` (the power average holds only load), this
    call for ``min_own_s``, readings covering the last ``window_s`` and over them either the power
    at POWER_LIMITED of ``power_limit_w`` (the controller holds it at the limit) with the clock
    within LIMITED_CLOCK_BAND (not in a transition), or both the power (< POWER_TOL) and the SM
    clock (< CLOCK_TOL) steady."""
    if now - busy_since < min_busy_s or now - own_since < min_own_s:
        return None
    start = now - window_s
    if not reads or reads[0][0] > start:
        return None  # the window is not covered by readings yet
    recent = [r for t, r in reads if start <= t <= now and t >= own_since]
    if len(recent) < 2:
        return None
    watts = [r.power_w for r in recent if r.power_w is not None]
    mhz = [r.sm_mhz for r in recent if r.sm_mhz is not None]
    if (watts and power_limit_w and min(watts) >= POWER_LIMITED * power_limit_w
            and (not mhz or _moved(mhz) < LIMITED_CLOCK_BAND)):
        return (f"at the power limit: over {window_s:g} s the power stayed >= {POWER_LIMITED:.0%} of "
                f"{power_limit_w:g} W and the SM clock within {LIMITED_CLOCK_BAND:.0%} after {now - busy_since:.2f} s busy")
    if (not watts or _moved(watts) < POWER_TOL) and (not mhz or _moved(mhz) < CLOCK_TOL):
        return (f"steady: over {window_s:g} s the SM clock moved < {CLOCK_TOL:.0%} and power < {POWER_TOL:.0%} "
                f"after {now - busy_since:.2f} s busy")
    return None


def first_settled(reads: Sequence[Reading], *, busy_since: float, own_since: float,
                  power_limit_w: float | None, **kw: float) -> float | None:
    """The host time of the first reading at which ``settled_reason`` says settled, or None.
    A sample that ended before it is not a sustained sample."""
    for i, (t, _) in enumerate(reads):
        if settled_reason(reads[:i + 1], t, busy_since=busy_since, own_since=own_since,
                          power_limit_w=power_limit_w, **kw):
            return t
    return None


def settled_clock(reads: Sequence[Reading], until: float, window_s: float = SETTLE_WINDOW_S) -> float | None:
    """Median SM clock over the readings of the last ``window_s`` up to ``until``."""
    xs = [r.sm_mhz for t, r in reads if until - window_s <= t <= until and r.sm_mhz is not None]
    return statistics.median(xs) if xs else None


@dataclass
class Stream:
    """The device's queue as sustained cells leave it: the end event of the last work enqueued
    and since when the GPU has been busy without a gap. One per process (a worker owns its
    device); consecutive cells of a case continue it."""

    tail: Any = None
    busy_since: float | None = None


STREAMS: dict[str, Stream] = {}


def _stats(xs: Sequence[float]) -> dict[str, float] | None:
    return {"min": min(xs), "median": statistics.median(xs), "max": max(xs)} if xs else None


@dataclass
class SustainedSampler:
    """One cell's sustained sampling on its device's stream (CUDA). ``work`` runs the timed work
    (``calls`` forwards), ``est_s`` is its rough GPU time; ``flush`` (cold mode) runs before each
    sample. ``settle()`` then ``take()`` per sample (seconds per call, or None: discarded)."""

    device: Any
    work: Callable[[], None]
    calls: int
    est_s: float
    reader: ClockReader | None
    max_time_s: float
    flush: Callable[[], None] | None = None
    clock: Callable[[], float] = time.perf_counter
    trace: list[Reading] = field(default_factory=list)  # settle readings
    sample_reads: list[ClockRead] = field(default_factory=list)
    discarded: dict[str, int] = field(default_factory=dict)
    kept_dry: int = 0
    settle: dict[str, Any] | None = None
    settled_sm_clock_mhz: float | None = None

    def __post_init__(self) -> None:
        import torch

        self._torch = torch
        self.stream = STREAMS.setdefault(str(self.device), Stream())
        self.depth = max(2, math.ceil(QUEUE_AHEAD_S / max(self.est_s, 1e-6)))
        self.pending: collections.deque[tuple[Any, Any, bool]] = collections.deque()
        self.sampling_from: float | None = None
        self.enqueued = 0
        self.gaps = 0

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
        if self.flush is not None:
            self.flush()
        e0, e1 = ev(enable_timing=True), ev(enable_timing=True)
        e0.record()
        self.work()
        e1.record()
        gap = fresh or e0.query()
        self.enqueued += 1
        self.gaps += gap
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

    def _start(self) -> tuple[float, bool]:
        """This call's start on the stream, and whether earlier work was still queued (then its
        own work begins once that has run: at most LEAVE_AHEAD_S later)."""
        now = self.clock()
        tail = self.stream.tail
        if tail is None or self.stream.busy_since is None or tail.query():
            self.stream.busy_since = now  # the GPU has nothing queued: a busy span starts here
            return now, False
        return now + LEAVE_AHEAD_S, True

    # -------------------------------------------------------------- the phases
    def run_settle(self) -> None:
        """Run the work back to back until ``settled_reason`` says settled (at most SETTLE_MAX_S)."""
        own, previous_busy = self._start()
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
                                     power_limit_w=self.reader.power_limit_w)
                if why:
                    reason = why
                    break
            if now - own >= SETTLE_MAX_S:
                reason = f"time cap {SETTLE_MAX_S:g} s (not settled: clock or power still moving)"
                break
        end = max(self.clock(), own)
        if before:
            self.discarded[BEFORE_SETTLED] = before
        self.settled_sm_clock_mhz = settled_clock(self.trace, end)
        last = self.trace[-1][1] if self.trace else None
        if self.host_bound:
            reason += f"; host-bound: {self.gaps} of {self.enqueued} samples started on an idle GPU"
        self.settle = {"seconds": end - own, "busy_s": end - (self.stream.busy_since or own), "reason": reason,
                       "previous_busy": previous_busy, "samples_before": before, "reads": len(self.trace),
                       "queue_ahead_s": self.depth * self.est_s,
                       "sm_mhz_start": first.sm_mhz if first else None, "sm_mhz_end": last.sm_mhz if last else None,
                       "power_w_start": first.power_w if first else None,
                       "power_w_end": last.power_w if last else None}
        self.sampling_from = end

    def take(self) -> float | None:
        """One sustained sample (seconds per call), or None: the queue ran dry before it (kept for a
        host-bound call, or once the time budget is spent; counted in ``kept_dry``)."""
        if self.settle is None:
            self.run_settle()
        gpu_s, dry = self._next()
        if self.reader is not None:
            self.sample_reads.append(self.reader.read())
        if dry:  # the sample started on an idle GPU
            if self.host_bound or (self.sampling_from is not None
                                   and self.clock() - self.sampling_from > self.max_time_s):
                self.kept_dry += 1
                return gpu_s / self.calls
            self.discarded[QUEUE_DRY] = self.discarded.get(QUEUE_DRY, 0) + 1
            return None
        return gpu_s / self.calls

    __call__ = take  # the sampler is the loop's ``take``

    def leave(self) -> None:
        """End of sampling: LEAVE_AHEAD_S more work queued (untimed), which runs on while the host
        finishes this row, so the next call of the case continues a busy GPU."""
        for _ in range(math.ceil(LEAVE_AHEAD_S / max(self.est_s, 1e-6))):
            self.work()
        end = self._torch.cuda.Event()
        end.record()
        self.stream.tail = end
        self.pending.clear()

    def record(self, base: dict[str, Any], sampling_s: float) -> dict[str, Any]:
        """The row's ``clocks`` (``base``: the regime's common fields) with this sampling's reads,
        discards and settle."""
        reads = self.sample_reads
        out = dict(base)
        cost = out.get("read_cost_us")
        out["read_share"] = cost * len(reads) / (sampling_s * 1e6) if cost is not None and sampling_s > 0 else None
        out.update(sm_mhz=_stats([r.sm_mhz for r in reads if r.sm_mhz is not None]),
                   power_w=_stats([r.power_w for r in reads if r.power_w is not None]),
                   reads=len(reads) + len(self.trace), discarded=sum(self.discarded.values()),
                   discard_reasons=dict(self.discarded), throttled_kept=self.kept_dry, settle=self.settle,
                   warmup=None, pad=None)
        return out


__all__ = ["BEFORE_SETTLED", "POWER_LIMITED", "POWER_WINDOW_S", "QUEUE_AHEAD_S", "QUEUE_DRY", "SETTLE_MAX_S",
           "SETTLE_MIN_OWN_S", "SETTLE_WINDOW_S", "LIMITED_CLOCK_BAND", "STREAMS", "Stream", "SustainedSampler", "first_settled",
           "settled_clock", "settled_reason"]
