"""Compare a backend's output (and LSE) with the reference, request by request.

Every request (and, through its summary, every segment kind: decode / extend / prefill) is
judged on its own, so a batch whose large prefill is right cannot hide wrong decodes. A
request passes when none of its outputs is NaN/Inf or unwritten, and

- elementwise: at most ``max_mismatch_fraction`` of its elements fall outside
  ``|out - ref| <= atol + rtol * |ref|``;
- relative L2: ``||out - ref|| / ||ref||`` is at most ``rel_l2_limit(dtype, kv, seq_len)``.
  This gate scales with the signal: a decode output at a 3k context is ~0.03 in magnitude,
  below any sensible atol, but its relative error is still ~1e-3 for a correct kernel;
- the last query row: its own relative L2 is at most the same limit. It is the row a model
  samples from, and the only row that sees a request's final key under a causal mask: an
  error confined to it (a kernel dropping each request's last key) is averaged away in the
  request's figure (1 row of 1024: 32x smaller) but not here. A single row of a correct
  kernel measures within the request's spread (docs/conformance.md, "Last query row");
- LSE (when the backend returns it): every finite reference LSE is matched within
  ``lse_atol``, and rows the reference leaves empty (-inf) are infinite in the kernel's too.

The relative-L2 limit (docs/conformance.md has the measured numbers behind it):

    rel_l2_limit = 3 u(dtype) + [fp8 KV] 2^-4 + 2^-20 sqrt(seq_len)

- ``u`` is the unit roundoff of the model dtype (fp16 2^-11, bf16 2^-8): the output is
  rounded once and the softmax probabilities P once more before P.V, and correct CPU
  backends measure 0.3-0.6 u, so 3 u leaves a 5x margin and still catches a kernel that
  reads ~8 wrong KV tokens of 3k (~13 u) or drops the last context token of 3k (~3.3 u);
- fp8 KV: the reference dequantizes the same stored K/V, so cache rounding is shared; the
  extra term is for kernels that also quantize Q and P to e4m3 for the fp8 tensor cores
  (FA3 measures 0.035 rel L2 on the H200; 2^-4 = u(e4m3) = 0.0625);
- the length term is fp32 accumulation over the reduction (at most ~2^-24 sqrt(L) per
  element, taken with a 16x margin); it matters only past ~1M keys.

Elementwise tolerances by (dtype, KV-cache dtype), from the storage precision of the inputs:
- fp16:  atol = rtol = 4e-3 (fp16 eps 9.8e-4, a few roundings);
- bf16:  atol = rtol = 2e-2 (bf16 eps 7.8e-3);
- fp8 KV (e4m3/e5m2): atol = rtol = 6e-2 with up to 0.1% of a request's elements outside.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import torch

from harness.records.results import Check, KindCheck, RequestCheck

UNIT_ROUNDOFF: dict[str, float] = {"float16": 2.0**-11, "bfloat16": 2.0**-8}
FP8_COMPUTE_U = 2.0**-4  # e4m3: the format fp8 tensor cores take Q and P in
ACCUMULATION = 2.0**-20  # fp32 accumulation, 16 x 2^-24, per sqrt(reduction length)
MAX_LISTED_REQUESTS = 64  # rows list every request up to this many, else failures + worst


def rel_l2_base(dtype: str, kv_cache_dtype: str) -> float:
    """The length-independent part of ``rel_l2_limit``: 3 u(dtype), + 2^-4 with an fp8 KV cache."""
    return 3.0 * UNIT_ROUNDOFF[dtype] + (FP8_COMPUTE_U if kv_cache_dtype.startswith("fp8") else 0.0)


def rel_l2_limit(dtype: str, kv_cache_dtype: str, reduction_len: int) -> float:
    """Largest relative L2 error a correct kernel may show on one request (see module doc)."""
    return rel_l2_base(dtype, kv_cache_dtype) + ACCUMULATION * math.sqrt(max(1, reduction_len))


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float
    max_mismatch_fraction: float = 0.0
    lse_atol: float = 1e-2
    dtype: str = "bfloat16"
    kv_cache_dtype: str = "auto"

    def rel_l2(self, reduction_len: int) -> float:
        return rel_l2_limit(self.dtype, self.kv_cache_dtype, reduction_len)


TOLERANCES: dict[tuple[str, bool], Tolerance] = {
    ("float16", False): Tolerance(atol=4e-3, rtol=4e-3, lse_atol=5e-3, dtype="float16"),
    ("bfloat16", False): Tolerance(atol=2e-2, rtol=2e-2, lse_atol=2e-2, dtype="bfloat16"),
    ("float16", True): Tolerance(atol=6e-2, rtol=6e-2, max_mismatch_fraction=1e-3, lse_atol=1e-1,
                                 dtype="float16", kv_cache_dtype="fp8_e4m3"),
    ("bfloat16", True): Tolerance(atol=6e-2, rtol=6e-2, max_mismatch_fraction=1e-3, lse_atol=1e-1,
                                  dtype="bfloat16", kv_cache_dtype="fp8_e4m3"),
}


def tolerance_for(dtype: str, fp8_kv: bool | str) -> Tolerance:
    """Tolerance for a model dtype and a KV-cache dtype (``True``/``False`` = fp8 or not)."""
    if isinstance(fp8_kv, str):
        tol = TOLERANCES[(dtype, fp8_kv.startswith("fp8"))]
        return Tolerance(**{**asdict(tol), "kv_cache_dtype": fp8_kv})
    return TOLERANCES[(dtype, bool(fp8_kv))]


def kernel_kv_dtype(config: Any) -> str:
    """The KV dtype the kernel's inputs have, which sets the tolerance: the cache dtype, except
    in MLA's expanded form, where K/V arrive up-projected in the model dtype (the reference
    up-projects the same dequantized latent, so an fp8 latent's rounding is shared and the
    kernel's error is that of a model-dtype call; the fp8 allowance would hide its bugs)."""
    if getattr(config, "attention_kind", "mha") == "mla_expanded":
        return "auto"
    return str(config.kv_cache_dtype)


