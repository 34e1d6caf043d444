"""``harness crosscheck RESULTS``: re-time each timed row's library call with timers this project
did not write, in one process on the row's device, and flag rows whose median disagrees.

For every row that passed and was timed, the row's own batch is generated again on its device
from its case and seed (``harness.case.workload.generate``, reordered as the backend asks) and bound
to the names a ``standalone_call`` source reads (harness/crosscheck/inputs.py; only the
constant part of the ``harness repro`` inputs runs), and the backend's library call is taken
from its ``standalone_call`` hook. The call's source is split at its first module-level
``out = ...`` (what every hook does: setup, plans and metadata before it, the call after), the
setup runs once, and the rest becomes the function the outside timers repeat:

- GPU: FlashInfer's ``flashinfer.testing.bench_gpu_time`` (CUDA graph and L2 mode as the row was
  timed; its signature is read at run time) and Triton's ``do_bench_cudagraph`` (graph-replayed
  hot rows) or ``do_bench`` (eager cold rows: it flushes L2 before every call), when installed;
- CPU: ``torch.utils.benchmark.Timer.blocked_autorange`` on the row's clock (wall or process).

A row is flagged when its median is more than the tolerance away from the median of the outside
timers' medians *and* outside their own spread (the range of their medians; one timer: its
interquartile range), whichever is wider. Flags set exit status 1; rows that cannot be re-timed
are listed with the reason. Beside the outside timers, each row gets the harness's own timer on
the adapter's call and on the same standalone call here (an eager row whose outside timers replay
a graph: also on that call as a graph, so the timers are compared like with like and the eager
launches' cost is named: harness/crosscheck/eager.py), the profiler's kernel time and the SM
clock (harness/crosscheck/explain.py), and a flag names the comparison that fails. The table goes to ``crosscheck.md`` /
``crosscheck.json`` in the results folder (or ``--out FILE``), rewritten after every row, where
the report's cross-check section reads it.
"""

from __future__ import annotations

import ast
import functools
import gc
import statistics
import time
from typing import Any, Callable

from typing import TYPE_CHECKING

from harness.crosscheck.timers import gpu_timers, time_cpu
from harness.cli.lazy import LazyModule

# Imported on first use: `harness --help` builds this command's parser without torch or pydantic.
torch = LazyModule("torch")
results = LazyModule("harness.records.results")
if TYPE_CHECKING:
    from harness.records.results import ResultRow


class CrosscheckError(Exception):
    """Why one row cannot be re-timed (listed, not fatal)."""


# ------------------------------------------------------------------ the call as a function
def split_call(source: str) -> tuple[str, str]:
    """(setup, call): the source up to and including its first module-level assignment to
    ``out``, and the statements after it. Raises CrosscheckError when there is none."""
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        raise CrosscheckError(f"standalone_call source does not parse: {e.msg} (line {e.lineno})") from None
    lines = source.splitlines()
    for stmt in tree.body:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else []
        if any(isinstance(t, ast.Name) and t.id == "out" for t in targets):
            end = stmt.end_lineno or stmt.lineno
            call = "\n".join(lines[end:]).strip("\n")
            if not call.strip():
                break
            return "\n".join(lines[:end]), call
    raise CrosscheckError("standalone_call source has no module-level `out = ...` followed by the call "
                          "(nothing separates the setup from the call to repeat)")


def build_call(inputs: str, call_source: str) -> Callable[[], None]:
    """Run the inputs source (the repro's draws) and the call's setup once; return the call as a
    function of no arguments."""
    ns: dict[str, Any] = {"__name__": "__crosscheck__"}
    exec(compile(inputs, "<crosscheck inputs>", "exec"), ns)
    return build_call_in(ns, call_source)


def build_call_in(ns: dict[str, Any], call_source: str) -> Callable[[], None]:
    """Run the call's setup once in ``ns`` (the inputs already bound); return the call as a
    function of no arguments."""
    setup, call = split_call(call_source)
    exec(compile(setup, "<crosscheck setup>", "exec"), ns)
    body = "\n".join("    " + ln if ln.strip() else "" for ln in call.splitlines())
    exec(compile(f"def _crosscheck_call():\n{body}\n    return None\n", "<crosscheck call>", "exec"), ns)
    return ns["_crosscheck_call"]


