"""Does the harness's kernel time agree with what the GPU profiler sees? A benchmark script,
not a test: run it on the GPU machine.

    harness diag fidelity --out results/fidelity [--backends flash-attn,flashinfer]
                          [--suite suites/decode.yaml --case 'llama3-8b*']

For every available backend (default variants) on about ten representative cells (decode and
prefill, several sizes: the built-in suite below, or --suite with --case filters) it times the
forward with harness.timing exactly as ``harness run`` does (hot mode, CUDA graph where the
backend allows it), then profiles the same forward calls with torch.profiler and takes, per
call (the CUDA graph replay when the harness timed one, else the eager call), the device
busy time of its kernels/memsets/memcpys (the union of their intervals:
kernels that overlap, as PDL-launched kernels can, count once), beside the
plain sum of durations and the first-start-to-last-end span (see interval_stats).

Prints harness us, busy us, diff % (gated), the sum and its diff, the span, the overlapping
kernels by name, and writes fidelity.csv (one row appended and flushed
as each cell finishes) and fidelity.json (rewritten after each row; ``complete`` false until
the end) to --out. Kernel-bound rows where the harness measures 20 us or more must agree within
3%: otherwise exit 1. Host-bound rows (not graph-timed and more than 8 kernels per call, or the
launch not hidden: the eager torch backends) are reported with their diff but gated "n/a": the
harness measures stream time, launch gaps between kernels included, by design, while the
profiler sums kernel durations only. Also prints the cold-L2 probe for both flush methods and
the method cold mode uses here, and the device ceilings.

Cells a backend cannot run (check_support, check_batch_support: e.g. cascade backends on a
batch with no shared prefix) are skipped with the reason, as the runner does. The work is
bounded: --time-budget seconds of sampling per cell (the profiled calls are capped to about
the same time), --total-budget seconds for the run (later cells are recorded as skipped), and
the eager torch backends (torch-math, sdpa, torch-cascade) run only on cells up to
--torch-max-gflop / --torch-max-kv-mib unless --include-large-torch. Ctrl-C / SIGINT stops
the run cleanly: the rows so far are in the CSV and JSON (``interrupted``: true), exit 130.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch

from attn_contract import AttentionBackend
from harness.records.fileio import atomic_write_text
from harness import registry
from harness.spec import SpecError, load_suite, parse_suite
from harness.case.layout import case_layout
from harness.cell.prepare import CellUnsupported, prepare_cell
from harness.plan.cells import case_work
from harness.timing import TimingOptions, select_flush, time_callable, verify_cold_l2
from harness.timing.graphs import capture_graph
from harness.case.workload import generate

GATE_MIN_US = 20.0
GATE_MAX_DIFF = 0.03
# Host-bound: an eager (not graph-timed) forward of many kernels. The harness's figure is
# stream time from the first kernel's start to the last one's end, gaps between kernels
# included (by design: that is what the call costs the stream); the profiler sums kernel
# durations only, so the two differ by the launch gaps (today's H200 run: 8-456% for torch-math
# and sdpa at 25-1600 kernels per call). The library calls are 1-3 kernels (plus the output
# copy, and an fp8 quantization of q); 8 leaves room for those and is far below the torch
# backends. A forward whose launch the spin kernel could not hide (it waits on the host, e.g.
# a .tolist()) is host-bound whatever its kernel count.
HOST_BOUND_MAX_KERNELS = 8
HOST_BOUND_MIN_HIDDEN = 0.5
HOST_BOUND_LABEL = "n/a (host-bound: harness measures stream time incl. launch gaps)"
TORCH_EAGER = {"torch-math", "sdpa", "torch-cascade"}

# About ten cells: decode over small/large batches and contexts, GQA ratios, head 256, a window,
# causal prefill, a chunked-prefill extend and a mixed batch.
BUILTIN = {
    "suite": "fidelity",
    "defaults": {"dtype": "bfloat16", "block_size": 16, "kv_layout": "NHD", "causal": True, "seed": 0},
    "cases": [
        {"name": "decode-b1-4k", "num_heads": 32, "num_kv_heads": 8, "head_size": 128,
         "batch": [{"kind": "decode", "count": 1, "context_len": 4096}]},
        {"name": "decode-b64-4k", "num_heads": 32, "num_kv_heads": 8, "head_size": 128,
         "batch": [{"kind": "decode", "count": 64, "context_len": {"dist": "uniform", "low": 2048, "high": 4096}}]},
        {"name": "decode-b256-8k", "num_heads": 32, "num_kv_heads": 8, "head_size": 128,
         "batch": [{"kind": "decode", "count": 256, "context_len": {"dist": "lognormal", "median": 8192,
                                                                      "sigma": 0.5, "min": 1024, "max": 32768}}]},
        {"name": "decode-tp8-b128-16k", "num_heads": 8, "num_kv_heads": 1, "head_size": 128,
         "batch": [{"kind": "decode", "count": 128, "context_len": {"dist": "uniform", "low": 8192, "high": 16384}}]},
        {"name": "decode-head256-b32", "num_heads": 16, "num_kv_heads": 8, "head_size": 256,
         "batch": [{"kind": "decode", "count": 32, "context_len": {"dist": "uniform", "low": 2048, "high": 8192}}]},
        {"name": "decode-window-b64", "num_heads": 32, "num_kv_heads": 8, "head_size": 128, "sliding_window": 4096,
         "batch": [{"kind": "decode", "count": 64, "context_len": {"dist": "uniform", "low": 8192, "high": 16384}}]},
        # Page 256 so FA2's paged path (pages a multiple of 256) has a cell too.
        {"name": "prefill-1x4k-p256", "num_heads": 32, "num_kv_heads": 8, "head_size": 128, "block_size": 256,
         "batch": [{"kind": "prefill", "count": 1, "query_len": 4096}]},
        {"name": "prefill-8x1k", "num_heads": 32, "num_kv_heads": 8, "head_size": 128,
         "batch": [{"kind": "prefill", "count": 8, "query_len": {"dist": "uniform", "low": 512, "high": 2048}}]},
        {"name": "extend-4x512-on-4k", "num_heads": 32, "num_kv_heads": 8, "head_size": 128,
         "batch": [{"kind": "extend", "count": 4, "query_len": 512, "context_len": 4096}]},
        {"name": "mixed-64dec-2ext", "num_heads": 32, "num_kv_heads": 8, "head_size": 128,
         "batch": [{"kind": "decode", "count": 64, "context_len": {"dist": "uniform", "low": 1024, "high": 4096}},
                   {"kind": "extend", "count": 2, "query_len": 256, "context_len": 2048}]},
    ],
}


def _device_events(prof: Any) -> list[Any]:
    """Device-side events (kernels, memsets, memcpys) of a torch.profiler run."""
    from torch.autograd import DeviceType

    # User annotations also appear on the GPU timeline, spanning kernels: not work of their own.
    return [e for e in prof.events() if getattr(e, "device_type", None) == DeviceType.CUDA
            and not getattr(e, "is_user_annotation", False)]


def interval_stats(intervals: list[tuple[float, float, str]], calls: int) -> dict[str, Any]:
    """Per-call figures of device intervals (start_us, end_us, name) recorded over ``calls``
    back-to-back calls (pure: tested on the CPU).

    sum_us:  the durations added up. Counts twice any time two kernels overlap, as with
             programmatic dependent launch (PDL, FA3 on Hopper): a dependent kernel starts, and
             its recorded duration begins, while its predecessor's last blocks still run
             (docs/measurement.md §12).
    busy_us: the union of the intervals: time the device had at least one of the call's kernels
             running, overlaps counted once and the gaps between kernels left out. The gated
             figure: the harness's stream time can only exceed it by the launch gaps.
    span_us: first start to last end over all calls, divided by the calls: gaps included, the
             closest analogue of the harness's back-to-back samples.
    overlap_us: sum_us - busy_us (0 for kernels that never overlap)."""
    if not intervals or calls <= 0:
        return {"sum_us": 0.0, "busy_us": 0.0, "span_us": 0.0, "overlap_us": 0.0, "kernels_per_call": 0.0,
                "kernels": []}
    iv = sorted((a, b) for a, b, _ in intervals)
    total = sum(b - a for a, b in iv)
    busy, cur_a, cur_b = 0.0, iv[0][0], iv[0][1]
    for a, b in iv[1:]:
        if a > cur_b:
            busy += cur_b - cur_a
            cur_a, cur_b = a, b
        else:
            cur_b = max(cur_b, b)
    busy += cur_b - cur_a
    span = max(b for _, b in iv) - iv[0][0]
    per_name: dict[str, list[float]] = {}
    for a, b, name in intervals:
        per_name.setdefault(name, []).append(b - a)
    stats = sorted(((n, len(d) / calls, statistics.fmean(d)) for n, d in per_name.items()), key=lambda s: -s[1] * s[2])
    kernels = [{"name": n[:120], "per_call": per_call, "mean_us": mean_us} for n, per_call, mean_us in stats]
    return {"sum_us": total / calls, "busy_us": busy / calls, "span_us": span / calls,
            "overlap_us": (total - busy) / calls, "kernels_per_call": len(intervals) / calls, "kernels": kernels[:6]}


def profile_kernels(call: Any, calls: int, warmup: int = 3) -> dict[str, Any]:
    """interval_stats of the device events (kernels, memsets, memcpys) of ``calls`` calls."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(warmup):
        call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
    evs = _device_events(prof)
    if not evs:
        raise RuntimeError("the profiler recorded no device events (CUPTI unavailable?)")
    return interval_stats([(e.time_range.start, e.time_range.end, e.name) for e in evs], calls)


