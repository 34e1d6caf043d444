"""Does the harness's kernel time agree with what the GPU profiler sees? A benchmark script,
not a test: run it on the GPU machine.

    python ci/fidelity.py --out results/fidelity [--backends flash-attn,flashinfer]
                          [--suite suites/decode.yaml --case 'llama3-8b*']

For every available backend (default variants) on about ten representative cells (decode and
prefill, several sizes: the built-in suite below, or --suite with --case filters) it times the
forward with harness.timing exactly as ``harness run`` does (hot mode, CUDA graph where the
backend allows it), then profiles the same forward calls with torch.profiler and sums the
device time of every kernel/memset/memcpy per call (averaged over --profile-calls calls).

Prints harness us, profiler us, diff %, and writes fidelity.csv and fidelity.json to --out.
Cells where the harness measures 20 us or more must agree within 3%: otherwise exit 1. Also
prints the cold-L2 probe for both flush methods and the device ceilings.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness import registry  # noqa: E402
from harness.metadata import decode_first_order  # noqa: E402
from harness.spec import SpecError, load_suite, parse_suite  # noqa: E402
from harness.timing import TimingOptions, graph_decision, time_callable, verify_cold_l2  # noqa: E402
from harness.workload import generate  # noqa: E402

GATE_MIN_US = 20.0
GATE_MAX_DIFF = 0.03

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
        {"name": "prefill-1x4k", "num_heads": 32, "num_kv_heads": 8, "head_size": 128,
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


def profile_kernel_us(call: Any, calls: int) -> tuple[float, float]:
    """(device time per call in us summed over its kernels/memsets/copies, kernels per call)."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
    evs = _device_events(prof)
    if not evs:
        raise RuntimeError("the profiler recorded no device events (CUPTI unavailable?)")
    total = sum(e.time_range.elapsed_us() for e in evs)
    return total / calls, len(evs) / calls


