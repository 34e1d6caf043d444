"""What ``harness compare`` reads from the GPU's clocks: the regime a row was timed in (rows of two
regimes are not compared) and whether a time shift is explained by an SM-clock shift.

The rule (docs/reports.md, "Clock-shifted rows"). A row judged slower (or faster) beyond the noise
is *clock-shifted*, reported and never failed, when

- both rows recorded the SM clock over their samples (``timing.clocks.sm_mhz``: its mean when both
  rows have one, schema 6, else its median; harness.records.clocks.pair_sm_clocks says why),
- the clock moved by more than CLOCK_NOISE (2%: the clock's own spread between identical runs at
  one state is a few MHz of ~1980; a power-limited state moves it 10-40%), and
- the time moved the way the clock explains (slower at a lower clock, faster at a higher one)
  and by no more than it explains: ``|log(time ratio)| <= |log(clock ratio)| + slack``, with
  slack the device class's noise band (at least 1%). A kernel's time scales at most inversely
  with the SM clock (a compute-bound kernel), less for a memory-bound one, so a larger move has
  a cause beside the clock and stays a regression.

A time shift at an unchanged clock is judged as before; correctness changes are judged before
any timing and always fail.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from harness.records.clocks import pair_sm_clocks, reasons_text, row_reasons, run_regimes

if TYPE_CHECKING:
    from harness.records.results import ResultRow

CLOCK_NOISE = 0.02  # an SM clock moved by less than this is unchanged
MIN_SLACK = 0.01


def clock_explains(base: "ResultRow", new: "ResultRow", time_ratio: float, band: float) -> str:
    """Why the time shift ``time_ratio`` (new/base) is explained by the SM clock ("" when it is not):
    see the module's rule. ``band``: the device class's noise band (a fraction; 0 unknown)."""
    cb, cn = pair_sm_clocks(base, new)
    if cb is None or cn is None or not time_ratio > 0:
        return ""
    clock_ratio = cn / cb
    if abs(clock_ratio - 1) <= CLOCK_NOISE:
        return ""
    lt, lc = math.log(time_ratio), math.log(clock_ratio)
    if lt * lc >= 0:  # slower at a higher clock, or faster at a lower one: not the clock
        return ""
    slack = math.log1p(max(band, MIN_SLACK))
    if abs(lt) > abs(lc) + slack:
        return ""
    return (f"SM clock {cb:.0f} -> {cn:.0f} MHz ({(clock_ratio - 1) * 100:+.1f}%{_why(base, new, clock_ratio)}) "
            f"explains the {(time_ratio - 1) * 100:+.1f}% time shift (at most {(1 / clock_ratio - 1) * 100:+.1f}% "
            f"for a compute-bound kernel, ±{max(band, MIN_SLACK) * 100:.1f}% noise)")


def _why(base: "ResultRow", new: "ResultRow", clock_ratio: float) -> str:
    """NVML's reasons on the side with the lower clock, for the message ("" unrecorded)."""
    text = reasons_text(row_reasons(new if clock_ratio < 1 else base))
    return f"; NVML's reasons below the max, reads: {text}" if text else ""


def clock_note(base: "ResultRow", new: "ResultRow") -> str:
    """The clocks of a pair, for a regression's message ("" when either is unknown)."""
    cb, cn = pair_sm_clocks(base, new)
    if cb is None or cn is None:
        return ""
    return f"SM clock {cb:.0f} -> {cn:.0f} MHz ({(cn / cb - 1) * 100:+.1f}%{_why(base, new, cn / cb)})"


def refuse_mixed_runs(base_rows: "list[ResultRow]", new_rows: "list[ResultRow]") -> str | None:
    """A clear message when the two runs were timed in different regimes (each in one), else
    None. Mixed folders are judged row by row instead (``compare_rows``)."""
    rb, rn = run_regimes(base_rows), run_regimes(new_rows)
    if len(rb) == 1 and len(rn) == 1 and rb != rn:
        b, n = next(iter(rb)), next(iter(rn))
        return (f"the baseline was timed in the {b} clock regime and the new run in the {n} regime: their timings "
                f"measure different GPU states (docs/measurement.md, Clock regimes) and are not compared. Re-run "
                f"one with --clock-regime {b if n != b else n}, or compare with --correctness-only")
    return None


__all__ = ["CLOCK_NOISE", "clock_explains", "clock_note", "refuse_mixed_runs"]
