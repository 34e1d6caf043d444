"""The pytest-benchmark integration end to end on one CPU cell: pytest-benchmark's JSON holds
the harness timer's samples (one round each), not a wall clock of its own."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import subprocess_env

ROOT = Path(__file__).resolve().parents[2]


def test_benchmark_json_holds_the_harness_samples(tmp_path):
    out = tmp_path / "bench.json"
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "harness.pytest_plugin",
         "--bench-suite", "ci/smoke.yaml", "--bench-device", "cpu", "--bench-backends", "torch-math,sdpa",
         "--bench-case", "softcap-sinks", f"--benchmark-json={out}", "-p", "no:cacheprovider", "-rs"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env=subprocess_env())
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "1 passed, 1 skipped" in r.stdout and "logits softcap not supported" in r.stdout
    data = json.loads(out.read_text())
    (bench,) = data["benchmarks"]
    info, stats = bench["extra_info"], bench["stats"]
    assert info["backend"] == "torch-math" and info["case"] == "softcap-sinks"
    assert info["timer"].startswith("harness wall_clock")
    # pytest-benchmark's median of the replayed rounds is the harness median (same samples).
    assert stats["rounds"] >= 3
    assert abs(stats["median"] * 1e6 - info["harness_median_us"]) <= 1e-6 * info["harness_median_us"] + 1e-3
    assert "harness_clock" in bench["options"]["timer"]


def test_bad_suite_is_one_usage_error():
    r = subprocess.run([sys.executable, "-m", "pytest",
                        "--bench-suite", "no/such.yaml", "-q", "-p", "no:cacheprovider"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "no such suite file" in (r.stdout + r.stderr)
