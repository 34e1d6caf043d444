"""Time the raw library calls (no harness code in the timed path) for the orientation cells,
and print the harness's figure for the same case beside each line.

    harness diag direct [--harness-results results/orientation] [--out direct.json]

Cells (suites/orientation.yaml names the same shapes for the harness):
- dense-prefill: bf16 non-causal, 2 sequences x 16 heads x 8192 tokens, head 128, through FA2
  ``flash_attn_varlen_func``, FA3 ``flash_attn_interface.flash_attn_varlen_func`` and FA4
  ``flash_attn.cute.flash_attn_varlen_func`` on dense (non-paged) K/V; reports TFLOP/s
  (orientation: 394 / 744 / 749). NOT the harness's call: the harness always reads a paged KV
  cache (page 256 for this case), so these lines are orientation figures only.
- paged-prefill: the same shape through the SAME paged calls backends/flash_attn/ makes:
  FA2 ``flash_attn_varlen_func(..., block_table=)``, FA3 ``flash_attn_with_kvcache(...,
  page_table=, cu_seqlens_q=, cache_seqlens=, scheduler_metadata=)``, FA4
  ``flash_attn.cute.flash_attn_varlen_func(..., page_table=, seqused_k=)``; page 256, a shuffled
  page table, K and V the two strided halves of one (num_blocks, 2, page, Hk, D) cache. This is
  what the harness's dense-prefill row is compared against (diff %, flagged above 5%). The
  harness's figure also includes the adapter's copy of the output into the caller's buffer
  (the public entry points have no out=; 64 MiB = 67 MB here): that copy is timed alone too.
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

from harness.timing.graphs import capture_graph


DENSE = dict(batch=2, heads=16, seqlen=8192, head=128)
PAGED_PREFILL = dict(DENSE, page=256)
FLAG_DIFF = 0.05  # a harness figure more than 5% off the same direct call is flagged
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
            g = capture_graph(fn, n, torch.device("cuda", torch.cuda.current_device()))
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


def paged_prefill_inputs() -> dict[str, Any]:
    """The dense-prefill shape in a paged cache, laid out as the harness gives it to the adapter."""
    B, H, L, D, P = (PAGED_PREFILL[k] for k in ("batch", "heads", "seqlen", "head", "page"))
    pages_per_seq = L // P
    num_pages = B * pages_per_seq
    g = torch.Generator(device="cuda").manual_seed(0)
    kv = torch.randn(num_pages, 2, P, H, D, device="cuda", dtype=torch.bfloat16, generator=g)
    perm = torch.randperm(num_pages, device="cuda", generator=g).to(torch.int32)
    q = torch.randn(B * L, H, D, device="cuda", dtype=torch.bfloat16, generator=g)
    cu = torch.arange(0, (B + 1) * L, L, device="cuda", dtype=torch.int32)
    flops = 4.0 * B * H * D * L * L
    return {"kv": kv, "page_table": perm.view(B, pages_per_seq).contiguous(), "q": q, "cu": cu,
            "seqlens": torch.full((B,), L, device="cuda", dtype=torch.int32), "L": L, "flops": flops,
            "out": torch.empty_like(q)}


def paged_prefill_calls(x: dict[str, Any]) -> list[tuple[str, str, Callable[[], Callable[[], Any]]]]:
    """The adapter's prefill-segment calls (FA2.call / FA3.call / FA4.call in backends/flash_attn/), argument for argument."""
    kv, pt, q, cu, seqlens, L = x["kv"], x["page_table"], x["q"], x["cu"], x["seqlens"], x["L"]
    B, H, D, P = (PAGED_PREFILL[k] for k in ("batch", "heads", "head", "page"))
    kc, vc = kv.unbind(1)  # as the adapter: (num_blocks, page, Hk, D) each, strided
    scale = D ** -0.5

    def fa2():
        from flash_attn import flash_attn_varlen_func as f
        return lambda: f(q, kc, vc, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=L, max_seqlen_k=L,
                         dropout_p=0.0, block_table=pt, return_attn_probs=False, softmax_scale=scale, causal=False,
                         window_size=(-1, -1), softcap=0.0, alibi_slopes=None)

    def fa3():
        import flash_attn_interface as fa3
        md = None
        if hasattr(fa3, "get_scheduler_metadata"):  # the adapter builds it when the library has it
            md = fa3.get_scheduler_metadata(
                batch_size=B, max_seqlen_q=L, max_seqlen_k=pt.shape[1] * P, num_heads_q=H, num_heads_kv=H,
                headdim=D, cache_seqlens=seqlens, qkv_dtype=torch.bfloat16, headdim_v=D, cu_seqlens_q=cu,
                page_size=P, causal=False, window_size=(-1, -1), has_softcap=False, num_splits=0,
                pack_gqa=None, sm_margin=0)
        return lambda: fa3.flash_attn_with_kvcache(
            q, kc, vc, cache_seqlens=seqlens, page_table=pt, cu_seqlens_q=cu, max_seqlen_q=L, softmax_scale=scale,
            causal=False, window_size=(-1, -1), scheduler_metadata=md, num_splits=0, pack_gqa=None, sm_margin=0,
            return_softmax_lse=False)

    def fa4():
        from flash_attn.cute import flash_attn_varlen_func as f
        cc = torch.cuda.get_device_capability()
        splits = 1 if cc[0] == 9 else 0  # as the adapter: FA4 on sm90 has no split-KV
        return lambda: f(q, kc, vc, cu_seqlens_q=cu, max_seqlen_q=L, seqused_k=seqlens, page_table=pt,
                         softmax_scale=scale, causal=False, window_size=(None, None), learnable_sink=None,
                         softcap=0.0, num_splits=splits, return_lse=False)

    def copy():
        o, out = torch.randn_like(q), x["out"]
        return lambda: out.copy_(o)

    return [("FA2 paged varlen (block_table)", "2", fa2), ("FA3 paged with_kvcache", "3", fa3),
            ("FA4 paged varlen (page_table)", "4", fa4), (OUTPUT_COPY, "", copy)]


