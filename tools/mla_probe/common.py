"""The probe's shared parts: a recorder that writes its JSON after every attempt (a crash or a
timeout keeps what ran), CUDA-event timing, error measures, and the fp32 references (MLA in the
absorbed form, ordinary GQA attention), all with bottom-right causal alignment. torch only."""

from __future__ import annotations

import json
import math
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import torch

LN2 = math.log(2.0)
# bf16 outputs against an fp32 reference land near 2e-3 (docs/attention-apis.md); the probe calls
# a result right below these and records the measured error either way.
TOL = {"bfloat16": 1e-2, "fp8": 6e-2}
# Errors after which the CUDA context is unusable: the item stops instead of failing every
# later attempt for a reason that is not theirs.
FATAL = ("illegal memory access", "unspecified launch failure", "device-side assert", "CUDA error: an illegal")


class Recorder:
    """One item's results: ``attempt`` runs a function, records its dict or its error, and
    rewrites ``OUT/<item>.json`` at once."""

    def __init__(self, out: Path, item: str):
        self.path = out / f"{item}.json"
        self.data: dict[str, Any] = {"item": item, "attempts": [], "notes": []}
        self.dead: str | None = None
        self.write()

    def note(self, key: str, value: Any) -> None:
        self.data[key] = value
        self.write()

    def write(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, default=str))
        tmp.replace(self.path)

    def attempt(self, name: str, params: dict[str, Any], fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        rec: dict[str, Any] = {"name": name, "params": params}
        if self.dead:
            rec.update(ok=False, error=f"skipped: CUDA context lost earlier ({self.dead[:120]})")
        else:
            t0 = time.perf_counter()
            try:
                rec.update(fn())
                if torch.cuda.is_available():
                    torch.cuda.synchronize()
                rec.setdefault("ok", True)
            except BaseException as e:  # every failure is a finding: record it and go on
                if isinstance(e, KeyboardInterrupt):
                    raise
                msg = f"{type(e).__name__}: {str(e).strip()}"
                rec.update(ok=False, error=msg[:1500],
                           trace=traceback.format_exc().strip().splitlines()[-6:])
                if any(f in msg for f in FATAL):
                    self.dead = msg
            rec["wall_s"] = round(time.perf_counter() - t0, 3)
        self.data["attempts"].append(rec)
        self.write()
        status = "ok" if rec.get("ok") else "FAIL"
        extra = {k: rec[k] for k in ("rel_err", "lse_rel_err", "median_us", "passed") if k in rec}
        print(f"[{self.data['item']}] {name} {json.dumps(params, default=str)} -> {status} {extra}"
              f"{'' if rec.get('ok') else ' ' + rec.get('error', '')[:300]}", flush=True)
        return rec


def cuda_time_us(fn: Callable[[], Any], warmup: int = 3, reps: int = 20) -> dict[str, float]:
    """Median and min of ``reps`` CUDA-event-timed calls after ``warmup`` calls (microseconds)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) * 1e3)
    times.sort()
    return {"median_us": round(times[len(times) // 2], 2), "min_us": round(times[0], 2), "reps": reps}


def errors(out: torch.Tensor, ref: torch.Tensor, tol: float, prefix: str = "") -> dict[str, Any]:
    """Relative Frobenius error, max abs error, finiteness; ``passed`` against ``tol``."""
    o, r = out.detach().float(), ref.detach().float()
    if o.shape != r.shape:
        return {f"{prefix}passed": False, f"{prefix}shape": [list(o.shape), list(r.shape)]}
    finite = bool(torch.isfinite(o).all())
    diff = torch.nan_to_num(o - r, nan=1e30, posinf=1e30, neginf=1e30)
    rel = float(diff.norm() / r.norm().clamp_min(1e-30))
    return {f"{prefix}rel_err": float(f"{rel:.3e}"), f"{prefix}max_abs_err": float(f"{float(diff.abs().max()):.3e}"),
            f"{prefix}finite": finite, f"{prefix}passed": finite and rel < tol}


def causal_mask(q_len: int, kv_len: int, device: torch.device) -> torch.Tensor:
    """[q_len, kv_len] True where query i may see key j: j <= i + kv_len - q_len (bottom-right)."""
    i = torch.arange(q_len, device=device).unsqueeze(1)
    j = torch.arange(kv_len, device=device).unsqueeze(0)
    return j <= i + (kv_len - q_len)


def mla_reference(q_nope: torch.Tensor, q_pe: torch.Tensor, ckv: torch.Tensor, kpe: torch.Tensor,
                  scale: float, causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """One request, absorbed MLA in fp32: q_nope [Lq, H, 512], q_pe [Lq, H, 64], ckv [L, 512],
    kpe [L, 64] (one latent shared by all heads; V is ckv). Returns out [Lq, H, 512], lse [Lq, H]
    (natural log)."""
    s = (torch.einsum("qhd,kd->hqk", q_nope.float(), ckv.float())
         + torch.einsum("qhd,kd->hqk", q_pe.float(), kpe.float())) * scale
    if causal:
        s = s.masked_fill(~causal_mask(s.shape[1], s.shape[2], s.device), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)  # [H, Lq]
    out = torch.einsum("hqk,kd->qhd", torch.softmax(s, dim=-1), ckv.float())
    return out, lse.transpose(0, 1)


def attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
                        causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """One request, GQA in fp32: q [Lq, Hq, Dqk], k [L, Hk, Dqk], v [L, Hk, Dv] ->
    out [Lq, Hq, Dv], lse [Lq, Hq] (natural log)."""
    group = q.shape[1] // k.shape[1]
    kf = k.float().repeat_interleave(group, dim=1)
    vf = v.float().repeat_interleave(group, dim=1)
    s = torch.einsum("qhd,khd->hqk", q.float(), kf) * scale
    if causal:
        s = s.masked_fill(~causal_mask(s.shape[1], s.shape[2], s.device), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    out = torch.einsum("hqk,khd->qhd", torch.softmax(s, dim=-1), vf)
    return out, lse.transpose(0, 1)


def lengths(n: int, lo: int, hi: int, gen: torch.Generator, must: tuple[int, ...] = ()) -> list[int]:
    """``n`` lengths in [lo, hi], the first ones taken from ``must`` (edge cases), the rest random."""
    out = [max(lo, min(hi, m)) for m in must][:n]
    out += torch.randint(lo, hi + 1, (n - len(out),), generator=gen).tolist()
    return out


def version_of(module: Any) -> str:
    return str(getattr(module, "__version__", "unknown"))
