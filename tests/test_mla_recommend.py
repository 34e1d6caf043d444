"""recommend's MLA answers from hand-made typed rows: the prefill (expanded) flag is vLLM's MLA
prefill choice, never a decode backend; one notion of cost (against the fastest passing backend,
as the winner tables); the SGLang answer does not repeat vLLM's sections."""

from __future__ import annotations

import pytest
from helpers.typed_rows import CFG, check, host, timing

from harness.analysis.per_model import answer_records, answers, engine_settings
from harness.records.results import ResultRow

MLA_DEC = {**CFG, "num_heads": 16, "num_kv_heads": 1, "head_size": 576, "v_head_size": 512, "block_size": 64,
           "attention_kind": "mla_absorbed"}
MLA_PRE = {**CFG, "num_heads": 16, "num_kv_heads": 16, "head_size": 192, "v_head_size": 128, "block_size": 64,
           "attention_kind": "mla_expanded"}
DECODE = {"num_reqs": 64, "num_tokens": 64, "num_decode": 64, "num_prefill": 0, "num_extend": 0,
          "max_query_len": 1, "max_seq_len": 4000, "mean_seq_len": 3000.0, "prefix_groups": 0}
PREFILL = {"num_reqs": 1, "num_tokens": 2048, "num_decode": 0, "num_prefill": 1, "num_extend": 0,
           "max_query_len": 2048, "max_seq_len": 2048, "mean_seq_len": 2048.0, "prefix_groups": 0}
FI = ("flashinfer-mla", {"mla_backend": "fa3"})
FA = ("flash-attn-mla", {"fa_build": "fa3-fwd"})
MODEL = "deepseek-v3/tp8"


def row(cand, median, case, cfg, batch):
    backend, variant = cand
    return ResultRow(suite="s", case=case, backend=backend, variant=variant,
                     variant_label=",".join(f"{k}={v}" for k, v in sorted(variant.items())), status="pass",
                     config=cfg, batch=batch, check=check(True), host=host(), timing=timing(median, median, median),
                     case_group=MODEL, case_params={"model": MODEL})


def rows():
    return [row(FI, 10.0, "dec", MLA_DEC, DECODE), row(FA, 18.93, "dec", MLA_DEC, DECODE),
            row(FI, 100.0, "pre", MLA_PRE, PREFILL), row(FA, 90.0, "pre", MLA_PRE, PREFILL)]


def test_prefill_answer_gets_the_mla_prefill_flag_and_decode_the_decode_backend():
    recs = {r["workload"]: r for r in answer_records(answers(rows(), tie=0.03))}
    assert recs["prefill"]["vLLM"] == """--attention-config '{"mla_prefill_backend": "FLASH_ATTN"}'"""
    assert "--attention-backend" not in recs["prefill"]["vLLM"]
    assert recs["prefill"]["SGLang"] == "--prefill-attention-backend fa3"
    assert recs["decode"]["vLLM"] == "no vLLM setting"  # vLLM's FLASHINFER_MLA is the Blackwell kernel
    assert recs["decode"]["SGLang"] == "--decode-attention-backend flashinfer"


def test_one_notion_of_cost_against_the_fastest_passing_backend():
    per, _ = engine_settings(rows(), "vllm")
    # vLLM runs only flash-attn-mla here: its decode costs +89.3% against flashinfer-mla, not "+0.0%".
    (s,) = per
    assert s["worst_cost_pct"] == pytest.approx(89.3)


def test_sglang_answer_leaves_out_vllms_sections(tmp_path, capsys):
    from harness.cli import main
    from harness.records.header import RunHeader
    from harness.records.results import ResultWriter, write_header

    with ResultWriter(tmp_path) as w:
        for r in rows():
            w.write(r)
    write_header(tmp_path, RunHeader.model_validate({"device": {"name": "NVIDIA H200", "capability": "9.0"}}))
    assert main(["recommend", str(tmp_path), "--engine", "sglang"]) == 0
    out = capsys.readouterr().out
    assert "## vLLM's default choice" not in out and "One setting for a whole deployment (vLLM)" not in out
    assert main(["recommend", str(tmp_path)]) == 0
    assert "## vLLM's default choice" in capsys.readouterr().out
