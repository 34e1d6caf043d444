"""Where a cell's GPU memory peak comes from: runs one backend's default variants on the case of
tests/test_executor.py::test_memory_estimate_bounds_the_measured_gpu_peak with the CUDA
allocator's history on, and prints, per variant, the measured peak, the estimate and the live
allocations at the peak grouped by the innermost frame outside torch (largest first).
Usage (GPU): python3 ci/mem_diag.py [BACKEND]"""
from __future__ import annotations

import collections
import sys

import torch
import yaml

sys.path.insert(0, "tests")
from test_executor import PREFIX_CASE  # noqa: E402

from harness import memory, registry  # noqa: E402
from harness.runner import Cell, RunOptions, iterate_case  # noqa: E402
from harness.spec import parse_suite  # noqa: E402


def where(frames: list[dict]) -> str:
    for f in frames:
        name = f.get("filename", "")
        if "/torch/" not in name and "<" not in name:
            return f"{name.split('/site/')[-1].split('/main/')[-1]}:{f.get('line')} {f.get('name')}"
    return "?"


def live_at_peak(trace: list[dict]) -> tuple[int, dict[str, int]]:
    live: dict[int, tuple[int, str]] = {}
    cur = peak = 0
    best: dict[int, tuple[int, str]] = {}
    for ev in trace:
        if ev["action"] == "alloc":
            live[ev["addr"]] = (ev["size"], where(ev.get("frames", [])))
            cur += ev["size"]
            if cur > peak:
                peak, best = cur, dict(live)
        elif ev["action"] in ("free_requested", "free_completed") and ev["addr"] in live:
            if ev["action"] == "free_requested":
                cur -= live.pop(ev["addr"])[0]
    groups: dict[str, int] = collections.Counter()
    for size, w in best.values():
        groups[w] += size
    return peak, groups


def main() -> int:
    name = sys.argv[1] if len(sys.argv) > 1 else "flashinfer"
    backend = registry.resolve(name)
    suite = parse_suite(yaml.safe_load(PREFIX_CASE.replace("count: 5", "count: 64").replace("high: 90", "high: 4000")
                                       .replace("query_len: 9", "query_len: 900")))
    dev = torch.device("cuda")
    opts = RunOptions(device=dev, time=False)
    for case in suite.cases:
        for variant in backend.default_variants():
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(dev)
            base = torch.cuda.memory_allocated(dev)
            torch.cuda.memory._record_memory_history(max_entries=200000)
            (row,) = list(iterate_case([Cell(case, backend, variant)], suite, opts))
            snap = torch.cuda.memory._snapshot()
            torch.cuda.memory._record_memory_history(enabled=None)
            peak = torch.cuda.max_memory_allocated(dev) - base
            est = memory.estimate(case, backend, variant, "cuda")
            trace = [ev for dt in snap.get("device_traces", []) for ev in dt]
            tpeak, groups = live_at_peak(trace)
            flag = "OK " if est.peak >= peak else "LOW"
            print(f"{flag} {case.name} {variant} {row.status}: measured peak {peak / 2**20:.1f} MiB, "
                  f"estimate {est.peak / 2**20:.1f} MiB {est.as_dict() and {k: round(v / 2**20, 1) for k, v in est.as_dict().items()}}")
            for w, size in sorted(groups.items(), key=lambda kv: -kv[1])[:12]:
                print(f"      {size / 2**20:9.1f} MiB  {w}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
