"""The timing loop: warm-up, calls per sample, CUDA graph or eager work, optional cold flush,
samples until the options' stopping criterion says stop, and the row's timing record."""

from __future__ import annotations

import bisect
import contextlib
import math
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Generator, TypedDict

import torch

from harness.timing.clocks import RegimeSampler, nvml_reader
from harness.timing.cold_l2 import L2Flusher, cold_l2_label, select_flush
from harness.timing.device import cycles_per_us, EventSampler, short_reason, sm_clock_mhz
from harness.timing.graphs import GraphDecision, capture_graph, replay_matches
from harness.timing.interleave import (SAMPLING_INTERLEAVED, SAMPLING_SEQUENTIAL, Candidate, sample_rounds,
                                       stop_sentence)
from harness.timing.energy import energy_meter, loop_energy, measure_energy
from harness.timing.options import TimingOptions
from harness.timing.stats import summarize
from harness.timing.stopping import STOP_TIME, ask, criterion_for
from harness.timing.sustained import QUEUE_AHEAD_S, SustainedSampler, fill_replays


def calls_per_sample(est_call_us: float, opts: TimingOptions) -> int:
    """Hot mode: enough back-to-back calls that a sample lasts ``min_sample_us`` (event
    resolution and launch gaps amortized). Cold mode: one call, right after the flush."""
    if opts.mode == "cold":
        return 1
    if not est_call_us > 0:
        return opts.max_calls_per_sample
    return max(1, min(opts.max_calls_per_sample, math.ceil(opts.min_sample_us / est_call_us)))


# Auto warm-up: a second copy before an interleaved hot sample whose work is shorter than this.
# On the main job's interleaved rows a second copy for every row would cost 4.4-4.8 s on an H200
# (47-54 s runs against a 60 s target) and 3.0-3.1 s on an H100; for works under 1 ms, 214 of the
# H200's 244 interleaved rows, 0.7-0.9 s (samples x work, reports/h200/2026-12-06/loan1/decode-1..5
# and reports/h100/2026-12-07/sixth-session/decode-minute). The rows whose level moved with
# company are ~0.2 ms works; a work of milliseconds streams its own data through the L2 many
# times over in one copy.
SECOND_COPY_UNDER_US = 1000.0


def warm_samples_for(opts: TimingOptions, sampling: str, work_us: float | None = None) -> int:
    """Untimed copies of the sample's work before every timed sample on a GPU: the option where
    given, else (auto) two hot in interleaved rounds for a work (``work_us``, the sample's calls)
    under SECOND_COPY_UNDER_US, one otherwise. A sample alone follows its own previous sample and
    one copy, two works of its own; in rounds the previous work is another candidate's, so a
    second copy gives it the same history. On an H100 (reports/h100/2026-12-07, eighth session)
    one copy left 4-10 of 52 interleaved FlashInfer mha[count=1] samples over 1.5% above their
    run's fastest, two copies none of 100."""
    if opts.warm_samples is not None:
        return opts.warm_samples
    short = work_us is None or work_us < SECOND_COPY_UNDER_US
    return 2 if opts.mode == "hot" and sampling == SAMPLING_INTERLEAVED and short else 1


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


class _Counts(TypedDict):
    """What one timing run did on the GPU, for the loop's energy figure."""

    works: int  # timed works (each k calls)
    busy_s: float  # their GPU time
    warm: int  # hot warm-up calls between samples


@dataclass(frozen=True)
class Sampled:
    """What the sampling loop hands back to a timing run: the samples (seconds), why they stopped
    and the seconds they took; in rounds also the case's complete rounds, after how many samples
    the candidate's own rule was met (None: the case stopped it first) and why the case stopped."""

    samples: list[float]
    reason: str
    elapsed: float
    rounds: int | None = None
    met_after: int | None = None
    case_stop: str = ""


# A timing run as a generator: it sets up (warm-up, graph capture, the regime's warm-up), yields
# its ``Candidate`` (timed take, host-bound test, hot warm-up), receives the sampling loop's
# ``Sampled`` and returns the row's timing record. ``time_callable`` drives one alone
# (``_loop``); ``time_interleaved`` drives several in rounds (harness/timing/interleave.py).
TimingRun = Generator[Candidate, Sampled, dict[str, Any]]


