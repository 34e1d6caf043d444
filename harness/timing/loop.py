"""The timing loop: warm-up, calls per sample, CUDA graph or eager work, optional cold flush,
samples until the options' stopping criterion says stop, and the row's timing record."""

from __future__ import annotations

import bisect
import contextlib
import math
import statistics
import time
from typing import Any, Callable, Generator

import torch

from harness.timing.clocks import RegimeSampler, nvml_reader
from harness.timing.cold_l2 import L2Flusher, cold_l2_label, select_flush
from harness.timing.device import cycles_per_us, EventSampler, short_reason, sm_clock_mhz
from harness.timing.graphs import GraphDecision, capture_graph, replay_matches
from harness.timing.interleave import SAMPLING_INTERLEAVED, SAMPLING_SEQUENTIAL, sample_rounds
from harness.timing.energy import energy_meter, loop_energy, measure_energy
from harness.timing.options import TimingOptions
from harness.timing.stats import summarize
from harness.timing.stopping import STOP_TIME, ask, criterion_for
from harness.timing.sustained import QUEUE_AHEAD_S, SustainedSampler


def calls_per_sample(est_call_us: float, opts: TimingOptions) -> int:
    """Hot mode: enough back-to-back calls that a sample lasts ``min_sample_us`` (event
    resolution and launch gaps amortized). Cold mode: one call, right after the flush."""
    if opts.mode == "cold":
        return 1
    if not est_call_us > 0:
        return opts.max_calls_per_sample
    return max(1, min(opts.max_calls_per_sample, math.ceil(opts.min_sample_us / est_call_us)))



def calls_from_estimates(samples_s: list[float], opts: TimingOptions) -> int:
    """Calls per sample from a few eager samples of one call (seconds): the least of them
    stands for the call (a disturbed sample is only ever longer)."""
    return calls_per_sample(min(samples_s) * 1e6, opts)


def time_contents(device_type: str, graph_used: bool, hidden_frac: float | None, calls: int) -> dict[str, Any]:
    """What a row's time holds beside the call's own kernels, so an eager row is never read as a
    graph-replayed one: a CUDA-graph replay has no host launches between the kernels; eager
    calls carry the device's gaps between back-to-back launches and run the kernels as launched
    eagerly (slower than the same kernels replayed, measured on an H200: docs/measurement.md);
    a sample whose launches the spin kernel did not hide also holds host time."""
    if device_type != "cuda":
        return {"timer": "host_clock", "kernels": True, "launch_gaps": False, "host_time": True,
                "note": "the whole call on the host clock (CPU)"}
    host = hidden_frac is not None and hidden_frac < 0.5
    if graph_used:
        return {"timer": "cuda_graph_replay", "kernels": True, "launch_gaps": False, "host_time": host,
                "note": f"{calls} call(s) per graph replay: no host launches between kernels; the replay's "
                        f"own launch and tail cost is shared by its {calls} call(s)"}
    note = (f"{calls} eager call(s) per sample: the kernels as launched eagerly plus the device's gaps "
            "between back-to-back launches (not comparable to a graph-replayed row)")
    if host:
        note += "; launches not hidden behind the spin kernel (the call waits on the host): host time included"
    return {"timer": "eager_launches", "kernels": True, "launch_gaps": True, "host_time": host, "note": note}


def time_callable(
    fn: Callable[[], object],
    device: torch.device,
    opts: TimingOptions,
    *,
    graph: GraphDecision | None = None,
    output: torch.Tensor | None = None,
) -> dict[str, Any]:
    """Time ``fn`` (which launches one forward) and return per-call statistics in microseconds
    plus how they were measured. ``graph`` says whether a CUDA graph may be used (see
    ``graph_decision``); ``output`` (the tensor ``fn`` writes) lets a replay be checked."""
    opts.validate()
    if device.type != "cuda":
        return _run_alone(_cpu_run(fn, opts), opts)
    with torch.cuda.device(device):
        return _run_alone(_cuda_run(fn, device, opts, graph or GraphDecision(False, "no graph decision given"),
                                    output), opts)


# A timing run as a generator: it sets up (warm-up, graph capture, the regime's warm-up), yields
# its ``take`` and host-bound test, receives the sampling loop's (samples, reason, elapsed) and
# returns the row's timing record. ``time_callable`` drives one alone (``_loop``);
# ``time_interleaved`` drives several in rounds (harness/timing/interleave.py).
Take = Callable[[], "float | None"]
TimingRun = Generator[tuple[Take, "Callable[[], bool] | None"], tuple[list[float], str, float], dict[str, Any]]


def _run_alone(run: TimingRun, opts: TimingOptions) -> dict[str, Any]:
    take, host_bound = next(run)
    try:
        run.send(_loop(take, opts, host_bound))
    except StopIteration as done:
        return done.value
    raise RuntimeError("a timing run did not finish")  # a harness bug: the generator yields once


