"""--ray on a local Ray cluster of CPU workers: the same rows as a local run, and a cell whose
isolated worker segfaults is recorded as an error row (never lost). Skipped without ray."""

from __future__ import annotations

from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="ray not installed: pip install 'attn-harness[ray]'")

from harness.cli import main  # noqa: E402
from harness.ray_executor import _local_pythonpath  # noqa: E402
from harness.results import read_header, read_rows  # noqa: E402

FLAGS = ["--device", "cpu", "--no-time", "--quiet"]
ONE_CASE = """
suite: crashy
cases:
  - name: gqa
    num_heads: 4
    num_kv_heads: 2
    head_size: 32
    batch:
      - kind: decode
        count: 3
        context_len: 40
"""


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": _local_pythonpath()}})
    yield
    ray.shutdown()


def test_ray_rows_equal_local_run(cluster, tmp_path: Path) -> None:
    assert main(["run", "ci/smoke.yaml", *FLAGS, "--no-isolation", "--out", str(tmp_path / "local")]) == 0
    assert main(["run", "ci/smoke.yaml", *FLAGS, "--ray", "--out", str(tmp_path / "ray")]) == 0
    local = {r.key: r.status for r in read_rows(tmp_path / "local")}
    got = read_rows(tmp_path / "ray")
    assert len(got) == len(local)
    assert {r.key: r.status for r in got} == local


def test_ray_segfault_costs_only_its_cell(cluster, tmp_path: Path) -> None:
    suite = tmp_path / "s.yaml"
    suite.write_text(ONE_CASE)
    out = tmp_path / "res"
    assert main(["run", str(suite), *FLAGS, "--ray", "--cell-timeout", "30", "--backends",
                 "torch-math,plugins.crashy:SegfaultBackend,sdpa", "--out", str(out)]) == 0
    rows = {r.backend: r for r in read_rows(out)}
    assert rows.keys() == {"torch-math", "crash-segv", "sdpa"}
    assert rows["crash-segv"].status == "error" and "SIGSEGV" in rows["crash-segv"].reason
    assert rows["torch-math"].status == "pass" and rows["sdpa"].status == "pass"
    assert read_header(out)["cells"] == 3


def test_ray_missing_exits_2_with_install_hint(monkeypatch, tmp_path: Path, capsys) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError, as on a machine without it
    assert main(["run", "ci/smoke.yaml", *FLAGS, "--ray", "--out", str(tmp_path / "x")]) == 2
    assert "attn-harness[ray]" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
