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
import json
import math
import statistics
import time
from typing import Any, Callable

from typing import TYPE_CHECKING

from harness.crosscheck.table import cells_of, to_markdown
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


def standalone_fn(row: ResultRow, case: Any, backend: Any, variant: dict[str, Any], batch: Any,
                  source: str) -> Callable[[], None]:
    """The row's standalone call (``source``, the backend's ``standalone_call``) bound to the
    harness batch of its case on its device: the function the outside timers repeat."""
    from harness.crosscheck import repro
    from harness.crosscheck.inputs import backend_view, bind_from_batch, constants_part

    view = backend_view(batch, backend, variant)
    constants = constants_part(repro.inputs_source(row, repro.script_case(case, backend, variant), backend))
    return build_call_in(bind_from_batch(constants, view), source)


def retime_row(row: ResultRow, tol: float, suite: str | None, min_run_s: float,
               batches: BatchCache | None = None, scale: float = 1.0) -> dict[str, Any]:
    """One row's cross-check record; raises CrosscheckError with the reason it cannot be re-timed.
    ``scale`` (<= 1) shortens the idle/warm waits before the outside timers to fit a deadline;
    ``cost_s`` in the record says where the row's time went."""
    from harness.crosscheck import explain as ex
    from harness.crosscheck import regime as cr
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
    on_gpu = row.device.startswith("cuda")
    if on_gpu and not torch.cuda.is_available():
        raise CrosscheckError(f"row timed on {row.device}; torch sees no CUDA device here")
    avail = backend.availability(variant)
    if not avail.available:
        raise CrosscheckError(f"library missing here: {avail.reason}")
    try:
        source = repro.call_source(backend, row, case, variant)
    except repro.ReproError:
        raise CrosscheckError(f"backend {backend.name} offers no standalone_call") from None
    timing = row.timing
    assert timing is not None
    graph = timing.cuda_graph.used
    cold = timing.mode == "cold"
    dev = torch.device(row.device) if on_gpu else torch.device("cpu")
    if on_gpu and dev.index is not None and dev.index >= torch.cuda.device_count():
        dev = torch.device("cuda")
    ctx = torch.cuda.device(dev) if on_gpu else _Null()
    batches = batches or BatchCache()
    with ctx:
        t0 = time.perf_counter()
        try:
            # The row's own inputs: the harness's batch for its case and seed, made on the device.
            batch = batches.get(case, dev)
            fn = standalone_fn(row, case, backend, variant, batch, source)
            fn()  # first call: JIT, workspaces
            if on_gpu:
                torch.cuda.synchronize()
        except CrosscheckError:
            raise
        except Exception as e:
            raise CrosscheckError(f"the standalone call raised: {_first_line(e)}") from None
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
        kernel: dict[str, Any] | str = ex.NA_CPU
        t4 = time.perf_counter()
        if on_gpu:
            try:
                kernel = ex.kernel_time(fn)
            except Exception as e:
                kernel = f"failed: {_first_line(e)}"
        cost["kernel"] = time.perf_counter() - t4
    del fn
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
    rec.update(judge_record(rec, tol, plan["row_mhz"], cr.host_bound_reason(row, outside_graph if on_gpu else None)))
    return rec


def sustained_busy(plan: dict[str, Any], fn: Callable[[], None], dev: Any) -> Callable[[], None] | None:
    """For a sustained eager row whose outside timers replay a graph: the replay of a graph of
    the call, to keep the GPU busy before each timer as they and the row's samples run it (an
    eager loop of a call whose host enqueue outlasts it leaves the GPU idle part of the time, at
    a higher clock); None where not such a row or the capture fails (the eager call then)."""
    from harness.timing.graphs import capture_graph

    if plan["regime"] != "sustained" or not plan["graph_here"]:
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


# ------------------------------------------------------------------ the table
DEADLINE_REASON = "not re-timed: deadline"
PENDING_REASON = "not re-timed yet: the command stopped before this row"