def setup_forward(backend: type, variant: dict, batch: Any, device: torch.device,
                  cuda_graph: bool = True) -> tuple[Any, Any, Any]:
    """Everything run_cell builds before timing: (call, decision inputs, out). Mirrors the runner."""
    cfg = batch.config
    caps = backend.capabilities(variant)
    if caps.reorder_batch_threshold is not None:
        bview, _ = batch.reordered(decode_first_order(batch.query_lens, caps.reorder_batch_threshold))
    else:
        bview = batch
    check_batch = getattr(backend, "check_batch_support", None)
    if check_batch is not None:
        why = check_batch(bview.common_metadata(), variant)
        if why:
            raise NotImplementedError(why)
    kv_cache = backend.materialize_kv_cache(bview.kv_cache, cfg.kv_layout)
    builder = backend.get_builder_cls()(cfg, variant, device)
    impl = backend.get_impl_cls()(cfg, variant, device, bview.layer)
    metadata = builder.build(bview.common_metadata())
    out = torch.full_like(bview.query, float("nan"), dtype=cfg.torch_dtype)  # as the runner: unwritten stays NaN

    def call() -> None:
        impl.forward(bview.query, bview.key, bview.value, kv_cache, metadata, out, None)

    safe = impl.graph_safe(metadata) if caps.cudagraph > 0 else None
    decision = graph_decision(caps.cudagraph, bview.query_lens, safe, enabled=cuda_graph, device_type="cuda")
    return call, decision, out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="folder for fidelity.csv and fidelity.json")
    p.add_argument("--backends", help="comma-separated backends (default: every registered one available here)")
    p.add_argument("--suite", help="a suite YAML instead of the built-in cells")
    p.add_argument("--case", action="append", help="with --suite: case name or glob (repeatable)")
    p.add_argument("--profile-calls", type=int, default=20, help="profiled calls per cell (default 20)")
    p.add_argument("--no-cuda-graph", action="store_true", help="harness timing without CUDA graphs")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("error: ci/fidelity.py needs a CUDA device", file=sys.stderr)
        return 2
    device = torch.device("cuda", torch.cuda.current_device())  # indexed, as harness/cli.py makes it
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

    print(f"{torch.cuda.get_device_name()}  torch {torch.__version__}")
    for method in ("read", "write"):
        print(f"cold-L2 probe ({method} flush): {json.dumps(verify_cold_l2(device, method))}")
    from harness.roofline import get_ceilings

    ceil, why = get_ceilings(device)
    print(f"ceilings: {ceil if ceil else why}")

    topts = TimingOptions.for_device(device, cuda_graph=not args.no_cuda_graph)
    rows: list[dict[str, Any]] = []
    hdr = f"{'case':22} {'backend':28} {'graph':6} {'harness us':>11} {'profiler us':>12} {'diff %':>8} {'kern/call':>9}  gate"
    print(hdr)
    for case in cases:
        batch = None
        for b in backends:
            for variant in b.default_variants():
                label = f"{b.name}[{','.join(f'{k}={v}' for k, v in sorted(variant.items())) or '-'}]"
                rec: dict[str, Any] = {"case": case.name, "backend": b.name, "variant": variant}
                avail = b.availability(variant)
                why_not = f"unavailable: {avail.reason}" if not avail.available else \
                    b.check_support(case.attention_config(), variant, "cuda")
                if why_not:
                    rec["skipped"] = why_not
                    rows.append(rec)
                    continue
                try:
                    if batch is None:
                        batch = generate(case, device)
                    call, decision, out = setup_forward(b, variant, batch, device, cuda_graph=not args.no_cuda_graph)
                    t = time_callable(call, device, topts, graph=decision, output=out)
                    prof_us, kpc = profile_kernel_us(call, args.profile_calls)
                    h = t["median_us"]
                    diff = (h - prof_us) / prof_us if prof_us else float("inf")
                    gated = h >= GATE_MIN_US
                    ok = (abs(diff) <= GATE_MAX_DIFF) if gated else None
                    rec.update(harness_us=h, profiler_us=prof_us, diff=diff, kernels_per_call=kpc,
                               graph=t["cuda_graph"]["used"], graph_reason=t["cuda_graph"].get("reason", ""),
                               calls_per_sample=t["calls_per_sample"], noise=t["rel_ci_half_width"],
                               launch_hidden=t["launch"]["hidden_frac"], gated=gated, ok=ok)
                    gate = "-" if ok is None else ("ok" if ok else "FAIL")
                    print(f"{case.name[:22]:22} {label[:28]:28} {'yes' if rec['graph'] else 'no':6} {h:11.2f} "
                          f"{prof_us:12.2f} {100 * diff:8.2f} {kpc:9.1f}  {gate}")
                except Exception as e:  # one broken backend costs only its own line
                    rec["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
                    print(f"{case.name[:22]:22} {label[:28]:28} error: {rec['error']}")
                rows.append(rec)
                torch.cuda.synchronize()
        del batch
        torch.cuda.empty_cache()

    args.out.mkdir(parents=True, exist_ok=True)
    fields = ["case", "backend", "variant", "graph", "harness_us", "profiler_us", "diff", "kernels_per_call",
              "calls_per_sample", "noise", "launch_hidden", "gated", "ok", "graph_reason", "skipped", "error"]
    with open(args.out / "fidelity.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({**r, "variant": json.dumps(r["variant"], sort_keys=True)})
    compared = [r for r in rows if "harness_us" in r]
    failed = [r for r in compared if r["ok"] is False]
    summary = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
               "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "gate": {"min_us": GATE_MIN_US, "max_abs_diff": GATE_MAX_DIFF},
               "compared": len(compared), "gated": sum(1 for r in compared if r["gated"]), "failed": len(failed),
               "median_abs_diff": statistics.median(abs(r["diff"]) for r in compared) if compared else None,
               "rows": rows}
    (args.out / "fidelity.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    print(f"{len(compared)} compared, {summary['gated']} gated (>= {GATE_MIN_US:g} us), {len(failed)} outside "
          f"{GATE_MAX_DIFF:.0%}; wrote {args.out / 'fidelity.csv'} and fidelity.json")
    if not compared:
        print("FAIL: nothing was compared (no available backend ran)")
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
