"""Every GPU kernel of a `harness run`, as the profiler saw it: per kernel name, how many ran, the
median and 90th-percentile duration and idle gap before it on the device, and the median
duration after the spin kernel's hold (the timed sample) and before it (the hot warm-up copy).
For a row whose time differs between two runs (issue 44: FlashInfer's decode, interleaved
against sequential sampling), it tells whether the difference is inside a kernel, or between
kernels.

    python tools/kernel_trace.py OUT.json -- suites/decode.yaml --case ... --sampling interleaved ...

The arguments after ``--`` go to ``harness run`` as they are; the run is in this process
(``--no-isolation`` is added), under ``torch.profiler`` with CUDA activity only. The profiler's
per-kernel cost falls on every kernel alike, so compare runs traced the same way, never a traced
row with an untraced one.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any


SPIN = "spin_kernel"  # torch.cuda._sleep's kernel: the hold right before every timed sample
IDLE_US = 10.0  # a gap this long ends a busy stretch (the host's turn between samples)


def summarize(events: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per kernel name: count, median and 90th-percentile duration (us) and gap (us) since the
    device's previous kernel ended, from chrome-trace kernel events (``ts``/``dur`` in us); and,
    where the run held its samples behind a spin kernel, the median duration of the kernels
    after a hold (``timed_median_us``: the timed sample's) and before it in the same busy
    stretch (``untimed_median_us``: the untimed warm-up copy right before a hot sample)."""
    kernels = sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    durs: dict[str, list[float]] = {}
    gaps: dict[str, list[float]] = {}
    by_role: dict[tuple[str, bool], list[float]] = {}
    end = None
    timed = False
    for e in kernels:
        name = e["name"]
        durs.setdefault(name, []).append(float(e["dur"]))
        if end is not None:
            gap = float(e["ts"]) - end
            gaps.setdefault(name, []).append(gap)
            if gap > IDLE_US:
                timed = False
        if SPIN in name:
            timed = True
        else:
            by_role.setdefault((name, timed), []).append(float(e["dur"]))
        end = float(e["ts"]) + float(e["dur"])
    out = {}
    for n, d in sorted(durs.items()):
        out[n] = {"count": len(d), "median_us": statistics.median(d), "min_us": min(d), "p90_us": _p90(d),
                  "median_gap_us": statistics.median(gaps[n]) if gaps.get(n) else float("nan"),
                  "p90_gap_us": _p90(gaps[n]) if gaps.get(n) else float("nan")}
        for key, role in (("timed", True), ("untimed", False)):
            xs = by_role.get((n, role))
            out[n][f"{key}_median_us"] = statistics.median(xs) if xs else float("nan")
    return out


def _p90(xs: list[float]) -> float:
    """The 90th percentile (a heavier upper tail, issue 44's disturbed samples, shows here first)."""
    return statistics.quantiles(xs, n=10)[-1] if len(xs) > 1 else xs[0]


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print(__doc__, file=sys.stderr)
        return 2
    out, run_args = Path(argv[0]), argv[2:]
    import torch
    from torch.profiler import ProfilerActivity, profile

    if not torch.cuda.is_available():
        print("error: kernel_trace needs a CUDA device (it traces GPU kernels)", file=sys.stderr)
        return 2

    from harness.cli.entry import main as harness_main

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        rc = harness_main(["run", *run_args, "--no-isolation"])
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(trace))
        events = json.loads(trace.read_text()).get("traceEvents", [])
    table = summarize(events)
    out.write_text(json.dumps({"harness_run": run_args, "rc": rc, "kernels": table}, indent=1))
    for name, s in sorted(table.items(), key=lambda kv: -kv[1]["count"])[:30]:
        print(f"{s['count']:7d}  {s['median_us']:9.2f} us (p90 {s['p90_us']:9.2f}; after the hold "
              f"{s['timed_median_us']:9.2f}, before {s['untimed_median_us']:9.2f})  gap {s['median_gap_us']:8.2f} us "
              f"(p90 {s['p90_gap_us']:8.2f})  {name[:90]}")
    return rc


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
