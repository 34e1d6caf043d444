"""Where do the adapter's call and a library's plain call part? A GPU diagnostic, one factor a line.

    harness diag callform --out DIR [--shapes NAME,...] [--libs fa3,fa4,flashinfer] [--max-time S]

For each orientation shape (the first three cases of suites/callforms.yaml: MQA 8/1 x 128 x 2k
page 16, GQA 32/8 x 16 x 32k page 64, GQA 32/8 x 64 x 4k page 16) it builds ONE batch
(harness.case.workload: shuffled pages, the harness's own inputs) and times, on those same tensors,
every way the call can differ between the adapter (both call forms, through prepare_cell as
`harness run` does) and the plain call a kernel engineer makes:

  FA3  plain batched flash_attn_with_kvcache(q [B,1,H,D], cache_seqlens, page_table), then one
       change at a time: + scheduler_metadata (AOT, built outside the timed call); varlen q
       [T,H,D] + cu_seqlens_q; varlen + scheduler_metadata; vLLM's num_splits=32 with metadata;
       num_splits=1; return_softmax_lse=True; + the output copy into a caller's buffer; out=
       (where the build has it); get_scheduler_metadata alone (builder work, not in the row).
  FA4  plain flash_attn.cute.flash_attn_varlen_func(q [B,1,H,D], seqused_k, page_table), then:
       varlen q + cu_seqlens_q; return_lse=True; + the output copy; out= (where it has it);
       disable_scheduler_metadata=True (where it has it). num_splits stays 1 (sm90 has no split-KV).
  FlashInfer  the decode wrapper planned once: run(out=) (tensor cores), run() allocating its
       output, return_lse=True, CUDA-core decode; plan() alone (host work, not in the row).

For FA3 and FA4 it then records the adapter's vllm-form call as it reaches the library and times
it against the plain call one argument at a time (harness/tools/diag/callform_args.py): the vllm
call with each argument that differs (query layout with cu_seqlens_q, page table, out=,
return_lse, scheduler metadata, num_splits, ...) as the plain call has it, and pack_gqa forced
either way; the argument whose reversal removes the most of the gap is named responsible when the
gap is beyond the noise (their 95% CIs apart).

Every line is timed by the harness's own timer (harness.timing.time_callable: CUDA-graph
replays with events, the noise-based stopping rule), so a factor's line and a row of
`harness run` are measured the same way. Writes DIR/callform-diag.json and DIR/callform-diag.md:
per shape and library, each factor's median (us), its 95% CI, its difference from that
library's plain call and (JSON) the kernels it launched (torch.profiler over graph replays,
`harness diag fidelity`; --no-kernels skips that). Without CUDA, or without a library, it prints `skipped: <why>` (per library
where only some are missing), writes the skip reasons and exits 0: the diagnostic is evidence,
not a gate. Exit 2: bad arguments.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch

ROOT = Path(__file__).resolve().parents[3]  # the checkout: suites/ and the results it reads

SUITE = ROOT / "suites" / "callforms.yaml"
SHAPES = ("orient-mqa-b128-2k-p16", "orient-gqa-b16-32k-p64", "orient-gqa-b64-4k-p16")
LIBS = {"fa3": "flash_attn_interface", "fa4": "flash_attn.cute", "flashinfer": "flashinfer"}
PLAIN = "plain"  # each library's first factor: what the others are compared with


def parse_args(argv: list[str] | None, prog: str | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="folder for callform-diag.json and .md")
    p.add_argument("--shapes", default=",".join(SHAPES), help=f"comma-separated case names of {SUITE.name}")
    p.add_argument("--libs", default=",".join(LIBS), help="comma-separated: " + ", ".join(LIBS))
    p.add_argument("--max-time", type=float, default=1.0, help="seconds of sampling per factor (default 1)")
    p.add_argument("--no-kernels", action="store_true", help="skip the per-factor kernel list (torch.profiler)")
    args = p.parse_args(argv)
    args.shapes = [s for s in args.shapes.split(",") if s]
    args.libs = [s for s in args.libs.split(",") if s]
    bad = [x for x in args.libs if x not in LIBS]
    if bad:
        p.error(f"--libs: unknown {', '.join(bad)}; expected some of {', '.join(LIBS)}")
    from harness.spec import load_suite

    names = {c.name for c in load_suite(SUITE).cases}
    bad = [s for s in args.shapes if s not in names]
    if bad:
        p.error(f"--shapes: {', '.join(bad)} not in {SUITE.relative_to(ROOT)}")
    if not args.max_time > 0:
        p.error("--max-time must be > 0")
    return args


def skip_reason(lib: str) -> str | None:
    """Why ``lib`` cannot be diagnosed here (None: it can)."""
    if not torch.cuda.is_available():
        return "no CUDA device"
    mod = LIBS[lib]
    try:
        if importlib.util.find_spec(mod.split(".")[0]) is None or importlib.util.find_spec(mod) is None:
            return f"{mod} not installed"
    except (ImportError, ValueError):
        return f"{mod} not installed"
    return None


# ---------------------------------------------------------------- the factors
def _has(fn: Any, name: str) -> bool:
    import inspect

    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def fa3_factors(x: dict[str, Any]) -> dict[str, Callable[[], Any] | str]:
    import flash_attn_interface as fa3

    f = fa3.flash_attn_with_kvcache
    q, q4, kc, vc, pt, sl, cu, B, cfg = (x[k] for k in ("q", "q4", "kc", "vc", "pt", "seqlens", "cu", "B", "cfg"))
    base = dict(cache_seqlens=sl, page_table=pt, causal=True, softmax_scale=cfg.softmax_scale)
    varlen = dict(cu_seqlens_q=cu, max_seqlen_q=1)

    def md(batched: bool, splits: int) -> Any:
        return fa3.get_scheduler_metadata(
            batch_size=B, max_seqlen_q=1, max_seqlen_k=pt.shape[1] * cfg.block_size, num_heads_q=cfg.num_heads,
            num_heads_kv=cfg.num_kv_heads, headdim=cfg.head_size, cache_seqlens=sl, qkv_dtype=cfg.torch_dtype,
            headdim_v=cfg.head_size, cu_seqlens_q=None if batched else cu, page_size=cfg.block_size, causal=True,
            window_size=(-1, -1), has_softcap=False, num_splits=splits, pack_gqa=None, sm_margin=0)

    out = torch.empty_like(q4)
    m_b, m_v, m_v32 = md(True, 0), md(False, 0), md(False, 32)
    facts: dict[str, Callable[[], Any] | str] = {
        PLAIN: lambda: f(q4, kc, vc, **base),
        "+ scheduler_metadata (batched)": lambda: f(q4, kc, vc, scheduler_metadata=m_b, **base),
        "varlen q + cu_seqlens_q": lambda: f(q, kc, vc, **varlen, **base),
        "varlen + scheduler_metadata": lambda: f(q, kc, vc, scheduler_metadata=m_v, **varlen, **base),
        "varlen + scheduler_metadata + num_splits=32 (vLLM)":
            lambda: f(q, kc, vc, scheduler_metadata=m_v32, num_splits=32, **varlen, **base),
        "num_splits=1": lambda: f(q4, kc, vc, num_splits=1, **base),
        "return_softmax_lse=True": lambda: f(q4, kc, vc, return_softmax_lse=True, **base),
        "+ output copy": lambda: out.copy_(f(q4, kc, vc, **base)),
        "get_scheduler_metadata alone (builder)": lambda: md(False, 32),
    }
    facts["out= (no copy)"] = (lambda: f(q4, kc, vc, out=out, **base)) if _has(f, "out") else \
        "this build's flash_attn_with_kvcache has no out="
    return facts


def fa4_factors(x: dict[str, Any]) -> dict[str, Callable[[], Any] | str]:
    from flash_attn.cute import flash_attn_varlen_func as f

    q, q4, kc, vc, pt, sl, cu, cfg = (x[k] for k in ("q", "q4", "kc", "vc", "pt", "seqlens", "cu", "cfg"))
    splits = 1 if torch.cuda.get_device_capability()[0] == 9 else 0
    base = dict(seqused_k=sl, page_table=pt, causal=True, softmax_scale=cfg.softmax_scale, num_splits=splits)
    out = torch.empty_like(q4)
    facts: dict[str, Callable[[], Any] | str] = {
        PLAIN: lambda: f(q4, kc, vc, **base),
        "varlen q + cu_seqlens_q": lambda: f(q, kc, vc, cu_seqlens_q=cu, max_seqlen_q=1, **base),
        "return_lse=True": lambda: f(q4, kc, vc, return_lse=True, **base),
        "+ output copy": lambda: out.copy_(f(q4, kc, vc, **base)[0]),
        "num_splits (split-KV)": "sm90 FA4 has no split-KV: num_splits stays 1" if splits == 1 else
            "not sm90: the heuristic (0) is the plain call",
    }
    facts["out= (no copy)"] = (lambda: f(q4, kc, vc, out=out, **base)) if _has(f, "out") else \
        "flash_attn.cute.flash_attn_varlen_func has no out="
    facts["disable_scheduler_metadata=True"] = (lambda: f(q4, kc, vc, disable_scheduler_metadata=True, **base)) \
        if _has(f, "disable_scheduler_metadata") else "this FA4 has no disable_scheduler_metadata"
    return facts


def flashinfer_factors(x: dict[str, Any]) -> dict[str, Callable[[], Any] | str]:
    import flashinfer

    q, kv, pt, sl, B, cfg = (x[k] for k in ("q", "kv", "pt", "seqlens", "B", "cfg"))
    P = cfg.block_size
    pages = (sl + P - 1) // P
    indptr = torch.zeros(B + 1, dtype=torch.int32, device=q.device)
    indptr[1:] = torch.cumsum(pages, 0)
    indices = torch.cat([pt[i, :int(pages[i])] for i in range(B)]).to(torch.int32)
    last = (sl - (pages - 1) * P).to(torch.int32)
    ws = torch.zeros(256 << 20, dtype=torch.uint8, device=q.device)
    plan_args = (indptr, indices, last, cfg.num_heads, cfg.num_kv_heads, cfg.head_size, P)
    plan_kw = dict(pos_encoding_mode="NONE", q_data_type=cfg.torch_dtype, kv_data_type=cfg.torch_dtype,
                   sm_scale=cfg.softmax_scale)
    tc = flashinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_tensor_cores=True)
    tc.plan(*plan_args, **plan_kw)
    ws2 = torch.zeros(256 << 20, dtype=torch.uint8, device=q.device)
    cc = flashinfer.BatchDecodeWithPagedKVCacheWrapper(ws2, "NHD", use_tensor_cores=False)
    out = torch.empty_like(q)
    facts: dict[str, Callable[[], Any] | str] = {
        PLAIN: lambda: tc.run(q, kv, out=out),
        "run() allocating its output": lambda: tc.run(q, kv),
        "return_lse=True": lambda: tc.run(q, kv, out=out, return_lse=True),
        "plan() alone (builder, host)": lambda: tc.plan(*plan_args, **plan_kw),
    }
    try:
        cc.plan(*plan_args, **plan_kw)
        facts["CUDA-core decode (use_tensor_cores=False)"] = lambda: cc.run(q, kv, out=out)
    except Exception as e:  # e.g. a GQA group the CUDA-core kernel does not instantiate
        facts["CUDA-core decode (use_tensor_cores=False)"] = f"{type(e).__name__}: {str(e)[:120]}"
    return facts


FACTORS = {"fa3": fa3_factors, "fa4": fa4_factors, "flashinfer": flashinfer_factors}


def plain_call(lib: str, x: dict[str, Any]) -> tuple[Callable[..., Any], tuple, dict[str, Any]] | None:
    """(function, args, kwargs) of the library's plain call, for the argument ladder (FA only)."""
    q4, kc, vc, pt, sl, cfg = (x[k] for k in ("q4", "kc", "vc", "pt", "seqlens", "cfg"))
    if lib == "fa3":
        import flash_attn_interface as fa3

        return fa3.flash_attn_with_kvcache, (q4, kc, vc), dict(cache_seqlens=sl, page_table=pt, causal=True,
                                                               softmax_scale=cfg.softmax_scale)
    if lib == "fa4":
        from flash_attn.cute import flash_attn_varlen_func

        splits = 1 if torch.cuda.get_device_capability()[0] == 9 else 0
        return flash_attn_varlen_func, (q4, kc, vc), dict(seqused_k=sl, page_table=pt, causal=True,
                                                          softmax_scale=cfg.softmax_scale, num_splits=splits)
    return None


