"""The small CPU run the report tests render (tests/report/test_report.py, tests/report/test_report_layout.py):
its suite, a module fixture that runs it once per test module, and row-file helpers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main

# Three batch/context points of one shape at two page sizes, a shared-prefix case for the
# cascade pair, and a softcap case sdpa does not support.
CPU_SUITE = """
suite: tiny-report
cases:
  - name: gqa
    num_heads: 4
    num_kv_heads: 2
    head_size: 32
    block_size: [16, 32]
    batch:
      - kind: decode
        count: [1, 3]
        context_len: [24, 96]
  - name: prefix
    num_heads: 4
    num_kv_heads: 2
    head_size: 32
    shared_prefix: {length: 32, groups: 1}
    batch:
      - {kind: decode, count: 4, context_len: 20}
  - name: softcap
    num_heads: 4
    num_kv_heads: 2
    head_size: 32
    softcap: 20.0
    batch:
      - kind: decode
        count: 2
        context_len: 30
"""



def _json_rows(folder: Path) -> list[dict]:
    """The rows of a results folder as plain JSON dicts (to derive new valid rows from)."""
    return [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines() if line.strip()]


def _write(rows: list[dict], folder: Path, header: dict | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if header is not None:
        (folder / "run.json").write_text(json.dumps(header))
    return folder


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("cpu-report")
    (d / "suite.yaml").write_text(CPU_SUITE)
    out = d / "res"
    rc = main(["run", str(d / "suite.yaml"), "--backends", "torch-math,sdpa,torch-cascade", "--device", "cpu",
               "--out", str(out), "--quiet", "--max-time", "0.05", "--report", "--no-isolation"])
    assert rc == 0
    return out
