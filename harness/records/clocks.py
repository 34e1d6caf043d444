"""What a result row says about the GPU's clock state (harness/timing/clocks.py wrote it): its
clock regime, its SM clock, and one line on a set of rows for the places numbers are read
(the run's verdict, recommend, the report)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.records.results import ResultRow

UNRECORDED = "burst"  # rows written before regimes were recorded were sampled as burst is now


def regime_of(row: "ResultRow") -> str | None:
    """The clock regime of a GPU-timed row (rows before the field: burst); None off the GPU."""
    t = row.timing
    if t is None or not (row.device or "").startswith("cuda"):
        return None
    return t.clock_regime or UNRECORDED


def sm_clock(row: "ResultRow") -> float | None:
    """The median SM clock (MHz) over the row's samples, or None where it was not read."""
    t = row.timing
    c = t.clocks if t is not None else None
    return c.sm_mhz.median if c is not None and c.sm_mhz is not None and c.sm_mhz.median > 0 else None


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
    clocks = [c for c in (r.timing.clocks for r in gpu if r.timing is not None) if c is not None]
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
    if dropped:
        text += f"; {dropped} sample(s) discarded as throttled"
    if short:
        text += f"; {short} row(s) short of clean samples"
    return text


__all__ = ["UNRECORDED", "clock_summary", "regime_of", "run_regimes", "sm_clock"]