def argument_ladder(lib: str, batch: Any, x: dict[str, Any], dev: torch.device, max_time: float) -> dict[str, Any]:
    """The adapter's vllm-form call against the plain call, one argument at a time, and the
    argument responsible for the gap (harness/tools/diag/callform_args.py)."""
    from harness.cell.prepare import prepare_cell
    from harness.registry import resolve
    from harness.tools.diag import callform_args as ca

    plain = plain_call(lib, x)
    if plain is None:
        return {"skipped": f"{lib}: no argument ladder (a wrapper API, not one call)"}
    name, variant = ADAPTER[lib]
    prep = prepare_cell(resolve(name), {**variant, "call_form": "vllm"}, batch, dev)
    prep.forward()
    got = ca.record_call(prep)
    if isinstance(got, str):
        return {"skipped": got}
    f, args, kw = got
    if getattr(f, "__wrapped__", f) is not getattr(plain[0], "__wrapped__", plain[0]) and f is not plain[0]:
        return {"skipped": f"the vllm form calls {getattr(f, '__qualname__', f)}, the plain call "
                           f"{getattr(plain[0], '__qualname__', plain[0])}: no ladder between two functions"}
    lines: dict[str, Any] = {}
    for label, fn in ca.ladder(f, (plain[1], plain[2]), (args, kw)).items():
        try:
            fn()
            torch.cuda.synchronize()
            lines[label] = time_us(fn, dev, max_time)
        except Exception as e:  # an argument combination the library refuses costs only its line
            lines[label] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
    return {"lines": lines, "responsible": ca.responsible(lines),
            "differing": ca.differing((plain[1], plain[2]), (args, kw))}