# ------------------------------------------------------------------ the verdict
def verdict(harness_us: float, outside: dict[str, dict[str, Any]], tol: float, gated: bool = True) -> dict[str, Any]:
    """Reference (median of the outside medians), ratios, the accepted band and the flag.
    ``gated=False`` (a row timed on a CPU's wall clock, ``gated(...)``): a disagreement is
    reported as ``noisy``, not flagged, as ``harness compare`` reports such timings without
    gating them: the row was timed earlier under other load, and on a shared machine one call's
    wall time moves by several x between minutes (2 shared cores, 2026-12-02: 0.2 to 180 ms)."""
    meds = [o["median_us"] for o in outside.values()]
    ref = statistics.median(meds)
    if len(meds) >= 2:
        lo, hi = min(meds), max(meds)
    else:
        one = next(iter(outside.values()))
        lo, hi = one.get("q1_us") or ref, one.get("q3_us") or ref
    lo, hi = min(lo, ref * (1 - tol)), max(hi, ref * (1 + tol))
    ratio = harness_us / ref
    off = not lo <= harness_us <= hi
    reason = ""
    if off:
        reason = (f"harness {harness_us:.4g} us is {ratio:.3g}x the outside timers' median {ref:.4g} us, outside "
                  f"{tol:.0%} and their spread [{lo:.4g}, {hi:.4g}] us")
    return {"ref_us": ref, "ratio": ratio, "band_us": [lo, hi], "flagged": off and gated, "noisy": off and not gated,
            "reason": reason,
            "ratios": {k: harness_us / o["median_us"] for k, o in outside.items()}}


def gated(device: str, clock: str) -> bool:
    """Whether a disagreement flags the row: GPU rows and CPU rows on the process clock."""
    return device.startswith("cuda") or clock == "process_time"


def skip_reason(row: ResultRow) -> str | None:
    if row.status != results.Status.PASS:
        return f"status {row.status.value}, not pass"
    if row.timing is None:
        return f"not timed ({row.timing_skipped})" if row.timing_skipped else "not timed"
    return None


class BatchCache:
    """The last case's generated batch, on its device: the rows of one case (one per backend
    variant) share it, as the run's CaseContext shares it; a new case frees the old one first."""

    def __init__(self) -> None:
        self.key: tuple[str, str] | None = None
        self.batch: Any = None

    def get(self, case: Any, device: Any) -> Any:
        from harness.case.workload import generate

        key = (case.model_dump_json(), str(device))
        if key != self.key:
            self.key, self.batch = None, None
            gc.collect()
            if device.type == "cuda":
                torch.cuda.empty_cache()
            self.batch, self.key = generate(case, device), key
        return self.batch


def _first_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]


def judge(harness_us: float, outside: dict[str, dict[str, Any]], tol: float, gated_: bool,
          row_mhz: float | None, host_bound: str = "") -> dict[str, Any]:
    """``verdict`` over the outside timers that ran in the row's state (their clock within 3% of
    the row's: harness/crosscheck/regime.py); when none did, "states differ" with the clocks,
    neither flagged nor agreeing (ref_us and ratios then only for reading). ``host_bound``
    (``regime.host_bound_reason``): the row and the timers time different quantities, state
    "host-bound", neither flagged nor agreeing."""
    from harness.crosscheck.regime import split_states

    same, differ = split_states(row_mhz, outside)
    if host_bound:
        out = verdict(harness_us, outside, tol, False)
        out.update(flagged=False, noisy=False, reason=host_bound)
        return {**out, "state": "host-bound", "states_differ": differ, "row_mhz": row_mhz, "host_bound": host_bound}
    if same:
        out = verdict(harness_us, same, tol, gated_)
    else:
        out = verdict(harness_us, outside, tol, False)
        out.update(flagged=False, noisy=False, reason="; ".join(f"{k}: {v}" for k, v in differ.items()))
    return {**out, "state": "matched" if same else "states differ", "states_differ": differ, "row_mhz": row_mhz}


