"""The GPU's clock state while a row is timed: a clock reader (NVML's SM clock and board power),
the clock regimes (``burst``, ``sustained``) and the throttle rule of burst sampling.

Reads happen between samples, after the sample's end event has completed, never inside the
timed region; each read costs host time only (the GPU is idle or running queued work while
the host reads), and every row records that cost (``clocks.read_cost_us``, ``read_share``).

Regimes (docs/measurement.md, "Clock regimes"):

- ``burst``: samples as they come after the cell's warm-up; a sample read back at an SM clock
  below ``throttle_threshold`` x the device's maximum SM clock is discarded (as nvbench does,
  its default threshold is 75% of the default clock) and the GPU left idle for
  ``throttle_recovery_s`` before the next. A cell that gets fewer clean samples than it needs
  keeps throttled ones and says so (``clocks.short_of_clean``).
- ``sustained``: the timed work on a queue that never runs dry, sampled once the GPU has settled
  in the state a continuous loop of it settles in (harness/timing/sustained.py): the state a
  serving GPU and the libraries' own timers (100+ ms loops) measure in.

Everything here except ``nvml_reader`` is pure: a reader and a clock are passed in, so CPU
tests drive it with synthetic traces.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Protocol, Sequence

REGIMES = ("burst", "sustained")
DEFAULT_REGIME: Literal["burst", "sustained"] = "burst"  # the lead picks it from the H200 runs (docs/measurement.md): one line to change
# nvbench discards samples below 75% of the default SM clock; the H200's boost is 1980 MHz and
# its clock under the 700 W limit 1100-1770 MHz (reports/h200/2026-12-02/callforms), so 0.75
# (1485 MHz) keeps a boost-clock burst sample and drops one taken deep in power throttling.
DEFAULT_THROTTLE_THRESHOLD = 0.75
DEFAULT_RECOVERY_S = 0.05  # nvbench's --throttle-recovery-delay default
# Sustained (harness/timing/sustained.py): steady when the clock moved less than CLOCK_TOL and the
# power less than POWER_TOL over its window.
CLOCK_TOL = 0.01
POWER_TOL = 0.02
# nvml.h's nvmlClocksEventReason* bits: why the clocks are below their maximum. Read only when a
# reading is below the maximum SM clock (at the maximum there is nothing to explain, and the
# query would add host time to every burst read); the H100 of 2026-12-07 dropped to 1785 MHz at
# a sixth of its power limit with nothing recorded to say why.
CLOCK_EVENT_REASONS = {0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap",
                       0x8: "hw_slowdown", 0x10: "sync_boost", 0x20: "sw_thermal_slowdown",
                       0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting"}


@dataclass(frozen=True)
class ClockRead:
    """One reading: SM clock (MHz) and board power (W); None where the reader cannot tell."""

    sm_mhz: float | None
    power_w: float | None
    power_instant_w: float | None = None  # NVML's instantaneous power where the driver has it (sustained.py)
    reasons: int | None = None  # NVML's clock-event reasons bitmask; read only below the maximum SM clock


class ClockReader(Protocol):
    """Reads the device's clock state; ``max_sm_mhz``/``power_limit_w`` None where unknown."""

    source: str
    max_sm_mhz: float | None
    power_limit_w: float | None

    def read(self) -> ClockRead: ...


@dataclass
class _NvmlReader:
    nvml: Any
    handle: Any
    source: str
    max_sm_mhz: float | None
    power_limit_w: float | None
    instant: bool = False  # the driver answers the instantaneous power field (probed once)
    reasons: bool = False  # the driver answers the clock-event reasons query (probed once)

    def read(self) -> ClockRead:
        instant: float | None = None
        if self.instant:
            try:
                instant = self.nvml.power_instant_mw(self.handle) / 1e3
            except Exception:
                instant = None
        try:
            mhz: float | None = float(self.nvml.sm_clock_mhz(self.handle))
        except Exception:
            mhz = None
        try:
            watts: float | None = self.nvml.power_mw(self.handle) / 1e3
        except Exception:
            watts = None
        reasons: int | None = None
        if self.reasons and mhz is not None and self.max_sm_mhz and mhz < self.max_sm_mhz:
            try:
                reasons = self.nvml.clock_event_reasons(self.handle)
            except Exception:
                reasons = None
        return ClockRead(mhz, watts, instant, reasons)