def _ident(i: int, row: ResultRow) -> dict[str, Any]:
    return {"row": i, "case": row.case, "backend": row.backend, "variant": row.variant_label}


def select_rows(rows: list[ResultRow], cases: list[str] | None, backends: list[str] | None) -> list[int]:
    """Indices of the rows whose case and backend match one of the globs (all when none given)."""
    from fnmatch import fnmatchcase

    return [i for i, r in enumerate(rows)
            if (not cases or any(fnmatchcase(r.case, c) for c in cases))
            and (not backends or any(fnmatchcase(r.backend, b) for b in backends))]


def reusable(previous: dict[str, Any] | None, rows: list[ResultRow]) -> dict[int, dict[str, Any]]:
    """Records of an earlier cross-check of these results that still describe the same row
    (index, case, backend, variant, harness median): ``--resume`` keeps them."""
    keep: dict[int, dict[str, Any]] = {}
    for rec in (previous or {}).get("rows") or []:
        i = rec.get("row")
        if not isinstance(i, int) or not 0 <= i < len(rows):
            continue
        r = rows[i]
        if r.timing is None:
            continue
        if (rec.get("case"), rec.get("backend"), rec.get("variant"), rec.get("harness_us")) == (
                r.case, r.backend, r.variant_label, r.timing.median_us):
            keep[i] = rec
    return keep


def eta_line(rows: list[ResultRow], todo: list[int], deadline_s: float | None) -> str:
    """"57 rows to re-time, about N s": what the rows cost by the measured per-row costs
    (regime.eta_s), and whether ``deadline_s`` lets them all be re-timed."""
    from harness.crosscheck import regime as cr

    plans = [cr.regime_plan(rows[i]) for i in todo]
    full, least = cr.eta_s(plans)
    regimes = ", ".join(f"{n} {r or 'no regime'}" for r, n in sorted(
        {p["regime"]: sum(q["regime"] == p["regime"] for q in plans) for p in plans}.items(), key=lambda x: str(x[0])))
    line = f"{len(plans)} rows to re-time ({regimes}), about {full:.0f} s"
    if deadline_s is None or not plans:
        return line
    if deadline_s >= full:
        return line + f"; the deadline {deadline_s:g} s allows them all"
    if deadline_s >= least:
        return line + f"; the deadline {deadline_s:g} s shortens the waits before the outside timers to fit"
    return (line + f"; the deadline {deadline_s:g} s is short of the {least:.0f} s they need with the waits shortened: "
                   f"rows will be left 'not re-timed: deadline' (give --deadline {math.ceil(least / 10) * 10:g} or more)")


