"""Why do two outside timers disagree on a short call? (issue 46: on the H100 Triton's
``do_bench_cudagraph`` read 5% above FlashInfer's ``bench_gpu_time`` on two ~60 us FA3 rows of
the sustained callforms run, both at the same clock.)

For chosen rows of a results folder, the row's standalone call (built as ``harness crosscheck``
builds it: the harness batch, the backend's ``standalone_call``) is timed in one process, each
figure after 0.3 s of the call back to back (1 s before the first), with NVML's clock beside it:

- ``bench_gpu_time`` (CUDA graph, hot L2) with its 100 ms loop, as the sustained cross-check runs it;
- ``do_bench_cudagraph`` with ``rep`` 5, 20 and 100 ms (its graph holds rep / estimate calls);
- the probe's own graphs of K calls (K = 10, 100 and as many as ``do_bench_cudagraph(rep=100)``
  unrolls), each replayed 10 times between two CUDA events, per call: does the graph's length
  move the time? With the device memory the capture took (do the calls' outputs get new memory?).

    python tools/graph_loop_probe.py RESULTS --rows 48,52 [--idle S] [--per-sample] [--profile-first] [--out probe.json]

``--idle S``: each figure after S seconds of an idle GPU instead of the call back to back, as the
burst cross-check runs its timers (there Triton read 4-7% above ``bench_gpu_time`` on these rows
where, warm, the two agreed within 2.6%: H100, reports/h100/2026-12-08/first).
``--per-sample``: also the harness's own timer (``time_callable``, a graph, hot, as the row's
options) at one call a sample and at about ten (``min_sample_us`` 200 and ten times the call),
and the probe's own graph of one call: does a sample of one long call hold a fixed cost that a
loop of calls does not? (Burst row 35, FlashInfer's ~300 us prefill: the harness 1.02-1.04x the
outside timers in six cross-checks on two cards, its samples one call each.)
``--profile-first``: the cross-check's profiler (``harness.crosscheck.explain.kernel_time``, torch's
CUPTI-based profiler) runs once before the figures, as the previous row's did before every row's
timers in the cross-check and never in the probe: does a profiler's leftover state slow the
replays that sync between launches (Triton's) more than the back-to-back ones (``bench_gpu_time``)?

Without CUDA it prints ``skipped: <why>`` and exits 0; bad input: one line and exit 2.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

from harness.cli.lazy import LazyModule

torch = LazyModule("torch")

GRAPH_CALLS = (10, 100)
REPLAYS = 10
FIRST_WARM_S, WARM_S = 1.0, 0.3


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="tools/graph_loop_probe.py", description=__doc__.split("\n\n")[0])
    p.add_argument("results", help="a results folder (harness run --out)")
    p.add_argument("--rows", required=True, help="comma-separated row indices, as harness crosscheck numbers them")
    p.add_argument("--idle", type=float, default=0.0, metavar="S",
                   help="seconds of idle GPU before each figure (default: the call back to back instead)")
    p.add_argument("--per-sample", action="store_true",
                   help="also the harness's timer at one call a sample and at about ten, and a graph of one call")
    p.add_argument("--profile-first", action="store_true",
                   help="run the cross-check's kernel profiler once before the figures")
    p.add_argument("--out", help="write the figures here as JSON")
    return p.parse_args(argv)


def row_indices(text: str, n: int) -> list[int]:
    """The row numbers of ``--rows``; ValueError names the bad one."""
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit() or int(part) >= n:
            raise ValueError(f"--rows: {part!r} is not a row index of these results (0-{n - 1})")
        out.append(int(part))
    return out


def own_graph(fn: Callable[[], None], calls: int) -> dict[str, Any]:
    """``calls`` calls captured in one graph, replayed REPLAYS times between events: median per call."""
    from harness.timing.graphs import capture_graph

    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    g = capture_graph(fn, calls, torch.device("cuda"))  # as the harness captures: side-stream warm-up, then the graph
    grew = torch.cuda.memory_allocated() - before
    g.replay()
    per = []
    for _ in range(REPLAYS):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        per.append(a.elapsed_time(b) * 1e3 / calls)
    del g
    torch.cuda.synchronize()
    return {"median_us": statistics.median(per), "min_us": min(per), "max_us": max(per), "calls": calls,
            "capture_grew_mb": round(grew / 2**20, 2), "settings": f"own graph of {calls} calls, {REPLAYS} replays"}


def harness_timer(fn: Callable[[], None], row: Any, calls_us: float) -> dict[str, Any]:
    """The harness's ``time_callable`` on ``fn`` as a graph with the row's options, each sample
    lasting at least ``calls_us`` (hot mode batches calls up to it): per call, and the calls a sample."""
    from harness.crosscheck.explain import row_timing_options
    from harness.timing import GraphDecision, time_callable

    dev = torch.device("cuda")
    opts = row_timing_options(row.timing.options if row.timing else None, dev).model_copy(
        update={"min_sample_us": calls_us, "mode": "hot"})
    m = time_callable(fn, dev, opts, graph=GraphDecision(True, ""))
    return {"median_us": float(m["median_us"]), "calls_per_sample": m.get("calls_per_sample"),
            "samples": m.get("samples"), "settings": f"harness time_callable(graph, hot, min_sample_us={calls_us:g})"}


def probe_row(row: Any, suite: str | None, idle_s: float = 0.0, profile_first: bool = False,
              per_sample: bool = False) -> dict[str, Any]:
    from flashinfer.testing import bench_gpu_time
    import triton.testing as tt

    from harness.crosscheck import explain as ex
    from harness.crosscheck import repro
    from harness.crosscheck.regime import keep_busy
    from harness.crosscheck.run import BatchCache, gpu_mark, standalone_fn
    from harness.registry import resolve

    case, spec = repro.case_of_row(row, suite)
    backend = resolve(spec)
    variant = dict(row.variant)
    dev = torch.device("cuda")
    fn = standalone_fn(row, case, backend, variant, BatchCache().get(case, dev),
                       repro.call_source(backend, row, case, variant))
    fn()
    torch.cuda.synchronize()
    profiled = ex.kernel_time(fn)["per_call_us"] if profile_first else None
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(5):  # do_bench_cudagraph's own estimate: 5 eager calls between two events
        fn()
    b.record()
    b.synchronize()
    eager_us = a.elapsed_time(b) * 1e3 / 5
    triton_calls = max(1, int(100e3 / eager_us))  # what do_bench_cudagraph(rep=100) unrolls
    want = {"use_cuda_graph": True, "cold_l2_cache": False, "enable_cupti": False, "dry_run_time_ms": 25,
            "repeat_time_ms": 100}
    kw = {k: v for k, v in want.items() if k in inspect.signature(bench_gpu_time).parameters}

    def flashinfer() -> dict[str, Any]:
        return {"median_us": statistics.median(bench_gpu_time(fn, **kw)) * 1e3}

    def triton(rep: int) -> dict[str, Any]:
        return {"median_us": float(tt.do_bench_cudagraph(fn, rep=rep, return_mode="median")) * 1e3}

    steps: list[tuple[str, Callable[[], dict[str, Any]]]] = [("bench_gpu_time(100 ms)", flashinfer)]
    steps += [(f"do_bench_cudagraph(rep={rep})", functools.partial(triton, rep)) for rep in (5, 20, 100)]
    steps += [(f"own graph x{k}", functools.partial(own_graph, fn, k)) for k in (*GRAPH_CALLS, triton_calls)]
    if per_sample:
        steps += [("harness, 1 call a sample", functools.partial(harness_timer, fn, row, 200.0)),
                  ("harness, ~10 calls a sample", functools.partial(harness_timer, fn, row, 10 * eager_us)),
                  ("own graph x1", functools.partial(own_graph, fn, 1))]
    out: dict[str, Any] = {"case": row.case, "backend": row.backend, "variant": row.variant_label,
                           "row_us": row.timing.median_us if row.timing else None, "eager_us": eager_us,
                           "profiled_first_us": profiled, "idle_s": idle_s, "timers": {}}
    first = True
    for name, run in steps:
        if idle_s > 0:
            torch.cuda.synchronize()
            time.sleep(idle_s)
        else:
            keep_busy(fn, FIRST_WARM_S if first else WARM_S, gpu_mark)
        first = False
        try:
            out["timers"][name] = ex.with_clocks(dev, True, run)
        except Exception as e:  # one timer failing does not end the probe; its reason is kept
            out["timers"][name] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
    return out


def main(argv: list[str]) -> int:
    args = parse(argv)
    from harness.records.load import load_run

    try:
        run = load_run(Path(args.results))
        idx = row_indices(args.rows, len(run.rows))
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.idle < 0:
        print(f"error: --idle: {args.idle:g} is below 0", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("skipped: no CUDA device here")
        return 0
    res = []
    for i in idx:
        rec = probe_row(run.rows[i], None, args.idle, args.profile_first, args.per_sample)
        rec["row"] = i
        res.append(rec)
        print(f"row {i} {rec['case']} {rec['backend']} {rec['variant']}: row {rec['row_us']:.2f} us")
        for name, t in rec["timers"].items():
            fig = f"{t['median_us']:.2f} us" if "median_us" in t else t.get("error", "?")
            extra = f", capture grew {t['capture_grew_mb']} MB" if "capture_grew_mb" in t else ""
            extra += f", {t['calls_per_sample']} calls a sample" if t.get("calls_per_sample") else ""
            c = t.get("sm_clock_mhz")
            clock = {k: c[k] for k in ("before", "during", "after", "loop") if k in c} if isinstance(c, dict) else c
            print(f"  {name:28s} {fig}  clock {clock}{extra}")  # the whole record, its trace included: --out
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