def time_interleaved(calls: dict[str, tuple[Callable[[], object], GraphDecision | None, torch.Tensor | None]],
                     device: torch.device, opts: TimingOptions) -> dict[str, dict[str, Any] | BaseException]:
    """Time several calls of one case in interleaved rounds (A B C A B C ...): each is set up as
    ``time_callable`` sets it up (warm-up, calls per sample, graph), then sampled once per round
    until every one's stopping rule is met; each record says ``sampling: interleaved``. A call
    whose setup or sampling raises gets its exception instead of a record; the others go on."""
    opts.validate()
    ctx = torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()
    with ctx:
        runs: dict[str, TimingRun] = {}
        takes: dict[str, tuple[Take, Callable[[], bool] | None]] = {}
        out: dict[str, dict[str, Any] | BaseException] = {}
        for name, (fn, graph, output) in calls.items():
            run = (_cpu_run(fn, opts, SAMPLING_INTERLEAVED) if device.type != "cuda" else
                   _cuda_run(fn, device, opts, graph or GraphDecision(False, "no graph decision given"), output,
                             SAMPLING_INTERLEAVED))
            try:
                takes[name] = next(run)
                runs[name] = run
            except Exception as e:  # this call's setup failed: its cell's error, not the others'
                out[name] = e
        rounds = sample_rounds(takes, opts)
        for name, run in runs.items():
            if name in rounds.errors:
                run.close()
                out[name] = rounds.errors[name]
                continue
            try:
                run.send((rounds.samples[name], rounds.reasons[name], rounds.elapsed[name]))
            except StopIteration as done:
                out[name] = done.value
            except Exception as e:
                out[name] = e
        return {name: out[name] for name in calls}


def time_sustained_group(calls: dict[str, tuple[Callable[[], object], GraphDecision | None, torch.Tensor | None]],
                         device: torch.device, opts: TimingOptions) -> dict[str, dict[str, Any] | BaseException]:
    """The sustained regime's way to time a case's calls together (harness/timing/sustained.py):
    each set up first, then each settled and sampled in turn on one queue that never runs dry,
    so the GPU stays under load from one call to the next. Not rounds: each call's samples must
    be taken in the state its own continuous loop settles in. Records say ``sampling: sequential``."""
    opts.validate()
    with torch.cuda.device(device):
        runs: dict[str, TimingRun] = {}
        takes: dict[str, tuple[Take, Callable[[], bool] | None]] = {}
        out: dict[str, dict[str, Any] | BaseException] = {}
        for name, (fn, graph, output) in calls.items():
            run = _cuda_run(fn, device, opts, graph or GraphDecision(False, "no graph decision given"), output,
                            settle_now=False)
            try:
                takes[name] = next(run)
                runs[name] = run
            except Exception as e:  # this call's setup failed: its cell's error, not the others'
                out[name] = e
        for name, run in runs.items():
            take, host_bound = takes[name]
            try:
                if isinstance(take, SustainedSampler):
                    take.run_settle()
                run.send(_loop(take, opts, host_bound))
            except StopIteration as done:
                out[name] = done.value
            except Exception as e:
                out[name] = e
        return {name: out[name] for name in calls}


def _loop(take: Callable[[], float | None], opts: TimingOptions,
          host_bound: Callable[[], bool] | None = None) -> tuple[list[float], str, float]:
    criterion = criterion_for(opts)
    samples: list[float] = []
    sorted_s: list[float] = []
    start = time.perf_counter()
    while True:
        x = take()
        if x is None:  # sample rejected (launch not hidden yet); the clock keeps running
            if time.perf_counter() - start > opts.max_time_s and samples:
                return samples, STOP_TIME, time.perf_counter() - start
            continue
        samples.append(x)
        bisect.insort(sorted_s, x)
        elapsed = time.perf_counter() - start
        reason = ask(criterion, sorted_s, elapsed, host_bound is not None and host_bound())
        if reason:
            return samples, reason, elapsed


def _finish(samples_s: list[float], reason: str, elapsed: float, opts: TimingOptions) -> dict[str, Any]:
    us = [x * 1e6 for x in samples_s]
    out = summarize(us, opts.confidence)
    out["stop_criterion"] = opts.stop_criterion
    out["stop_reason"] = reason
    out["stop"] = criterion_for(opts).describe(reason, out)
    out["target_rel_noise"] = opts.target_rel_noise
    out["sampling_s"] = elapsed
    if opts.keep_raw:
        out["raw_us"] = us
    return out


