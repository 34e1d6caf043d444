"""``harness crosscheck`` in the row's clock regime (harness/timing/clocks.py), so "within 3%"
compares like with like, and the rule that says when it does not.

- ``burst`` rows: each outside timer after the row's own idle (``clocks.idle_before_s``, kept
  within [BURST_IDLE_MIN_S, BURST_IDLE_MAX_S]; BURST_IDLE_S when the row does not say) and
  with loops short enough to stay at the boost clock: ``bench_gpu_time(dry_run_time_ms=1,
  repeat_time_ms=5)``, ``do_bench_cudagraph(rep=5)``. Their 100 ms loops throttle where the
  row's few ms of samples do not (H200 2026-12-02: 1455-1560 MHz against the row's 1980).
- ``sustained`` rows: each outside timer's long loop (100 ms) after the call back to back with
  no gap (``keep_busy``): SUSTAIN_REWARM_S before each (the harness timer here, or the previous
  timer's loop, just kept the GPU hot; SUSTAIN_WARM_S before the first where the harness timer
  here failed), as the row was sampled in its call's settled continuous loop. The call is
  replayed from a graph there (``busy_graph``; harness.crosscheck.run.sustained_busy) except for
  a host-bound row, whose timers run it eagerly: an eager loop of a call whose host enqueue
  outlasts it idles the GPU. ``bench_gpu_time``'s dry run (SUSTAIN_DRY_RUN_MS) brings the GPU
  back after the gap of its own graph capture.
- CPU rows and rows of no regime: as before.

Whatever the preparation, a timer's clock is what decides whether it timed the row's state.
**The clock a timer ran at** (``timer_clock``, the one definition the state split and the
explanation's clock sentence both use): the mean of NVML's reads over the timer's timed loop
(``loop_clock``: the reads in the ``loop_ms`` its record names before it returned; the loop is
its last phase), the statistic the row's clock is (``row_clock``: the mean over its samples).
At the power limit the clock takes a new level about every 0.1 s (docs/measurement.md §13,
"Which clock statistic"), so one read is a level, not the loop's clock: H100 2026-12-08
sustained row 0, ``do_bench_cudagraph`` with its reads' median at 1620 MHz and 1395 right after
it against the row's 1580. Where the loop holds fewer than LOOP_MIN_READS reads (a burst row's
5 ms ``bench_gpu_time`` loop), or an older record has no loop mean: the range of the median of
the reads while the timer ran (``during``) and the read right after it (``after``), both within
STATE_TOL of the row's. Neither figure alone is that loop's clock: a short loop after graph
capture and a dry run near the idle clock moves the median little while the read after it
catches where the loop took the clock (H200 2026-12-06 burst row 15: ``bench_gpu_time`` 50
reads, median 1980 MHz, 1590 after its 5 ms loop, its time 1.13x the other timer's at 1965).
More than STATE_TOL (3%) from the row's clock, the timer is "states differ" with both clocks,
never "agrees" or "off" (``timer_state``), whatever the two times say.

A sustained eager row's samples are the GPU's work with the host's enqueue hidden, where the
host cannot keep up behind untimed graph replays of the same call (``launch.fill_replays``,
harness/timing/sustained.py); its outside timers then replay a graph like any eager hot row's,
after the call's graph loop (``harness.crosscheck.run.sustained_busy``). Where no graph of the
call could be captured, the row's samples began on an idle GPU (``timing.contains.host_time``,
``launch.hidden_frac`` below 0.5): it times its continuous eager loop's rate, the host's enqueue
included; outside timers that replay it from a graph time device work alone (H100 2026-12-06:
FA4's mixed-step rows 3.4-4.5x their graph-replaying timers). Such a row's outside timers run the
call eagerly first, an eager loop of the same kind (``outside_graph_order``: FlashInfer's
``bench_gpu_time`` without a graph; Triton has no hot eager timer), and a graph replay only where
none could. Either way the row is "host-bound", neither flagged nor agreeing
(``host_bound_reason``): the eager timers' loop is the standalone call's, whose host work is not
the adapter's, and a host's launch rate does not repeat across processes (H100 2026-12-08, judged
against eager timers: 3 of 4 such rows off by 3-26%, the harness's own timer on the same call in
the cross-check's process 1.15-1.53x the row).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable

from harness.records.clocks import reasons_text

if TYPE_CHECKING:
    from harness.records.results import ResultRow

BURST_IDLE_S = 1.0
BURST_IDLE_MIN_S, BURST_IDLE_MAX_S = 0.1, 1.0
BURST_REPEAT_MS = 5.0
BURST_DRY_RUN_MS = 1.0
SUSTAIN_WARM_S = 1.0
SUSTAIN_REWARM_S = 0.3
SUSTAIN_REPEAT_MS = 100.0
DRY_RUN_MS = 25.0
# bench_gpu_time's dry run before a sustained row's loop: graph replays of the call right before
# it, after the gap of its own capture (H100 2026-12-08, first/: its reads' median 4-26% above
# the row's clock on 23 of the 24 "states differ" rows, after 25 ms)
SUSTAIN_DRY_RUN_MS = 300.0
STATE_TOL = 0.03
# A timed loop's clock is its reads' mean from this many reads on (a 100 ms loop holds ~40 at
# POLL_S); a 5 ms burst loop holds ~2, where the median and the read after it still judge.
LOOP_MIN_READS = 5
WARM_CHUNK = 20  # calls enqueued between two waits while keeping the GPU busy
MIN_SCALE = 0.2  # waits are shortened to fit a deadline, never below this share


def row_clock(row: "ResultRow") -> float | None:
    """The row's SM clock over its samples (NVML; their mean where recorded, else their median), or None."""
    from harness.records.clocks import sm_clock

    return sm_clock(row)


