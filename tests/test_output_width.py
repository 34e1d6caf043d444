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

ROOT = Path(__file__).resolve().parent.parent


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
    assert len(text.splitlines()) < 60, "the default is one row per backend (and per distinct answer)"
    assert "capabilities" in text.splitlines()[0] and "--verbose" in text  # says where the rest is
    names = [b["name"] for b in cli.list_backends()]
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
