"""Complete typed payloads for hand-made rows (tests of pure functions: statistics, rules).

Tests about measurement use real rows from real runs instead."""

from __future__ import annotations

from typing import Any

from harness.records.results import Check, Host, ResultRow, Status, Timing
from harness.timing import TimingOptions


# A typed row's config (harness/records/parts.py RowConfig): a Llama-3-8B-like GQA layer, bf16, page 16.
CFG = {"num_heads": 32, "num_kv_heads": 8, "head_size": 128, "dtype": "bfloat16", "kv_cache_dtype": "auto",
       "block_size": 16, "kv_layout": "NHD", "causal": True, "sliding_window": None, "softcap": 0.0,
       "alibi": False, "sinks": False, "scale": None, "seed": 0, "tags": []}

def timing(median: float, lo: float | None = None, hi: float | None = None, *, samples: int = 20,
           method: str = "cuda_event", **kw: Any) -> Timing:
    lo = median if lo is None else lo
    hi = median if hi is None else hi
    fields: dict[str, Any] = dict(
        median_us=float(median), min_us=float(lo), max_us=float(hi), mean_us=float(median), stdev_us=0.0,
        q1_us=float(lo), q3_us=float(hi), iqr_us=float(hi - lo), ci_low_us=float(lo), ci_high_us=float(hi),
        ci_coverage=0.95, rel_ci_half_width=(hi - lo) / (2 * median) if median else 0.0, samples=samples,
        stop_reason="noise_target", stop="", target_rel_noise=0.01, sampling_s=0.1, method=method, mode="hot",
        l2="hot (not flushed)", cuda_graph={"used": False, "reason": "test"}, calls_per_sample=1,
        sm_clock_mhz=None, options=TimingOptions().model_dump())
    fields.update(kw)
    return Timing.model_validate(fields)


def check(passed: bool = True, message: str = "") -> Check:
    return Check(passed=passed, message=message or ("ok" if passed else "max abs err 0.5 > tol"),
                 max_abs_err=0.0 if passed else 0.5, max_rel_err=0.0, rel_l2_err=0.0,
                 mismatch_fraction=0.0 if passed else 0.5, num_nan=0, num_inf=0, num_unwritten=0,
                 lse_checked=False, lse_max_abs_err=None, atol=4e-3, rtol=4e-3, lse_atol=5e-3,
                 max_mismatch_fraction=0.0)


def host() -> Host:
    return Host(build_ms=0.1, first_call_ms=1.0)


def ran_row(median: float | None, lo: float | None = None, hi: float | None = None, *,
            status: Status = Status.PASS, **kw: Any) -> ResultRow:
    """A row that ran (pass/mismatch) with a check, host costs and (median given) a timing."""
    t = None if median is None else timing(median, lo, hi, **{k: kw.pop(k) for k in ("samples", "method") if k in kw})
    ok = status == Status.PASS
    return ResultRow(suite=kw.pop("suite", "s"), case=kw.pop("case", "c"), backend=kw.pop("backend", "b"),
                     status=status, reason="" if ok else "max abs err 0.5 > tol", check=check(ok), host=host(),
                     timing=t, **kw)


def as_status(row: ResultRow, status: Status | str, reason: str) -> ResultRow:
    """``row`` turned into a valid row of another status (what a failing run would have written):
    a mismatch gets a failed check, an error keeps no timing, a cell that did not run keeps
    nothing measured."""
    status = Status(status)
    upd: dict[str, Any] = {"status": status, "reason": reason}
    if status == Status.MISMATCH:
        upd["check"] = check(False, reason)
    elif status == Status.ERROR:
        upd.update(timing=None, metrics=None)
    elif status != Status.PASS:
        upd.update(check=None, timing=None, metrics=None, host=None, call=None)
    return ResultRow.model_validate({**row.model_dump(), **{k: (v.model_dump() if hasattr(v, "model_dump") else v)
                                                            for k, v in upd.items()}})


def gpu_row(case: str, median: float, mhz: float | None = 1980.0, regime: str | None = "burst",
            sm_mhz: dict[str, float] | None = None, reasons: dict[str, int] | None = None) -> ResultRow:
    """A GPU-timed row; ``sm_mhz`` replaces the clock statistics (min / median / max / mean) that
    ``mhz`` would give; ``reasons``: its ``clocks.below_max_reasons``."""
    row = ran_row(median, median * 0.997, median * 1.003, case=case, device="cuda:0")
    t = row.timing.model_dump()
    if regime is not None:
        t["clock_regime"] = regime
        t["clocks"] = {"regime": regime, "source": "nvml (pynvml)", "reads": 20, "max_sm_mhz": 1980.0,
                       "power_limit_w": 700.0}
        if mhz is not None:
            t["clocks"]["sm_mhz"] = {"min": mhz - 5, "median": mhz, "max": mhz + 5}
        if sm_mhz is not None:
            t["clocks"]["sm_mhz"] = dict(sm_mhz)
        if reasons is not None:
            t["clocks"]["below_max_reasons"] = dict(reasons)
    return ResultRow.model_validate({**row.model_dump(), "timing": t})
