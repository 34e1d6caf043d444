"""``Runner(plan).run(reporter)``, the object under ``harness run``, ``harness gate`` and
``harness.api.run`` (harness/execute/runner.py): a run driven from Python with a reporter that
records what it is told, the quiet reporter, a plan the run cannot carry out, and the keyword
flags the API and the gate build their plans from."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from harness import api
from harness.cli.commands.run import pick_backends
from harness.cli.flags import UsageError
from harness.cli.run_flags import RunFlags, option_argv
from harness.execute.runner import QUIET, RunError, Runner
from harness.records.results import read_header, read_rows

TINY = ("suite: tiny\nbackends: [torch-math, sdpa]\ncases:\n  - name: c\n    num_heads: 4\n    num_kv_heads: 2\n"
        "    head_size: 32\n    block_size: 16\n    batch: [{kind: decode, count: 2, context_len: 40}]\n")


class Recorder:
    """A reporter that keeps every event, in order."""

    def __init__(self) -> None:
        self.events: list[tuple] = []

    def notice(self, text: str) -> None:
        self.events.append(("notice", text))

    def started(self, suite: str, cells: int, placement: str, out_dir: Path) -> None:
        self.events.append(("started", suite, cells, out_dir))

    @contextlib.contextmanager
    def progress(self, total: int, label: str):
        events = self.events

        class P:
            def cell_started(self, cell) -> None:
                events.append(("cell", cell.backend.name))

            def row_done(self, row) -> None:
                events.append(("row", row.backend, row.status))

        events.append(("progress", total, label))
        yield P()
        events.append(("progress done",))

    def summary(self, rows, out_dir: Path) -> None:
        self.events.append(("summary", len(rows)))

    def nothing_ran(self, hint: str) -> None:
        self.events.append(("nothing ran", hint))

    def failed(self, count: int, strict: bool) -> None:
        self.events.append(("failed", count, strict))


def _plan(tmp_path: Path, **flags):
    suite = tmp_path / "tiny.yaml"
    suite.write_text(TINY)
    values = {"suite": str(suite), "device": "cpu", "no_time": True, "no_isolation": True, "seed": 7,
              "out": str(tmp_path / "r"), **flags}
    return RunFlags.parse(values).resolve(pick_backends)


def test_a_run_from_python_reports_each_event_to_its_reporter(tmp_path, capsys):
    rec = Recorder()
    outcome = Runner(_plan(tmp_path), argv=["harness", "run", "tiny.yaml"]).run(rec)
    assert outcome.exit_code == 0 and outcome.out_dir == tmp_path / "r"
    assert sorted(r.backend for r in outcome.rows) == ["sdpa", "torch-math"]
    assert [r.backend for r in read_rows(outcome.out_dir)] == [r.backend for r in outcome.rows]
    kinds = [e[0] for e in rec.events]
    assert rec.events[0] == ("started", "tiny", 2, tmp_path / "r")
    assert kinds[:2] == ["started", "progress"] and kinds[-2:] == ["progress done", "summary"]
    assert sorted(kinds[2:-2]) == ["cell", "cell", "row", "row"]
    assert {e[1:] for e in rec.events if e[0] == "row"} == {("torch-math", "pass"), ("sdpa", "pass")}
    assert read_header(outcome.out_dir)["command"] == "harness run tiny.yaml"  # the argv given
    assert capsys.readouterr().out == ""  # the runner itself prints nothing


def test_the_quiet_reporter_says_nothing_and_strict_sets_the_exit_code(tmp_path, capsys):
    # every row passes: --strict leaves the exit code 0
    outcome = Runner(_plan(tmp_path, strict=True)).run(QUIET)
    assert outcome.exit_code == 0 and len(outcome.rows) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""
    assert read_header(outcome.out_dir)["command"].startswith("harness run ")  # default argv: the suite


def test_a_plan_the_run_cannot_carry_out_is_a_run_error_with_nothing_written(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(RunError, match="is a file"):
        Runner(_plan(tmp_path, out=str(blocker))).run(QUIET)
    with pytest.raises(RunError, match="lies under"):
        Runner(_plan(tmp_path, out=str(blocker / "sub"))).run(QUIET)
    assert blocker.read_text() == "x"
    with pytest.raises(RunError, match="nothing to run"):
        Runner(_plan(tmp_path, case=["no-such-case"])).run(QUIET)
    assert not (tmp_path / "r").exists()


def test_keyword_flags_read_as_the_command_line_reads_them():
    flags = RunFlags.from_options(suite="s.yaml", case="a", variant=("x.y=1", "x.z=2"), ray=True, model="m", tp=8,
                                  max_time="0.5", no_time=True, strict=False, out=Path("o"))
    assert flags.case == ["a"] and flags.variant == ["x.y=1", "x.z=2"]
    assert flags.ray == "local" and flags.tp == "8" and flags.max_time == 0.5 and flags.out == "o"
    assert flags.no_time and not flags.strict
    with pytest.raises(UsageError, match="not a harness run option"):
        RunFlags.from_options(suite="s.yaml", no_tmie=True)
    with pytest.raises(UsageError, match="--max-time: give it a value"):
        RunFlags.from_options(suite="s.yaml", max_time=True)
    with pytest.raises(UsageError, match="--seed"):
        RunFlags.from_options(suite="s.yaml", seed=-1)
    assert option_argv({"case": ["a", "b"], "no_time": True, "strict": False, "max_time": 0.5, "out": None}) == [
        "--case", "a", "--case", "b", "--no-time", "--max-time", "0.5"]


def test_the_api_passes_a_given_reporter_and_names_a_bad_keyword(tmp_path):
    suite = tmp_path / "tiny.yaml"
    suite.write_text(TINY)
    rec = Recorder()
    df = api.run(suite, out=tmp_path / "r", device="cpu", no_time=True, isolation=False, reporter=rec)
    assert len(df) == 2 and ("summary", 2) in rec.events
    with pytest.raises(api.HarnessError, match="no_tmie"):
        api.run(suite, out=tmp_path / "r2", device="cpu", no_tmie=True, isolation=False)
    assert not (tmp_path / "r2").exists()
