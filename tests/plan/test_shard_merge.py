"""--shard K/N and `harness merge`: shards cover the suite exactly once, balanced by cost, and
their merge equals an unsharded run (ci/smoke.yaml on CPU)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.records.results import read_header, read_rows
from harness.plan.shard import parse_shard, partition, suite_hash

SMOKE = "ci/smoke.yaml"
FLAGS = ["--device", "cpu", "--no-time", "--no-isolation", "--quiet"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("shards")
    assert main(["run", SMOKE, *FLAGS, "--out", str(root / "whole")]) == 0
    for k in (1, 2, 3):
        assert main(["run", SMOKE, *FLAGS, "--shard", f"{k}/3", "--out", str(root / f"s{k}")]) == 0
    return root


def _verdicts(d: Path) -> dict:
    return {r.key: r.status for r in read_rows(d)}


def test_shards_partition_and_merge_equals_whole(runs: Path) -> None:
    whole = _verdicts(runs / "whole")
    parts = [_verdicts(runs / f"s{k}") for k in (1, 2, 3)]
    keys = [set(p) for p in parts]
    assert all(keys), "every shard has cells (smoke has more cases than 3)"
    assert not (keys[0] & keys[1]) and not (keys[0] & keys[2]) and not (keys[1] & keys[2])
    assert set().union(*keys) == set(whole)
    h = read_header(runs / "s2")
    assert h["shard"]["index"] == 2 and h["shard"]["count"] == 3
    assert {tuple(k.split("|")) for k in h["shard"]["cells"]} == keys[1]
    assert h["suite_hash"] == read_header(runs / "whole")["suite_hash"]
    assert main(["merge", *(str(runs / f"s{k}") for k in (3, 1, 2)), "-o", str(runs / "merged"), "--strict"]) == 0
    assert _verdicts(runs / "merged") == whole
    assert main(["compare", str(runs / "whole"), str(runs / "merged"), "--correctness-only"]) == 0
    assert main(["report", str(runs / "merged"), "-o", str(runs / "merged" / "report.html")]) == 0


def test_partition_is_stable_and_balanced() -> None:
    from harness import registry
    from harness.plan.balance import case_cost_s
    from harness.plan.cells import RunOptions, group_by_case, plan_cells
    from harness.spec import load_suite
    import torch

    suite = load_suite(SMOKE)
    backends = registry.resolve_many(suite.backends or list(registry.known_backends()))
    cells = plan_cells(suite, backends, RunOptions(device=torch.device("cpu"), time=False))
    a = partition(cells, 3, "cuda", True, 2.0)
    b = partition(list(reversed(cells)), 3, "cuda", True, 2.0)  # input order does not matter
    assert [{c.case.name for c in s} for s in a] == [{c.case.name for c in s} for s in b]
    costs = [case_cost_s(g, "cuda", True, 2.0) for g in group_by_case(cells)]
    loads = [sum(case_cost_s(g, "cuda", True, 2.0) for g in group_by_case(s)) for s in a]
    # LPT: the loads differ by at most the largest single case
    assert max(loads) - min(loads) <= max(costs) + 1e-9
    assert suite_hash(suite) == suite_hash(load_suite(SMOKE))


@pytest.mark.parametrize("bad", ["0/2", "3/2", "2", "a/b", "1/0"])
def test_bad_shard_exits_2(bad: str, tmp_path: Path, capsys) -> None:
    with pytest.raises(ValueError):
        parse_shard(bad)
    assert main(["run", SMOKE, *FLAGS, "--shard", bad, "--out", str(tmp_path / "x")]) == 2
    assert "--shard" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def _copy(src: Path, dst: Path, **header_changes) -> Path:
    dst.mkdir()
    (dst / "results.jsonl").write_text((src / "results.jsonl").read_text())
    h = json.loads((src / "run.json").read_text())
    h.update(header_changes)
    (dst / "run.json").write_text(json.dumps(h))
    return dst


@pytest.mark.parametrize("change, word", [({"suite_hash": "0" * 64}, "suite content"), ({"seed": 7}, "seeds"),
                                          ({"git_sha": "deadbeef"}, "harness versions"),
                                          ({"harness_version": "0.0.0"}, "harness versions"),
                                          ({"suite": "other"}, "suites")])
def test_merge_refuses_mixed_runs(runs: Path, tmp_path: Path, capsys, change: dict, word: str) -> None:
    other = _copy(runs / "s2", tmp_path / "other", **change)
    assert main(["merge", str(runs / "s1"), str(other), "-o", str(tmp_path / "m")]) == 2
    assert word in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


def test_merge_reports_missing_and_duplicated(runs: Path, tmp_path: Path, capsys) -> None:
    assert main(["merge", str(runs / "s1"), str(runs / "s1"), str(runs / "s2"), "-o", str(tmp_path / "m"), "--strict"]) == 1
    err = capsys.readouterr().err
    assert "missing" in err and "duplicated" in err
    h = read_header(tmp_path / "m")
    s1, s3 = read_header(runs / "s1")["shard"]["cells"], read_header(runs / "s3")["shard"]["cells"]
    assert h["merge_missing"] == [f"shard(s) 3/3: no folder given ({len(s3)} of {h['cells'] + len(s3)} cells missing)"]
    assert len(h["merge_duplicated"]) == len(s1)
    assert main(["merge", str(runs / "s1"), "-o", str(tmp_path / "m")]) == 2  # -o already holds results
    assert main(["merge", str(tmp_path / "nothing"), "-o", str(tmp_path / "m2")]) == 2


def test_merge_names_a_cell_missing_from_its_shard(runs: Path, tmp_path: Path) -> None:
    """An interrupted shard (its --resume leftover) lacks cells: merge names them."""
    part = _copy(runs / "s1", tmp_path / "part")
    lines = (part / "results.jsonl").read_text().splitlines(keepends=True)
    (part / "results.jsonl").write_text("".join(lines[:-1]))
    lost = json.loads(lines[-1])
    assert main(["merge", str(part), str(runs / "s2"), str(runs / "s3"), "-o", str(tmp_path / "m")]) == 0
    h = read_header(tmp_path / "m")
    assert len(h["merge_missing"]) == 1 and lost["backend"] in h["merge_missing"][0]
    assert lost["case"] in h["merge_missing"][0]
