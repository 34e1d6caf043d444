"""--ray on a local Ray cluster of CPU workers: the same rows as a local run, a cell whose
isolated worker segfaults is recorded as an error row, and a case whose actor is lost midway
(SIGKILL, ray.kill) runs again on another actor or, retries spent, is recorded (never lost).
Skipped without ray."""

from __future__ import annotations

from pathlib import Path

import pytest

from importlib.util import find_spec

from harness.cli import main
from harness.execute.ray_cluster import _local_pythonpath
from harness.records.results import read_header, read_rows

# Ray is imported by the cluster fixture, not at collection: importing it costs ~1.5 s in every
# test process, most of which never run these tests.
# slow: a local Ray cluster per test, seconds each (CI runs them with -m slow).
pytestmark = [pytest.mark.skipif(find_spec("ray") is None, reason="ray not installed: pip install 'attn-harness[ray]'"),
              pytest.mark.slow]

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
    import ray

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
    # One long-lived actor per CPU slot (2 here) keeps one worker for all its cases: the first
    # version started a worker per case (8 cases, 8 pids), paying the imports every time.
    assert len({r.case for r in got}) > 2 and len({r.worker.pid for r in got}) <= 2


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


# Four cases of slow cells (0.25 s a call): each case is in flight for a few seconds, long
# enough to lose its actor midway.
FOUR_CASES = "suite: lost\ncases:\n" + "".join(f"""
  - name: c{i}
    num_heads: 4
    num_kv_heads: 2
    head_size: 32
    batch:
      - kind: decode
        count: 2
        context_len: {24 + 8 * i}
""" for i in range(4))


def _plan(tmp_path: Path):
    import torch
    import yaml

    from harness import registry
    from harness.execute.local import ExecOptions
    from harness.plan.cells import RunOptions, plan_cells
    from harness.spec import parse_suite

    suite = parse_suite(yaml.safe_load(FOUR_CASES))
    opts = RunOptions(device=torch.device("cpu"), time=False)
    backends = registry.resolve_many(["torch-math", "plugins.crashy:SlowBackend"])
    return suite, opts, plan_cells(suite, backends, opts), ExecOptions(devices=["cpu"], cell_timeout=60)


def _run_and_lose_an_actor(tmp_path: Path, how: str, max_retries: int):
    """Run on two actors; when the first case's rows are back (both actors busy), lose one
    actor for real: SIGKILL its process (a dead worker or node) or ray.kill it."""
    import os
    import signal

    from harness.execute.ray_cluster import RayExecutor

    import ray

    suite, opts, cells, exec_opts = _plan(tmp_path)
    ex = RayExecutor(suite, opts, exec_opts, actors=2, max_retries=max_retries)
    rows, killed = [], None
    for row in ex.run(cells):
        rows.append(row)
        if killed is None:
            killed = ex.actor_pids[0]
            if how == "sigkill":
                os.kill(killed, signal.SIGKILL)
            else:
                ray.kill(ex.actors[killed])
    return suite, cells, rows, ex


@pytest.mark.parametrize("how", ["sigkill", "ray.kill"])
def test_lost_actor_case_is_retried_and_rows_equal_a_local_run(cluster, tmp_path: Path, how: str) -> None:
    from harness.execute.local import ExecOptions, LocalExecutor
    from harness.plan.resume import cell_key

    suite, cells, rows, ex = _run_and_lose_an_actor(tmp_path, how, max_retries=2)
    assert len(ex.lost_actors) == 1, ex.lost_actors  # the kill really hit a busy actor
    _, opts, _, _ = _plan(tmp_path)
    local = {r.key: r.status for r in LocalExecutor(suite, opts, ExecOptions(devices=["cpu"], isolation=False)).run(cells)}
    assert len(rows) == len(cells) == len({r.key for r in rows})  # every cell once: none lost, none twice
    assert {r.key: r.status for r in rows} == local
    assert set(local.values()) == {"pass"}
    assert {cell_key(suite, c) for c in cells} == set(local)


def test_lost_actor_without_retries_records_its_cells(cluster, tmp_path: Path) -> None:
    suite, cells, rows, ex = _run_and_lose_an_actor(tmp_path, "sigkill", max_retries=0)
    assert len(rows) == len(cells) == len({r.key for r in rows})  # recorded, never lost
    lost = [r for r in rows if r.status == "error"]
    assert lost and len({r.case for r in lost}) == 1  # exactly the case that was in flight
    assert all("ray actor lost 1 times" in r.reason for r in lost)
    assert all(r.status == "pass" for r in rows if r.case != lost[0].case)


def test_cuda_run_on_a_cluster_without_gpus_is_error_rows_not_a_traceback(cluster) -> None:
    import torch
    import yaml

    from harness import registry
    from harness.execute.local import ExecOptions
    from harness.execute.ray_cluster import RayExecutor
    from harness.plan.cells import RunOptions, plan_cells
    from harness.spec import parse_suite

    suite = parse_suite(yaml.safe_load(ONE_CASE))
    opts = RunOptions(device=torch.device("cuda"), time=False)  # the cluster here has CPUs only
    cells = plan_cells(suite, registry.resolve_many(["torch-math", "sdpa"]), opts)
    rows = list(RayExecutor(suite, opts, ExecOptions(devices=["cuda:0"])).run(cells))
    assert len(rows) == len(cells) == 2
    assert all(r.status == "error" and r.reason == "--ray: the Ray cluster has no GPU" for r in rows)