def regime_plan(row: "ResultRow") -> dict[str, Any]:
    """How the outside timers are run for this row: regime, idle or warm seconds before each,
    their loop's length, the row's clock, and a sentence for the table."""
    from harness.records.clocks import regime_of

    regime = regime_of(row)
    t = row.timing
    # an eager hot GPU row: its outside timers replay a graph, and the harness times the call as a
    # graph here too (harness/crosscheck/eager.py); not a host-bound sustained one
    eager = (t is not None and row.device.startswith("cuda") and not t.cuda_graph.used and t.mode != "cold"
             and not host_bound(row))  # a host-bound row's outside timers run eagerly (outside_graph_order)
    base = {"regime": regime, "idle_s": 0.0, "warm_s": 0.0, "rewarm_s": 0.0, "repeat_ms": SUSTAIN_REPEAT_MS,
            "dry_run_ms": DRY_RUN_MS, "row_mhz": row_clock(row) if regime else None, "graph_here": eager,
            "busy_graph": False}
    if regime == "burst" and t is not None:
        c = t.clocks
        idle = c.idle_before_s if c is not None and c.idle_before_s is not None else BURST_IDLE_S
        idle = min(BURST_IDLE_MAX_S, max(BURST_IDLE_MIN_S, idle))
        return {**base, "idle_s": idle, "repeat_ms": BURST_REPEAT_MS, "dry_run_ms": BURST_DRY_RUN_MS,
                "how": f"burst: each outside timer after the row's idle ({BURST_IDLE_MIN_S:g}-{BURST_IDLE_MAX_S:g} s), "
                       f"its loop {BURST_REPEAT_MS:g} ms after a {BURST_DRY_RUN_MS:g} ms dry run"}
    if regime == "sustained":
        busy = row.device.startswith("cuda") and not host_bound(row)
        return {**base, "warm_s": SUSTAIN_WARM_S, "rewarm_s": SUSTAIN_REWARM_S, "dry_run_ms": SUSTAIN_DRY_RUN_MS,
                "busy_graph": busy,
                "how": f"sustained: each outside timer's continuous loop ({SUSTAIN_REPEAT_MS:g} ms) after the call back "
                       f"to back without a gap ({SUSTAIN_WARM_S:g} s before the first, {SUSTAIN_REWARM_S:g} s before "
                       f"the next{', replayed from a graph' if busy else ''}; bench_gpu_time's dry run "
                       f"{SUSTAIN_DRY_RUN_MS:g} ms)"}
    return {**base, "repeat_ms": 100.0, "how": "as the outside timers run (no clock regime)"}