def judge_record(rec: dict[str, Any], tol: float, row_mhz: float | None, host_bound: str = "") -> dict[str, Any]:
    """The verdict and its explanation from a row's record (its figures only: a fresh row's and a
    ``--resume``d one's alike): ``judge``, then for an eager GPU row against graph replays the
    like-with-like verdict (harness/crosscheck/eager.py), then the comparisons that name why a
    flagged or noisy row is off (harness/crosscheck/explain.py)."""
    from harness.crosscheck import eager
    from harness.crosscheck import explain as ex

    harness_us, outside = rec["harness_us"], rec["outside"]
    gated_ = gated(str(rec.get("device", "")), str(rec.get("clock", "")))
    out = judge(harness_us, outside, tol, gated_, row_mhz, host_bound)
    here = rec.get("here") if isinstance(rec.get("here"), dict) else None
    adapter = rec.get("here_adapter") if isinstance(rec.get("here_adapter"), dict) else None
    graph_here: dict[str, Any] | None = None
    eager_row = eager.applies(rec)
    if eager_row:
        graph_here, why_not = eager.graph_here_of(rec.get("here_graph"), row_mhz)
        if out["state"] != "matched":
            graph_here = None
        same = {k: v for k, v in outside.items() if k not in out["states_differ"]}
        timer = verdict(graph_here["median_us"], same, tol, gated_) if graph_here is not None and same else None
        out.update(eager.eager_verdict(harness_us, out, here, graph_here, why_not, timer, tol))
    else:
        out["eager"] = None
    why = ex.explain(harness_us, out["ref_us"], here, rec.get("kernel", ex.NA_CPU), tol, adapter, outside=outside,
                     row_mhz=row_mhz, here_graph=graph_here, eager_vs_graph=eager_row)
    out.update(why)
    if out["flagged"] or out["noisy"]:
        out["reason"] += "; " + ("; ".join(why["because"]) if why["because"] else
                                 f"no single comparison (row vs here, here vs outside, kernel vs outside) is "
                                 f"more than {tol:.0%} off")
    return out


def rejudge(rec: dict[str, Any], row: ResultRow, tol: float) -> dict[str, Any]:
    """A record's verdict and explanation, by this version's rules, from its figures and its row
    (the row's clock, ``regime.host_bound_reason``): a fresh record's (``retime_row``), and an
    earlier cross-check's rows under ``--resume``, on any machine, by the rules that came since."""
    from harness.crosscheck import regime as cr

    on_gpu = str(rec.get("device", "")).startswith("cuda")
    row_mhz = cr.regime_plan(row)["row_mhz"] if on_gpu else None
    return judge_record(rec, tol, row_mhz, cr.host_bound_reason(row, rec.get("outside_graph") if on_gpu else None))


def standalone_fn(row: ResultRow, case: Any, backend: Any, variant: dict[str, Any], batch: Any,
                  source: str) -> Callable[[], None]:
    """The row's standalone call (``source``, the backend's ``standalone_call``) bound to the
    harness batch of its case on its device: the function the outside timers repeat."""
    from harness.crosscheck import repro
    from harness.crosscheck.inputs import backend_view, bind_from_batch, constants_part

    view = backend_view(batch, backend, variant)
    constants = constants_part(repro.inputs_source(row, repro.script_case(case, backend, variant), backend))
    return build_call_in(bind_from_batch(constants, view), source)


def row_device(row: ResultRow) -> Any:
    """The device to re-time ``row`` on here: its own, or this machine's first GPU where that index
    is missing; CrosscheckError where the row was timed on a GPU and none is here."""
    if not row.device.startswith("cuda"):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise CrosscheckError(f"row timed on {row.device}; torch sees no CUDA device here")
    dev = torch.device(row.device)
    return torch.device("cuda") if dev.index is not None and dev.index >= torch.cuda.device_count() else dev


def row_call(row: ResultRow, suite: str | None, batches: BatchCache,
             dev: Any) -> tuple[Any, dict[str, Any], Any, Callable[[], None]]:
    """(backend, variant, batch, the standalone call) of ``row`` on ``dev`` (inside its device
    context), the call made once (JIT, workspaces); CrosscheckError with the reason it cannot be."""
    from harness.crosscheck import repro
    from harness.registry import resolve

    try:
        case, spec = repro.case_of_row(row, suite)
    except repro.ReproError as e:
        raise CrosscheckError(str(e)) from None
    try:
        backend = resolve(spec)
    except Exception as e:
        raise CrosscheckError(f"backend {spec!r} cannot be loaded: {str(e).splitlines()[0] if str(e) else e}") from None
    variant = dict(row.variant)
    avail = backend.availability(variant)
    if not avail.available:
        raise CrosscheckError(f"library missing here: {avail.reason}")
    try:
        source = repro.call_source(backend, row, case, variant)
    except repro.ReproError:
        raise CrosscheckError(f"backend {backend.name} offers no standalone_call") from None
    try:
        # The row's own inputs: the harness's batch for its case and seed, made on the device.
        batch = batches.get(case, dev)
        fn = standalone_fn(row, case, backend, variant, batch, source)
        fn()  # first call: JIT, workspaces
        if dev.type == "cuda":
            torch.cuda.synchronize()
    except CrosscheckError:
        raise
    except Exception as e:
        raise CrosscheckError(f"the standalone call raised: {_first_line(e)}") from None
    return backend, variant, batch, fn