OUTPUT_COPY = "output copy alone (adapter)"


def decode_inputs(shape: dict[str, int] = DECODE) -> dict[str, Any]:
    B, S, Hq, Hk, D, P = (shape[k] for k in ("batch", "context", "heads", "kv_heads", "head", "page"))
    pages_per_seq = S // P
    num_pages = B * pages_per_seq
    g = torch.Generator(device="cuda").manual_seed(0)
    # One (pages, 2, page, Hk, D) cache: FlashInfer takes it whole, FA3/FA4 its K and V views.
    kv = torch.randn(num_pages, 2, P, Hk, D, device="cuda", dtype=torch.bfloat16, generator=g)
    perm = torch.randperm(num_pages, device="cuda", generator=g).to(torch.int32)
    page_table = perm.view(B, pages_per_seq).contiguous()
    q = torch.randn(B, Hq, D, device="cuda", dtype=torch.bfloat16, generator=g)
    seqlens = torch.full((B,), S, device="cuda", dtype=torch.int32)
    kv_bytes = 2.0 * B * S * Hk * D * kv.element_size()
    return {"kv": kv, "page_table": page_table, "q": q, "seqlens": seqlens, "kv_bytes": kv_bytes}


def decode_calls(x: dict[str, Any], shape: dict[str, int] = DECODE) -> list[tuple[str, str, Callable[[], Callable[[], Any]]]]:
    kv, pt, q, seqlens = x["kv"], x["page_table"], x["q"], x["seqlens"]
    B, Hq, Hk, D, P = (shape[k] for k in ("batch", "heads", "kv_heads", "head", "page"))
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
HARNESS_BACKEND = {"dense-prefill": "flash-attn", "paged-prefill": "flash-attn", "paged-decode": None}
# The harness case each cell is compared with, and whether the direct call is the harness's call.
HARNESS_CASE = {"dense-prefill": "dense-prefill", "paged-prefill": "dense-prefill", "paged-decode": "paged-decode"}
SAME_CALL = {"dense-prefill": False, "paged-prefill": True, "paged-decode": True}
CALL_NOTE = {"dense-prefill": "NOT the same call (dense, non-paged: orientation only)",
             "paged-prefill": "same call as the adapter, argument for argument",
             "paged-decode": "same paged entry point (direct arguments not mirrored one for one)"}


# ---------------------------------------------------------------- harness figures
def harness_rows(results: Path | None, case: str, backend: str, fa_version: str,
                 tensor_cores: bool | None = None) -> list[dict[str, Any]]:
    """The harness's rows for the same case: label, median us, figure (TFLOP/s or K/V TB/s), graph."""
    if results is None:
        return []
    from harness.records.results import read_rows

    out = []
    for r in read_rows(results):
        if r.case != case or r.backend != backend or not r.timing or not r.metrics:
            continue
        if fa_version and "fa_version" in r.variant and str(r.variant["fa_version"]) != fa_version:
            continue
        if tensor_cores is not None and "decode_tensor_cores" in r.variant \
                and bool(r.variant["decode_tensor_cores"]) != tensor_cores:
            continue
        t = r.timing.median_us * 1e-6
        fig = (r.metrics.flops / t / 1e12 if case == "dense-prefill" else r.metrics.bytes_kv / t / 1e12)
        graph = "graph" if r.timing.cuda_graph.used else "eager"
        out.append({"label": f"{r.backend}[{r.variant_label or '-'}]", "median_us": r.timing.median_us,
                    "figure": fig, "graph": graph})
    return out


def harness_figures(results: Path | None, case: str, backend: str, fa_version: str) -> list[str]:
    """The harness's figure for the same case: TFLOP/s (dense) or K/V TB/s (decode), per matching row."""
    if results is None:
        return []
    rows = harness_rows(results, case, backend, fa_version)
    return [f"{h['label']} {h['figure']:.3g} ({h['median_us']:.1f} us, {h['graph']})" for h in rows] \
        or [f"no {backend} row for {case}"]


