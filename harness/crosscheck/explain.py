"""What ``harness crosscheck`` measures beside the outside timers, to say *why* a row is off.

Per re-timed row, none of it part of the outside median:

- ``here``: the harness's own ``time_callable`` with the row's recorded timing options, on the
  same standalone call, in the cross-check process, just before the outside timers. Row vs here
  compares the conditions (the run's process, GPU state, history); here vs outside compares the
  timers on one call in one process.
- ``here_graph``: for an eager GPU row whose outside timers replay a graph, the same timer
  replaying the same call from a CUDA graph, just after ``here``: here (graph) vs outside
  compares the timers like with like, row vs here (graph) is the eager launches' cost
  (harness/crosscheck/eager.py).
- ``adapter``: the same timer on the adapter's own timed call (``prepare_cell`` on the batch):
  row vs adapter isolates the conditions, adapter vs here the standalone source.
- ``kernel``: on a GPU, the eager kernel time of one call from ``torch.profiler`` (the CUDA
  kernels' and copies' self time summed over a few calls, per call). Kernel vs the outside
  median compares the kernels alone with a graph replay / event loop around them.
- ``clocks``: on a GPU, the SM clock (NVML) before and after each timer, the median of the
  reads taken while it ran (``during``), the mean over its timed loop (``loop``) and a trace of
  the reads; the clock a timer ran at is defined once, in harness/crosscheck/regime.py
  (``timer_clock``).

On a CPU the GPU-only figures say ``n/a on cpu``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import torch

from harness.records.timing_parts import TimingOptionsRecord

if TYPE_CHECKING:
    from harness.timing import TimingOptions

NA_CPU = "n/a on cpu"
PROFILED_CALLS = 10


def row_timing_options(recorded: TimingOptionsRecord | dict[str, Any] | None, device: torch.device) -> TimingOptions:
    """The row's ``TimingOptions`` from its recorded ``timing.options``: fields this version
    does not know are dropped, missing ones keep the device's defaults; no energy window (the
    cross-check does not report energy)."""
    from harness.timing import TimingOptions

    known = set(TimingOptions.model_fields)
    if isinstance(recorded, TimingOptionsRecord):  # a typed row's
        recorded = recorded.model_dump(exclude_none=True)
    given = {k: v for k, v in (recorded or {}).items() if k in known}
    given.update(energy_window_s=0.0, keep_raw=False)
    return TimingOptions.for_device(device, **given)


def time_here(fn: Callable[[], None], device: torch.device, recorded: TimingOptionsRecord | dict[str, Any] | None,
              graph: bool) -> dict[str, Any]:
    """The harness's own timer on ``fn`` as the row was timed: median, quartiles, samples."""
    from harness.timing import GraphDecision, time_callable

    opts = row_timing_options(recorded, device)
    m = time_callable(fn, device, opts, graph=GraphDecision(graph, "" if graph else "the row was timed eagerly"))
    info = m.get("cuda_graph") or {}
    used = bool(info.get("used"))
    return {"median_us": float(m["median_us"]), "q1_us": float(m["q1_us"]), "q3_us": float(m["q3_us"]),
            "n": int(m["samples"]), "graph": used, "graph_reason": str(info.get("reason") or ""),
            "method": m.get("method"),
            "settings": f"harness time_callable({'graph' if used else 'eager'}, {opts.mode}, "
                        f"max_time_s={opts.max_time_s:g}, stop={opts.stop_criterion})"}


def time_adapter(backend: Any, variant: dict[str, Any], batch: Any, device: torch.device,
                 recorded: TimingOptionsRecord | dict[str, Any] | None) -> dict[str, Any]:
    """The harness's timer on the adapter's own timed call (``prepare_cell`` on the same batch,
    the graph decision the run makes): the row's exact call, in this process. Against the row it
    isolates the conditions; against ``time_here`` on the standalone source, the call source."""
    from harness.cell.prepare import prepare_cell
    from harness.timing import time_callable

    opts = row_timing_options(recorded, device)
    prepared = prepare_cell(backend, variant, batch, device)
    prepared.forward()
    if device.type == "cuda":
        torch.cuda.synchronize()
    graph = prepared.graph_decision(enabled=opts.cuda_graph)
    m = time_callable(prepared.timed_call, device, opts, graph=graph, output=prepared.out)
    used = bool((m.get("cuda_graph") or {}).get("used"))
    return {"median_us": float(m["median_us"]), "q1_us": float(m["q1_us"]), "q3_us": float(m["q3_us"]),
            "n": int(m["samples"]), "graph": used,
            "settings": f"harness time_callable on the adapter's timed_call ({'graph' if used else 'eager'}, {opts.mode})"}


