"""Time the raw library calls (no harness code in the timed path) for the orientation cells,
and print the harness's figure for the same case beside each line.

    python ci/direct_timing.py [--harness-results results/orientation] [--out direct.json]

Cells (ci/orientation.yaml names the same shapes for the harness):
- dense-prefill: bf16 non-causal, 2 sequences x 16 heads x 8192 tokens, head 128, through FA2
  ``flash_attn_varlen_func``, FA3 ``flash_attn_interface.flash_attn_varlen_func`` and FA4
  ``flash_attn.cute.flash_attn_varlen_func``; reports TFLOP/s (orientation: 394 / 744 / 749).
- paged-decode: batch 64, context 4096, 32/8 heads, head 128, page 16 (shuffled pages), through
  FA3 ``flash_attn_with_kvcache`` and FlashInfer's tensor-core decode wrapper; reports TB/s of
  K/V read (orientation: 4.04 / 4.21). FA4 paged decode is timed too, without an orientation.

Timing: 5 warm-up calls, then CUDA-graph replays of N back-to-back calls (N so that a replay
lasts about 2 ms) timed with CUDA events, median over --reps replays, divided by N. Where
capture fails the line says so and uses eager calls, each behind a spin kernel that hides the
host launch. Signatures: reports/h200/library-probe.txt.
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DENSE = dict(batch=2, heads=16, seqlen=8192, head=128)
DECODE = dict(batch=64, context=4096, heads=32, kv_heads=8, head=128, page=16)


def _events() -> tuple[torch.cuda.Event, torch.cuda.Event]:
    return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)


def bench(fn: Callable[[], Any], reps: int, graph: bool = True, replay_ms: float = 2.0) -> dict[str, Any]:
    """Median per-call GPU time of ``fn`` in microseconds, and how it was measured."""
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    a, b = _events()
    a.record()
    fn()
    b.record()
    b.synchronize()
    est_ms = max(a.elapsed_time(b), 1e-3)
    n = max(1, min(100, math.ceil(replay_ms / est_ms)))
    note = ""
    if graph:
        try:
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                fn()
            torch.cuda.current_stream().wait_stream(s)
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for _ in range(n):
                    fn()
            g.replay()
            torch.cuda.synchronize()
            times = []
            for _ in range(reps):
                torch.cuda._sleep(2_000_000)  # hold the stream while the host enqueues (~1 ms)
                a.record()
                g.replay()
                b.record()
                b.synchronize()
                times.append(a.elapsed_time(b) * 1e3 / n)
            return {"median_us": statistics.median(times), "min_us": min(times), "method": f"graph x{n}",
                    "reps": reps}
        except Exception as e:
            torch.cuda.synchronize()
            note = f"capture failed ({type(e).__name__}: {str(e).splitlines()[0][:80] if str(e) else ''}); eager"
    times = []
    for _ in range(reps):
        torch.cuda._sleep(2_000_000)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    return {"median_us": statistics.median(times), "min_us": min(times), "method": "eager", "note": note, "reps": reps}


# ---------------------------------------------------------------- the cells
def dense_inputs() -> dict[str, Any]:
    B, H, L, D = DENSE["batch"], DENSE["heads"], DENSE["seqlen"], DENSE["head"]
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(B * L, H, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
    cu = torch.arange(0, (B + 1) * L, L, device="cuda", dtype=torch.int32)
    flops = 4.0 * B * H * D * L * L  # non-causal: every (query, key) pair
    return {"q": q, "k": k, "v": v, "cu": cu, "L": L, "flops": flops}


def dense_calls(x: dict[str, Any]) -> list[tuple[str, str, Callable[[], Callable[[], Any]]]]:
    q, k, v, cu, L = x["q"], x["k"], x["v"], x["cu"], x["L"]

    def fa2():
        from flash_attn import flash_attn_varlen_func as f
        return lambda: f(q, k, v, cu, cu, L, L, dropout_p=0.0, causal=False)

    def fa3():
        from flash_attn_interface import flash_attn_varlen_func as f
        return lambda: f(q, k, v, cu, cu, L, L, causal=False)

    def fa4():
        from flash_attn.cute import flash_attn_varlen_func as f
        return lambda: f(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=L, max_seqlen_k=L, causal=False)

    return [("FA2", "2", fa2), ("FA3", "3", fa3), ("FA4", "4", fa4)]


def decode_inputs() -> dict[str, Any]:
    B, S, Hq, Hk, D, P = (DECODE[k] for k in ("batch", "context", "heads", "kv_heads", "head", "page"))
    pages_per_seq = S // P
    num_pages = B * pages_per_seq
    g = torch.Generator(device="cuda").manual_seed(0)
    # One (pages, 2, page, Hk, D) cache: FlashInfer takes it whole, FA3/FA4 its K and V views.
    kv = torch.randn(num_pages, 2, P, Hk, D, device="cuda", dtype=torch.bfloat16, generator=g)
    perm = torch.randperm(num_pages, device="cuda", generator=g).to(torch.int32)
    page_table = perm.view(B, pages_per_seq).contiguous()
    q = torch.randn(B, Hq, D, device="cuda", dtype=torch.bfloat16, generator=g)
    seqlens = torch.full((B,), S, device="cuda", dtype=torch.int32)
    kv_bytes = 2.0 * B * S * Hk * D * 2
    return {"kv": kv, "page_table": page_table, "q": q, "seqlens": seqlens, "kv_bytes": kv_bytes}


def decode_calls(x: dict[str, Any]) -> list[tuple[str, str, Callable[[], Callable[[], Any]]]]:
    kv, pt, q, seqlens = x["kv"], x["page_table"], x["q"], x["seqlens"]
    B, Hq, Hk, D, P = (DECODE[k] for k in ("batch", "heads", "kv_heads", "head", "page"))
    k_cache, v_cache = kv[:, 0], kv[:, 1]

    def fa3():
        from flash_attn_interface import flash_attn_with_kvcache as f
        q4 = q.unsqueeze(1)  # (B, 1, Hq, D)
        return lambda: f(q4, k_cache, v_cache, cache_seqlens=seqlens, page_table=pt, causal=True)

    def flashinfer_tc():
        import flashinfer
        ws = torch.zeros(128 << 20, dtype=torch.uint8, device="cuda")
        w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_tensor_cores=True)
        pages_per_seq = pt.shape[1]
        indptr = torch.arange(0, (B + 1) * pages_per_seq, pages_per_seq, device="cuda", dtype=torch.int32)
        last = torch.full((B,), P, device="cuda", dtype=torch.int32)
        w.plan(indptr, pt.flatten(), last, Hq, Hk, D, P, q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)
        out = torch.empty_like(q)
        return lambda: w.run(q, kv, out=out)

    def fa4():
        from flash_attn.cute import flash_attn_varlen_func as f
        cu_q = torch.arange(0, B + 1, device="cuda", dtype=torch.int32)
        return lambda: f(q, k_cache, v_cache, cu_seqlens_q=cu_q, max_seqlen_q=1, seqused_k=seqlens,
                         page_table=pt, causal=True)

    return [("FA3 with_kvcache", "3", fa3), ("FlashInfer decode (tensor cores)", "", flashinfer_tc),
            ("FA4 paged varlen", "4", fa4)]


ORIENTATION = {("dense-prefill", "FA2"): 394.0, ("dense-prefill", "FA3"): 744.0, ("dense-prefill", "FA4"): 749.0,
               ("paged-decode", "FA3 with_kvcache"): 4.04, ("paged-decode", "FlashInfer decode (tensor cores)"): 4.21}
HARNESS_BACKEND = {"dense-prefill": "flash-attn", "paged-decode": None}


# ---------------------------------------------------------------- harness figures
def harness_figures(results: Path | None, case: str, backend: str, fa_version: str) -> list[str]:
    """The harness's figure for the same case: TFLOP/s (dense) or K/V TB/s (decode), per matching row."""
    if results is None:
        return []
    from harness.results import read_rows

    out = []
    for r in read_rows(results):
        if r.case != case or r.backend != backend or not r.timing or not r.metrics:
            continue
        if fa_version and "fa_version" in r.variant and str(r.variant["fa_version"]) != fa_version:
            continue
        t = r.timing["median_us"] * 1e-6
        fig = (r.metrics["flops"] / t / 1e12 if case == "dense-prefill" else r.metrics["bytes_kv"] / t / 1e12)
        graph = "graph" if (r.timing.get("cuda_graph") or {}).get("used") else "eager"
        out.append(f"{r.backend}[{r.variant_label or '-'}] {fig:.3g} ({r.timing['median_us']:.1f} us, {graph})")
    return out or [f"no {backend} row for {case}"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--harness-results", type=Path, help="results folder of `harness run ci/orientation.yaml`")
    p.add_argument("--reps", type=int, default=30, help="timed replays per line (default 30)")
    p.add_argument("--no-graph", action="store_true", help="eager calls only")
    p.add_argument("--out", type=Path, help="write the lines as JSON here")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("error: ci/direct_timing.py needs a CUDA device", file=sys.stderr)
        return 2
    if args.harness_results and not args.harness_results.exists():
        print(f"error: --harness-results {args.harness_results}: no such folder", file=sys.stderr)
        return 2
    lines = []
    print(f"{torch.cuda.get_device_name()}  torch {torch.__version__}")
    print(f"{'cell':14} {'library':34} {'method':12} {'median us':>10} {'figure':>16} {'orientation':>11}  harness")
    for case, make_inputs, make_calls, unit in (("dense-prefill", dense_inputs, dense_calls, "TFLOP/s"),
                                               ("paged-decode", decode_inputs, decode_calls, "TB/s KV")):
        x = make_inputs()
        for label, fa_version, factory in make_calls(x):
            rec: dict[str, Any] = {"case": case, "library": label, "unit": unit,
                                   "orientation": ORIENTATION.get((case, label))}
            try:
                fn = factory()
                r = bench(fn, args.reps, graph=not args.no_graph)
                work = x["flops"] if unit == "TFLOP/s" else x["kv_bytes"]
                rec.update(r, figure=work / (r["median_us"] * 1e-6) / 1e12)
            except Exception as e:  # a missing or failing library costs only its line
                rec["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
            backend = HARNESS_BACKEND[case] or ("flash-attn" if fa_version else "flashinfer")
            rec["harness"] = harness_figures(args.harness_results, case, backend, fa_version)
            lines.append(rec)
            orient = f"{rec['orientation']:g}" if rec["orientation"] else "-"
            if "error" in rec:
                print(f"{case:14} {label:34} {'-':12} {'-':>10} {'-':>16} {orient:>11}  error: {rec['error']}")
            else:
                print(f"{case:14} {label:34} {rec['method']:12} {rec['median_us']:10.1f} "
                      f"{rec['figure']:9.3g} {unit:>6} {orient:>11}  {'; '.join(rec['harness'])}")
                if rec.get("note"):
                    print(f"{'':14} {'':34} {rec['note']}")
        del x
        torch.cuda.empty_cache()
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                                        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                        "lines": lines}, indent=2) + "\n")
    return 1 if all("error" in r for r in lines) else 0


if __name__ == "__main__":
    sys.exit(main())
