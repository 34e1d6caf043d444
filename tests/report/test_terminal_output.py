"""What `harness run` and `harness list --verbose` print at 80 columns: no line wider, no word
split across lines, case names by short id with a legend, times in a suitable unit, and the
verdict per case group at the end (the rules of `harness recommend`)."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from harness import cli
from harness.report.terminal import tables as terminal
from harness.records.results import Status, read_rows

SWEEP = """
suite: term
cases:
  - name: llama3-70b-tp8-decode-sweep
    num_heads: 8
    num_kv_heads: 2
    head_size: 32
    block_size: 16
    batch:
      - kind: decode
        count: [1, 2, 3]
        context_len: {dist: uniform, low: 10, high: 60}
  - name: small
    num_heads: 4
    num_kv_heads: 1
    head_size: 16
    block_size: 16
    batch:
      - kind: decode
        count: 2
        context_len: 20
"""


@pytest.fixture(scope="module")
def real_rows(tmp_path_factory):
    """Rows of a real run; the tests overwrite their timings (nothing depends on this machine's speed)."""
    d = tmp_path_factory.mktemp("term")
    (d / "s.yaml").write_text(SWEEP)
    assert cli.main(["run", str(d / "s.yaml"), "--device", "cpu", "--out", str(d / "r"), "--quiet", "--max-time", "0.01",
                     "--max-samples", "3", "--no-isolation", "--backends", "torch-math,sdpa,flashinfer"]) == 0
    return read_rows(d / "r"), d / "r"


def _timed(rows, medians: dict[str, float], spread: float):
    """The rows with synthesized timings: backend -> median (us), CI +-spread (fraction)."""
    out = []
    for r in rows:
        if str(r.status) == "pass":
            m = medians[r.backend]
            t = r.timing.model_copy(update={"median_us": m, "ci_low_us": m * (1 - spread),
                                            "ci_high_us": m * (1 + spread)})
            r = r.model_copy(update={"timing": t})
        out.append(r)
    return out


def _render(width: int, fn, *args) -> str:
    buf = io.StringIO()
    con = Console(file=buf, width=width, color_system=None)
    fn(*args, con)
    return buf.getvalue()


@pytest.mark.parametrize("us, text", [(43.62, "43.62 µs"), (43.6, "43.6 µs"), (999.4, "999.4 µs"),
                                      (1474928.2, "1.475 s"), (1475.0, "1.475 ms"),
                                      (14749.3, "14.75 ms"), (0.5, "0.5 µs"), (None, "")])
def test_times_have_3_to_4_significant_digits_in_a_unit(us, text):
    assert terminal.fmt_time(us) == text


def test_run_output_at_80_columns_has_whole_lines_and_words(real_rows):
    rows, out = real_rows
    rows = _timed(rows, {"torch-math": 1474928.2, "sdpa": 43.6}, 0.02)
    buf = io.StringIO()
    con = Console(file=buf, width=80, color_system=None)
    terminal.print_summary(rows, out, con, con)
    text = buf.getvalue()
    lines = text.splitlines()
    assert max(len(ln) for ln in lines) <= 80 and "…" not in text
    # One line per cell that ran: case ids, not wrapped case names.
    start = next(i for i, ln in enumerate(lines) if ln.strip().startswith("Cells that ran"))
    ran = [r for r in rows if str(r.status) == "pass"]
    assert len(ran) == 8
    body = lines[start + 4:start + 4 + len(ran)]
    assert all(ln.startswith("│") for ln in body) and not lines[start + 4 + len(ran)].startswith("│")
    ids = terminal.short_case_ids(rows)
    assert {ln.split("│")[1].strip() for ln in body} == {ids[r.case] for r in ran}
    assert {ids[r.case] for r in ran} == {"c1#1", "c1#2", "c1#3", "small"}
    # The legend names every case in full, each on its own line.
    for r in ran:
        if ids[r.case] != r.case:
            assert f"  {ids[r.case]} = {r.case}" in lines
    # Medians: 3-4 significant digits with their unit.
    assert "1.475 s" in text and "43.6 µs" in text and "1474928" not in text
    # No word is split across lines: every token of every name is whole somewhere.
    words = set(text.split())
    for r in rows:
        assert r.backend in words


def test_verdict_names_the_winner_with_margin_and_interval(real_rows):
    rows, out = real_rows
    rows = _timed(rows, {"torch-math": 300.0, "sdpa": 100.0}, 0.02)
    ids = {("sdpa", ""): "B", ("torch-math", ""): "C"}
    lines = terminal.verdict_lines(rows, ids)
    assert len(lines) == 2  # one per case group
    for ln in lines:
        assert re.search(r": B sdpa, 100(\.\d)? µs; \+\d+\.\d% \[\+\d+\.\d, \+\d+\.\d\] over C torch-math$", ln), ln
    assert lines[0].startswith("llama3-70b-tp8-decode-sweep (3 cases): ")
    assert lines[1].startswith("small (1 case): ")


def test_verdict_says_tie_when_the_intervals_overlap(real_rows):
    rows, _ = real_rows
    rows = _timed(rows, {"torch-math": 101.0, "sdpa": 100.0}, 0.10)
    lines = terminal.verdict_lines(rows, {("sdpa", ""): "B", ("torch-math", ""): "C"})
    assert all(": tie (the interval reaches 0): B sdpa" in ln and "C torch-math" in ln for ln in lines), lines


def _skipped(r, reason: str):
    return r.model_copy(update={"status": Status.SKIPPED, "reason": reason, "timing": None, "check": None,
                                "metrics": None})


def test_verdict_ranks_on_the_cases_a_backend_ran(real_rows):
    """A case every backend skipped (too large for this machine) leaves its group, as on a CPU run
    of the decode suite; a backend skipped where another one ran is still not a candidate."""
    rows, _ = real_rows
    rows = _timed(rows, {"torch-math": 300.0, "sdpa": 100.0}, 0.02)
    big = next(r.case for r in rows if r.case_group == "llama3-70b-tp8-decode-sweep")
    too_large = "too large for the CPU: 9.9 GFLOP > --cpu-max-gflop 0.5"
    rows = [_skipped(r, too_large) if r.case == big and r.status == Status.PASS else r for r in rows]
    ids = {("sdpa", ""): "B", ("torch-math", ""): "C"}
    lines = terminal.verdict_lines(rows, ids)
    assert lines[0].startswith("llama3-70b-tp8-decode-sweep (2 cases): B sdpa, 100 µs; ") and "over C torch-math" in lines[0]
    # The same where flashinfer is installed but cannot take a CPU cell (the GPU machine's rows):
    # unsupported is not run either.
    gpu_box = [r.model_copy(update={"status": Status.UNSUPPORTED, "reason": "runs on cuda only"})
               if r.backend == "flashinfer" else r for r in rows]
    assert terminal.verdict_lines(gpu_box, ids)[0] == lines[0]
    # sdpa alone skipped on a case torch-math ran: torch-math is the group's only candidate.
    other = next(r.case for r in rows if r.case_group == "llama3-70b-tp8-decode-sweep" and r.case != big)
    rows = [_skipped(r, too_large) if r.case == other and r.backend == "sdpa" else r for r in rows]
    lines = terminal.verdict_lines(rows, ids)
    assert lines[0] == ("llama3-70b-tp8-decode-sweep (2 cases): C torch-math, 300 µs; "
                        "the only one that passed and was timed"), lines[0]


def test_verdict_says_why_no_backend_won_a_group(real_rows):
    rows, _ = real_rows
    rows = _timed(rows, {"torch-math": 300.0, "sdpa": 100.0}, 0.02)
    small = [r for r in rows if r.case_group == "small"]
    assert len({r.case for r in small}) == 1
    broken = [r.model_copy(update={"status": Status.MISMATCH, "reason": "max abs err 9"})
              if r.case_group == "small" and r.status == Status.PASS else r for r in rows]
    line = terminal.verdict_lines(broken, {})[1]
    assert line.startswith("small: no backend passed the check with a timing (") and "failed the check (mismatch)" in line
    gone = [_skipped(r, "too large for the CPU") if r.case_group == "small" else r for r in rows]
    assert terminal.verdict_lines(gone, {})[1] == "small: no backend passed the check with a timing (every case was skipped)"


def test_run_ends_with_the_verdict(real_rows, monkeypatch):
    rows, out = real_rows
    rows = _timed(rows, {"torch-math": 300.0, "sdpa": 100.0}, 0.02)
    buf = io.StringIO()
    monkeypatch.setattr(cli, "console", Console(file=buf, width=80, color_system=None))
    monkeypatch.setattr(cli, "err_console", Console(file=io.StringIO(), width=80, color_system=None))
    cli.print_summary(rows, out)
    tail = buf.getvalue().strip().splitlines()
    assert tail[-1].lstrip().startswith("small (1 case): ") and "over" in tail[-1]
    assert any(ln.startswith("Verdict per case group") for ln in tail[-6:])


def test_list_verbose_never_splits_a_word_at_80_columns():
    backends = cli.list_backends()
    text = _render(80, terminal.print_backends_verbose, backends)
    assert max(len(ln) for ln in text.splitlines()) <= 80 and "…" not in text
    words = set(text.split())
    for b in backends:
        for v in b["variants"]:
            for w in (v["reason"] or "").split():
                assert w in words, w  # e.g. ModuleNotFoundError: whole, not ModuleNo/tFoundEr/ror
            for k in v["capabilities"]:
                assert any(t.startswith(f"{k}=") for t in words), k
            if v["label"]:
                pairs = v["label"].split(",")
                for i, pair in enumerate(pairs):  # fa_version=auto whole, not fa_versi/on=auto
                    assert f"{pair}{':' if i == len(pairs) - 1 else ','}" in words, pair
