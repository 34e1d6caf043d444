"""What a result row says about the GPU's clock state (harness/timing/clocks.py wrote it): its
clock regime, its SM clock, and one line on a set of rows for the places numbers are read
(the run's verdict, recommend, the report)."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.records.results import ResultRow
    from harness.records.timing_parts import Clocks, ClockStats

UNRECORDED = "burst"  # rows written before regimes were recorded were sampled as burst is now


def regime_of(row: "ResultRow") -> str | None:
    """The clock regime of a GPU-timed row (rows before the field: burst); None off the GPU."""
    t = row.timing
    if t is None or not (row.device or "").startswith("cuda"):
        return None
    return t.clock_regime or UNRECORDED


def sm_clock(row: "ResultRow", stat: str | None = None) -> float | None:
    """The SM clock (MHz) over the row's samples: their mean where the row records it (schema 6),
    else their median; ``stat`` ("mean" or "median") asks for that one. None where it was not read.

    Why the mean first: at the power limit NVML's clock takes a new level about every 0.1 s, and a
    median is whichever level holds the middle read. Two read sets of one second of one loop (a
    sustained row's samples and its settled stretch, reports/h100/2026-12-07/fifth-session) had
    medians -1.3% to +4.0% apart (5 of 57 rows beyond 2%) and means within 0.65%."""
    c = _row_clocks(row)
    return clock_value(c.sm_mhz if c is not None else None, stat)


def _row_clocks(row: "ResultRow") -> "Clocks | None":
    t = row.timing
    return t.clocks if t is not None else None


def clock_value(s: "ClockStats | None", stat: str | None = None) -> float | None:
    """``sm_clock``'s rule on one set of clock statistics (a row's, or a timing record's before it
    is a row, as `harness diag clocks` has): the mean where recorded, else the median."""
    if s is None:
        return None
    use_median = stat == "median" or (stat is None and s.mean is None)
    value = s.median if use_median else s.mean
    return value if value is not None and value > 0 else None


def pair_sm_clocks(a: "ResultRow", b: "ResultRow") -> tuple[float | None, float | None]:
    """Two rows' SM clocks by one statistic: the mean when both record it, else both medians (a row
    written before schema 6 has no mean, and a median against a mean would compare two things)."""
    ma, mb = sm_clock(a, "mean"), sm_clock(b, "mean")
    if ma is not None and mb is not None:
        return ma, mb
    return sm_clock(a, "median"), sm_clock(b, "median")


def reasons_text(counts: "dict[str, int] | None") -> str:
    """NVML's clock-event reasons over a row's reads below the maximum SM clock, most frequent
    first ("sw_power_cap 12, none 3"); "" where none were read (schema 7 rows only)."""
    if not counts:
        return ""
    return ", ".join(f"{k} {n}" for k, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def row_reasons(row: "ResultRow") -> "dict[str, int] | None":
    """The row's ``clocks.below_max_reasons`` (None: not recorded)."""
    c = _row_clocks(row)
    return c.below_max_reasons if c is not None else None


def run_regimes(rows: "list[ResultRow]") -> set[str]:
    """The clock regimes of a run's GPU-timed rows."""
    return {r for r in (regime_of(x) for x in rows) if r is not None}


def clock_summary(rows: "list[ResultRow]") -> str | None:
    """One line on the clock state of a set of rows (terminal verdict, recommend, report): the
    regime(s), the range of the rows' median SM clocks and power, throttle discards. None when
    no row was timed on a GPU (CPU rows have no clock regime)."""
    gpu = [r for r in rows if regime_of(r) is not None]
    if not gpu:
        return None
    regimes = sorted(run_regimes(gpu))
    text = f"GPU clock regime: {' and '.join(regimes)}"
    if len(regimes) > 1:
        text += " (mixed: rows of different regimes measure different GPU states)"
    clocks = [c for c in map(_row_clocks, gpu) if c is not None]
    mhz = [c.sm_mhz.median for c in clocks if c.sm_mhz is not None]
    watts = [c.power_w.median for c in clocks if c.power_w is not None]
    if mhz:
        text += f"; SM clock {min(mhz):.0f}-{max(mhz):.0f} MHz over the rows' medians"
        top = next((c.max_sm_mhz for c in clocks if c.max_sm_mhz), None)
        text += f" (max {top:.0f})" if top else ""
    if watts:
        text += f", power {min(watts):.0f}-{max(watts):.0f} W"
    if not mhz:
        text += "; SM clock not read" + (f" ({clocks[0].reason})" if clocks and clocks[0].reason else
                                         " (rows written before clocks were recorded)" if not clocks else "")
    dropped = sum(c.discarded or 0 for c in clocks)
    short = sum(1 for c in clocks if c.short_of_clean)
    reasons: Counter[str] = Counter()
    for c in clocks:
        reasons.update(c.below_max_reasons or {})
    if reasons:
        text += f"; NVML's reasons below the max SM clock (reads): {reasons_text(reasons)}"
    if dropped:
        text += f"; {dropped} sample(s) discarded as throttled"
    if short:
        text += f"; {short} row(s) short of clean samples"
    return text


__all__ = ["UNRECORDED", "clock_summary", "clock_value", "pair_sm_clocks", "reasons_text", "regime_of", "row_reasons",
           "run_regimes", "sm_clock"]
