"""``harness crosscheck`` in the row's clock regime (harness/timing/clocks.py), so "within 3%"
compares like with like.

- ``sustained`` rows: the outside timers as they are (continuous loops of 100+ ms: the state
  they measure in), each after SUSTAIN_WARM_S of the same call back to back, as the row's
  sampling came after its warm-up to a steady clock and power.
- ``burst`` rows: each outside timer after BURST_IDLE_S idle (the GPU back at its boost clock)
  and with its loop shortened to the row's own sampling time (10-100 ms), as the row was
  sampled in a short burst after its cell's warm-up. Where the outside timer's clock still falls
  below the row's throttle threshold, the pair cannot be matched: the record says so and why.
- CPU rows and rows of no regime: as before.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from harness.records.results import ResultRow

BURST_IDLE_S = 1.0
BURST_MIN_MS, BURST_MAX_MS = 10.0, 100.0
SUSTAIN_WARM_S = 1.0
DRY_RUN_MS = 25.0
BURST_DRY_RUN_MS = 5.0


def regime_plan(row: "ResultRow") -> dict[str, Any]:
    """How the outside timers are run for this row: regime, idle or warm seconds before each,
    their loop's length, and a sentence for the table."""
    from harness.records.clocks import regime_of

    regime = regime_of(row)
    t = row.timing
    if regime == "burst" and t is not None:
        repeat = min(BURST_MAX_MS, max(BURST_MIN_MS, t.sampling_s * 1e3))
        c = t.clocks
        return {"regime": regime, "idle_s": BURST_IDLE_S, "warm_s": 0.0, "repeat_ms": repeat,
                "dry_run_ms": BURST_DRY_RUN_MS,
                "threshold": c.throttle_threshold if c is not None and c.throttle_threshold else None,
                "max_sm_mhz": c.max_sm_mhz if c is not None else None,
                "how": f"burst: each outside timer after {BURST_IDLE_S:g} s idle, its loop {repeat:.0f} ms "
                       "(the row's sampling time)"}
    if regime == "sustained":
        return {"regime": regime, "idle_s": 0.0, "warm_s": SUSTAIN_WARM_S, "repeat_ms": 100.0,
                "dry_run_ms": DRY_RUN_MS, "threshold": None, "max_sm_mhz": None,
                "how": f"sustained: each outside timer's continuous loop (100 ms) after {SUSTAIN_WARM_S:g} s of the "
                       "call back to back"}
    return {"regime": regime, "idle_s": 0.0, "warm_s": 0.0, "repeat_ms": 100.0, "dry_run_ms": DRY_RUN_MS,
            "threshold": None, "max_sm_mhz": None, "how": "as the outside timers run (no clock regime)"}


def prepare(plan: dict[str, Any], fn: Callable[[], None], sync: Callable[[], None],
            sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.perf_counter) -> None:
    """Before one outside timer: idle (burst) or the call back to back (sustained)."""
    if plan["idle_s"] > 0:
        sync()
        sleep(plan["idle_s"])
    if plan["warm_s"] > 0:
        t0 = clock()
        while clock() - t0 < plan["warm_s"]:
            for _ in range(20):
                fn()
            sync()


def unmatched(plan: dict[str, Any], outside: dict[str, Any]) -> str:
    """Why an outside timer's figure is not in the row's regime ("" when it is): a burst row's
    outside loop whose SM clock fell below the row's throttle threshold."""
    if plan["regime"] != "burst" or not plan["threshold"] or not plan["max_sm_mhz"]:
        return ""
    clk = outside.get("sm_clock_mhz")
    after = clk.get("after") if isinstance(clk, dict) else None
    floor = plan["threshold"] * plan["max_sm_mhz"]
    if after is not None and after < floor:
        return (f"cannot be matched: the outside timer's loop ended at {after:.0f} MHz, below the burst row's "
                f"throttle threshold ({floor:.0f} MHz)")
    return ""


__all__ = ["BURST_IDLE_S", "SUSTAIN_WARM_S", "prepare", "regime_plan", "unmatched"]
