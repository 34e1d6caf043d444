"""`harness diag interleave-paired`: both sampling orders in one process (A B B A), judged on each
process's own ratio."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from harness.records.results import read_rows
from harness.tools.diag.interleave import table
from harness.tools.diag.interleave_paired import main, order, paired_table


def test_every_mode_runs_twice_a_process_at_the_same_mean_position():
    hot = [("interleaved", "hot"), ("sequential", "hot")]
    assert order(0, hot) == hot + hot[::-1] and order(1, hot)[0] == ("sequential", "hot")
    four = [("interleaved", "hot"), ("sequential", "hot"), ("interleaved", "cold"), ("sequential", "cold")]
    for i in range(5):
        runs = order(i, four)
        assert sorted(runs) == sorted(four * 2)
        # A B B A: a drift linear in time weighs every mode alike
        assert {sum(k for k, m in enumerate(runs) if m == mode) for mode in four} == {len(runs) - 1}


def _procs(n: int, effect: float, level_sd: float, noise: float, seed: int = 1) -> list[dict]:
    """Synthetic processes: each has its own level (a factor shared by both orders, ``level_sd``),
    interleaved is ``effect`` times sequential, and every run has its own ``noise``."""
    rnd = random.Random(seed)
    procs = []
    for _ in range(n):
        level = 10.0 * (1 + rnd.gauss(0, level_sd))
        proc = {}
        for mode, f in (("interleaved-hot", effect), ("sequential-hot", 1.0)):
            proc[mode] = [{"r": {"median_us": level * f * (1 + rnd.gauss(0, noise))}} for _ in range(2)]
        procs.append(proc)
    return procs


def test_a_level_each_process_shares_cancels_in_the_pairs():
    # the H100's picture: processes a few % apart, runs within one process ~0.3% apart (seeded)
    procs = _procs(8, effect=1.0, level_sd=0.02, noise=0.003)
    paired = paired_table(procs, 0.01, ["hot"])
    assert paired["ok"], paired["verdict"]
    row = paired["rows"][0]["hot"]
    assert row["between"] > 0.02 and row["within"] < 0.01 and row["procs"] == 8
    lo, hi = row["ci"]
    assert lo <= 1 <= hi and hi - lo < 0.01  # the pairs resolve 1% where the processes' levels cannot
    # the same runs read as unpaired fresh-process runs: the interval is several times wider
    flat = {m: [run for p in procs for run in p[m]] for m in ("interleaved-hot", "sequential-hot")}
    lo_u, hi_u = table(flat, 0.01, ["hot"])["rows"][0]["ci_hot"]
    assert hi_u - lo_u > 2 * (hi - lo)
    # a 2% effect under the same process levels is found and resolved
    moved = paired_table(_procs(8, effect=1.02, level_sd=0.02, noise=0.003), 0.01, ["hot"])
    assert not moved["ok"] and moved["rows"][0]["hot"]["ratio"] == pytest.approx(1.02, abs=0.004)
    assert "do not resolve" not in moved["outside"][0] and moved["rows"][0]["hot"]["ci"][0] > 1.01


def test_a_process_without_both_orders_of_a_row_is_not_a_pass():
    procs = _procs(3, effect=1.0, level_sd=0.0, noise=0.0)
    for p in procs:
        p["sequential-hot"] = []
    t = paired_table(procs, 0.01, ["hot"])
    assert not t["ok"] and t["missing"] == ["r (hot)"] and not paired_table([], 0.01, ["hot"])["ok"]


def test_earlier_paired_experiments_pool_and_other_summaries_are_refused(tmp_path: Path, capsys):
    def experiment(name: str, procs: list[dict], paired: bool = True) -> Path:
        folder = tmp_path / name
        folder.mkdir()
        (folder / "summary.json").write_text(json.dumps({"paired": paired, "device": "X", "per_proc": procs}))
        return folder

    a = experiment("a", _procs(3, 1.0, 0.02, 0.002, seed=2))
    b = experiment("b", _procs(4, 1.0, 0.02, 0.002, seed=3))
    assert main(["--out", str(tmp_path / "pooled"), "--l2", "hot", "--read", str(a), "--read", str(b)]) == 0
    summary = json.loads((tmp_path / "pooled" / "summary.json").read_text())
    assert summary["paired"] and summary["rows"][0]["hot"]["procs"] == 7 and summary["devices"] == ["X", "X"]
    assert "| r | hot |" in (tmp_path / "pooled" / "interleave.md").read_text()
    # an unpaired experiment's summary (harness diag interleave) is not read as processes
    c = experiment("c", [], paired=False)
    assert main(["--out", str(tmp_path / "x"), "--l2", "hot", "--read", str(c)]) == 2
    assert "no readable summary.json of a `harness diag interleave-paired` run" in capsys.readouterr().err


@pytest.mark.slow
def test_one_cpu_process_runs_both_orders_twice_and_writes_the_table(tmp_path: Path):
    out = tmp_path / "paired"
    rc = main(["--out", str(out), "--procs", "1", "--l2", "hot", "--backends", "torch-math,sdpa",
               "--case", "mha[count=1]", "--", "--device", "cpu", "--max-time", "0.2"])
    assert rc == 0
    folders = sorted(p.name for p in (out / "proc-0").iterdir())
    assert folders == ["0-interleaved-hot", "1-sequential-hot", "2-sequential-hot", "3-interleaved-hot"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["procs"] == 1 and len(summary["per_proc"][0]["interleaved-hot"]) == 2
    assert {r["row"] for r in summary["rows"]} == {"mha[count=1] sdpa", "mha[count=1] torch-math"}
    assert all(r["hot"]["procs"] == 1 and r["hot"]["ratio"] > 0 for r in summary["rows"])
    # each run was sampled in its order
    for name in folders:
        rows = read_rows(out / "proc-0" / name)
        assert {r.timing.sampling for r in rows if r.timing is not None} == {name.split("-")[1]}


@pytest.mark.slow
def test_a_failing_run_ends_the_experiment_with_exit_2_and_no_verdict(tmp_path: Path, capsys):
    out = tmp_path / "paired"
    assert main(["--out", str(out), "--procs", "2", "--l2", "hot", "--backends", "torch-math",
                 "--case", "no-such-case", "--", "--device", "cpu"]) == 2
    assert "matches none of the" in capsys.readouterr().err
    assert (out / "proc-0.log").exists() and not (out / "summary.json").exists() and not (out / "proc-1.log").exists()
