"""What the harness prints must be readable at 80 columns (pipes, CI logs) and at 120: no
ellipsis, every number and every variant name whole."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from conftest import subprocess_env
from harness import cli
from harness.cli.summary import fmt
from harness.report.terminal import tables as terminal

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def render(monkeypatch):
    """Run a CLI function with its console fixed at WIDTH columns (no terminal, no colour)."""
    def go(width: int, fn, *args):
        buf = io.StringIO()
        monkeypatch.setattr(cli, "console", Console(file=buf, width=width, color_system=None))
        monkeypatch.setattr(cli, "err_console", Console(file=buf, width=width, color_system=None))
        rc = fn(*args)
        return rc, buf.getvalue()
    return go


def _unwrapped(text: str) -> str:
    """Table cells folded over several lines, joined back: strips the borders and padding."""
    cells = []
    for line in text.splitlines():
        cells.extend(c.strip() for c in line.replace("┃", "│").split("│"))
    return "".join(c for c in cells if c)


@pytest.mark.parametrize("width", [80, 120])
def test_list_is_compact_and_whole(render, width):
    rc, text = render(width, cli.main, ["list"])
    assert rc == 0 and "…" not in text
    assert max(len(line) for line in text.splitlines()) <= width
    # One row per backend and distinct answer (the variants that share it share the row), however
    # many lines the machine's reasons and versions wrap over (a GPU box lists more versions).
    backends = cli.list_backends()
    answers = sum(len({(v["available"], v["reason"] if not v["available"] else tuple(sorted(v["versions"].items())))
                       for v in b["variants"]}) or 1 for b in backends)
    entries = [line for line in text.splitlines() if line.count("│") > 3 and line.split("│")[3].strip() in ("yes", "no")]
    assert len(entries) == answers < sum(len(b["variants"]) or 1 for b in backends)
    assert "capabilities" in text.splitlines()[0] and "--verbose" in text  # says where the rest is
    names = [b["name"] for b in backends]
    for name in names:
        assert any(line.split("│")[1].strip() == name for line in text.splitlines() if line.count("│") > 2), name


def test_list_verbose_and_json_carry_the_capabilities(render, capsys):
    rc, text = render(120, cli.main, ["list", "--verbose"])
    assert rc == 0 and "…" not in text and "head_sizes" in _unwrapped(text)
    assert cli.main(["list", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    math = {b["name"]: b for b in data}["torch-math"]
    assert math["variants"][0]["available"] and "cpu" in math["variants"][0]["capabilities"]["devices"]


def test_list_in_a_pipe_defaults_to_80_columns():
    r = subprocess.run([sys.executable, "-m", "harness.cli", "list"], cwd=ROOT, capture_output=True, text=True,
                       env=subprocess_env(COLUMNS="80", TERM="dumb"))
    assert r.returncode == 0 and "…" not in r.stdout
    assert max(len(line) for line in r.stdout.splitlines()) <= 80


LONG = """
suite: wide
cases:
  - name: a-rather-long-case-name-as-model-sweeps-make-them
    num_heads: 8
    num_kv_heads: 2
    head_size: 32
    block_size: [16, 32]
    batch:
      - kind: decode
        count: [1, 3]
        context_len: {dist: uniform, low: 10, high: 60}
"""


@pytest.fixture(scope="module")
def wide_rows(tmp_path_factory):
    """Real rows: CPU backends timed, plus GPU backends' variants (skipped here, long labels)."""
    from harness.records.results import read_rows

    d = tmp_path_factory.mktemp("wide")
    (d / "wide.yaml").write_text(LONG)
    out = d / "res"
    assert cli.main(["run", str(d / "wide.yaml"), "--device", "cpu", "--out", str(out), "--quiet",
                     "--backends", "torch-math,sdpa,flash-attn,flashinfer,plugins.crashy:NaNBackend",
                     "--max-time", "0.05", "--no-isolation"]) == 0
    return read_rows(out), out


def _ran_cells(text: str) -> dict[str, list[str]]:
    """case name -> the "Cells that ran" table's other cells: one line per cell (names never
    wrap), the case shown by its short id and named in full in the legend below the table."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.strip().startswith("Cells that ran"))
    rows, i = [], start + 4
    while lines[i].startswith("│"):
        rows.append([p.strip() for p in lines[i].split("│")[1:-1]])
        i += 1
    legend: dict[str, str] = {}
    i += 1
    while i < len(lines) and lines[i].startswith("  ") and " =" in lines[i]:
        cid, _, name = lines[i].strip().partition(" =")
        if not name.strip():  # a name too long for the line starts on the next one
            i += 1
            name = lines[i]
        legend[cid] = name.strip()
        i += 1
    cells: dict[str, list[str]] = {}
    for r in rows:
        cells.setdefault(legend.get(r[0], r[0]), []).append(" ".join(r[1:]))
    return cells


@pytest.mark.parametrize("width", [80, 120])
def test_run_summary_fits_and_keeps_every_number_and_name_whole(render, wide_rows, width):
    rows, out = wide_rows
    rc, text = render(width, lambda: cli.print_summary(rows, out) or 0)
    assert "…" not in text
    table_lines = [ln for ln in text.splitlines() if ln[:1] in "┏┃┡│└"]
    assert max(len(ln) for ln in table_lines) <= width
    # every variant's full name in the legend: on one line, or (longer than the line) on the
    # lines after its id, broken only after a comma between axis=value pairs
    import re

    legend = re.sub(r" =\n +", " = ", re.sub(r",\n +", ",", text))
    variants = {(r.backend, r.variant_label) for r in rows if r.variant_label}
    assert len(variants) >= 4
    for b, v in variants:
        assert any(f" = {b} {v}" in ln for ln in legend.splitlines()), (b, v)
    # every ran cell on one line, its case named whole in the legend, every number intact
    cells = _ran_cells(text)
    ran = [r for r in rows if str(r.status) in ("pass", "mismatch")]
    assert len(ran) == 12 and sum(map(len, cells.values())) == 12
    for r in ran:
        nums = [terminal.fmt_time(r.timing.median_us), fmt(r.metrics.tflops, ".3g"),
                fmt(r.metrics.tbps, ".3g"), fmt(r.check.max_abs_err, ".2e")]
        assert r.case in cells, (r.case, list(cells))
        assert any(c.endswith(" ".join(nums)) for c in cells[r.case]), (nums, cells[r.case])


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("suite", sorted(p.name for p in (ROOT / "suites").glob("*.yaml")))
def test_validate_table_fits_and_keeps_case_names_and_figures_whole(render, suite, width):
    from harness.spec import load_suite

    rc, text = render(width, cli.main, ["validate", str(ROOT / "suites" / suite)])
    assert rc == 0 and "…" not in text
    assert max(len(ln) for ln in text.splitlines()) <= width
    rows = []
    for ln in text.splitlines():
        if not ln.startswith("│"):
            continue
        parts = [p.strip() for p in ln.split("│")[1:-1]]
        if parts[1]:  # the heads column is filled on a row's first line
            rows.append([parts[0], *parts[1:]])
        else:
            rows[-1][0] += parts[0]
    cases = load_suite(ROOT / "suites" / suite).cases
    assert [r[0] for r in rows] == [c.name for c in cases]
    for r, c in zip(rows, cases):
        assert r[1] == f"{c.num_heads}/{c.num_kv_heads}" and r[6] == f"{c.max_seq_len_bound():,}"