def graph_replay(call: Any) -> Callable[[], None]:
    """``call`` captured in a CUDA graph (warmed up on a side stream, as torch documents), so
    the profiler sees the call path the harness timed, not the eager one."""
    return capture_graph(call, 1, torch.device("cuda", torch.cuda.current_device())).replay


def profile_kernel_us(call: Any, calls: int, warmup: int = 3) -> tuple[float, float]:
    """(device time per call in us summed over its kernels/memsets/copies, kernels per call)."""
    st = profile_kernels(call, calls, warmup)
    return st["sum_us"], st["kernels_per_call"]


def host_bound_reason(graph_used: bool, kernels_per_call: float, launch_hidden: float | None) -> str | None:
    """Why a row is host-bound (its diff is launch gaps, not a measurement error), or None."""
    if graph_used:
        return None
    if kernels_per_call > HOST_BOUND_MAX_KERNELS:
        return f"eager, {kernels_per_call:.0f} kernels per call > {HOST_BOUND_MAX_KERNELS}"
    if launch_hidden is not None and launch_hidden < HOST_BOUND_MIN_HIDDEN:
        return f"eager, launch hidden in {launch_hidden:.0%} of samples < {HOST_BOUND_MIN_HIDDEN:.0%}"
    return None


def gate_row(harness_us: float, profiler_us: float, graph_used: bool, kernels_per_call: float,
             launch_hidden: float | None) -> dict[str, Any]:
    """diff, gated, ok and the gate label of one compared row (pure: tested on the CPU)."""
    diff = (harness_us - profiler_us) / profiler_us if profiler_us else float("inf")
    host = host_bound_reason(graph_used, kernels_per_call, launch_hidden)
    if host:
        return {"diff": diff, "gated": False, "ok": None, "host_bound": host, "gate": HOST_BOUND_LABEL}
    if harness_us < GATE_MIN_US:
        return {"diff": diff, "gated": False, "ok": None, "host_bound": "", "gate": f"- (< {GATE_MIN_US:g} us)"}
    ok = abs(diff) <= GATE_MAX_DIFF
    return {"diff": diff, "gated": True, "ok": ok, "host_bound": "", "gate": "ok" if ok else "FAIL"}


