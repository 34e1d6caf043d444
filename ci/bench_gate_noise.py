#!/usr/bin/env python
"""The gate's noise model on real CPU timings: a benchmark that prints its numbers, not a test.

    python ci/bench_gate_noise.py [--out DIR] [--threshold 25%] [--max-time 1]

Runs the same small suite three times with torch-math wrapped by tests/plugins/slowed.py
(every forward repeated: 2, 2, then 3 times: the third run does 1.5x the work), timed with CPU
process time on one thread, in this process. Prints, per row, NEW/BASE for the two runs of the
same code and for the 1.5x run, the noise model of each comparison and the verdicts of
``harness compare`` at the given threshold and at the default 5%. Exit 0 whatever it measures:
the numbers depend on this machine's load, which is why the test suite does not assert on them
(tests/test_gate_noise.py decides the same questions on synthesized samples)."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # harness, and the plugin under tests/plugins
os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])

import torch  # noqa: E402

from harness.cli import main as harness_main  # noqa: E402
from harness.compare import compare_paths, parse_threshold  # noqa: E402

SUITE = """
suite: slowgate
backends: [torch-math]
defaults: {dtype: bfloat16, kv_layout: NHD, causal: true, seed: 0}
cases:
  - name: decode
    num_heads: 16
    num_kv_heads: 4
    head_size: 128
    block_size: 16
    batch:
      - kind: decode
        count: [4, 8]
        context_len: [256, 512]
  - name: prefill
    num_heads: 8
    num_kv_heads: 8
    head_size: 64
    block_size: 16
    batch:
      - kind: prefill
        count: 1
        query_len: [64, 128]
"""
SLOWED = "plugins.slowed:SlowedTorchMath"
RUNS = (("base-1", 2), ("base-2", 2), ("slow-1.5x", 3))


def _summary(name: str, comp) -> str:
    m = comp.noise.get("cpu/process_time")
    ratios = sorted(d.ratio for d in comp.diffs if d.ratio is not None)
    speeds = {s: len(comp.of(s)) for s in ("slower", "ambiguous", "same", "noisy", "faster") if comp.of(s)}
    noise = ("-" if m is None else
             f"typical {m.median_ratio:.3f}, sd ±{(m.sigma or 0) * 100:.1f}%, rows' CI ±{(m.row_noise or 0) * 100:.1f}%"
             + (f", noise-dominated: {m.dominated}" if m.dominated else "")
             + (f", shared shift: {m.shared_shift}" if m.shared_shift else ""))
    return (f"{name}: NEW/BASE {ratios[0]:.3f}..{ratios[-1]:.3f} over {len(ratios)} rows; {speeds}; "
            f"{'REGRESSED' if comp.regressed else 'OK'}\n    noise model: {noise}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, help="keep the three runs here (default: a temporary folder)")
    p.add_argument("--threshold", default="25%", help="the gate threshold to judge at besides the default 5%%")
    p.add_argument("--max-time", default="1", help="sampling budget per cell, seconds (default 1)")
    args = p.parse_args(argv)
    root = args.out or Path(tempfile.mkdtemp(prefix="bench-gate-noise-"))
    root.mkdir(parents=True, exist_ok=True)
    suite = root / "slowgate.yaml"
    suite.write_text(SUITE)
    torch.set_num_threads(1)  # no idle-thread spinning in the process time
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"bench_gate_noise: {os.cpu_count()} cores, load average {load:.2f}, results under {root}")
    for name, repeat in RUNS:
        os.environ["ATTN_HARNESS_SLOW_REPEAT"] = str(repeat)
        t0 = time.monotonic()
        with contextlib.redirect_stdout(io.StringIO()):  # the run's own tables: only the numbers below are printed
            rc = harness_main(["run", str(suite), "--backends", SLOWED, "--out", str(root / name), "--device", "cpu",
                               "--quiet", "--no-isolation", "--cpu-clock", "process", "--min-samples", "10",
                               "--max-samples", "30", "--max-time", args.max_time, "--target-noise", "0.01"])
        print(f"  run {name} (forward x{repeat}): exit {rc}, {time.monotonic() - t0:.1f} s")
        if rc != 0:
            return rc
    threshold = parse_threshold(args.threshold)
    for t in sorted({threshold, 0.05}, reverse=True):
        print(f"threshold {t * 100:g}%:")
        for label, new in (("same code (base-2 vs base-1)", "base-2"), ("1.5x the work (slow-1.5x vs base-1)", "slow-1.5x")):
            print("  " + _summary(label, compare_paths(root / "base-1", root / new, threshold=t)))
    comp = compare_paths(root / "base-1", root / "slow-1.5x", threshold=threshold)
    print("per row, 1.5x the work:")
    for d in comp.diffs:
        print(f"  {d.name}: {d.ratio:.3f} {d.speed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
