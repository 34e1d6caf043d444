"""Call forms in verdicts: recommend ranks the vllm form by default, --call-form selects, and the
call-form gap lists pairs that differ beyond the noise (recommend output and the report)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from harness.analysis.callform_gap import gap_records, gaps, only_call_form
from harness.cli import main
from harness.analysis.recommend import inputs_of, policy, recommend_rows
from harness.report import load, render_html
from harness.records.results import ResultRow
from helpers.typed_rows import CFG, check, host, timing

BATCH = {"num_reqs": 64, "num_tokens": 64, "num_decode": 64, "num_prefill": 0, "num_extend": 0,
         "max_query_len": 1, "max_seq_len": 4000, "mean_seq_len": 3000.0, "prefix_groups": 0}
FI = {"decode_tensor_cores": True, "prefill_backend": "auto"}


def row(backend: str, median: float, variant: dict, *, case: str = "c1", half: float = 0.2) -> ResultRow:
    return ResultRow(suite="s", case=case, backend=backend, variant=variant,
                     variant_label=",".join(f"{k}={v}" for k, v in sorted(variant.items())), status="pass",
                     config=CFG, batch=BATCH, check=check(True), host=host(),
                     timing=timing(median, median - half, median + half))


def fa(v: int, form: str) -> dict:
    return {"fa_version": v, "call_form": form}


# FA3 wins in its vllm form, FA4 only in its fastest form; flashinfer has no call_form on this row.
ROWS = [row("flash-attn", 100.0, fa(3, "vllm")), row("flash-attn", 120.0, fa(3, "fastest")),
        row("flash-attn", 110.0, fa(4, "vllm")), row("flash-attn", 80.0, fa(4, "fastest")),
        row("flashinfer", 105.0, FI)]


def rec_of(rows: list[dict], form: str = "vllm"):
    return recommend_rows(inputs_of(rows, [("<test>", {"device": {"name": "NVIDIA H200", "capability": "9.0"}})], form))


def test_default_ranks_vllm_form_rows_and_rows_without_the_axis_only():
    rec = rec_of(ROWS)
    (res,) = rec.measured
    names = [c.name for c in res.ranked]
    assert names == ["flash-attn [call_form=vllm,fa_version=3]", "flashinfer [decode_tensor_cores=True,prefill_backend=auto]",
                     "flash-attn [call_form=vllm,fa_version=4]"]
    assert policy(rec)["call_form"] == "vllm" and policy(rec)["rules"][0]["use"]["variant"] == fa(3, "vllm")
    assert any("Call form: `vllm`" in n and "left out: 2" in n for n in rec.inputs.notes)


def test_call_form_fastest_changes_the_winner():
    rec = rec_of(ROWS, "fastest")
    (res,) = rec.measured
    assert res.winner.variant == fa(4, "fastest")
    assert {c.name for c in res.ranked} == {"flash-attn [call_form=fastest,fa_version=3]",
                                           "flash-attn [call_form=fastest,fa_version=4]",
                                           "flashinfer [decode_tensor_cores=True,prefill_backend=auto]"}
    assert len(rec_of(ROWS, "any").measured[0].ranked) == 5


def test_a_row_standing_for_both_forms_counts_under_either():
    r = row("flashinfer", 90.0, {**FI, "call_form": "vllm"}).model_copy(
        update={"variant_axes": {"not_applied": {"call_form": ["fastest", "vllm"]}}})
    assert only_call_form([r], "fastest") == [r]
    assert only_call_form([row("flashinfer", 90.0, {**FI, "call_form": "vllm"})], "fastest") == []


def test_gap_lists_a_pair_20pct_apart_and_counts_one_half_a_pct_apart():
    rows = [row("flash-attn", 100.0, fa(3, "vllm"), case="far"), row("flash-attn", 120.0, fa(3, "fastest"), case="far"),
            row("flash-attn", 100.0, fa(3, "vllm"), case="near", half=0.05),
            row("flash-attn", 100.5, fa(3, "fastest"), case="near", half=0.05),
            row("flashinfer", 50.0, FI, case="far")]  # one form only: no pair
    gs = gaps(rows, 0.03)
    assert [(g.case, g.tie) for g in gs] == [("s/far", ""), ("s/near", "band")]
    (rec,) = gap_records(gs)
    assert rec["case"] == "s/far" and rec["other variant axes"] == "fa_version=3" and rec["faster form"] == "vllm"
    assert rec["fastest / vllm [interval]"] == "1.200 [1.196, 1.204]"
    # The fastest form 20% faster than the vllm form is listed too, and overlapping CIs are noise.
    fast = gaps([row("flash-attn", 100.0, fa(4, "vllm")), row("flash-attn", 80.0, fa(4, "fastest"))], 0.03)
    assert fast[0].tie == "" and gap_records(fast)[0]["faster form"] == "fastest"
    wide = gaps([row("flash-attn", 100.0, fa(4, "vllm"), half=10), row("flash-attn", 95.0, fa(4, "fastest"), half=10)], 0.03)
    assert wide[0].tie == "noise" and gap_records(wide) == []


def _write(folder: Path, rows: list[ResultRow]) -> Path:
    folder.mkdir(parents=True)
    (folder / "results.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in rows))
    (folder / "run.json").write_text(json.dumps({"device": {"name": "NVIDIA H200", "capability": "9.0"}}))
    return folder


def test_recommend_cli_says_the_form_and_prints_the_gap(tmp_path, capsys):
    d = _write(tmp_path / "r", ROWS)
    assert main(["recommend", str(d), "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "Call form: `vllm`" in out and "## Call-form gap" in out
    assert "2 case x backend x variant pair(s) timed in both call forms: 2 differ beyond the noise" in out
    assert json.loads((tmp_path / "o" / "vllm.json").read_text().replace("\n", ""))["call_form"] == "vllm"
    assert main(["recommend", str(d), "--call-form", "fastest", "--engine", "vllm"]) == 0
    out = capsys.readouterr().out
    assert "Call form: `fastest`" in out
    assert re.search(r"\| flash-attn \[call_form=fastest,fa_version=4\] \|", out)


def test_report_shows_the_gap_section_and_the_answer_names_the_form(tmp_path):
    d = _write(tmp_path / "r", ROWS)
    secs = dict(re.findall(r'<section id="([\w-]+)"[^>]*>(.*?)</section>', render_html(load([d])), flags=re.S))
    gap = secs["callform-gap"]
    assert "differ beyond the noise" in gap and "fa_version=4" in gap and "0.727" in gap
    # These rows come from no model (the per-model answer says so); the recommendation names the form.
    assert "made from a model" in secs["answer-per-model"]
    assert "call_form=vllm" in secs["recommend"] and "call_form=fastest" not in secs["recommend"]


def test_report_names_the_argument_behind_the_gap_from_the_diagnostic_beside_the_rows(tmp_path):
    d = _write(tmp_path / "r", ROWS)
    diag = {"results": [{"shape": "orient-mqa-b128-2k-p16", "lib": "fa4", "vllm_args": {"responsible": {
        "argument": "query layout (varlen q + cu_seqlens_q, max_seqlen_q)",
        "why": "with query layout as in the plain call the vllm form loses 91% of its +11.4% over the plain call"}}},
        {"shape": "orient-gqa-b16-32k-p64", "lib": "fa4", "vllm_args": {"responsible": {
            "argument": None, "why": "the vllm form is +0.4% from the plain call, within the noise"}}}]}
    (d / "callform-diag.json").write_text(json.dumps(diag))
    secs = dict(re.findall(r'<section id="([\w-]+)"[^>]*>(.*?)</section>', render_html(load([d])), flags=re.S))
    gap = secs["callform-gap"]
    assert "query layout (varlen q + cu_seqlens_q, max_seqlen_q)" in gap and "loses 91%" in gap
    assert "none named" in gap and "within the noise" in gap
    (d / "callform-diag.json").write_text("{not json")
    gap = dict(re.findall(r'<section id="([\w-]+)"[^>]*>(.*?)</section>', render_html(load([d])), flags=re.S))[
        "callform-gap"]
    assert "not readable JSON" in gap