PROFILED_LATER = "profiled after every row's timers"


def retime_row(row: ResultRow, tol: float, suite: str | None, min_run_s: float,
               batches: BatchCache | None = None, scale: float = 1.0) -> dict[str, Any]:
    """One row's cross-check record; raises CrosscheckError with the reason it cannot be re-timed.
    ``scale`` (<= 1) shortens the idle/warm waits before the outside timers to fit a deadline;
    ``cost_s`` in the record says where the row's time went. A GPU row's ``kernel`` is
    PROFILED_LATER: the profiler runs after every row's timers (``kernel_of``, driver.profile_pass)."""
    from harness.crosscheck import explain as ex
    from harness.crosscheck import regime as cr

    dev = row_device(row)
    on_gpu = dev.type == "cuda"
    timing = row.timing
    assert timing is not None
    graph = timing.cuda_graph.used
    cold = timing.mode == "cold"
    ctx = torch.cuda.device(dev) if on_gpu else _Null()
    batches = batches or BatchCache()
    with ctx:
        t0 = time.perf_counter()
        backend, variant, batch, fn = row_call(row, suite, batches, dev)
        setup_s = time.perf_counter() - t0  # batch, call setup, first call
        cost = {"setup": setup_s}
        # The harness's own timer on the adapter's call and on this call, just before the outside
        # timers; the profiler last (its tracer stays out of every timed figure).
        try:
            adapter: dict[str, Any] | None = ex.with_clocks(
                dev, on_gpu, lambda: ex.time_adapter(backend, variant, batch, dev, timing.options))  # noqa: F821  (deleted later; the lambda runs before)
            adapter_error = None
        except Exception as e:
            adapter, adapter_error = None, f"failed: {_first_line(e)}"
        cost["adapter"] = time.perf_counter() - t0 - setup_s
        del batch  # collected after the next timer: a collection here would idle a sustained row's GPU
        t1 = time.perf_counter()
        try:
            here: dict[str, Any] | None = ex.with_clocks(dev, on_gpu, lambda: ex.time_here(fn, dev, timing.options, graph))  # noqa: F821  (deleted later; the lambda runs before)
            here_error = None
        except Exception as e:
            here, here_error = None, f"failed: {_first_line(e)}"
        cost["here"] = time.perf_counter() - t1
        # An eager hot row's outside timers replay a graph: the same timer replaying the same call
        # here, so the timers are compared like with like and the row's excess over it is the
        # eager launches' (harness/crosscheck/eager.py).
        plan = cr.regime_plan(row)  # the outside timers in the row's clock regime, and whether it is such a row
        here_graph: dict[str, Any] | str | None = None
        if plan["graph_here"]:
            t1 = time.perf_counter()
            try:
                here_graph = ex.with_clocks(dev, True, lambda: ex.time_here(fn, dev, timing.options, True))  # noqa: F821  (deleted later; the lambda runs before)
            except Exception as e:
                here_graph = f"failed: {_first_line(e)}"
            cost["here_graph"] = time.perf_counter() - t1
        gc.collect()
        outside: dict[str, dict[str, Any]] = {}
        unused: dict[str, str] = {}
        outside_graph = graph
        cost["waits"] = cost["timers"] = 0.0
        busy_graph = sustained_busy(plan, fn, dev) if on_gpu else None
        if on_gpu:
            # An eager hot row's time is device time (its samples hide the host's enqueue behind a
            # spin kernel); event-timed eager loops measure the host's enqueue when it outlasts the
            # kernels (FA4's Python launcher: 210 us against a 65 us kernel). So its outside timers
            # replay the call from a CUDA graph, the same kernels without the host between them,
            # and time it eagerly only where it cannot be captured (docs/measurement.md §11). A
            # host-bound sustained row is its eager loop's rate: eager timers first (regime.py).
            for as_graph in cr.outside_graph_order(row):
                outside_graph = as_graph
                for name, t in gpu_timers(as_graph, cold, plan["repeat_ms"], plan["dry_run_ms"]).items():
                    if isinstance(t, str):
                        unused[name] = t
                        continue
                    try:
                        t2 = time.perf_counter()
                        # the harness timer here just left the GPU in the row's state: a shorter warm-up
                        cr.prepare(plan, busy_graph if as_graph and busy_graph else fn, torch.cuda.synchronize,
                                   first=not outside and here is None and not isinstance(here_graph, dict),
                                   scale=scale, mark=gpu_mark)
                        t3 = time.perf_counter()
                        outside[name] = ex.with_clocks(dev, True, functools.partial(t, fn))
                        cost["waits"] += t3 - t2
                        cost["timers"] += time.perf_counter() - t3
                    except Exception as e:
                        unused[name] = f"failed{' as a graph' if as_graph and not graph else ''}: {_first_line(e)}"
                if outside:
                    break
        else:
            clock = "process" if timing.method == "process_time" else "wall"
            outside["torch.utils.benchmark.Timer"] = ex.with_clocks(dev, False, lambda: time_cpu(fn, clock, min_run_s))  # noqa: F821  (deleted later; the lambda runs before)
        kernel: dict[str, Any] | str = ex.NA_CPU if not on_gpu else PROFILED_LATER
        cost["kernel"] = 0.0  # a GPU row's: driver.profile_pass's
    del fn, busy_graph  # the graph keeps its pool until dropped
    gc.collect()
    if on_gpu:
        torch.cuda.empty_cache()
    if not outside:
        raise CrosscheckError("no outside timer could time it: " + "; ".join(f"{k}: {v}" for k, v in unused.items()))
    rec = {"case": row.case, "backend": row.backend, "variant": row.variant_label, "device": row.device,
           "mode": timing.mode, "graph": graph, "clock": timing.method, "harness_us": timing.median_us,
           "inputs": f"harness batch (generate on {dev.type})", "setup_s": setup_s,
           "here": here if here is not None else here_error,
           "here_adapter": adapter if adapter is not None else adapter_error, "here_graph": here_graph,
           "kernel": kernel,
           "outside": outside, "timers_not_used": unused, "clock_regime": plan["regime"],
           "regime_how": plan["how"], "wait_scale": scale, "cost_s": cost,
           "outside_graph": outside_graph if on_gpu else None}
    rec.update(rejudge(rec, row, tol))
    return rec