def _run_alone(run: TimingRun, opts: TimingOptions) -> dict[str, Any]:
    c = next(run)
    try:
        run.send(Sampled(*_loop(c.take, opts, c.host_bound, c.warm)))
    except StopIteration as done:
        return done.value
    raise RuntimeError("a timing run did not finish")  # a harness bug: the generator yields once


def time_interleaved(calls: dict[str, tuple[Callable[[], object], GraphDecision | None, torch.Tensor | None]],
                     device: torch.device, opts: TimingOptions) -> dict[str, dict[str, Any] | BaseException]:
    """Time several calls of one case in interleaved rounds (A B C A B C ...): each is set up as
    ``time_callable`` sets it up (warm-up, calls per sample, graph), then sampled once per round,
    its hot warm-up right before each of its samples, in complete rounds until every one's
    stopping rule is met or the case's overtime budget is spent (``sample_rounds``); each record
    says ``sampling: interleaved`` and the case's ``rounds``. A call whose setup or sampling
    raises gets its exception instead of a record; the others go on."""
    opts.validate()
    ctx = torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()
    with ctx:
        runs: dict[str, TimingRun] = {}
        takes: dict[str, Candidate] = {}
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
                run.send(Sampled(rounds.samples[name], rounds.reasons[name], rounds.elapsed[name], rounds.rounds,
                                 rounds.met_after.get(name), rounds.stop))
            except StopIteration as done:
                out[name] = done.value
            except Exception as e:
                out[name] = e
        return {name: out[name] for name in calls}


def time_in_turn(calls: dict[str, tuple[Callable[[], object], GraphDecision | None, torch.Tensor | None]],
                 device: torch.device, opts: TimingOptions) -> dict[str, dict[str, Any] | BaseException]:
    """A case's calls set up together (each held in memory, as in rounds), then each sampled
    alone in turn, all of its samples before the next call's. Records say ``sampling: sequential``.

    Burst (``--sampling sequential`` on a GPU): the same memory placement as interleaved rounds,
    so the two orders differ in order alone (issue 44: with each call set up only after the
    previous one was freed, every call's buffers reused the same addresses, held ones do not).
    Sustained (harness/timing/sustained.py): each settled and sampled on one queue that never
    runs dry, so the GPU stays under load from one call to the next; not rounds, since each
    call's samples must be taken in the state its own continuous loop settles in."""
    opts.validate()
    with torch.cuda.device(device):
        runs: dict[str, TimingRun] = {}
        takes: dict[str, Candidate] = {}
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
            c = takes[name]
            try:
                if isinstance(c.take, SustainedSampler):
                    c.take.run_settle()
                run.send(Sampled(*_loop(c.take, opts, c.host_bound, c.warm)))
            except StopIteration as done:
                out[name] = done.value
            except Exception as e:
                out[name] = e
        return {name: out[name] for name in calls}


def _loop(take: Callable[[], float | None], opts: TimingOptions, host_bound: Callable[[], bool] | None = None,
          warm: Callable[[], object] | None = None) -> tuple[list[float], str, float]:
    """Sample one call alone until the criterion says stop; ``warm`` (the hot warm-up) runs right
    before every take, as in rounds, so hot means the same in both orders. A sustained sampler's
    ``window_open`` (at the power limit the samples must span a controller cycle) keeps the loop
    going past the criterion."""
    window_open = take.window_open if isinstance(take, SustainedSampler) else None
    criterion = criterion_for(opts)
    samples: list[float] = []
    sorted_s: list[float] = []
    start = time.perf_counter()
    while True:
        if warm is not None:
            warm()
        x = take()
        if x is None:  # sample rejected (launch not hidden yet); the clock keeps running
            if time.perf_counter() - start > opts.max_time_s and samples:
                return samples, STOP_TIME, time.perf_counter() - start
            continue
        samples.append(x)
        bisect.insort(sorted_s, x)
        elapsed = time.perf_counter() - start
        reason = ask(criterion, sorted_s, elapsed, host_bound is not None and host_bound())
        if reason and not (window_open is not None and window_open()):
            return samples, reason, elapsed


def kept_clocks(taken: list[tuple[float, float | None]], kept: list[float]) -> list[float | None]:
    """The hold's clock of each kept sample, in order: ``kept`` is ``taken``'s values with the
    samples of dropped rounds left out (a round is dropped when another candidate got no sample),
    so each kept value is matched to the next accepted take of that value. Pure."""
    out: list[float | None] = []
    i = 0
    for x in kept:
        while i < len(taken) and taken[i][0] != x:
            i += 1
        out.append(taken[i][1] if i < len(taken) else None)
        i += 1
    return out


