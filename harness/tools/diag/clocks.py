"""What the GPU's clock state does to a decode call's time: burst (after idle) against sustained
(after continuous load), with the SM clock and board power NVML reports, and what one clock read
costs.

    harness diag clocks [--batch 32] [--context 4096] [--idle 1] [--load 3] [--libs fa3,flashinfer] [--out FILE]

One decode shape (Llama-3-8B: 32 query / 8 KV heads, head 128, page 16, shuffled pages; the
inputs of `harness diag direct`'s paged-decode cell) through FA3 ``flash_attn_with_kvcache`` and
FlashInfer's tensor-core decode wrapper. Per library:

- NVML read cost: the median host time of one read (SM clock + board power), microseconds;
- burst: ``--idle`` seconds idle, then ``--samples`` CUDA-graph replays (each behind a spin
  kernel, timed by CUDA events, the clock read after each): time per call, clock, power;
- sustained: ``--load`` seconds of back-to-back replays, then the same samples with two
  replays' worth of work queued before each (the earlier sustained regime's sampling, kept as
  the comparison: it lets the clock recover between samples);
- the harness's own timer (``time_callable``) in each regime (``--clock-regime``), its
  median and the clocks its row records; for sustained, its clock against the load loop's
  last second (``loop_settled_sm_mhz``: within 3% is the regime's aim) and its own
  settled-loop clock (``settled_sm_clock_mhz``).

Expect on an H200 (reports/h200/2026-12-02): burst at ~1980 MHz; sustained FA3 slower by
several percent at 1100-1770 MHz and ~690-700 W, FlashInfer (memory-bound) within ~1-2%.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch

from harness.records.clocks import clock_value
from harness.records.timing_parts import ClockStats

LIBS = {"fa3": "FA3 with_kvcache", "flashinfer": "FlashInfer decode (tensor cores)", "fa4": "FA4 paged varlen"}


def _graph(fn: Callable[[], Any], target_us: float = 500.0) -> tuple[torch.cuda.CUDAGraph, int]:
    """A graph of enough calls to last about ``target_us`` (at most 64), replayed once."""
    from harness.timing.graphs import capture_graph

    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    fn()
    b.record()
    b.synchronize()
    n = max(1, min(64, math.ceil(target_us / max(a.elapsed_time(b) * 1e3, 1.0))))
    g = capture_graph(fn, n, torch.device("cuda", torch.cuda.current_device()))
    g.replay()
    torch.cuda.synchronize()
    return g, n


def _samples(g: torch.cuda.CUDAGraph, n: int, count: int, reader: Any, pad: int) -> dict[str, Any]:
    """``count`` event-timed replays, the clock read after each (outside the events)."""
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    us, mhz, watts = [], [], []
    t0 = time.perf_counter()
    for _ in range(count):
        for _ in range(pad):
            g.replay()
        torch.cuda._sleep(200_000)  # hold the stream while the host enqueues
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        us.append(a.elapsed_time(b) * 1e3 / n)
        r = reader.read() if reader is not None else None
        if r is not None and r.sm_mhz is not None:
            mhz.append(r.sm_mhz)
        if r is not None and r.power_w is not None:
            watts.append(r.power_w)
    return {"median_us": statistics.median(us), "min_us": min(us), "max_us": max(us), "samples": count,
            "seconds": time.perf_counter() - t0, "sm_mhz": _mmm(mhz), "power_w": _mmm(watts)}


def _mmm(xs: list[float]) -> list[float] | None:
    return [min(xs), statistics.median(xs), max(xs)] if xs else None


def _load(g: torch.cuda.CUDAGraph, seconds: float, reader: Any) -> list[list[float | None]]:
    """Back-to-back replays for ``seconds``; (t, MHz, W, instantaneous W or None) every ~50 ms."""
    trace = []
    t0 = time.perf_counter()
    while (t := time.perf_counter() - t0) < seconds:
        for _ in range(100):
            g.replay()
        torch.cuda.synchronize()
        r = reader.read() if reader is not None else None
        trace.append([round(t, 3), r.sm_mhz if r else None, r.power_w if r else None,
                      r.power_instant_w if r else None])
    return trace


def _harness(fn: Callable[[], Any], dev: torch.device, regime: str) -> dict[str, Any]:
    from harness.timing import GraphDecision, TimingOptions, time_callable

    opts = TimingOptions.for_device(dev, clock_regime=regime)
    t = time_callable(fn, dev, opts, graph=GraphDecision(True, ""))
    return {"median_us": t["median_us"], "samples": t["samples"], "sampling_s": t["sampling_s"],
            "clocks": t.get("clocks"), "settled_sm_clock_mhz": t.get("settled_sm_clock_mhz")}


def loop_settled_mhz(trace: list[list[float | None]], last_s: float = 1.0) -> float | None:
    """Mean SM clock over the load trace's last ``last_s`` seconds: the clock a continuous loop
    settles at (the reference a sustained row's clock must be within 3% of). A mean, as
    records.clocks.sm_clock reads a row: at the power limit a median of one second lands on
    whichever of about ten clock levels holds the middle read."""
    if not trace:
        return None
    end = trace[-1][0] or 0.0
    xs = [row[1] for row in trace if row[0] is not None and row[1] is not None and row[0] >= end - last_s]
    return statistics.fmean(xs) if xs else None


def probe(label: str, fn: Callable[[], Any], dev: torch.device, reader: Any, args: argparse.Namespace) -> dict[str, Any]:
    from harness.timing.clocks import read_cost_us

    g, n = _graph(fn)
    rec: dict[str, Any] = {"library": label, "calls_per_replay": n}
    rec["read_cost_us"] = read_cost_us(reader, 200) if reader is not None else None
    time.sleep(args.idle)
    rec["burst"] = _samples(g, n, args.samples, reader, pad=0)
    rec["load_trace"] = _load(g, args.load, reader)
    rec["sustained"] = _samples(g, n, args.samples, reader, pad=2)
    rec["sustained_over_burst"] = rec["sustained"]["median_us"] / rec["burst"]["median_us"]
    rec["loop_settled_sm_mhz"] = loop_settled_mhz(rec["load_trace"])
    for regime in ("burst", "sustained"):
        time.sleep(args.idle)
        try:
            rec[f"harness_{regime}"] = _harness(fn, dev, regime)
        except Exception as e:  # the harness's path failing costs only its line
            rec[f"harness_{regime}"] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"}
    return rec


def _line(name: str, r: dict[str, Any]) -> str:
    if "error" in r:
        return f"  {name:18} error: {r['error']}"
    clk = r.get("sm_mhz") or ((r.get("clocks") or {}).get("sm_mhz") or {})
    pw = r.get("power_w") or ((r.get("clocks") or {}).get("power_w") or {})
    if isinstance(clk, dict):
        clk = [clk.get("min"), clk.get("median"), clk.get("max")] if clk else None
    if isinstance(pw, dict):
        pw = [pw.get("min"), pw.get("median"), pw.get("max")] if pw else None
    def f(v: list | None) -> str:
        return "/".join(f"{x:.0f}" for x in v) if v else "-"

    return f"  {name:18} {r['median_us']:9.2f} us/call   SM MHz min/med/max {f(clk):>16}   W {f(pw):>12}"


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--context", type=int, default=4096)
    p.add_argument("--idle", type=float, default=1.0, help="seconds idle before burst sampling (default 1)")
    p.add_argument("--load", type=float, default=3.0, help="seconds of continuous load before sustained sampling")
    p.add_argument("--samples", type=int, default=50, help="timed replays per state (default 50)")
    p.add_argument("--libs", default="fa3,flashinfer", help="comma-separated: " + ",".join(LIBS) + " (default fa3,flashinfer)")
    p.add_argument("--out", type=Path, help="write the records as JSON here")
    args = p.parse_args(argv)
    libs = [x.strip() for x in args.libs.split(",") if x.strip()]
    bad = [x for x in libs if x not in LIBS]
    if bad:
        print(f"error: --libs {','.join(bad)}: expected some of {','.join(LIBS)}", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("error: harness diag clocks needs a CUDA device (torch.cuda.is_available() is False here)", file=sys.stderr)
        return 2
    from harness.tools.diag.direct import DECODE, decode_calls, decode_inputs
    from harness.timing.clocks import nvml_reader

    dev = torch.device("cuda", torch.cuda.current_device())
    reader, source = nvml_reader(dev)
    shape = dict(DECODE, batch=args.batch, context=args.context)
    x = decode_inputs(shape)
    factories = {label: f for label, _, f in decode_calls(x, shape)}
    head = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "shape": shape, "clock_source": source,
            "max_sm_mhz": getattr(reader, "max_sm_mhz", None), "power_limit_w": getattr(reader, "power_limit_w", None),
            "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    print(f"{head['device']}  torch {torch.__version__}  clock source: {source}  max SM {head['max_sm_mhz']} MHz  "
          f"power limit {head['power_limit_w']} W  shape {shape}")
    recs = []
    for lib in libs:
        label = LIBS[lib]
        try:
            rec = probe(label, factories[label](), dev, reader, args)
        except Exception as e:  # a missing library costs only its lines
            rec = {"library": label, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"}
        recs.append(rec)
        if "error" in rec:
            print(f"{label}: error: {rec['error']}")
            continue
        cost = rec["read_cost_us"]
        share = (cost / (rec["burst"]["median_us"] * rec["calls_per_replay"])) if cost else None
        print(f"{label}: NVML read {cost:.1f} us per read" + (f" ({share:.2%} of one sample)" if share else "")
              if cost is not None else f"{label}: no NVML reader")
        print(_line(f"burst ({args.idle:g} s idle)", rec["burst"]))
        print(_line(f"sustained ({args.load:g} s)", rec["sustained"]))
        print(f"  sustained / burst  {rec['sustained_over_burst']:.3f}")
        print(_line("harness burst", rec["harness_burst"]))
        print(_line("harness sustained", rec["harness_sustained"]))
        hs = rec["harness_sustained"]
        sm = (hs.get("clocks") or {}).get("sm_mhz")
        row_mhz = clock_value(ClockStats.model_validate(sm) if sm else None)  # as records.clocks.sm_clock reads a row
        loop_mhz = rec.get("loop_settled_sm_mhz")
        if row_mhz and loop_mhz:
            print(f"  harness sustained clock {row_mhz:.0f} MHz / the {args.load:g} s loop's last second "
                  f"{loop_mhz:.0f} MHz = {row_mhz / loop_mhz:.3f} (within 3%: {abs(row_mhz / loop_mhz - 1) <= 0.03}); "
                  f"the row's own settled-loop clock {hs.get('settled_sm_clock_mhz')} MHz, settle "
                  f"{((hs.get('clocks') or {}).get('settle') or {}).get('seconds', float('nan')):.2f} s, sampling "
                  f"{hs.get('sampling_s', float('nan')):.2f} s ({((hs.get('clocks') or {}).get('settle') or {}).get('reason')})")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({**head, "libraries": recs}, indent=2) + "\n")
    return 1 if all("error" in r for r in recs) else 0


if __name__ == "__main__":
    sys.exit(main())