def kernel_of(row: ResultRow, suite: str | None, batches: BatchCache) -> dict[str, Any] | str:
    """The profiler's kernel time of ``row``'s standalone call, for a pass after every row's outside
    timers (harness/crosscheck/driver.py): torch's profiler leaves CUPTI attached when it stops
    (Kineto tears it down only under TEARDOWN_CUPTI=1; pytorch/pytorch#144455 measured the work
    after a profile 10-20% slower), so a row profiled between rows would carry it into the next
    rows' timers. "failed: ..." where the call cannot be made or profiled."""
    from harness.crosscheck import explain as ex

    try:
        dev = row_device(row)
        with torch.cuda.device(dev):
            fn = row_call(row, suite, batches, dev)[3]
            return ex.kernel_time(fn)
    except CrosscheckError as e:
        return f"failed: {e}"
    except Exception as e:
        return f"failed: {_first_line(e)}"


def sustained_busy(plan: dict[str, Any], fn: Callable[[], None], dev: Any) -> Callable[[], None] | None:
    """For a sustained GPU row whose outside timers replay a graph (``plan["busy_graph"]``: not a
    host-bound one): the replay of a graph of the call, to keep the GPU busy before each timer as
    they and the row's samples run it. An eager loop of a call whose host enqueue outlasts it
    leaves the GPU idle part of the time, at a higher clock: FA3's and FA4's Python launchers take
    324-561 us a call on the H100 (first/ of 2026-12-08, ``host.enqueue_us``), so their ~55 us
    rows' timers started at 1980 MHz after the eager re-warm, the rows at 1708-1846. None where not
    such a row or the capture fails (the eager call then)."""
    from harness.timing.graphs import capture_graph

    if plan["regime"] != "sustained" or not plan["busy_graph"]:
        return None
    try:
        return capture_graph(fn, 1, dev).replay
    except Exception:
        return None


def gpu_mark() -> Callable[[], None]:
    """A point in the GPU's queue (an event recorded now) and the wait for it."""
    e = torch.cuda.Event()
    e.record()
    return e.synchronize


class _Null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *a: Any) -> None:
        return None


__all__ = ["PROFILED_LATER", "BatchCache", "CrosscheckError", "build_call", "build_call_in", "gated", "gpu_mark",
           "judge", "judge_record", "kernel_of", "rejudge", "retime_row", "row_call", "row_device", "skip_reason", "split_call",
           "standalone_fn", "sustained_busy", "verdict"]