def host_bound(row: "ResultRow") -> bool:
    """A sustained eager row whose time holds the host's enqueue (module docstring)."""
    from harness.records.clocks import regime_of

    t = row.timing
    if regime_of(row) != "sustained" or t is None or t.cuda_graph.used:
        return False
    return t.contains is not None and bool(t.contains.host_time)  # what the timing loop recorded the row's time holds


def outside_graph_order(row: "ResultRow") -> list[bool]:
    """Whether the outside timers replay a graph, in the order to try (the next only where no timer
    ran): a graph row and a cold row as timed; a host-bound sustained row eagerly first, since an
    eager loop of the call runs at the same host-bound rate as the row (FlashInfer's
    ``bench_gpu_time`` records its events around each call as it enqueues it); any other eager hot
    row from a graph first (its samples hide the host's enqueue), eagerly where capture fails."""
    t = row.timing
    if t is None or t.cuda_graph.used or t.mode == "cold":
        return [bool(t is not None and t.cuda_graph.used)]
    return [False, True] if host_bound(row) else [True, False]


def host_bound_reason(row: "ResultRow", outside_graph: bool | None) -> str:
    """Why a host-bound sustained eager row is not compared with its outside timers, or ""
    (module docstring): graph-replaying timers time device work alone; eager ones time the
    standalone call's host rate, not the adapter's, and a host's rate does not repeat across
    processes (H100 2026-12-08: the same call 1.15-1.53x apart between the run's process and the
    cross-check's)."""
    t = row.timing
    if outside_graph is None or t is None or not host_bound(row):
        return ""
    frac = t.launch.hidden_frac if t.launch is not None else None
    ahead = f" (the queue was ahead on {frac:.0%} of samples)" if frac is not None else ""
    head = f"host-bound: the sustained row is its eager loop's rate, the host's enqueue included{ahead}"
    if outside_graph:
        return f"{head}; the outside timers replay a graph (device time): not compared"
    return (f"{head}; the eager outside timers time the standalone call's loop, whose host work is not the "
            "adapter's, and a host's rate does not repeat across processes: shown, not compared")


def keep_busy(fn: Callable[[], None], seconds: float, mark: Callable[[], Callable[[], None]],
              clock: Callable[[], float] = time.perf_counter) -> int:
    """Enqueue ``fn`` back to back for ``seconds``, one chunk of WARM_CHUNK calls always queued
    behind the one waited on (``mark()`` records a point in the queue and returns its wait), so
    the GPU never idles; the last chunk is waited on. Returns the calls made."""
    t0 = clock()
    prev: Callable[[], None] | None = None
    calls = 0
    while clock() - t0 < seconds:
        for _ in range(WARM_CHUNK):
            fn()
        calls += WARM_CHUNK
        wait = mark()
        if prev is not None:
            prev()
        prev = wait
    if prev is not None:
        prev()
    return calls


def prepare(plan: dict[str, Any], fn: Callable[[], None], sync: Callable[[], None], *, first: bool = True,
            scale: float = 1.0, mark: Callable[[], Callable[[], None]] | None = None,
            sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.perf_counter) -> None:
    """Before one outside timer: idle (burst) or the call back to back (sustained; ``first``: the
    row's first timer). ``scale`` (<= 1) shortens the wait to fit a deadline."""
    if plan["idle_s"] > 0:
        sync()
        sleep(plan["idle_s"] * scale)
    warm = (plan["warm_s"] if first else plan["rewarm_s"]) * scale
    if warm > 0:
        keep_busy(fn, warm, mark or (lambda: sync), clock)