def crosscheck(rows: list[ResultRow], tol: float, suite: str | None = None, min_run_s: float = 0.2,
               log: Callable[[str], None] = lambda m: None, *, deadline_s: float | None = None,
               selected: list[int] | None = None, previous: dict[str, Any] | None = None,
               on_progress: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """The cross-check table of ``rows`` (those in ``selected``; all by default).

    ``deadline_s``: no row starts once that many seconds have passed since the call (at least
    one row is re-timed); the rest are listed as not re-timed for the deadline. ``on_progress``
    gets the table so far after every row, the rows not reached listed as pending."""
    start = time.perf_counter()
    order = list(range(len(rows))) if selected is None else list(selected)
    kept = reusable(previous, rows)
    batches = BatchCache()
    checked: list[dict[str, Any]] = []
    not_retimed: list[dict[str, Any]] = []
    attempted = 0
    # Rows still to re-time, and each re-timed row's cost beside its idle/warm waits: the waits
    # are shortened (harness/crosscheck/regime.py fit_scale) so every row fits the deadline.
    todo = {i for i in order if i not in kept and skip_reason(rows[i]) is None}
    fixed_costs: list[float] = []
    log(eta_line(rows, [i for i in order if i in todo], deadline_s))

    def table(done: int, complete: bool) -> dict[str, Any]:
        pending = [{**_ident(i, rows[i]), "reason": PENDING_REASON} for i in order[done:]] if not complete else []
        timers = sorted({k for r in checked for k in r["outside"]})
        return {"tolerance": tol, "timers": timers, "rows": list(checked), "not_retimed": not_retimed + pending,
                "flagged": sum(r["flagged"] for r in checked), "checked": len(checked), "complete": complete,
                "states_differ": sum(r.get("state") == "states differ" for r in checked),
                "host_bound": sum(r.get("state") == "host-bound" for r in checked),
                "selected": len(order), "of_rows": len(rows), "elapsed_s": time.perf_counter() - start,
                "deadline_s": deadline_s, "torch": torch.__version__,
                "clock_regimes": sorted({r["clock_regime"] for r in checked if r.get("clock_regime")}),
                "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}

    for n, i in enumerate(order):
        row = rows[i]
        tag = f"#{i} {row.case} / {row.backend} [{row.variant_label}]"
        why = skip_reason(row)
        if why is None and i in kept:
            rec = dict(kept[i])
            # the verdict and its explanation again from the recorded figures (what this version compares)
            rec.update(judge_record(rec, tol, rec.get("row_mhz"), str(rec.get("host_bound") or "")))
            checked.append(rec)
            log(f"{tag}: kept from the earlier cross-check (--resume)")
        elif why is None and deadline_s is not None and attempted and time.perf_counter() - start >= deadline_s:
            not_retimed.append({**_ident(i, row), "reason": DEADLINE_REASON})
            log(f"{tag}: {DEADLINE_REASON} ({deadline_s:g} s passed)")
        elif why is None:
            from harness.crosscheck import regime as cr

            attempted += 1
            t0 = time.perf_counter()
            left = None if deadline_s is None else deadline_s - (t0 - start)
            plan = cr.regime_plan(row)
            # a row's cost beside its waits: the rows so far, else the measured cost of its regime
            scale = cr.fit_scale(cr.waits_of(plan, cr.OUTSIDE_TIMERS),
                                 statistics.median(fixed_costs) if fixed_costs else cr.row_cost_s(plan), left,
                                 sum(1 for j in order[n:] if j in todo))
            try:
                rec = retime_row(row, tol, suite, min_run_s, batches, scale)
            except CrosscheckError as e:
                not_retimed.append({**_ident(i, row), "reason": str(e)})
                log(f"{tag}: not re-timed: {e}")
            else:
                rec["retime_s"] = time.perf_counter() - t0
                fixed_costs.append(rec["retime_s"] - rec["cost_s"]["waits"])
                checked.append({"row": i, **rec})
                shown = cells_of(rec)
                log(f"{tag}: harness {rec['harness_us']:.4g} us, adapter here {shown['adapter here us']}, standalone here "
                    f"{shown['harness here us']}, kernel {shown['kernel us (profiler)']}, outside {rec['ref_us']:.4g} us, "
                    f"ratio {rec['ratio']:.3g} (setup {rec['setup_s']:.1f} s of {rec['retime_s']:.1f} s)"
                    f"{'  FLAGGED' if rec['flagged'] else ''}{'  STATES DIFFER' if rec['state'] != 'matched' else ''}"
                    f"{f' (waits x{scale:.2f} for the deadline)' if scale < 1 else ''}")
        else:
            not_retimed.append({**_ident(i, row), "reason": why})
        if on_progress is not None:
            on_progress(table(n + 1, False))
    return table(len(order), True)


def result_json(res: dict[str, Any]) -> str:
    """The cross-check's record as strict JSON (NaN and infinities as null)."""
    return json.dumps(results.finite_json(res), indent=2, allow_nan=False, default=str) + "\n"


__all__ = ["build_call", "build_call_in", "cells_of", "crosscheck", "gpu_mark", "judge_record", "result_json",
           "split_call", "standalone_fn", "sustained_busy", "to_markdown", "verdict"]
