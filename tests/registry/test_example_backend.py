"""The backend example of docs/adding-a-backend.md (examples/naive_backend.py) is complete: run
the way the docs say (its folder on PYTHONPATH, a module:Class spec), it passes a subset of
the conformance suite on the CPU; and that subset catches the classic bug decode cells cannot
(a causal mask that is never applied: with one query token per request it changes nothing)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import subprocess_env
from harness.cli import main

ROOT = Path(__file__).resolve().parents[2]
# decode, prefill and mixed cells, MHA and GQA, fp16 and bf16, two block sizes: ~10 s on 2 cores
SUBSET = ["*[[]num_heads=4,head_size=64,dtype=float16,block_size=16]",
          "*[[]num_heads=16,head_size=64,dtype=bfloat16,block_size=64]"]


def _rows(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]


def _case_args() -> list[str]:
    return [a for p in SUBSET for a in ("--case", p)]


@pytest.mark.slow  # subprocess runs (~8-11 s): the slow job (CI) keeps the test command under 4 minutes
def test_the_example_backend_passes_the_conformance_subset_as_documented(tmp_path):
    out = tmp_path / "naive"
    r = subprocess.run(
        [sys.executable, "-m", "harness", "run", "suites/conformance.yaml", "--backends", "naive_backend:NaiveBackend",
         "--device", "cpu", "--no-time", "--quiet", "--out", str(out), *_case_args()],
        cwd=ROOT, env=subprocess_env(PYTHONPATH=str(ROOT / "examples")), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    rows = _rows(out)
    kinds = {row["case"].split("[")[0] for row in rows if row["status"] == "pass"}
    assert {"decode", "prefill", "mixed"} <= kinds
    assert all(row["status"] in ("pass", "unsupported", "skipped") for row in rows), \
        [(row["case"], row["status"], row["reason"]) for row in rows if row["status"] not in ("pass",)]
    assert all(row["backend"] == "naive" and row["check"]["lse_max_abs_err"] is not None
               for row in rows if row["status"] == "pass")


def test_the_conformance_subset_catches_a_missing_causal_mask_that_decode_cells_miss(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    out = tmp_path / "nomask"
    assert main(["run", "suites/conformance.yaml", "--backends", "plugins.buggy_naive:NoCausalMaskBackend",
                 "--device", "cpu", "--no-time", "--quiet", "--no-isolation", "--out", str(out), *_case_args()]) == 0
    by_kind: dict[str, set[str]] = {}
    for row in _rows(out):
        by_kind.setdefault(row["case"].split("[")[0], set()).add(row["status"])
    assert by_kind["decode"] == {"pass"}  # decode-only suites cannot see this bug
    assert by_kind["prefill"] == {"mismatch"} and "mismatch" in by_kind["mixed"]
