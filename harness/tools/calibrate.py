"""Measure the per-request relative L2 error of the correct CPU backends (torch-math, sdpa)
against the fp64 reference over a grid of dtype x KV dtype x reduction length, and print it
next to the limit of ``harness.cell.check.rel_l2_limit``. The numbers behind docs/conformance.md:

    python -m harness.tools.calibrate            # ~1-2 min on 2 CPU cores
"""

from __future__ import annotations

import argparse
import math

import torch

from harness.report import markdown
from harness.cell.check import UNIT_ROUNDOFF, rel_l2_limit
from harness.registry import resolve
from harness.cell.prepare import CaseContext
from harness.plan.cells import Cell, RunOptions
from harness.cell.run import run_cell
from harness.spec import CaseSpec, Suite

LENGTHS = (1, 16, 128, 1024, 4096)


def _case(dtype: str, kvd: str, length: int, kind: str, seed: int) -> CaseSpec:
    if kind == "decode":
        batch = [{"kind": "decode", "count": 8, "context_len": length}]
    else:
        batch = [{"kind": "prefill", "count": 2, "query_len": length}]
    return CaseSpec.model_validate(dict(
        name=f"cal-{dtype}-{kvd}-{kind}-{length}", num_heads=8, num_kv_heads=2, head_size=128, dtype=dtype,
        kv_cache_dtype=kvd, k_scale="auto", v_scale="auto", block_size=16, seed=seed, batch=batch))


def measure(backends: list[str], lengths: tuple[int, ...] = LENGTHS) -> list[dict]:
    rows = []
    opts = RunOptions(device=torch.device("cpu"), time=False)
    for dtype in ("float16", "bfloat16"):
        for kvd in ("auto", "fp8_e4m3", "fp8_e5m2"):
            for kind in ("decode", "prefill"):
                for length in lengths:
                    if kind == "prefill" and length > 1024:
                        continue  # the fp64 reference of a 4k prefill is slow on 2 cores
                    case = _case(dtype, kvd, length, kind, seed=length)
                    case_data = CaseContext(case, opts.device, True)
                    for b in backends:
                        row = run_cell(Cell(case, resolve(b), {}), case_data, Suite(suite="cal", cases=[case]), opts)
                        assert row.check is not None  # reference backends: each of their cells is checked
                        # None: not finite (a NaN/Inf output), the worst error there is
                        errs = [math.inf if p.rel_l2_err is None else p.rel_l2_err for p in row.check.per_request or []]
                        rows.append(dict(dtype=dtype, kv=kvd, kind=kind, length=length, backend=b,
                                         max_rel_l2=max(errs), limit=rel_l2_limit(dtype, kvd, length),
                                         status=row.status))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default="torch-math,sdpa")
    args = ap.parse_args()
    rows = measure(args.backends.split(","))
    head = ["dtype", "KV", "kind", "L", "backend", "max per-request rel L2", "in u(dtype)", "limit", "margin"]
    print("\n".join(markdown.table(head, [
        [r["dtype"], r["kv"], r["kind"], r["length"], r["backend"], f"{r['max_rel_l2']:.2e}",
         f"{r['max_rel_l2'] / UNIT_ROUNDOFF[r['dtype']]:.2f}", f"{r['limit']:.2e}",
         f"{r['limit'] / max(r['max_rel_l2'], 1e-12):.1f}x"] for r in rows])))


if __name__ == "__main__":
    main()
