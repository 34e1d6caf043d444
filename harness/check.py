"""Compare a backend's output (and LSE) with the reference.

An element passes when ``|out - ref| <= atol + rtol * |ref|``. A cell passes when no output is
NaN/Inf or unwritten, the fraction of failing elements is at most ``max_mismatch_fraction``,
and (when the backend returns it) every finite reference LSE is matched within ``lse_atol``
while rows the reference leaves empty (-inf) are infinite in the kernel's LSE too.

Tolerances by (dtype, KV-cache dtype), chosen from the storage precision of the inputs and
P (the kernels round the softmax probabilities to the model dtype before P.V):
- fp16:  atol = rtol = 4e-3 (fp16 eps 9.8e-4, a few roundings);
- bf16:  atol = rtol = 2e-2 (bf16 eps 7.8e-3);
- fp8 KV (e4m3/e5m2): the reference dequantizes the same stored values, so K/V rounding is
  shared; the kernels may also quantize Q to fp8 (FA3) and P, so atol = rtol = 6e-2 with up
  to 0.1% of elements outside.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float
    max_mismatch_fraction: float = 0.0
    lse_atol: float = 1e-2


TOLERANCES: dict[tuple[str, bool], Tolerance] = {
    ("float16", False): Tolerance(atol=4e-3, rtol=4e-3, lse_atol=5e-3),
    ("bfloat16", False): Tolerance(atol=2e-2, rtol=2e-2, lse_atol=2e-2),
    ("float16", True): Tolerance(atol=6e-2, rtol=6e-2, max_mismatch_fraction=1e-3, lse_atol=1e-1),
    ("bfloat16", True): Tolerance(atol=6e-2, rtol=6e-2, max_mismatch_fraction=1e-3, lse_atol=1e-1),
}


def tolerance_for(dtype: str, fp8_kv: bool) -> Tolerance:
    return TOLERANCES[(dtype, fp8_kv)]


@dataclass
class CheckResult:
    passed: bool
    message: str
    max_abs_err: float
    max_rel_err: float
    rel_l2_err: float
    mismatch_fraction: float
    num_nan: int
    num_inf: int
    num_unwritten: int
    lse_checked: bool
    lse_max_abs_err: float | None
    atol: float
    rtol: float
    lse_atol: float
    max_mismatch_fraction: float

    def as_dict(self) -> dict:
        return asdict(self)


def _finite_or_none(x: float) -> float | None:
    return x if x == x and abs(x) != float("inf") else None


def check_output(
    out: torch.Tensor,
    ref: torch.Tensor,
    tol: Tolerance,
    lse: torch.Tensor | None = None,
    ref_lse: torch.Tensor | None = None,
    unwritten: torch.Tensor | None = None,
) -> CheckResult:
    """``out``/``ref`` [T, H, D]; ``lse``/``ref_lse`` [T, H] natural log; ``unwritten`` a bool mask
    of output elements the kernel never wrote (found by a sentinel run), if known."""
    o = out.double()
    r = ref.to(o.device).double()
    nan = torch.isnan(o)
    inf = torch.isinf(o)
    num_unwritten = int(unwritten.sum()) if unwritten is not None else 0
    num_nan = int(nan.sum()) - num_unwritten
    num_inf = int(inf.sum())
    finite = ~(nan | inf)
    diff = (o - r).abs()
    diff = torch.where(finite, diff, torch.full_like(diff, float("inf")))
    bad = diff > tol.atol + tol.rtol * r.abs()
    n = max(1, o.numel())
    mismatch_fraction = float(bad.sum()) / n
    fdiff = diff[finite]
    max_abs = float(fdiff.max()) if fdiff.numel() else float("nan")
    rel = fdiff / r.abs()[finite].clamp_min(1e-6)
    max_rel = float(rel.max()) if rel.numel() else float("nan")
    ref_norm = float(r.norm())
    rel_l2 = float((o.where(finite, torch.zeros_like(o)) - r).norm()) / ref_norm if ref_norm else float(fdiff.norm())

    problems = []
    if num_unwritten:
        problems.append(f"{num_unwritten} output elements never written")
    if num_nan > 0:
        problems.append(f"{num_nan} NaN outputs")
    if num_inf:
        problems.append(f"{num_inf} Inf outputs")
    if mismatch_fraction > tol.max_mismatch_fraction:
        problems.append(
            f"{mismatch_fraction:.3%} of elements outside atol={tol.atol:g}, rtol={tol.rtol:g}"
            f" (max abs err {max_abs:.3g})"
        )
    lse_err = None
    if lse is not None and ref_lse is not None:
        lg = lse.double()
        lr = ref_lse.to(lg.device).double()
        ref_empty = torch.isinf(lr)
        got_inf = torch.isinf(lg)  # FA2 reports +inf, others -inf, for rows that see nothing
        wrong_empty = int((ref_empty & ~got_inf).sum() + (~ref_empty & ~torch.isfinite(lg)).sum())
        both = ~ref_empty & torch.isfinite(lg)
        lse_err = float((lg[both] - lr[both]).abs().max()) if both.any() else 0.0
        if wrong_empty:
            problems.append(f"{wrong_empty} LSE rows disagree on being empty/NaN")
        if lse_err > tol.lse_atol:
            problems.append(f"LSE max abs err {lse_err:.3g} > {tol.lse_atol:g}")
    return CheckResult(
        passed=not problems,
        message="; ".join(problems),
        max_abs_err=_finite_or_none(max_abs) or 0.0,
        max_rel_err=_finite_or_none(max_rel) or 0.0,
        rel_l2_err=rel_l2 if rel_l2 == rel_l2 else float("inf"),
        mismatch_fraction=mismatch_fraction,
        num_nan=max(0, num_nan),
        num_inf=num_inf,
        num_unwritten=num_unwritten,
        lse_checked=lse_err is not None,
        lse_max_abs_err=lse_err,
        atol=tol.atol,
        rtol=tol.rtol,
        lse_atol=tol.lse_atol,
        max_mismatch_fraction=tol.max_mismatch_fraction,
    )