def loop_clock(reads: list[tuple[float, float]], end_s: float, loop_ms: float | None) -> dict[str, Any]:
    """The SM clock over a timer's timed loop: the mean of NVML's reads ``(seconds, MHz)`` in
    the ``loop_ms`` before the timer returned at ``end_s`` (its loop is its last phase), the
    statistic the row's own clock is (``row_clock``: the mean over its samples); {} without
    ``loop_ms`` or a read in that stretch."""
    if not loop_ms or loop_ms <= 0:
        return {}
    start = end_s - loop_ms / 1e3
    mhz = [m for t, m in reads if t >= start]
    if not mhz:
        return {}
    return {"loop": sum(mhz) / len(mhz), "loop_reads": len(mhz), "loop_ms": loop_ms}


def timer_clock(timer: dict[str, Any]) -> tuple[float, float] | None:
    """The SM clock a timer ran at (module docstring): the mean of NVML's reads over its timed
    loop where at least LOOP_MIN_READS fell in it (``loop_clock``), else (lowest, highest) of the
    median of the reads while it ran and the read after it, whichever exist; None without any
    (a CPU)."""
    c = timer.get("sm_clock_mhz")
    if not isinstance(c, dict):
        return None
    loop, n = c.get("loop"), c.get("loop_reads")
    if isinstance(loop, (int, float)) and loop > 0 and isinstance(n, int) and n >= LOOP_MIN_READS:
        return float(loop), float(loop)
    reads = [float(c[k]) for k in ("during", "after") if isinstance(c.get(k), (int, float)) and c[k] > 0]
    return (min(reads), max(reads)) if reads else None


def mhz_text(clock: float | tuple[float, float]) -> str:
    """A clock or a timer's clock range in words: "1965 MHz", "1590-1980 MHz"."""
    lo, hi = clock if isinstance(clock, tuple) else (clock, clock)
    return f"{lo:.0f} MHz" if round(lo) == round(hi) else f"{lo:.0f}-{hi:.0f} MHz"


def timer_state(row_mhz: float | None, timer_mhz: float | tuple[float, float] | None, tol: float = STATE_TOL) -> str:
    """"" when the timer ran in the row's state (its clock, or both ends of its clock range,
    within ``tol`` of the row's; or either unknown), else "states differ" with both clocks."""
    if not row_mhz or not timer_mhz:
        return ""
    lo, hi = timer_mhz if isinstance(timer_mhz, tuple) else (timer_mhz, timer_mhz)
    far = lo if abs(lo / row_mhz - 1) >= abs(hi / row_mhz - 1) else hi
    if abs(far / row_mhz - 1) > tol:
        return (f"states differ: the row ran at {row_mhz:.0f} MHz, this timer at {mhz_text((lo, hi))} "
                f"({far / row_mhz - 1:+.1%}, more than {tol:.0%})")
    return ""


def split_states(row_mhz: float | None, outside: dict[str, dict[str, Any]],
                 tol: float = STATE_TOL) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """(the timers that ran in the row's state, {timer: why the states differ})."""
    same: dict[str, dict[str, Any]] = {}
    differ: dict[str, str] = {}
    for name, rec in outside.items():
        why = timer_state(row_mhz, timer_clock(rec), tol)
        if why:
            c = rec.get("sm_clock_mhz")
            reasons = reasons_text(c.get("reasons")) if isinstance(c, dict) else ""
            differ[name] = why + (f"; NVML's reasons while it ran, reads below the max: {reasons}" if reasons else "")
        else:
            same[name] = rec
    return same, differ