def torch_too_large(case: Any, max_gflop: float, max_kv_mib: float) -> str | None:
    """Eager torch backends: the reason to skip a cell above the size limits, or None."""
    layout = case_layout(case)
    _, work = case_work(case, layout)
    kv_mib = layout.logical_kv_bytes / 2**20
    if work.flops / 1e9 > max_gflop:
        return (f"eager torch backend on a large cell: {work.flops / 1e9:.1f} GFLOP > --torch-max-gflop "
                f"{max_gflop:g} (--include-large-torch to run it)")
    if kv_mib > max_kv_mib:
        return (f"eager torch backend on a large cell: KV {kv_mib:.0f} MiB > --torch-max-kv-mib {max_kv_mib:g} "
                "(--include-large-torch to run it)")
    return None


FIELDS = ["case", "backend", "variant", "graph", "harness_us", "profiler_us", "diff", "profiler_sum_us", "diff_sum",
          "profiler_span_us", "overlap_us", "profiled_path", "eager_busy_us", "eager_sum_us", "kernels_per_call",
          "profiled_calls", "calls_per_sample", "noise", "launch_hidden", "gated", "ok", "gate", "host_bound",
          "graph_reason", "cell_s", "skipped", "error"]


class RowWriter:
    """fidelity.csv appended and flushed per row; fidelity.json rewritten (atomically) per row."""

    def __init__(self, out: Path, header: dict[str, Any]):
        out.mkdir(parents=True, exist_ok=True)
        self.out, self.header = out, header
        self.rows: list[dict[str, Any]] = []
        self.fh = open(out / "fidelity.csv", "w", newline="")
        self.csv = csv.DictWriter(self.fh, fieldnames=FIELDS, extrasaction="ignore")
        self.csv.writeheader()
        self.fh.flush()
        self.write_json(complete=False)

    def add(self, rec: dict[str, Any]) -> None:
        self.rows.append(rec)
        self.csv.writerow({**rec, "variant": json.dumps(rec["variant"], sort_keys=True)})
        self.fh.flush()
        self.write_json(complete=False)

    def summary(self, complete: bool, interrupted: bool = False) -> dict[str, Any]:
        compared = [r for r in self.rows if "harness_us" in r]
        failed = [r for r in compared if r["ok"] is False]
        gated = [r for r in compared if r["gated"]]
        return {**self.header, "complete": complete, "interrupted": interrupted,
                "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "gate": {"min_us": GATE_MIN_US, "max_abs_diff": GATE_MAX_DIFF,
                         "host_bound": f"not graph-timed and > {HOST_BOUND_MAX_KERNELS} kernels per call, or "
                                       f"launch hidden in < {HOST_BOUND_MIN_HIDDEN:.0%} of samples: {HOST_BOUND_LABEL}"},
                "compared": len(compared), "gated": len(gated), "failed": len(failed),
                "host_bound": sum(1 for r in compared if r.get("host_bound")),
                "skipped": sum(1 for r in self.rows if "skipped" in r),
                "errors": sum(1 for r in self.rows if "error" in r),
                "median_abs_diff_gated": statistics.median(abs(r["diff"]) for r in gated) if gated else None,
                "rows": self.rows}

    def write_json(self, complete: bool, interrupted: bool = False) -> dict[str, Any]:
        s = self.summary(complete, interrupted)
        atomic_write_text(self.out / "fidelity.json", json.dumps(s, indent=2, default=str) + "\n")
        return s

    def close(self) -> None:
        self.fh.close()