def compare(direct_us: float, harness: list[dict[str, Any]], same_call: bool) -> list[dict[str, Any]]:
    """Harness row vs direct call: diff = harness / direct - 1; flagged above 5% for the same call."""
    out = []
    for h in harness:
        diff = h["median_us"] / direct_us - 1.0 if direct_us else float("inf")
        out.append({**h, "direct_us": direct_us, "diff": diff, "same_call": same_call,
                    "flag": same_call and abs(diff) > FLAG_DIFF})
    return out


def comparison_lines(lines: list[dict[str, Any]]) -> list[str]:
    """The printout: which harness figure against which direct call, the % difference, flags."""
    txt = ["", f"harness vs direct (diff = harness / direct - 1; '!!' marks > {FLAG_DIFF:.0%} on the same call):"]
    copy = next((r for r in lines if r["library"] == OUTPUT_COPY and "median_us" in r), None)
    for r in lines:
        if r["library"] == OUTPUT_COPY:
            continue
        for c in r.get("compare", []):
            what = CALL_NOTE.get(r["case"], "same call" if c["same_call"] else "not the same call")
            flag = "  !! > 5%" if c["flag"] else ""
            txt.append(f"  {r['case']:14} harness {c['label']} {c['median_us']:.1f} us ({c['graph']}) vs direct "
                       f"{r['library']} {c['direct_us']:.1f} us: {100 * c['diff']:+.1f}%  [{what}]{flag}")
            if r["case"] == "paged-prefill" and copy:
                net = (c["median_us"] - copy["median_us"]) / c["direct_us"] - 1.0
                txt.append(f"  {'':14}   without the adapter's output copy ({copy['median_us']:.1f} us): "
                           f"{100 * net:+.1f}%")
    b, h, L, d = (PAGED_PREFILL[k] for k in ("batch", "heads", "seqlen", "head"))
    nbytes = b * L * h * d * 2
    copy_txt = f"{copy['median_us']:.1f} us timed alone above" if copy else "not timed"
    txt.append(f"  note: the harness's prefill figures include the adapter's copy of the output into the caller's "
               f"buffer (public entry points have no out=): {nbytes / 1e6:.0f} MB per call, {copy_txt}.")
    return txt


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    p.add_argument("--harness-results", type=Path, help="results folder of `harness run suites/orientation.yaml`")
    p.add_argument("--reps", type=int, default=30, help="timed replays per line (default 30)")
    p.add_argument("--no-graph", action="store_true", help="eager calls only")
    p.add_argument("--out", type=Path, help="write the lines as JSON here")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("error: harness diag direct needs a CUDA device (torch.cuda.is_available() is False here)", file=sys.stderr)
        return 2
    if args.harness_results and not args.harness_results.exists():
        print(f"error: --harness-results {args.harness_results}: no such folder", file=sys.stderr)
        return 2
    lines = []
    print(f"{torch.cuda.get_device_name()}  torch {torch.__version__}")
    print(f"{'cell':14} {'library':34} {'method':12} {'median us':>10} {'figure':>16} {'orientation':>11}  harness")
    for case, make_inputs, make_calls, unit in (("dense-prefill", dense_inputs, dense_calls, "TFLOP/s"),
                                               ("paged-prefill", paged_prefill_inputs, paged_prefill_calls, "TFLOP/s"),
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
            hcase = HARNESS_CASE[case]
            if label == OUTPUT_COPY:
                rec["harness"] = []
                rec.pop("figure", None)
            else:
                tc = ("tensor cores" in label) if backend == "flashinfer" else None
                hrows = harness_rows(args.harness_results, hcase, backend, fa_version, tc)
                rec["harness"] = [f"{h['label']} {h['figure']:.3g} ({h['median_us']:.1f} us, {h['graph']})"
                                  for h in hrows] or ([f"no {backend} row for {hcase}"] if args.harness_results else [])
                if "median_us" in rec:
                    rec["compare"] = compare(rec["median_us"], hrows, SAME_CALL[case])
            lines.append(rec)
            orient = f"{rec['orientation']:g}" if rec["orientation"] else "-"
            if "error" in rec:
                print(f"{case:14} {label:34} {'-':12} {'-':>10} {'-':>16} {orient:>11}  error: {rec['error']}")
            elif "figure" not in rec:
                print(f"{case:14} {label:34} {rec['method']:12} {rec['median_us']:10.1f} {'-':>16} {orient:>11}")
            else:
                print(f"{case:14} {label:34} {rec['method']:12} {rec['median_us']:10.1f} "
                      f"{rec['figure']:9.3g} {unit:>6} {orient:>11}  {'; '.join(rec['harness'])}")
                if rec.get("note"):
                    print(f"{'':14} {'':34} {rec['note']}")
        del x
        torch.cuda.empty_cache()
    for t in comparison_lines(lines):
        print(t)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                                        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                        "lines": lines}, indent=2) + "\n")
    return 1 if all("error" in r for r in lines) else 0


if __name__ == "__main__":
    sys.exit(main())
