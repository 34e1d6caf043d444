"""The outside timers ``harness crosscheck`` runs (harness/crosscheck/run.py drives them): FlashInfer's
``bench_gpu_time`` and Triton's ``do_bench_cudagraph`` / ``do_bench`` on a GPU, torch's
``Timer.blocked_autorange`` on a CPU, each as its installed signature allows."""

from __future__ import annotations

import inspect
import statistics
import time
from typing import Any, Callable

from harness.cli.lazy import LazyModule

torch = LazyModule("torch")


def _spread(ms: list[float]) -> tuple[float, float, float]:
    xs = sorted(ms)
    if len(xs) < 4:
        return statistics.median(xs), xs[0], xs[-1]
    q = statistics.quantiles(xs, n=4)
    return statistics.median(xs), q[0], q[2]


def time_cpu(fn: Callable[[], None], clock: str, min_run_s: float = 0.2) -> dict[str, Any]:
    from torch.utils.benchmark import Timer

    timer = time.process_time if clock == "process" else time.perf_counter
    m = Timer(stmt="fn()", globals={"fn": fn}, timer=timer, num_threads=torch.get_num_threads()).blocked_autorange(
        min_run_time=min_run_s)
    times = [t * 1e6 for t in m.times]
    med, q1, q3 = _spread(times)
    return {"median_us": m.median * 1e6, "q1_us": q1, "q3_us": q3, "n": len(times),
            "settings": f"torch.utils.benchmark.Timer.blocked_autorange(min_run_time={min_run_s}), "
                        f"{'process_time' if clock == 'process' else 'perf_counter'} clock"}


TRITON_UNCAPTURED_CALLS = 6  # do_bench_cudagraph's one warm-up call and five eager calls of its estimate


def triton_loop_ms(calls: int, median_ms: float, rep: int) -> float:
    """The length of ``do_bench_cudagraph``'s timed loop: ten replays of one graph of the calls
    it captured, the calls its ``fn`` saw less the uncaptured ones. Its graph holds ``rep`` over
    an estimate from eager calls, so a host-bound call's graph is shorter than ``rep`` (H100
    2026-12-08 sustained rows 52-55, ~55 us FA3 calls: ~100 NVML reads at 2 ms where a 1 s loop
    gives ~450). Ten times ``rep`` where the count is not there (a Triton that calls ``fn``
    differently)."""
    captured = calls - TRITON_UNCAPTURED_CALLS
    return 10.0 * captured * median_ms if captured >= 1 else 10.0 * rep


def gpu_timers(graph: bool, cold: bool, repeat_ms: float = 100.0,
               dry_run_ms: float = 25.0) -> dict[str, Callable[[Callable[[], None]], dict[str, Any]] | str]:
    """Each outside GPU timer that matches the row's timing (graph or eager, hot or cold L2): a
    function timing ``fn``, or the reason it does not apply here. ``repeat_ms``: the timers'
    loop (shortened for a burst row, harness/crosscheck/regime.py). Each record's ``loop_ms`` is
    the length of that timer's timed loop, its last phase (the clock over it: regime.loop_clock)."""
    rep = max(1, round(repeat_ms))
    out: dict[str, Any] = {}
    try:
        from flashinfer.testing import bench_gpu_time
    except Exception as e:  # not installed, or a build for another torch
        out["flashinfer.bench_gpu_time"] = f"not available: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    else:
        params = inspect.signature(bench_gpu_time).parameters
        want = {"use_cuda_graph": graph, "cold_l2_cache": cold, "enable_cupti": False,
                "dry_run_time_ms": max(1, round(dry_run_ms)), "repeat_time_ms": rep}
        if cold and "cold_l2_cache" not in params:
            out["flashinfer.bench_gpu_time"] = "this version has no cold_l2_cache: cannot time a cold-L2 row"
        elif graph and "use_cuda_graph" not in params:
            out["flashinfer.bench_gpu_time"] = "this version has no use_cuda_graph: cannot time a graph-replayed row"
        else:
            kw = {k: v for k, v in want.items() if k in params}

            def fi(fn: Callable[[], None], kw: dict[str, Any] = kw) -> dict[str, Any]:
                ms = [float(x) for x in bench_gpu_time(fn, **kw)]
                med, q1, q3 = _spread(ms)
                return {"median_us": med * 1e3, "q1_us": q1 * 1e3, "q3_us": q3 * 1e3, "n": len(ms),
                        "settings": "bench_gpu_time(" + ", ".join(f"{k}={v!r}" for k, v in kw.items()) + ")",
                        "loop_ms": float(kw.get("repeat_time_ms", rep))}
            out["flashinfer.bench_gpu_time"] = fi
    try:
        import triton.testing as tt
    except Exception as e:
        out["triton"] = f"not available: {type(e).__name__}"
        return out
    if graph and not cold:
        def tr(fn: Callable[[], None]) -> dict[str, Any]:
            calls = [0]

            def counted() -> None:
                calls[0] += 1
                fn()
            ms = float(tt.do_bench_cudagraph(counted, rep=rep, return_mode="median"))
            return {"median_us": ms * 1e3, "n": None, "settings": f'do_bench_cudagraph(rep={rep}, return_mode="median")',
                    "loop_ms": triton_loop_ms(calls[0], ms, rep)}
        out["triton.do_bench_cudagraph"] = tr
    elif cold and not graph:
        def trc(fn: Callable[[], None]) -> dict[str, Any]:
            ms = float(tt.do_bench(fn, rep=rep, return_mode="median"))
            return {"median_us": ms * 1e3, "n": None, "settings": f'do_bench(rep={rep}, return_mode="median"), L2 flushed',
                    "loop_ms": float(rep)}
        out["triton.do_bench"] = trc
    else:
        out["triton"] = ("do_bench_cudagraph replays hot and do_bench flushes L2 eagerly: neither times a "
                         f"{'cold graph-replayed' if graph else 'hot eager'} row")
    return out


__all__ = ["TRITON_UNCAPTURED_CALLS", "gpu_timers", "time_cpu", "triton_loop_ms"]