def _label(b: type[AttentionBackend], variant: dict) -> str:
    return f"{b.name}[{','.join(f'{k}={v}' for k, v in sorted(variant.items())) or '-'}]"


def _err(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"


def run_cells(cases: list, backends: list, args: Any, device: torch.device, writer: RowWriter) -> None:
    timing_opts = TimingOptions.for_device(device, cuda_graph=not args.no_cuda_graph, max_time_s=args.time_budget)
    t_start = getattr(args, "t_start", None) or time.perf_counter()
    hdr = (f"{'case':22} {'backend':28} {'graph':6} {'harness us':>11} {'busy us':>12} {'diff %':>8} "
           f"{'kern/call':>9} {'sum us':>10} {'vs sum %':>8} {'span us':>10}  gate (on busy)")
    print(hdr, flush=True)
    for case in cases:
        batch = None
        try:
            for b in backends:
                for variant in b.default_variants():
                    label = _label(b, variant)
                    rec: dict[str, Any] = {"case": case.name, "backend": b.name, "variant": variant}
                    spent = time.perf_counter() - t_start
                    avail = b.availability(variant)
                    why_not = None
                    if spent > args.total_budget:
                        why_not = f"total budget {args.total_budget:g} s spent ({spent:.0f} s)"
                    elif not avail.available:
                        why_not = f"unavailable: {avail.reason}"
                    else:
                        why_not = b.check_support(case.attention_config(), variant, "cuda")
                        if not why_not and b.name in TORCH_EAGER and not args.include_large_torch:
                            why_not = torch_too_large(case, args.torch_max_gflop, args.torch_max_kv_mib)
                    if why_not:
                        rec["skipped"] = why_not
                        print(f"{case.name[:22]:22} {label[:28]:28} skipped: {why_not[:120]}", flush=True)
                        writer.add(rec)
                        continue
                    t_cell = time.perf_counter()
                    try:
                        if batch is None:
                            batch = generate(case, device)
                        # The runner's own preparation: the same batch view, KV layout and metadata.
                        prepared = prepare_cell(b, variant, batch, device)
                        call, decision, out = (prepared.timed_call, prepared.graph_decision(not args.no_cuda_graph),
                                               prepared.out)
                        left = max(0.2, args.total_budget - (time.perf_counter() - t_start))
                        opts = timing_opts if left >= timing_opts.max_time_s else TimingOptions.for_device(
                            device, cuda_graph=not args.no_cuda_graph, max_time_s=left)
                        t = time_callable(call, device, opts, graph=decision, output=out)
                        h = t["median_us"]
                        # Profile about one time budget's worth of calls (at least 3), at most --profile-calls.
                        n_prof = max(3, min(args.profile_calls, math.floor(opts.max_time_s * 1e6 / max(h, 1e-3))))
                        eager = profile_kernels(call, n_prof, warmup=1 if h > 1e4 else 3)
                        st, path = eager, "eager"
                        if t["cuda_graph"]["used"]:  # profile the graph replay the harness timed
                            try:
                                st, path = profile_kernels(graph_replay(call), n_prof, warmup=2), "graph"
                            except Exception as e:  # the eager profile stands; say why
                                rec["graph_profile_error"] = _err(e)
                        rec.update(profiled_path=path, eager_busy_us=eager["busy_us"], eager_sum_us=eager["sum_us"])
                        # Gated against the busy time (overlapping kernels counted once, see
                        # interval_stats); the plain sum and the span are kept beside it.
                        prof_us, kpc = st["busy_us"], st["kernels_per_call"]
                        g = gate_row(h, prof_us, t["cuda_graph"]["used"], kpc, t["launch"]["hidden_frac"])
                        g["diff_sum"] = (h - st["sum_us"]) / st["sum_us"] if st["sum_us"] else float("inf")
                        rec.update(profiler_sum_us=st["sum_us"], profiler_span_us=st["span_us"],
                                   overlap_us=st["overlap_us"], kernels=st["kernels"])
                        rec.update(harness_us=h, profiler_us=prof_us, kernels_per_call=kpc, profiled_calls=n_prof,
                                   graph=t["cuda_graph"]["used"], graph_reason=t["cuda_graph"].get("reason", ""),
                                   calls_per_sample=t["calls_per_sample"], noise=t["rel_ci_half_width"],
                                   launch_hidden=t["launch"]["hidden_frac"], **g)
                        print(f"{case.name[:22]:22} {label[:28]:28} {'yes' if rec['graph'] else 'no':6} {h:11.2f} "
                              f"{prof_us:12.2f} {100 * g['diff']:8.2f} {kpc:9.1f} {st['sum_us']:10.2f} "
                              f"{100 * g['diff_sum']:8.2f} {st['span_us']:10.2f}  {g['gate']}", flush=True)
                        if path == "graph" and abs(eager["busy_us"] - st["busy_us"]) > 0.02 * st["busy_us"]:
                            print(f"    eager call path: busy {eager['busy_us']:.2f} us, sum {eager['sum_us']:.2f} us "
                                  f"(graph replay: busy {st['busy_us']:.2f})", flush=True)
                        if st["overlap_us"] > 0.01 * st["busy_us"]:  # name the overlapping kernels
                            print("    overlap " + f"{st['overlap_us']:.2f} us/call: " + "; ".join(
                                f"{k['name'][:60]} x{k['per_call']:.0f} {k['mean_us']:.1f} us" for k in st["kernels"]),
                                flush=True)
                    except CellUnsupported as e:
                        rec["skipped"] = f"unsupported: {e}"
                        print(f"{case.name[:22]:22} {label[:28]:28} skipped: {rec['skipped'][:120]}", flush=True)
                    except KeyboardInterrupt:
                        raise
                    except Exception as e:  # one broken backend costs only its own line
                        rec["error"] = _err(e)
                        print(f"{case.name[:22]:22} {label[:28]:28} error: {rec['error']}", flush=True)
                    rec["cell_s"] = round(time.perf_counter() - t_cell, 2)
                    writer.add(rec)
                    torch.cuda.synchronize()
        finally:
            del batch
            torch.cuda.empty_cache()


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="folder for fidelity.csv and fidelity.json")
    p.add_argument("--backends", help="comma-separated backends (default: every registered one available here)")
    p.add_argument("--suite", help="a suite YAML instead of the built-in cells")
    p.add_argument("--case", action="append", help="with --suite: case name or glob (repeatable)")
    p.add_argument("--profile-calls", type=int, default=20, help="most profiled calls per cell (default 20)")
    p.add_argument("--no-cuda-graph", action="store_true", help="harness timing without CUDA graphs")
    p.add_argument("--time-budget", type=float, default=0.5,
                   help="seconds of harness sampling per cell; the profiled calls are capped to about as long "
                        "(default 0.5)")
    p.add_argument("--total-budget", type=float, default=70.0,
                   help="seconds for the whole run, from start (probes and ceilings included); cells not started "
                        "by then are recorded as skipped (default 70: the run ends within ~90 s on an H200)")
    p.add_argument("--include-large-torch", action="store_true",
                   help="run the eager torch backends on every cell (default: only up to the limits below)")
    p.add_argument("--torch-max-gflop", type=float, default=1.0, help="eager torch size limit (default 1 GFLOP)")
    p.add_argument("--torch-max-kv-mib", type=float, default=64.0, help="eager torch size limit (default 64 MiB KV)")
    args = p.parse_args(argv)
    args.t_start = time.perf_counter()  # the total budget counts from here (probes and ceilings included)
    if not torch.cuda.is_available():
        print("error: harness diag fidelity needs a CUDA device (torch.cuda.is_available() is False here)", file=sys.stderr)
        return 2
    if not args.time_budget > 0 or not args.total_budget > 0:
        print("error: --time-budget and --total-budget must be positive seconds", file=sys.stderr)
        return 2
    device = torch.device("cuda", torch.cuda.current_device())  # indexed, as harness/cli/run_flags.py's pick_device makes it
    try:
        suite = load_suite(args.suite) if args.suite else parse_suite(BUILTIN, "<built-in fidelity suite>")
    except SpecError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    cases = suite.cases
    if args.case:
        import fnmatch

        cases = [c for c in cases if any(fnmatch.fnmatchcase(c.name, pat) for pat in args.case)]
    names = args.backends.split(",") if args.backends else list(registry.known_backends())
    backends = []
    for n in names:
        try:
            backends.append(registry.resolve(n.strip()))
        except registry.BackendLookupError as e:
            print(f"skip {n}: {e}")

    # SIGINT (Ctrl-C, `timeout --signal=INT`): raise once, then ignore while the rows are written.
    interrupted = False

    def on_sigint(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_sigint)
    writer: RowWriter | None = None
    try:
        print(f"{torch.cuda.get_device_name()}  torch {torch.__version__}", flush=True)
        for method in ("read", "write"):
            print(f"cold-L2 probe ({method} flush): {json.dumps(verify_cold_l2(device, method))}", flush=True)
        choice = select_flush(device, "auto")
        print(f"cold mode uses: {choice['method']} flush, {'verified' if choice['verified'] else 'NOT VERIFIED'} "
              f"({choice['selection']})", flush=True)
        from harness.case.roofline import get_ceilings

        ceil, why = get_ceilings(device)
        print(f"ceilings: {ceil if ceil else why}", flush=True)
        header = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                  "cold_l2": {k: v for k, v in choice.items() if k != "probes"},
                  "budgets": {"time_budget_s": args.time_budget, "total_budget_s": args.total_budget,
                              "include_large_torch": args.include_large_torch,
                              "torch_max_gflop": args.torch_max_gflop, "torch_max_kv_mib": args.torch_max_kv_mib}}
        writer = RowWriter(args.out, header)
        run_cells(cases, backends, args, device, writer)
    except KeyboardInterrupt:
        interrupted = True
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        print("interrupted (SIGINT): writing the rows so far", flush=True)
    if writer is None:
        print("interrupted before any row was written" if interrupted else "no rows", file=sys.stderr)
        return 130 if interrupted else 1
    s = writer.write_json(complete=not interrupted, interrupted=interrupted)
    writer.close()
    print(f"{s['compared']} compared, {s['gated']} gated (kernel-bound, >= {GATE_MIN_US:g} us), {s['failed']} outside "
          f"{GATE_MAX_DIFF:.0%}, {s['host_bound']} host-bound (n/a), {s['skipped']} skipped, {s['errors']} errors; "
          f"wrote {args.out / 'fidelity.csv'} and fidelity.json{' (interrupted)' if interrupted else ''}", flush=True)
    if interrupted:
        return 130
    if not s["compared"]:
        print("FAIL: nothing was compared (no available backend ran)")
        return 1
    return 1 if s["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