def kernel_time(fn: Callable[[], None], calls: int = PROFILED_CALLS) -> dict[str, Any]:
    """Eager device time of one call: every CUDA event's self time over ``calls`` calls / calls."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    per: list[tuple[str, int, float]] = []
    total = 0.0
    for e in prof.key_averages():
        t = float(getattr(e, "self_device_time_total", 0.0) or getattr(e, "self_cuda_time_total", 0.0) or 0.0)
        if t > 0:
            per.append((e.key, int(e.count), t / calls))
            total += t
    per.sort(key=lambda x: -x[2])
    return {"per_call_us": total / calls, "calls": calls,
            "top": [{"name": k[:120], "count": c, "us_per_call": round(u, 3)} for k, c, u in per[:4]]}


def clock_now(device: torch.device) -> float | None:
    from harness.timing.device import sm_clock_mhz

    mhz, _src = sm_clock_mhz(device)
    return mhz


POLL_S = 0.002  # NVML reads while a timer runs
TRACE_POINTS = 100  # of them kept in the record: ~1.2 KB a timer, ~15 ms apart over a 1.5 s timer


def with_clocks(device: torch.device, on_gpu: bool, run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``run()``'s record with the SM clock before and after it and ``during``: the median of
    NVML's reads every POLL_S on a thread while it ran (the timer waits on the GPU without the
    GIL), the clock it timed at (``n/a on cpu`` off a GPU). Where the record names its timed
    loop's length (``loop_ms``, harness/crosscheck/timers.py), also the mean of the reads over
    that loop (``regime.loop_clock``) and ``trace``: ``[ms since the start, MHz]`` of at most
    TRACE_POINTS reads, to see where each phase of the timer left the clock."""
    if not on_gpu:
        rec = run()
        rec["sm_clock_mhz"] = NA_CPU
        return rec
    import statistics
    import threading
    import time

    from harness.crosscheck.regime import loop_clock
    from harness.timing.clocks import ClockRead, below_max_reasons, nvml_reader

    reader, _why = nvml_reader(device)
    reads: list[tuple[float, ClockRead]] = []  # (when, the read)
    stop = threading.Event()

    def poll() -> None:
        while not stop.wait(POLL_S):
            r = reader.read() if reader is not None else None
            if r is not None and r.sm_mhz is not None:
                reads.append((time.perf_counter(), r))

    before = clock_now(device)
    start = time.perf_counter()
    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    try:
        rec = run()
    finally:
        end = time.perf_counter()
        stop.set()
        poller.join()
    timed = [(t, float(r.sm_mhz)) for t, r in reads if r.sm_mhz is not None]
    step = max(1, -(-len(timed) // TRACE_POINTS))
    rec["sm_clock_mhz"] = {"before": before, "after": clock_now(device),
                           "during": statistics.median(m for _, m in timed) if timed else None,
                           "reads": len(reads), "reasons": below_max_reasons([r for _, r in reads]),  # NVML's, over the reads below the max
                           **loop_clock(timed, end, rec.get("loop_ms")),
                           "trace": [[round((t - start) * 1e3, 1), round(m)] for t, m in timed[::step]]}
    return rec


def _off(a: float, b: float, tol: float) -> bool:
    return abs(a / b - 1) > tol



def _ratio(comps: dict[str, Any], because: list[str], key: str, a: float, b: float, tol: float, why: str) -> None:
    """One comparison: ``comps[key]`` is a / b and whether it is more than ``tol`` off; when it
    is, ``because`` gets ``"<key in words> <ratio>: <why>"``."""
    comps[key] = {"ratio": a / b, "off": _off(a, b, tol)}
    if comps[key]["off"]:
        because.append(f"{key.replace('_', ' ')} {a / b:.3f}: {why}")


def explain(harness_us: float, ref_us: float, here: dict[str, Any] | None, kernel: dict[str, Any] | str,
            tol: float, adapter: dict[str, Any] | None = None,
            outside: dict[str, dict[str, Any]] | None = None, row_mhz: float | None = None,
            here_graph: dict[str, Any] | None = None, eager_vs_graph: bool = False) -> dict[str, Any]:
    """Which comparison fails: row vs here (the row's conditions), here vs outside (the timer),
    kernel vs the outside median (graph replay / launch gaps around the kernels); with the
    adapter's call timed here too, row vs that (the same call: only the conditions differ) and
    adapter vs standalone (the same timer and process: the call source differs). Each entry:
    ratio and whether it is more than ``tol`` off; ``because`` lists the failing ones in words.
    On a GPU, ``clock`` holds each timer's clock (``regime.timer_clock``) and names those more
    than STATE_TOL from ``row_mhz`` (the row's clock, records.clocks.sm_clock), as ``regime.split_states`` does.
    ``here_graph`` (an eager row against graph replays, ``eager.graph_here_of``): here vs outside
    compares it, the like of the outside timers, and ``eager_vs_graph_here`` records the row
    over it (the eager launches' cost: not a failing comparison). ``eager_vs_graph`` without it:
    here (eager) vs outside (graph replays) cannot tell the timers from the eager launches."""
    from harness.crosscheck.regime import STATE_TOL, mhz_text, split_states, timer_clock, timer_state

    comps: dict[str, Any] = {}
    because: list[str] = []
    if adapter is not None:
        a = adapter["median_us"]
        _ratio(comps, because, "row_vs_adapter_here", harness_us, a, tol,
               f"the row's own call timed by the harness here gives {a:.4g} us: the row's conditions")
        if here is not None:
            h = here["median_us"]
            # CPU wall clocks on a shared machine move by tens of percent between two timings of
            # one call: there the ratio says nothing about which source was timed.
            cpu = NA_CPU in (here.get("sm_clock_mhz"), adapter.get("sm_clock_mhz"))
            why = (f"CPU wall-clock noise ({a:.4g} against {h:.4g} us); CPU rows cannot tell the standalone source "
                   "from the adapter's call" if cpu else
                   f"the standalone source is not the adapter's call ({a:.4g} against {h:.4g} us, one timer, "
                   "one process)")
            _ratio(comps, because, "adapter_vs_standalone", a, h, tol, why)
    if here is not None:
        h = here["median_us"]
        _ratio(comps, because, "row_vs_here", harness_us, h, tol,
               f"the row's conditions (the harness timer here gives {h:.4g} us on the same call)")
        if here_graph is None:
            _ratio(comps, because, "here_vs_outside", h, ref_us, tol,
                   "the harness timer here times eager launches, the outside timers a graph replay: the eager "
                   "launches' gaps or the timers, not told apart" if eager_vs_graph else
                   "the timers disagree on one call in one process")
    if here_graph is not None:
        g = here_graph["median_us"]
        _ratio(comps, because, "here_vs_outside", g, ref_us, tol,
               "the timers disagree on one call in one process (both replay a graph)")
        comps["eager_vs_graph_here"] = {"ratio": harness_us / g, "off": False}
    # The clock each timer ran at against the row's, by the definition the state split uses
    # (regime.timer_clock / timer_state): a timer more than 3% off the row's clock timed another
    # GPU state, whatever its time says (docs/measurement.md §13).
    clocked: dict[str, tuple[float, float]] = {}
    for name, t in [("harness here", here), ("harness here (graph)", here_graph), *(outside or {}).items()]:
        c = timer_clock(t) if isinstance(t, dict) else None
        if c is not None:
            clocked[name] = c
    here_mhz = clocked.get("harness here")
    ref = row_mhz or (here_mhz[0] if here_mhz else None)  # a record without the row's clock: the timer here
    if ref and clocked:
        differ = {k: v for k, v in clocked.items() if timer_state(ref, v)}
        comps["clock"] = {"row_mhz": row_mhz, "timers_mhz": {k: list(v) for k, v in clocked.items()},
                          "states_differ": sorted(differ), "off": bool(differ)}
        if differ:
            whose = "the row" if row_mhz else "the harness timer here"
            because.append("clock: states differ: " + ", ".join(f"{k} ran at {mhz_text(v)}" for k, v in differ.items())
                           + f", {whose} at {ref:.0f} MHz (more than {STATE_TOL:.0%} apart): another GPU state, "
                           "not the timer")
    if isinstance(kernel, dict):
        k = kernel["per_call_us"]
        _ratio(comps, because, "kernel_vs_outside", k, ref_us, tol,
               f"the profiler's eager kernel time {k:.4g} us differs from the graph replay / timed loop")
    _outside_spread(comps, because, harness_us, split_states(row_mhz, outside or {})[0], tol)
    return {"comparisons": comps, "because": because}


def _outside_spread(comps: dict[str, Any], because: list[str], harness_us: float,
                    same: dict[str, dict[str, Any]], tol: float) -> None:
    """The outside timers in the row's state (``same``, as ``regime.split_states`` gives them to the
    verdict's median) against each other: with two timers their median is
    their mean, so when they are more than ``tol`` apart the reference is the middle of a
    disagreement (H100 2026-12-07: Triton's graph loop 5% above FlashInfer's on 60 us FA3 calls,
    with the row within 1% of FlashInfer's and of the profiler's kernel time); ``because`` names
    the timers and which of them the row agrees with."""
    meds = {k: float(v["median_us"]) for k, v in same.items() if isinstance(v, dict) and v.get("median_us")}
    if len(meds) < 2:
        return
    lo, hi = min(meds.values()), max(meds.values())
    comps["outside_spread"] = {"ratio": hi / lo, "off": _off(hi, lo, tol)}
    if comps["outside_spread"]["off"]:
        near = [k for k, v in meds.items() if not _off(harness_us, v, tol)]
        timers = ", ".join(f"{k} {v:.4g}" for k, v in meds.items())
        because.append(f"outside timers {hi / lo:.3f} apart ({timers} us): they disagree with each other"
                       + (f"; the row is within {tol:.0%} of {', '.join(near)}" if near else ""))


__all__ = ["NA_CPU", "clock_now", "explain", "kernel_time", "row_timing_options", "time_adapter", "time_here",
           "with_clocks"]