def _maybe(fn: Callable[[], float]) -> float | None:
    try:
        return float(fn())
    except Exception:  # a query this driver or GPU does not answer: the field stays None
        return None


def nvml_reader(device: Any) -> tuple[ClockReader | None, str]:
    """(a reader of the CUDA device's SM clock and power through NVML, source) or (None, why
    not): nvidia-ml-py when installed, else the driver's libnvidia-ml through ctypes (the energy
    counter's session, harness/timing/energy.py). None on the CPU."""
    if getattr(device, "type", "cpu") != "cuda":
        return None, f"no GPU clock on {getattr(device, 'type', device)}"
    from harness.timing.device import device_index
    from harness.timing.energy import nvml_handle

    index = device_index(device)
    nvml, handle = nvml_handle(f"cuda:{index}")
    if nvml is None:
        return None, f"NVML unavailable: {handle}"
    reader = _NvmlReader(nvml, handle, f"nvml ({nvml.source})",
                         _maybe(lambda: nvml.max_sm_clock_mhz(handle)),
                         _maybe(lambda: nvml.power_limit_mw(handle) / 1e3))
    reader.instant = _maybe(lambda: nvml.power_instant_mw(handle)) is not None
    reader.reasons = _maybe(lambda: nvml.clock_event_reasons(handle)) is not None
    if reader.read().sm_mhz is None:
        return None, "NVML does not report this device's SM clock"
    return reader, reader.source


def read_cost_us(reader: ClockReader, reads: int = 20, clock: Callable[[], float] = time.perf_counter) -> float:
    """Median host time of one ``reader.read()`` in microseconds."""
    costs = []
    for _ in range(reads):
        t0 = clock()
        reader.read()
        costs.append((clock() - t0) * 1e6)
    return statistics.median(costs)


def below_max_reasons(reads: Sequence[ClockRead]) -> dict[str, int] | None:
    """Over the readings below the maximum SM clock whose reasons were read: how many had each
    clock-event reason set (``none``: no bit set; an unknown bit by its hex value). None when no
    reading had its reasons read (all at the maximum, or a reader without the query)."""
    masks = [r.reasons for r in reads if r.reasons is not None]
    if not masks:
        return None

    def names(mask: int) -> list[str]:
        return [CLOCK_EVENT_REASONS.get(1 << b, hex(1 << b)) for b in range(64) if mask >> b & 1] or ["none"]

    return dict(Counter(n for m in masks for n in names(m)))


def clock_stats(xs: Sequence[float]) -> dict[str, float] | None:
    """min, median, max and mean of a series of reads (a row's ``ClockStats``); None for none."""
    return {"min": min(xs), "median": statistics.median(xs), "max": max(xs), "mean": statistics.fmean(xs)} if xs else None


@dataclass
class ClockTrace:
    """The readings taken over a cell's samples, and what the throttle rule did with them."""

    reads: list[ClockRead] = field(default_factory=list)
    discarded: dict[str, int] = field(default_factory=dict)  # why -> count
    throttled_kept: int = 0  # throttled samples kept because clean ones did not come in time

    def add(self, r: ClockRead) -> None:
        self.reads.append(r)

    def discard(self, why: str) -> None:
        self.discarded[why] = self.discarded.get(why, 0) + 1

    @property
    def discarded_count(self) -> int:
        return sum(self.discarded.values())

    def summary(self) -> dict[str, Any]:
        return {"sm_mhz": clock_stats([r.sm_mhz for r in self.reads if r.sm_mhz is not None]),
                "power_w": clock_stats([r.power_w for r in self.reads if r.power_w is not None]),
                "below_max_reasons": below_max_reasons(self.reads),
                "reads": len(self.reads), "discarded": self.discarded_count,
                "discard_reasons": dict(self.discarded), "throttled_kept": self.throttled_kept}


def throttled(read: ClockRead, max_sm_mhz: float | None, threshold: float) -> str | None:
    """Why a sample read back at ``read`` is throttled (its SM clock under ``threshold`` of the
    maximum), or None: also None when either clock is unknown (nothing to judge by)."""
    if read.sm_mhz is None or not max_sm_mhz:
        return None
    if read.sm_mhz < threshold * max_sm_mhz:
        return f"SM clock below {threshold:.0%} of {max_sm_mhz:g} MHz"
    return None


