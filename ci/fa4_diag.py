"""Where does FA4's paged decode lose time through the adapter? A GPU diagnostic (issue 15).

    python ci/fa4_diag.py [--out fa4-diag.json] [--version 4] [--reps 30]

On 2026-11-30 the harness measured FA4 paged decode 64 x 4096 (32/8 heads, page 16) at 317.6 us
against 289.1 us for the raw call in ci/direct_timing.py (+9.9%; about 15% earlier on 8/1
heads, batch 128, 2k context), while FA3 through the same adapter was within 0.5%. For that
cell and the issue's cell this times, each as CUDA-graph replays of N back-to-back calls
(ci/direct_timing.py's bench) and once through harness.timing as `harness run` does:

  A adapter   the adapter's forward (prepare_cell(...).timed_call: kernel call + output copy)
  B raw-same  flash_attn_varlen_func with the adapter's own tensors and arguments, no copy
  C raw+copy  B followed by the same copy into the output buffer (= A's device work)
  D direct    ci/direct_timing.py's call: its own inputs (shuffled pages), default arguments
  H harness   A timed by harness.timing.time_callable (what `harness run` reports)

and prints each call's kernels (torch.profiler over graph replays: name, count and mean us per
call, busy time, overlap). Reading: A-C = host/adapter effects (none expected: a graph replays
kernels only); C-B = the output copy; B-D = inputs/arguments (page order, lengths, a different
compiled variant: compare the kernel names); H-A = the harness's sampling (calls per sample,
events). --version 3 runs the same for FA3 as the control.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _load(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, ROOT / "ci" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


CELLS = {
    # direct_timing.py's paged-decode cell (orientation paged-decode: 4095 cached + 1 new = 4096)
    "decode-64x4096-32/8": {"num_heads": 32, "num_kv_heads": 8, "batch": 64, "context": 4096},
    # the cell: Llama-3-70B TP8 shape, batch 128, 2k context
    "decode-128x2048-8/1": {"num_heads": 8, "num_kv_heads": 1, "batch": 128, "context": 2048},
}


def case_spec(name: str, c: dict[str, Any]) -> dict[str, Any]:
    return {"suite": "fa4-diag", "cases": [{
        "name": name.replace("/", "-"), "num_heads": c["num_heads"], "num_kv_heads": c["num_kv_heads"],
        "head_size": 128, "dtype": "bfloat16", "kv_layout": "NHD", "causal": True, "block_size": 16, "seed": 0,
        "batch": [{"kind": "decode", "count": c["batch"], "context_len": c["context"] - 1}]}]}


def kernel_lines(fid: Any, fn: Any, calls: int) -> dict[str, Any]:
    st = fid.profile_kernels(fid.graph_replay(fn), calls, warmup=2)
    return {k: st[k] for k in ("busy_us", "sum_us", "span_us", "overlap_us", "kernels_per_call", "kernels")}


def run_cell(name: str, c: dict[str, Any], version: int, reps: int, fid: Any, direct: Any) -> dict[str, Any]:
    from backends.flash_attn.backend import FlashAttentionBackend
    from harness.runner import prepare_cell
    from harness.spec import parse_suite
    from harness.timing import TimingOptions, time_callable
    from harness.workload import generate

    dev = torch.device("cuda", torch.cuda.current_device())
    case = parse_suite(case_spec(name, c), "<fa4_diag>").cases[0]
    batch = generate(case, dev)
    prepared = prepare_cell(FlashAttentionBackend, {"fa_version": version}, batch, dev)
    impl, md, view = prepared.impl, prepared.metadata, prepared.view
    gen = impl.generation
    (seg,) = md.segments
    kc, vc = prepared.kv_cache.unbind(1)
    q = view.query[seg.token_start:seg.token_end]
    out = prepared.out

    def raw_same() -> Any:
        return gen.call(q, kc, vc, seg, md, False, None)[0]  # the adapter's own call, argument for argument

    def raw_copy() -> None:
        out[seg.token_start:seg.token_end].copy_(raw_same())

    # D: direct_timing.py's inputs and call for this shape
    saved = dict(direct.DECODE)
    direct.DECODE.update(batch=c["batch"], context=c["context"], heads=c["num_heads"], kv_heads=c["num_kv_heads"],
                         head=128, page=16)
    try:
        x = direct.decode_inputs()
        calls = {label: make for label, v, make in direct.decode_calls(x) if v == str(version)}
    finally:
        direct.DECODE.clear()
        direct.DECODE.update(saved)
    (d_label, d_make), = calls.items()
    d_fn = d_make()

    fns = {"A adapter": prepared.timed_call, "B raw-same": raw_same, "C raw+copy": raw_copy, f"D direct ({d_label})": d_fn}
    res: dict[str, Any] = {"cell": name, "fa_version": version, "call": impl.describe_call(md),
                           "adapter_args": {"page_table": [list(seg.block_table.shape), str(seg.block_table.dtype),
                                                           seg.block_table.is_contiguous()],
                                            "seq_lens": [int(seg.seq_lens.min()), int(seg.seq_lens.max())],
                                            "q": [list(q.shape), list(q.stride())], "k": [list(kc.shape), list(kc.stride())],
                                            "num_splits": getattr(gen, "num_splits", None), "window": list(gen.window),
                                            "softcap": getattr(gen, "softcap", None)},
                           "direct_args": {"page_table": [list(x["page_table"].shape), str(x["page_table"].dtype)],
                                           "seq_lens": [int(x["seqlens"].min()), int(x["seqlens"].max())]},
                           "rows": {}}
    for label, fn in fns.items():
        b = direct.bench(fn, reps)
        b1 = direct.bench(fn, reps, replay_ms=0.0)  # one call per replay, as a harness sample of 1 call
        k = kernel_lines(fid, fn, 10)
        res["rows"][label] = {"graph_us": b["median_us"], "method": b["method"], "graph_1call_us": b1["median_us"], **k}
    t = time_callable(prepared.timed_call, dev, TimingOptions.for_device(dev, cuda_graph=True, max_time_s=1.0),
                      graph=prepared.graph_decision(True), output=out)
    res["rows"]["H harness"] = {"graph_us": t["median_us"], "calls_per_sample": t["calls_per_sample"],
                                "graph": t["cuda_graph"]["used"]}
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("fa4-diag.json"))
    ap.add_argument("--version", type=int, choices=(3, 4), default=4, help="FA generation (3: the control)")
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("error: ci/fa4_diag.py needs a CUDA device", file=sys.stderr)
        return 2
    fid, direct = _load("fidelity"), _load("direct_timing")
    results = []
    for name, c in CELLS.items():
        try:
            r = run_cell(name, c, args.version, args.reps, fid, direct)
        except Exception as e:  # one cell's failure is a line, the other cell still runs
            r = {"cell": name, "error": f"{type(e).__name__}: {str(e)[:300]}"}
            print(f"{name}: ERROR {r['error']}", flush=True)
        results.append(r)
        if "rows" in r:
            print(f"\n== {name} FA{args.version}: {json.dumps(r['call'])}\n   adapter args {r['adapter_args']}"
                  f"\n   direct args {r['direct_args']}", flush=True)
            base = r["rows"]["A adapter"]["graph_us"]
            for label, row in r["rows"].items():
                extra = (f" 1-call replay {row['graph_1call_us']:8.2f}  busy {row['busy_us']:8.2f} sum {row['sum_us']:8.2f}"
                         f" overlap {row['overlap_us']:6.2f} kern/call {row['kernels_per_call']:.0f}"
                         if "busy_us" in row else f" calls/sample {row['calls_per_sample']} graph {row['graph']}")
                print(f"   {label:40} {row['graph_us']:9.2f} us ({100 * (row['graph_us'] / base - 1):+6.1f}% vs A){extra}")
                for k in row.get("kernels", []):
                    print(f"        {k['per_call']:4.1f} x {k['mean_us']:9.2f} us  {k['name']}")
        args.out.write_text(json.dumps(results, indent=2, default=str) + "\n")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