def _cpu_run(fn: Callable[[], object], opts: TimingOptions, sampling: str = SAMPLING_SEQUENTIAL) -> TimingRun:
    for _ in range(opts.warmup):
        fn()

    clock = time.process_time if opts.cpu_clock == "process" else time.perf_counter

    def take() -> float:
        t0 = clock()
        fn()
        return clock() - t0

    samples, reason, elapsed = yield take, None
    out = _finish(samples, reason, elapsed, opts)
    out["sampling"] = sampling
    out.update(
        method="process_time" if opts.cpu_clock == "process" else "wall_clock",
        mode=opts.mode,
        l2="n/a on CPU",
        cuda_graph={"used": False, "reason": "n/a on CPU"},
        calls_per_sample=1,
        sm_clock_mhz=None,
        energy={"available": False, "reason": "no energy counter on cpu (NVML reports GPUs only)"},
        options=opts.model_dump(),
        contains=time_contents("cpu", False, None, 1),
    )
    return out


def _cuda_run(fn: Callable[[], object], device: torch.device, opts: TimingOptions, decision: GraphDecision,
              output: torch.Tensor | None, sampling: str = SAMPLING_SEQUENTIAL, settle_now: bool = True) -> TimingRun:
    cold = opts.mode == "cold"
    sampler = EventSampler(device)
    for _ in range(opts.warmup):
        fn()
    torch.cuda.synchronize(device)

    # Host cost of enqueueing one call (the GPU is idle, so nothing waits on it).
    host = []
    for _ in range(3):
        t0 = time.perf_counter()
        fn()
        host.append(time.perf_counter() - t0)
        torch.cuda.synchronize(device)
    host_call_s = statistics.median(host)
    cyc_per_us = cycles_per_us(device) if (opts.hide_launch and sampler.can_hold) else 0.0

    def hold_for(host_s: float) -> int:
        us = min(opts.max_hold_ms * 1e3, 2.0 * host_s * 1e6 + 20.0)
        return int(us * cyc_per_us)

    # Rough GPU time of one call picks how many calls a sample holds: the least of three, since
    # whatever disturbs a sample (a host gap the hold did not cover, a clock still ramping up)
    # only lengthens it. The median let two disturbed samples set too few calls per sample
    # (docs/measurement.md §12).
    estimates = [sampler.sample(fn, hold_for(host_call_s))[0] for _ in range(3)]
    k = calls_from_estimates(estimates, opts)

    graph_info: dict[str, Any] = {"used": False, "reason": decision.reason, "required": decision.required,
                                  "declared": decision.declared}
    work: Callable[[], None]
    enqueue_s = host_call_s * k
    if decision.use:
        try:
            g = capture_graph(fn, k, device)
            bad = replay_matches(g, output, device) if output is not None else None
            if bad:
                graph_info["reason"] = f"{bad}: timed eagerly"
            else:
                graph_info.update(used=True, reason="", calls_per_replay=k)
                work = g.replay
                t0 = time.perf_counter()
                g.replay()
                enqueue_s = time.perf_counter() - t0
                torch.cuda.synchronize(device)
        except Exception as e:  # capture is the backend's promise; a broken one costs only the graph
            try:
                torch.cuda.synchronize(device)
            except Exception:
                pass
            graph_info["reason"] = f"capture failed: {short_reason(e)}; timed eagerly"
    if not graph_info["used"]:
        def work() -> None:
            for _ in range(k):
                fn()

    cold_check = select_flush(device, opts.flush_method) if cold else None
    flusher = L2Flusher(device, cold_check["method"]) if cold_check else None
    clock_before = sm_clock_mhz(device)
    state = {"hold": hold_for(enqueue_s), "raises": 0, "hidden": 0, "unhidden": 0}
    clocks: list[float] = []
    max_hold = int(opts.max_hold_ms * 1e3 * cyc_per_us)

    count = {"works": 0, "busy_s": 0.0}
    # The clock regime (harness/timing/clocks.py): burst reads the clock after every sample and
    # discards throttled ones; sustained samples on a queue kept full, once the GPU has settled
    # (harness/timing/sustained.py).
    reader, why_no_reader = nvml_reader(device)
    regime = RegimeSampler(opts.clock_regime, reader, why_no_reader, threshold=opts.throttle_threshold,
                           recovery_s=opts.throttle_recovery_s, max_time_s=opts.max_time_s, device_key=str(device))
    sustained = (SustainedSampler(device, work, k, min(estimates) * k, reader, opts.max_time_s,
                                  flusher.flush if flusher else None) if opts.clock_regime == "sustained" else None)
    if sustained is not None and settle_now:
        sustained.run_settle()
    started: list[float] = []  # the first sample's start: interleaved runs are set up long before

    def take() -> float | None:
        if not started:
            started.append(time.perf_counter())
        gpu_s, hidden, mhz, host_s = sampler.sample(work, state["hold"], flusher)
        count["works"] += 1
        count["busy_s"] += gpu_s
        if mhz:
            clocks.append(mhz)
        if not regime.after_sample(time.perf_counter() - started[0]):
            return None  # throttled (burst): discarded after the recovery delay
        if hidden is False and state["raises"] < 3 and state["hold"] < max_hold:
            # Host enqueue outlasted the hold: lengthen it and retake the sample.
            state["raises"] += 1
            state["hold"] = hold_for(host_s * 2)
            return None
        if hidden:
            state["hidden"] += 1
        else:  # not held, or held too briefly (e.g. the forward waits on the GPU itself)
            state["unhidden"] += 1
        return gpu_s / k

    # NVML energy around the loop itself (harness/timing/energy.py); hot mode only: in cold
    # mode the flushes between samples would be counted as the kernel's.
    # Interleaved: the other calls' samples fall inside any span, so energy comes from the window.
    alone = sampling == SAMPLING_SEQUENTIAL
    read, source = energy_meter(device) if (opts.energy_window_s > 0 and not cold and alone) else (None, "")
    if read is not None:
        torch.cuda.synchronize(device)
        e0, t0 = read(), time.perf_counter()
    # Host-bound so far: eager work whose launches were mostly not hidden (compare's class for
    # such rows, hidden_frac < 0.5). A graph replay never is: its stopping rule is the plain one.
    host_bound = None if graph_info["used"] else (lambda: state["unhidden"] > state["hidden"])
    if sustained is not None:  # a full queue hides every launch: no hold, no host-bound class
        samples, reason, elapsed = yield sustained, None
        sustained.leave()
        count["works"] += len(samples)
        count["busy_s"] += sum(samples) * k
    else:
        samples, reason, elapsed = yield take, host_bound
    loop_e = None
    if read is not None:
        torch.cuda.synchronize(device)
        e1, span = read(), time.perf_counter() - t0
        if span >= opts.energy_window_s:
            loop_e = loop_energy(e0, e1, span, count["works"] * k, count["busy_s"], source)
    clock_after = sm_clock_mhz(device)
    out = _finish(samples, reason, elapsed, opts)
    n_hold = state["hidden"] + state["unhidden"]
    q = max(1, len(clocks) // 4)
    during_first = statistics.median(clocks[:q]) if clocks else None
    during_last = statistics.median(clocks[-q:]) if clocks else None
    throttled = None
    if during_first and during_last:
        throttled = during_last < 0.95 * during_first
    elif clock_before[0] and clock_after[0]:
        throttled = clock_after[0] < 0.95 * clock_before[0]
    out.update(
        method="cuda_event",
        mode=opts.mode,
        l2=flusher.describe() if flusher else "hot (not flushed)",
        cuda_graph=graph_info,
        calls_per_sample=k,
        launch={
            "hidden_frac": state["hidden"] / n_hold if n_hold else None,
            "hold_us": state["hold"] / cyc_per_us if cyc_per_us else 0.0,
            "note": "" if cyc_per_us else "no spin kernel (torch.cuda._sleep): launch not hidden",
        },
        host_enqueue_us=host_call_s * 1e6,
        sm_clock_mhz={
            "before": clock_before[0],
            "after": clock_after[0],
            "source": clock_before[1],
            "during_first": during_first,
            "during_last": during_last,
            "throttled": throttled,
        },
        options=opts.model_dump(),
        contains=time_contents("cuda", graph_info["used"], state["hidden"] / n_hold if n_hold else None, k),
        clock_regime=opts.clock_regime,
        clocks=regime.finish(len(samples), opts.min_samples, elapsed),
        sampling=sampling,
    )
    if sustained is not None:
        out["clocks"] = sustained.record(out["clocks"], elapsed)
        out["settled_sm_clock_mhz"] = sustained.settled_sm_clock_mhz
        # hidden: the share of samples the queue ahead covered (the rest began on an idle GPU)
        hidden_frac = 1.0 - sustained.gaps / sustained.enqueued if sustained.enqueued else None
        out["launch"].update(hidden_frac=hidden_frac, hold_us=0.0,
                             note=f"no hold: {QUEUE_AHEAD_S * 1e3:g} ms of work queued ahead of every sample")
        out["contains"] = time_contents("cuda", graph_info["used"], hidden_frac, k)
    if flusher is not None:
        if flusher.count < len(samples):
            raise RuntimeError(f"cold mode: {flusher.count} flushes for {len(samples)} samples")
        out["cold_check"] = cold_check
        out["cold_l2"] = cold_l2_label(cold_check)  # e.g. "verified (write flush, ...)" / "not verified (...)"
    # Energy beside the time: from the timed loop when it was long enough for the counter, else
    # the same work back to back for the window, outside the timed samples.
    out["energy"] = loop_e or measure_energy(work, k, out["median_us"] * 1e-6, device, opts.energy_window_s)
    return out
