"""SGLang's flags checked against its server_args.py as each PR left it: FA4 is named for prefill
only, and a setting that makes SGLang move the KV cache to page 128 says the rows were timed at
another page (issue: `sglang_flags('fa4', None)` gave `--attention-backend fa4`, which SGLang refuses)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness.analysis.engines import SGLANG_FACTS, sglang_flags, sglang_page_note
from harness.cli import main

ROOT = Path(__file__).resolve().parents[1]
GEMMA = ROOT / "tests" / "data" / "gemma-q2k"  # the gemma-2-9b/tp1/*/q2k rows of reports/h200/2026-12-01/models

# SGLang's python/sglang/srt/server_args.py, as each PR left it, for a non-MLA model on sm90:
# (PR, date, refuses `--attention-backend fa4` / `--decode-attention-backend fa4`,
#  page_size it forces under `--prefill-attention-backend fa4` (None: keeps --page-size), for MLA too)
SERVER_ARGS = [
    ("#10937", "2025-09", True, 128, True),    # FA4 for MHA prefill; `if prefill == "fa4": page_size = 128`
    ("#12801", "2025-11", True, 128, False),   # `... and not self.use_mla_backend()`
    ("#18442", "2026-02", False, None, False),  # sm90 paged FA4 (decode); the page-128 rule on sm100 only
]


def accepted(flags: str, refuses_whole: bool) -> bool:
    """Whether server_args of that era takes these flags (its `raise ValueError` for fa4)."""
    words = flags.split()
    pairs = dict(zip(words[::2], words[1::2]))
    return not (refuses_whole and "fa4" in (pairs.get("--attention-backend"), pairs.get("--decode-attention-backend")))


@pytest.mark.parametrize("pr, date, refuses_whole, page, mla_too", SERVER_ARGS)
@pytest.mark.parametrize("prefill, decode", [("fa4", None), ("fa4", "fa3"), ("fa4", "flashinfer"), ("fa3", None)])
def test_flags_are_accepted_by_every_server_args(pr, date, refuses_whole, page, mla_too, prefill, decode):
    flags = sglang_flags(prefill, decode)
    assert accepted(flags, refuses_whole), f"SGLang after {pr} ({date}) refuses {flags!r}"
    if prefill == "fa4":
        assert flags.startswith("--prefill-attention-backend fa4")
        note = sglang_page_note([flags], [16])
        assert note is not None and "page 128" in note and "page 16" in note and pr in note


def test_flags_and_facts():
    assert sglang_flags("fa4", None) == "--prefill-attention-backend fa4"
    assert sglang_flags("fa4", "fa4") == "--prefill-attention-backend fa4 --decode-attention-backend fa4"
    assert sglang_flags("fa3", "fa3") == "--attention-backend fa3"
    assert sglang_page_note(["--attention-backend fa3"], [16]) is None
    assert sglang_page_note(["--prefill-attention-backend fa4"], [128]) is None  # measured at SGLang's page
    assert any("#18442" in f and "prefill" in f for f in SGLANG_FACTS)


def test_recommend_sglang_on_the_gemma_fa4_rows(tmp_path, capsys):
    run = tmp_path / "gemma"
    shutil.copytree(GEMMA, run)
    assert main(["recommend", str(run), "--engine", "sglang", "--out", str(tmp_path / "rec")]) == 0
    md = capsys.readouterr().out
    assert "| --attention-backend fa4 |" not in md and "`--attention-backend fa4` over" not in md
    assert "| gemma-2-9b/tp1 | 21 local + 21 global | --prefill-attention-backend fa4 |" in md
    assert "measured at page 16" in md and "page 128" in md
    js = json.loads((tmp_path / "rec" / "sglang-per-model.json").read_text())
    assert js["single"]["flags"] == "--prefill-attention-backend fa4" and "page 16" in js["notes"][0]