def _moved(xs: Sequence[float]) -> float:
    lo, hi = min(xs), max(xs)
    return (hi - lo) / hi if hi > 0 else 0.0


class BusyLog:
    """When each device last finished sampling a cell, per regime (perf_counter seconds), so the
    next cell knows how long the GPU has been idle. One per process (a worker owns its device)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._last: dict[tuple[str, str], float] = {}

    def idle_s(self, device_key: str, regime: str | None = None) -> float | None:
        """Seconds since a cell of ``regime`` (any regime: None) finished on the device."""
        times = [t for (d, r), t in self._last.items() if d == device_key and regime in (None, r)]
        return self._clock() - max(times) if times else None

    def mark(self, device_key: str, regime: str) -> None:
        self._last[(device_key, regime)] = self._clock()


BUSY = BusyLog()


class RegimeSampler:
    """One cell's clock handling under its regime: a read after every burst sample (outside the
    timed region), burst's throttle discards, and the row's ``clocks`` (sustained: the common
    fields, which harness/timing/sustained.py completes)."""

    def __init__(self, regime: str, reader: ClockReader | None, reason: str, *, threshold: float,
                 recovery_s: float, max_time_s: float, device_key: str, busy: BusyLog = BUSY,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.perf_counter) -> None:
        if regime not in REGIMES:
            raise ValueError(f"clock regime {regime!r}: expected one of {', '.join(REGIMES)}")
        self.regime, self.reader, self.reason = regime, reader, reason
        self.threshold, self.recovery_s, self.max_time_s = threshold, recovery_s, max_time_s
        self.device_key, self.busy, self.sleep, self.clock = device_key, busy, sleep, clock
        self.trace = ClockTrace()
        self.cost_us = read_cost_us(reader, 10, clock) if reader is not None else None
        self.idle_before_s = busy.idle_s(device_key)

    def after_sample(self, elapsed_s: float) -> bool:
        """Read the clock after a sample; False: the sample is throttled and discarded (burst),
        after ``recovery_s`` idle. Past the time budget a throttled sample is kept (counted)."""
        if self.reader is None:
            return True
        r = self.reader.read()
        self.trace.add(r)
        why = throttled(r, self.reader.max_sm_mhz, self.threshold) if self.regime == "burst" else None
        if why is None:
            return True
        if elapsed_s > self.max_time_s:
            self.trace.throttled_kept += 1
            return True
        self.trace.discard(why)
        if self.recovery_s > 0:
            self.sleep(self.recovery_s)
        return False

    def finish(self, samples: int, min_samples: int, sampling_s: float) -> dict[str, Any]:
        """The row's ``clocks`` record (``samples`` kept, throttled ones included)."""
        self.busy.mark(self.device_key, self.regime)
        t = self.trace.summary()
        clean = samples - self.trace.throttled_kept
        out: dict[str, Any] = {"regime": self.regime, "source": self.reader.source if self.reader else None,
                               **t,
                               "max_sm_mhz": self.reader.max_sm_mhz if self.reader else None,
                               "power_limit_w": self.reader.power_limit_w if self.reader else None,
                               "read_cost_us": self.cost_us,
                               "read_share": (self.cost_us * t["reads"] / (sampling_s * 1e6)
                                              if self.cost_us is not None and sampling_s > 0 else None),
                               "short_of_clean": bool(self.trace.discarded_count or self.trace.throttled_kept)
                               and clean < min_samples,
                               "idle_before_s": self.idle_before_s}
        if self.regime == "burst":
            out.update(throttle_threshold=self.threshold, recovery_s=self.recovery_s)
        if self.reader is None:
            out["reason"] = self.reason
        return out


__all__ = ["BUSY", "CLOCK_EVENT_REASONS", "CLOCK_TOL", "DEFAULT_RECOVERY_S", "DEFAULT_REGIME", "DEFAULT_THROTTLE_THRESHOLD", "POWER_TOL",
           "REGIMES", "BusyLog", "RegimeSampler", "ClockRead", "ClockReader", "ClockTrace",
           "below_max_reasons", "nvml_reader", "read_cost_us", "throttled"]