def fit_scale(waits_s: float, fixed_s: float, left_s: float | None, rows_left: int) -> float:
    """The share of a row's idle/warm waits (``waits_s`` at full length; ``fixed_s`` the rest of
    a row's cost, measured on the rows so far) that lets the ``rows_left`` rows fit in the
    ``left_s`` seconds before the deadline: 1 when they fit or there is no deadline, never below
    MIN_SCALE (then the deadline may still stop the last rows)."""
    if left_s is None or rows_left <= 0 or waits_s <= 0:
        return 1.0
    per_row = left_s / rows_left
    if fixed_s + waits_s <= per_row:
        return 1.0
    return max(MIN_SCALE, (per_row - fixed_s) / waits_s)


def waits_of(plan: dict[str, Any], timers: int, here_ran: bool = True) -> float:
    """Seconds of idle/warm waits a row's ``timers`` outside timers take at full length. The
    harness timer here runs just before them and leaves the GPU in the row's state, so every
    sustained timer gets ``rewarm_s``; ``warm_s`` only where that timer failed (``here_ran``)."""
    if timers <= 0:
        return 0.0
    first = plan["rewarm_s"] if here_ran else plan["warm_s"]
    return timers * plan["idle_s"] + first + (timers - 1) * plan["rewarm_s"]


# A re-timed row's cost beside its idle/warm waits, by clock regime: the medians of the H100's
# cross-checks (reports/h100/2026-12-07/callforms/*/crosscheck.json, retime_s less cost_s
# waits, 57 rows each: burst 0.78 s, sustained 6.68 s; the H200's of 2026-12-06 were 0.6 and 4.0).
# A sustained row's harness timers here (adapter and standalone call, each with its own
# settling) take about 5 s of it, the outside timers' long loops 1.2 (do_bench_cudagraph's ten
# 100 ms replays). The first row adds the libraries' JIT and first calls (10-15 s). Sustained:
# + 0.3 s since bench_gpu_time's dry run grew from 25 to SUSTAIN_DRY_RUN_MS (not measured yet).
ROW_COST_S: dict[str | None, float] = {"burst": 0.8, "sustained": 7.0, None: 2.0}
# ... and an eager GPU row's graph timing here beside them (``graph_here``), not in those runs:
# as long as the standalone call's timing here on the graph-timed rows of the same files (the
# medians of cost_s ``here``: burst 0.03 s, sustained 2.03 s, its settling).
GRAPH_HERE_S: dict[str | None, float] = {"burst": 0.05, "sustained": 2.0, None: 0.5}
FIRST_ROW_S = 15.0
OUTSIDE_TIMERS = 2  # bench_gpu_time and a Triton timer


def row_cost_s(plan: dict[str, Any]) -> float:
    """The measured cost of a row beside its waits (ROW_COST_S), by its plan's regime, with its
    graph timing here (GRAPH_HERE_S) for an eager GPU row."""
    extra = GRAPH_HERE_S.get(plan["regime"], GRAPH_HERE_S[None]) if plan.get("graph_here") else 0.0
    return ROW_COST_S.get(plan["regime"], ROW_COST_S[None]) + extra


def eta_s(plans: list[dict[str, Any]]) -> tuple[float, float]:
    """(seconds at full waits, seconds with the waits at MIN_SCALE) to re-time rows of these
    plans, the first row's one-off cost included: what a deadline must allow."""
    if not plans:
        return 0.0, 0.0
    fixed = FIRST_ROW_S + sum(row_cost_s(p) for p in plans)
    waits = sum(waits_of(p, OUTSIDE_TIMERS) for p in plans)
    return fixed + waits, fixed + MIN_SCALE * waits


__all__ = ["BURST_IDLE_S", "BURST_REPEAT_MS", "FIRST_ROW_S", "GRAPH_HERE_S", "LOOP_MIN_READS", "ROW_COST_S",
           "STATE_TOL", "SUSTAIN_DRY_RUN_MS", "SUSTAIN_REWARM_S", "SUSTAIN_WARM_S", "eta_s", "fit_scale", "host_bound",
           "keep_busy", "loop_clock", "mhz_text", "outside_graph_order", "prepare", "regime_plan", "row_clock",
           "row_cost_s", "split_states", "timer_clock", "timer_state", "waits_of"]