ADAPTER: dict[str, tuple[str, dict[str, Any]]] = {"fa3": ("flash-attn", {"fa_version": 3}), "fa4": ("flash-attn", {"fa_version": 4}),
           "flashinfer": ("flashinfer", {"decode_tensor_cores": True, "prefill_backend": "auto"})}


# ---------------------------------------------------------------- timing
def shape_inputs(name: str, dev: torch.device) -> tuple[Any, dict[str, Any]]:
    """The case's batch (harness.case.workload) and the tensors the plain calls take from it."""
    from harness.spec import load_suite
    from harness.case.workload import generate

    case = next(c for c in load_suite(SUITE).cases if c.name == name)
    batch = generate(case, dev)
    cfg = batch.config
    kv = batch.kv_cache  # canonical (blocks, 2, page, Hk, D), NHD
    kc, vc = kv.unbind(1)
    B = batch.num_reqs
    nblk = -(-max(batch.seq_lens) // cfg.block_size)
    common = batch.common_metadata()
    return batch, {"cfg": cfg, "kv": kv, "kc": kc, "vc": vc, "B": B, "q": batch.query,
                   "q4": batch.query.view(B, 1, cfg.num_heads, cfg.head_size),
                   "pt": common.block_table[:, :nblk].to(dev, torch.int32).contiguous(),
                   "seqlens": torch.tensor(batch.seq_lens, dtype=torch.int32, device=dev),
                   "cu": torch.arange(B + 1, dtype=torch.int32, device=dev)}


def time_us(fn: Callable[[], Any], dev: torch.device, max_time: float, graph: bool = True) -> dict[str, Any]:
    """The harness's own timer on ``fn`` (CUDA-graph replays where capture works, else eager)."""
    from harness.timing import TimingOptions, time_callable
    from harness.timing.graphs import GraphDecision

    opts = TimingOptions.for_device(dev, max_time_s=max_time)
    t = time_callable(fn, dev, opts, graph=GraphDecision(graph, "" if graph else "host work"))
    return {"median_us": t["median_us"], "ci95_us": [t.get("ci_low_us"), t.get("ci_high_us")], "samples": t.get("samples"),
            "cuda_graph": (t.get("cuda_graph") or {}).get("used")}


def adapter_lines(lib: str, batch: Any, dev: torch.device, max_time: float) -> dict[str, Any]:
    """The adapter's forward in both call forms, timed as `harness run` times a row."""
    from harness.registry import resolve
    from harness.cell.prepare import prepare_cell
    from harness.timing import TimingOptions, time_callable

    name, variant = ADAPTER[lib]
    backend = resolve(name)
    lines: dict[str, Any] = {}
    for form in ("vllm", "fastest"):
        label = f"adapter, call_form {form}"
        try:
            prep = prepare_cell(backend, {**variant, "call_form": form}, batch, dev)
            prep.forward(lse=prep.lse)
            t = time_callable(prep.timed_call, dev, TimingOptions.for_device(dev, max_time_s=max_time),
                              graph=prep.graph_decision(True), output=prep.out)
            lines[label] = {"median_us": t["median_us"], "ci95_us": [t.get("ci_low_us"), t.get("ci_high_us")],
                            "cuda_graph": (t.get("cuda_graph") or {}).get("used"),
                            "call": prep.impl.describe_call(prep.metadata)}
        except Exception as e:  # one failing form costs only its line
            lines[label] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
    return lines


def kernel_names(fn: Callable[[], Any]) -> list[dict[str, Any]] | str:
    """The kernels one call launches (torch.profiler over CUDA-graph replays, harness diag fidelity)."""
    from harness.tools.diag import fidelity as fid
    try:
        st = fid.profile_kernels(fid.graph_replay(fn), 10, warmup=2)
    except Exception as e:
        return f"{type(e).__name__}: {str(e)[:120]}"
    return [{"name": k["name"][:160], "per_call": k["per_call"], "mean_us": k["mean_us"]} for k in st["kernels"]]


def diagnose(shape: str, lib: str, dev: torch.device, max_time: float, kernels: bool = True) -> dict[str, Any]:
    batch, x = shape_inputs(shape, dev)
    res: dict[str, Any] = {"shape": shape, "lib": lib, "lines": {}}
    for label, fn in FACTORS[lib](x).items():
        if isinstance(fn, str):
            res["lines"][label] = {"skipped": fn}
            continue
        try:
            fn()  # first call: JIT compilation out of the timing
            torch.cuda.synchronize()
            host = label.endswith("(builder, host)") or label.endswith("(builder)")
            res["lines"][label] = time_us(fn, dev, max_time, graph=not host)
            if kernels and not host:
                res["lines"][label]["kernels"] = kernel_names(fn)
        except Exception as e:
            res["lines"][label] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
    res["lines"].update(adapter_lines(lib, batch, dev, max_time))
    if lib in ("fa3", "fa4"):
        try:
            res["vllm_args"] = argument_ladder(lib, batch, x, dev, max_time)
        except Exception as e:  # the ladder failing costs only its section
            res["vllm_args"] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
    plain = res["lines"].get(PLAIN, {}).get("median_us")
    for line in res["lines"].values():
        if plain and "median_us" in line:
            line["vs_plain"] = line["median_us"] / plain - 1.0
    return res


def markdown(results: list[dict[str, Any]], skipped: dict[str, str]) -> str:
    out = ["# Call-form diagnostic", "",
           "Per shape and library: each factor's median (harness timer, CUDA-graph replays), its 95% CI, "
           "and its difference from that library's plain call.", ""]
    for lib, why in skipped.items():
        out.append(f"- {lib}: skipped: {why}")
    for r in results:
        out += ["", f"## {r['shape']} - {r['lib']}", "", "| factor | median us | CI95 us | vs plain |", "|---|---|---|---|"]
        for label, line in r["lines"].items():
            if "median_us" in line:
                ci = line.get("ci95_us")
                ci_txt = f"{ci[0]:.2f}-{ci[1]:.2f}" if isinstance(ci, list) and None not in ci else "-"
                vs = f"{100 * line['vs_plain']:+.1f}%" if "vs_plain" in line else "-"
                out.append(f"| {label} | {line['median_us']:.2f} | {ci_txt} | {vs} |")
            else:
                out.append(f"| {label} | - | - | {line.get('skipped') or line.get('error')} |")
        va = r.get("vllm_args")
        if va:
            out += ["", "vllm form against the plain call, one argument at a time:", ""]
            if "lines" not in va:
                out.append(f"- {va.get('skipped') or va.get('error')}")
                continue
            plain = (va["lines"].get("plain call") or {}).get("median_us")
            out += ["| call | median us | CI95 us | vs plain |", "|---|---|---|---|"]
            for label, line in va["lines"].items():
                if "median_us" in line:
                    ci = line.get("ci95_us") or [None, None]
                    ci_txt = f"{ci[0]:.2f}-{ci[1]:.2f}" if None not in ci else "-"
                    vs = f"{100 * (line['median_us'] / plain - 1):+.1f}%" if plain else "-"
                    out.append(f"| {label} | {line['median_us']:.2f} | {ci_txt} | {vs} |")
                else:
                    out.append(f"| {label} | - | - | {line.get('error')} |")
            resp = va["responsible"]
            out += ["", f"**Responsible: {resp['argument']}**: {resp['why']}." if resp.get("argument")
                    else f"No argument named: {resp['why']}."]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    args = parse_args(argv, prog)
    skipped = {lib: why for lib in args.libs if (why := skip_reason(lib))}
    for lib, why in skipped.items():
        print(f"{lib}: skipped: {why}")
    results: list[dict[str, Any]] = []
    todo = [lib for lib in args.libs if lib not in skipped]
    if todo:
        dev = torch.device("cuda", torch.cuda.current_device())
        for shape in args.shapes:
            for lib in todo:
                r = diagnose(shape, lib, dev, args.max_time, kernels=not args.no_kernels)
                results.append(r)
                for label, line in r["lines"].items():
                    txt = (f"{line['median_us']:9.2f} us {100 * line.get('vs_plain', 0):+6.1f}%" if "median_us" in line
                           else line.get("skipped") or line.get("error"))
                    print(f"{shape:24} {lib:10} {label:52} {txt}", flush=True)
                va = r.get("vllm_args") or {}
                if "responsible" in va:
                    resp = va["responsible"]
                    print(f"{shape:24} {lib:10} vllm-form argument responsible: {resp.get('argument') or '-'} "
                          f"({resp['why']})", flush=True)
                elif va:
                    print(f"{shape:24} {lib:10} argument ladder: {va.get('skipped') or va.get('error')}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    header = {"device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
              "torch": torch.__version__, "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "shapes": args.shapes, "skipped": skipped}
    (args.out / "callform-diag.json").write_text(json.dumps({**header, "results": results}, indent=2, default=str) + "\n")
    (args.out / "callform-diag.md").write_text(markdown(results, skipped))
    print(f"wrote {args.out / 'callform-diag.json'} and callform-diag.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