def _finite_or_none(x: float) -> float | None:
    return x if x == x and abs(x) != float("inf") else None


def _seg_sum(x: torch.Tensor, seg: torch.Tensor, n: int) -> torch.Tensor:
    return torch.zeros(n, dtype=x.dtype, device=x.device).index_add_(0, seg, x)


def _seg_max(x: torch.Tensor, seg: torch.Tensor, n: int) -> torch.Tensor:
    return torch.full((n,), float("-inf"), dtype=x.dtype, device=x.device).scatter_reduce_(0, seg, x, "amax")


def check_output(
    out: torch.Tensor,
    ref: torch.Tensor,
    tol: Tolerance,
    lse: torch.Tensor | None = None,
    ref_lse: torch.Tensor | None = None,
    unwritten: torch.Tensor | None = None,
    query_start_loc: list[int] | None = None,
    kinds: list[str] | None = None,
    seq_lens: list[int] | None = None,
    request_ids: list[int] | None = None,
) -> Check:
    """``out``/``ref`` [T, H, D]; ``lse``/``ref_lse`` [T, H] natural log; ``unwritten`` a bool mask
    of output elements the kernel never wrote (found by a sentinel run), if known.

    ``query_start_loc`` (num_reqs + 1 offsets), ``kinds`` and ``seq_lens`` describe the requests
    in the order of ``out``'s tokens; without them the whole output is one request.
    ``request_ids`` names each of them in reports (the batch order when a backend reordered it)."""
    T = out.shape[0]
    qsl = list(query_start_loc) if query_start_loc is not None else [0, T]
    n = len(qsl) - 1
    kinds = list(kinds) if kinds is not None else ["request"] * n
    seq_lens = list(seq_lens) if seq_lens is not None else [qsl[i + 1] - qsl[i] for i in range(n)]
    dev = out.device
    counts = torch.tensor([qsl[i + 1] - qsl[i] for i in range(n)], device=dev)
    seg = torch.repeat_interleave(torch.arange(n, device=dev), counts)  # request of each token

    o = out.double()
    r = ref.to(dev).double()
    nan = torch.isnan(o)
    inf = torch.isinf(o)
    unw = unwritten.to(dev) if unwritten is not None else torch.zeros_like(nan)
    finite = ~(nan | inf)
    diff = (o - r).abs()
    diff = torch.where(finite, diff, torch.full_like(diff, float("inf")))
    bad = diff > tol.atol + tol.rtol * r.abs()
    per_tok = lambda x: x.flatten(1).sum(1)  # noqa: E731
    elems = o[0].numel() if T else 1

    req_nan = _seg_sum(per_tok(nan & ~unw).double(), seg, n)
    req_inf = _seg_sum(per_tok(inf).double(), seg, n)
    req_unw = _seg_sum(per_tok(unw).double(), seg, n)
    req_bad = _seg_sum(per_tok(bad).double(), seg, n)
    err2 = torch.where(finite, o - r, torch.zeros_like(o)).pow(2)
    tok_err2, tok_ref2 = per_tok(err2), per_tok(r.pow(2))
    req_err2 = _seg_sum(tok_err2, seg, n)
    req_ref2 = _seg_sum(tok_ref2, seg, n)
    # Each request's last query row (the sampled one; the only one seeing the final key).
    # (a request with no query row points anywhere in range; its figure is not used)
    last = torch.tensor([min(max(qsl[i + 1] - 1, qsl[i]), max(T - 1, 0)) for i in range(n)], device=dev,
                        dtype=torch.long)
    last_err2 = tok_err2[last] if T else tok_err2.new_zeros(n)
    last_ref2 = tok_ref2[last] if T else tok_ref2.new_zeros(n)
    fdiff_tok = torch.where(finite, diff, torch.zeros_like(diff)).flatten(1).amax(1) if T else diff.new_zeros(0)
    req_maxabs = _seg_max(fdiff_tok, seg, n)

    lse_req = None
    lse_empty_req = None
    if lse is not None and ref_lse is not None:
        lg = lse.to(dev).double()
        lr = ref_lse.to(dev).double()
        ref_empty = torch.isinf(lr)
        got_inf = torch.isinf(lg)  # FA2 reports +inf, others -inf, for rows that see nothing
        wrong_empty = (ref_empty & ~got_inf) | (~ref_empty & ~torch.isfinite(lg))
        both = ~ref_empty & torch.isfinite(lg)
        lerr = torch.where(both, (lg - lr).abs(), torch.zeros_like(lg)).amax(1)
        lse_req = _seg_max(lerr, seg, n)
        lse_empty_req = _seg_sum(wrong_empty.sum(1).double(), seg, n)

    # Every per-request figure to the host in one transfer: indexing the device tensors per
    # request cost a device sync per figure (about ten per request, 256 requests per cell).
    cols = [counts, req_ref2, req_err2, req_bad, req_maxabs, req_unw, req_nan, req_inf, last_err2, last_ref2]
    if lse_req is not None and lse_empty_req is not None:  # set together
        cols += [lse_req, lse_empty_req]
    err2_total = req_err2.sum()  # the batch's figure, reduced on the device as before
    host = torch.stack([c.double() for c in cols]).cpu().tolist() if n else [[] for _ in cols]
    counts_h, req_ref2, req_err2, req_bad, req_maxabs, req_unw, req_nan, req_inf, last_err2_h, last_ref2_h = host[:10]
    if lse_req is not None:
        lse_req_h, lse_empty_h = host[10], host[11]
    per_request: list[dict[str, Any]] = []
    for i in range(n):
        numel = max(1, int(counts_h[i]) * elems)
        ref_norm = math.sqrt(float(req_ref2[i]))
        # The floor keeps requests whose reference is ~0 (rows that see no key) on the atol gate.
        rel_l2 = math.sqrt(float(req_err2[i])) / max(ref_norm, tol.atol * math.sqrt(numel) * 1e-3, 1e-30)
        limit = tol.rel_l2(seq_lens[i])
        mf = float(req_bad[i]) / numel
        maxabs = float(req_maxabs[i]) if n and int(counts_h[i]) else 0.0
        problems = []
        if req_unw[i]:
            problems.append(f"{int(req_unw[i])} outputs never written")
        if req_nan[i] > 0:
            problems.append(f"{int(req_nan[i])} NaN outputs")
        if req_inf[i]:
            problems.append(f"{int(req_inf[i])} Inf outputs")
        if mf > tol.max_mismatch_fraction:
            problems.append(f"{mf:.2%} of elements outside atol={tol.atol:g}, rtol={tol.rtol:g} (max abs err {maxabs:.3g})")
        if rel_l2 > limit:
            problems.append(f"rel L2 {rel_l2:.3g} > {limit:.3g}")
        row_floor = tol.atol * math.sqrt(elems) * 1e-3  # as above, for one row
        last_rel = (math.sqrt(float(last_err2_h[i])) / max(math.sqrt(float(last_ref2_h[i])), row_floor, 1e-30)
                    if int(counts_h[i]) else 0.0)
        if last_rel > limit and rel_l2 <= limit:
            problems.append(f"last query row rel L2 {last_rel:.3g} > {limit:.3g}")
        lse_err = None
        if lse_req is not None:
            lse_err = float(lse_req_h[i]) if int(counts_h[i]) else 0.0
            if lse_empty_h[i]:
                problems.append(f"{int(lse_empty_h[i])} LSE rows disagree on being empty/NaN")
            if lse_err > tol.lse_atol:
                problems.append(f"LSE max abs err {lse_err:.3g} > {tol.lse_atol:g}")
        per_request.append({
            "request": request_ids[i] if request_ids is not None else i, "kind": kinds[i], "query_len": int(counts_h[i]), "seq_len": int(seq_lens[i]),
            "passed": not problems, "rel_l2_err": rel_l2, "rel_l2_limit": limit, "max_abs_err": maxabs,
            "mismatch_fraction": mf, "lse_max_abs_err": lse_err, "last_row_rel_l2_err": last_rel,
            "problems": "; ".join(problems),
        })

    failed = [p for p in per_request if not p["passed"]]
    badness = lambda p: (not p["passed"], p["rel_l2_err"] / p["rel_l2_limit"] if p["rel_l2_err"] == p["rel_l2_err"] else float("inf"))  # noqa: E731
    worst = max(per_request, key=badness) if per_request else None
    per_kind: dict[str, dict[str, Any]] = {}
    for p in per_request:
        k = per_kind.setdefault(p["kind"], {"requests": 0, "failed": 0, "max_rel_l2_err": 0.0})
        k["requests"] += 1
        k["failed"] += not p["passed"]
        k["max_rel_l2_err"] = max(k["max_rel_l2_err"], p["rel_l2_err"])

    # Whole-batch statistics, kept for reports and comparisons across runs.
    num_unwritten = int(unw.sum())
    num_nan = int(nan.sum()) - num_unwritten
    num_inf = int(inf.sum())
    mismatch_fraction = float(bad.sum()) / max(1, o.numel())
    fdiff = diff[finite]
    max_abs = float(fdiff.max()) if fdiff.numel() else float("nan")
    rel = fdiff / r.abs()[finite].clamp_min(1e-6)
    max_rel = float(rel.max()) if rel.numel() else float("nan")
    ref_norm = float(r.norm())
    rel_l2 = math.sqrt(float(err2_total)) / ref_norm if ref_norm else float(fdiff.norm())
    lse_all = float(lse_req.max()) if lse_req is not None and n else (0.0 if lse_req is not None else None)

    if failed:
        by_kind = ", ".join(f"{k} {v['failed']}/{v['requests']}" for k, v in per_kind.items() if v["failed"])
        shown = sorted(failed, key=badness, reverse=True)[:3]
        detail = "; ".join(f"req {p['request']} ({p['kind']}, q={p['query_len']}, kv={p['seq_len']}): {p['problems']}"
                           for p in shown)
        more = f"; +{len(failed) - len(shown)} more" if len(failed) > len(shown) else ""
        message = f"{len(failed)}/{n} requests fail ({by_kind}): {detail}{more}"
    else:
        message = ""
    listed = per_request
    if n > MAX_LISTED_REQUESTS:
        keep = {p["request"] for p in failed[:MAX_LISTED_REQUESTS]}
        keep |= {p["request"] for p in sorted(per_request, key=badness, reverse=True)[:16]}
        listed = [p for p in per_request if p["request"] in keep]
    # The stored row model itself (harness.records.results.Check): one definition of a check's fields.
    return Check(
        passed=not failed,
        message=message,
        max_abs_err=_finite_or_none(max_abs) or 0.0,
        max_rel_err=_finite_or_none(max_rel) or 0.0,
        rel_l2_err=rel_l2 if rel_l2 == rel_l2 else float("inf"),
        mismatch_fraction=mismatch_fraction,
        num_nan=max(0, num_nan),
        num_inf=num_inf,
        num_unwritten=num_unwritten,
        lse_checked=lse_all is not None,
        lse_max_abs_err=lse_all,
        atol=tol.atol,
        rtol=tol.rtol,
        lse_atol=tol.lse_atol,
        max_mismatch_fraction=tol.max_mismatch_fraction,
        num_requests=n,
        num_failed_requests=len(failed),
        per_request=[RequestCheck.model_validate(p) for p in listed],
        worst_request=RequestCheck.model_validate(worst) if worst is not None else None,
        per_kind={k: KindCheck.model_validate(v) for k, v in per_kind.items()},
    )
