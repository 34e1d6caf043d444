"""What the sustained regime's settle rules (harness/timing/sustained.py) cost on the main job, by
a model read from the H100 rows of reports/h100/2026-12-06/loan3/decode-sustained (the earlier
rules: 157 s wall against 39.5 s for burst, 117 s of it settling; extract in
tests/data/h100/loan3/decode_sustained_settle.json).

The model replays the 251 timed rows in their order, a busy span starting at each row whose
settle found an idle GPU (``previous_busy`` false), and swaps each row's settle and sampling
seconds for what the new rules would take; the rest of the wall (imports, setup, checks, burst
work) stays. Per row, by the state its settle ended in:

- power-limited (the old reason "at the power limit", or power at the end >= POWER_LIMITED of the
  limit): settle until its own work fills the power window and one controller cycle has passed
  since the average reached the limit: after idle ``AFTER_IDLE_LIMIT_S`` (the probes' traces:
  1.96 s H100 FA3, 2.01 s H200 FA3, 1.97 s H200 FlashInfer), after a power-limited call
  POWER_WINDOW_S, after a call below the limit ``AFTER_BELOW_LIMIT_S`` (no trace measured this:
  the average climbs from the earlier call's power to the limit first; assumed half a window);
  then sampling over one cycle;
- below the limit (clock at its maximum at the settle's end, power there under
  BELOW_LIMIT_MARGIN of the limit): with NVML's instantaneous power, SETTLE_MIN_OWN_S plus a
  reading window; with the averaged power's ramp alone, once four power updates (0.3 s) are
  readable after the window stopped holding earlier load, if that comes before the old settle
  ended (the earlier load's end: the previous cell's end after idle, the previous call's start
  when continuing); sampling unchanged;
- otherwise: the old settle, but at least what the power window still needs where earlier rows
  of its busy span got shorter.

Not modelled: a call below the limit after a power-limited one waits until the clock has
recovered to its maximum (its row's end clock says where it was, not when it got there); the
power at a continuing row's settle end mixes the previous call's (a row counted below the limit
may be near it). ``python tests/timing/test_sustained_cost.py`` prints the estimates.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.timing.sustained import (BELOW_LIMIT_MARGIN, CONTROLLER_CYCLE_S, POWER_LIMITED, POWER_WINDOW_S,
                                      SETTLE_MIN_OWN_S, SETTLE_WINDOW_S)

DATA = Path(__file__).parents[1] / "data" / "h100" / "loan3" / "decode_sustained_settle.json"
AFTER_IDLE_LIMIT_S = 2.0  # the probes: 1.96-2.01 s from idle to settled at the limit
AFTER_BELOW_LIMIT_S = POWER_WINDOW_S + 0.5 * CONTROLLER_CYCLE_S  # assumed, see the docstring
RAMP_READ_S = 0.3  # four of NVML's ~0.1 s power updates (RAMP_POINTS over RAMP_MIN_S)


@dataclass(frozen=True)
class Estimate:
    wall_s: float
    limited_rows: int
    below_rows: int
    other_rows: int
    limited_s: float  # settle + sampling of the power-limited rows under the new rules


def _kind(r: dict[str, Any], limit: float, max_mhz: float) -> str:
    if r["reason"] == "at the power limit" or (r["power_w_end"] or 0.0) >= POWER_LIMITED * limit:
        return "limit"
    if (r["sm_mhz_end"] or 0.0) >= 0.99 * max_mhz and (r["power_w_end"] or limit) < BELOW_LIMIT_MARGIN * limit:
        return "below"
    return "other"


def estimate(data: dict[str, Any], instant_power: bool) -> Estimate:
    limit, max_mhz = data["power_limit_w"], data["max_sm_mhz"]
    wall = data["sustained_wall_s"]
    busy = 0.0  # seconds of the current busy span before this row (new rules)
    prev_kind, prev_span = "", 0.0
    counts = {"limit": 0, "below": 0, "other": 0}
    limited_s = 0.0
    for r in data["rows"]:
        old_settle, old_sampling = r["settle_s"], r["sampling_s"]
        kind = _kind(r, limit, max_mhz)
        counts[kind] += 1
        cont = bool(r["previous_busy"])
        if not cont:
            busy, prev_kind = 0.0, ""
        sampling = old_sampling
        if kind == "limit":
            settle = (AFTER_IDLE_LIMIT_S if not cont else
                      POWER_WINDOW_S if prev_kind == "limit" else AFTER_BELOW_LIMIT_S)
            sampling = max(old_sampling, CONTROLLER_CYCLE_S)
            limited_s += settle + sampling
        elif kind == "below":
            if instant_power:
                settle = SETTLE_MIN_OWN_S + SETTLE_WINDOW_S
            else:
                flat_s = prev_span if cont else (r["idle_before_s"] if r["idle_before_s"] is not None else 10.0)
                at = max(POWER_WINDOW_S - flat_s, 0.0) + RAMP_READ_S
                settle = at if at < min(old_settle, POWER_WINDOW_S) else max(old_settle, POWER_WINDOW_S - busy)
        else:
            settle = max(old_settle, POWER_WINDOW_S - busy)
        wall += settle + sampling - old_settle - old_sampling
        busy += settle + sampling
        prev_kind, prev_span = kind, settle + sampling
    return Estimate(wall, counts["limit"], counts["below"], counts["other"], limited_s)


def load() -> dict[str, Any]:
    return json.loads(DATA.read_text())


def test_the_power_limited_rows_alone_put_the_main_job_past_twice_burst():
    data = load()
    burst = data["burst_wall_s"]
    for instant in (True, False):
        e = estimate(data, instant)
        assert e.limited_rows + e.below_rows + e.other_rows == len(data["rows"]) == 251
        # the floor: burst plus what the power-limited rows cannot skip (own window + a cycle each)
        assert burst + e.limited_s > 2 * burst
        assert e.wall_s > burst + e.limited_s * 0.9  # the limited rows are most of the cost
    # the instantaneous power only helps (below-limit rows settle at once)
    assert estimate(data, True).wall_s <= estimate(data, False).wall_s


def main() -> None:
    data = load()
    burst, old = data["burst_wall_s"], data["sustained_wall_s"]
    print(f"burst {burst:.1f} s, sustained (earlier rules) {old:.1f} s = {old / burst:.2f}x")
    for instant in (True, False):
        e = estimate(data, instant)
        how = "with NVML's instantaneous power" if instant else "averaged power only (ramp)"
        print(f"new rules, {how}: {e.wall_s:.1f} s = {e.wall_s / burst:.2f}x burst; rows: {e.limited_rows} "
              f"power-limited ({e.limited_s:.1f} s of settle + sampling), {e.below_rows} below the limit, "
              f"{e.other_rows} other; floor (burst + the limited rows) {burst + e.limited_s:.1f} s = "
              f"{(burst + e.limited_s) / burst:.2f}x")


if __name__ == "__main__":
    main()
