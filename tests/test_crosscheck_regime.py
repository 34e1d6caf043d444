"""harness crosscheck in the row's clock regime (harness/crosscheck/regime.py), on synthesized rows."""

from __future__ import annotations

from harness.crosscheck.regime import BURST_IDLE_S, SUSTAIN_WARM_S, prepare, regime_plan, unmatched
from harness.crosscheck.table import to_markdown
from test_compare_clock import gpu_row
from helpers.typed_rows import ran_row


def _burst_row():
    row = gpu_row("fa3", 256.0)
    t = row.timing.model_dump()
    t["clocks"].update(throttle_threshold=0.75, recovery_s=0.05)
    t["sampling_s"] = 0.04
    return type(row).model_validate({**row.model_dump(), "timing": t})


def test_burst_rows_get_idle_and_a_loop_as_short_as_their_sampling():
    plan = regime_plan(_burst_row())
    assert plan["regime"] == "burst" and plan["idle_s"] == BURST_IDLE_S and plan["warm_s"] == 0
    assert plan["repeat_ms"] == 40.0 and "burst" in plan["how"]


def test_sustained_rows_get_the_outside_loops_as_they_are_after_a_warm_up():
    plan = regime_plan(gpu_row("fa3", 276.0, regime="sustained"))
    assert plan["regime"] == "sustained" and plan["repeat_ms"] == 100.0 and plan["warm_s"] == SUSTAIN_WARM_S


def test_cpu_rows_have_no_regime():
    plan = regime_plan(ran_row(10.0, device="cpu"))
    assert plan["regime"] is None and plan["idle_s"] == 0 and plan["warm_s"] == 0


def test_prepare_idles_or_keeps_the_call_running():
    t = {"now": 0.0, "slept": 0.0, "calls": 0}

    def fn():
        t["calls"] += 1
        t["now"] += 0.001

    prepare(regime_plan(_burst_row()), fn, lambda: None, sleep=lambda s: t.__setitem__("slept", t["slept"] + s),
            clock=lambda: t["now"])
    assert t["slept"] == BURST_IDLE_S and t["calls"] == 0
    prepare(regime_plan(gpu_row("x", 1.0, regime="sustained")), fn, lambda: None, clock=lambda: t["now"])
    assert t["calls"] >= SUSTAIN_WARM_S / 0.001


def test_a_burst_row_against_a_throttled_outside_loop_cannot_be_matched():
    plan = regime_plan(_burst_row())
    why = unmatched(plan, {"median_us": 290.0, "sm_clock_mhz": {"before": 1980.0, "after": 1300.0}})
    assert why.startswith("cannot be matched") and "1300" in why and "1485" in why
    assert unmatched(plan, {"median_us": 257.0, "sm_clock_mhz": {"before": 1980.0, "after": 1965.0}}) == ""
    sustained = regime_plan(gpu_row("x", 1.0, regime="sustained"))
    assert unmatched(sustained, {"sm_clock_mhz": {"after": 1100.0}}) == ""


def test_the_table_says_the_regime():
    rec = {"row": 0, "case": "c", "backend": "flash-attn", "variant": "fa_version=3", "device": "cuda:0",
           "mode": "hot", "graph": True, "clock": "cuda_event", "harness_us": 256.0, "ref_us": 257.0,
           "ratio": 0.996, "outside": {"t": {"median_us": 257.0}}, "flagged": False, "reason": "",
           "clock_regime": "burst", "regime_how": regime_plan(_burst_row())["how"]}
    md = to_markdown({"timers": ["t"], "rows": [rec], "not_retimed": [], "checked": 1, "flagged": 0,
                      "tolerance": 0.03}, "src")
    assert "graph, hot, burst" in md and "Clock regime of the comparisons: burst" in md