def filler_graph(fn: Callable[[], object], k: int, device: torch.device, output: torch.Tensor | None,
                  decision: GraphDecision, opts: TimingOptions) -> tuple[Callable[[], None] | None, str]:
    """A sustained eager row's filler (harness/timing/sustained.py): the replay of a CUDA graph of
    its ``k`` calls, captured here only to keep the GPU busy while the host enqueues a sample, and
    used only where its replay writes the eager output; else (None, why not)."""
    if not opts.cuda_graph:
        return None, "--no-cuda-graph leaves no graph to fill the queue with"
    if decision.use:  # the timing loop tried this capture and it failed or did not match
        return None, "no working graph of the call fills the queue"
    if output is None:
        return None, "no output to check a graph replay against: no filler"
    try:
        g = capture_graph(fn, k, device)
        bad = replay_matches(g, output, device)
    except Exception as e:  # capture_graph leaves the process as it found it
        return None, f"a graph to fill the queue could not be captured ({short_reason(e)})"
    if bad:
        return None, f"a graph to fill the queue is unusable ({bad})"
    return g.replay, ""


def _finish(got: Sampled, opts: TimingOptions) -> dict[str, Any]:
    us = [x * 1e6 for x in got.samples]
    out = summarize(us, opts.confidence)
    out["stop_criterion"] = opts.stop_criterion
    out["stop_reason"] = got.reason
    out["stop"] = criterion_for(opts).describe(got.reason, out)
    if got.rounds is not None:  # in rounds: the case, not only the row's own rule, set the count
        out["stop"] = stop_sentence(got.reason, got.met_after, got.rounds, got.case_stop, out, opts) or out["stop"]
    out["rounds"] = got.rounds
    out["target_rel_noise"] = opts.target_rel_noise
    out["sampling_s"] = got.elapsed
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

    got = yield Candidate(take)  # no hot warm-up on the CPU: its caches are not what a row states
    out = _finish(got, opts)
    out["sampling"] = sampling
    out.update(
        method="process_time" if opts.cpu_clock == "process" else "wall_clock",
        mode=opts.mode,
        l2="n/a on CPU",
        warm_calls=0,
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
    flusher = L2Flusher(device, cold_check["method"], cold_check["l2_factor"]) if cold_check else None
    clock_before = sm_clock_mhz(device)
    state = {"hold": hold_for(enqueue_s), "raises": 0, "hidden": 0, "unhidden": 0}
    clocks: list[float] = []
    max_hold = int(opts.max_hold_ms * 1e3 * cyc_per_us)

    count: _Counts = {"works": 0, "busy_s": 0.0, "warm": 0}
    # The clock regime (harness/timing/clocks.py): burst reads the clock after every sample and
    # discards throttled ones; sustained samples on a queue kept full, once the GPU has settled
    # (harness/timing/sustained.py).
    reader, why_no_reader = nvml_reader(device)
    regime = RegimeSampler(opts.clock_regime, reader, why_no_reader, threshold=opts.throttle_threshold,
                           recovery_s=opts.throttle_recovery_s, max_time_s=opts.max_time_s, device_key=str(device))
    work_s = min(estimates) * k  # one sample's work, from the eager estimates
    filler: Callable[[], None] | None = None  # without one the sampler queues no replays, whatever fill says
    fill, fill_note = 0, ""
    if opts.clock_regime == "sustained" and not graph_info["used"]:
        fill = fill_replays(enqueue_s, work_s)
        if fill:  # eager work the host cannot keep ahead of the GPU (harness/timing/sustained.py)
            filler, fill_note = filler_graph(fn, k, device, output, decision, opts)
    sustained = (SustainedSampler(device, work, k, work_s, reader, opts.max_time_s,
                                  flusher.flush if flusher else None, opts.max_samples, filler, fill)
                 if opts.clock_regime == "sustained" else None)
    if sustained is not None and settle_now:
        sustained.run_settle()
    started: list[float] = []  # the first sample's start: interleaved runs are set up long before
    taken: list[tuple[float, float | None]] = []  # --keep-raw: every accepted take and its hold's clock

    # Before every timed sample (the sampling loop runs it, in rounds and alone alike) the GPU is
    # put in the state a sequential sample finds it in, whatever candidate ran before: untimed
    # copies of the sample's own work (``warm_samples_for``; the same graph replay or eager calls;
    # cold, one call, before the flush, which evicts the data but not the kernel's code), so the L2's contents and
    # replacement state, the TLBs, the instruction caches and the last graph launched are what the
    # previous sample of this row left. One eager call was not enough on an H100: interleaved hot
    # rows stayed 1-5% slower than sequential, cold ones up to 3% (reports/h100/2026-12-06, first
    # loan). Cold took one eager call before: the graph replay timed after the flush then
    # followed another candidate's graph in rounds and its own in sequence (a guess about the one
    # cold row still outside 1%, docs/measurement.md §13).
    warm_samples = warm_samples_for(opts, sampling, work_s * 1e6)
    warm_calls = k * warm_samples  # k is 1 in cold mode (calls_from_estimates)

    def warm() -> None:
        for _ in range(warm_samples):
            work()
        count["warm"] += warm_calls

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
        if opts.keep_raw:
            taken.append((gpu_s / k, mhz))
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
    if sustained is not None:  # a full queue of the call's own work: no hold, no host-bound class, no warm-up
        got = yield Candidate(sustained, None, None)
        sustained.leave()
        # at the limit only every stride-th work is timed: the untimed ones ran too (energy per call)
        count["works"] += sustained.works_sampled
        count["busy_s"] += statistics.mean(got.samples) * k * sustained.works_sampled if got.samples else 0.0
    else:
        got = yield Candidate(take, host_bound, warm if warm_calls else None)
    samples = got.samples
    loop_e = None
    if read is not None:
        torch.cuda.synchronize(device)
        e1, span = read(), time.perf_counter() - t0
        if span >= opts.energy_window_s:  # the warm-up calls ran inside the span too: counted as calls
            call_s = statistics.median(samples) if samples else 0.0
            loop_e = loop_energy(e0, e1, span, count["works"] * k + count["warm"],
                                 count["busy_s"] + count["warm"] * call_s, source)
    clock_after = sm_clock_mhz(device)
    out = _finish(got, opts)
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
        warm_calls=warm_calls,
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
        clocks=regime.finish(len(samples), opts.min_samples, got.elapsed),
        sampling=sampling,
    )
    if opts.keep_raw and sustained is None and cyc_per_us:
        out["launch"]["raw_hold_mhz"] = kept_clocks(taken, samples)
    if sustained is not None:
        out["clocks"] = sustained.record(out["clocks"], got.elapsed)
        out["settled_sm_clock_mhz"] = sustained.settled_sm_clock_mhz
        if opts.keep_raw:
            out["clocks"]["raw_sm_mhz"] = list(sustained.kept_mhz)
        # hidden: the share of samples the queue ahead covered (the rest began on an idle GPU)
        hidden_frac = 1.0 - sustained.gaps / sustained.enqueued if sustained.enqueued else None
        note = f"no hold: {QUEUE_AHEAD_S * 1e3:g} ms of work queued ahead of every sample"
        if sustained.filler is not None:
            note += (f"; the host's enqueue ({enqueue_s * 1e6:.0f} us a sample) outlasts the eager work "
                     f"({work_s * 1e6:.0f} us): {sustained.fill} untimed graph replay(s) of the same work queued "
                     f"before each sample ({sustained.fill_raised} raise(s) after a sample on an idle GPU)")
        elif fill_note:
            note += f"; the host's enqueue outlasts the eager work and {fill_note}: samples hold host time"
        out["launch"].update(hidden_frac=hidden_frac, hold_us=0.0, note=note,
                             fill_replays=sustained.fill if sustained.filler is not None else None)
        out["contains"] = time_contents("cuda", graph_info["used"], hidden_frac, k)
    if flusher is not None and cold_check is not None:  # set together
        if flusher.count < len(samples):
            raise RuntimeError(f"cold mode: {flusher.count} flushes for {len(samples)} samples")
        out["cold_check"] = cold_check
        out["cold_l2"] = cold_l2_label(cold_check)  # e.g. "verified (write flush, ...)" / "not verified (...)"
    # Energy beside the time: from the timed loop when it was long enough for the counter, else
    # the same work back to back for the window, outside the timed samples.
    out["energy"] = loop_e or measure_energy(work, k, out["median_us"] * 1e-6, device, opts.energy_window_s)
    return out
