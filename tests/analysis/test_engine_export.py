"""The answer per model and the engine exports (vLLM, SGLang) from hand-made typed rows: winners,
ties, the flags, one setting per model shape with its cost, and ``recommend --engine``."""

from __future__ import annotations

import math

import pytest
from helpers.typed_rows import CFG, check, host, timing

from harness.cli import main
from harness.analysis.per_model import answer_records, answers, engine_settings, model_of
from harness.analysis.engines import TABLE_ONLY, sglang_flags
from harness.records.header import RunHeader
from harness.records.results import ResultRow, ResultWriter, write_header

DECODE = {"num_reqs": 64, "num_tokens": 64, "num_decode": 64, "num_prefill": 0, "num_extend": 0,
          "max_query_len": 1, "max_seq_len": 4000, "mean_seq_len": 3000.0, "prefix_groups": 0}
PREFILL = {"num_reqs": 1, "num_tokens": 2048, "num_decode": 0, "num_prefill": 1, "num_extend": 0,
           "max_query_len": 2048, "max_seq_len": 2048, "mean_seq_len": 2048.0, "prefix_groups": 0}
FA3 = ("flash-attn", {"fa_version": 3})
FA2 = ("flash-attn", {"fa_version": 2})
FI = ("flashinfer", {"decode_tensor_cores": True, "prefill_backend": "auto"})


def row(cand, median, case, model, batch, half=0.2):
    backend, variant = cand
    return ResultRow(suite="s", case=case, backend=backend, variant=variant,
                     variant_label=",".join(f"{k}={v}" for k, v in sorted(variant.items())), status="pass",
                     config=CFG, batch=batch, check=check(True), host=host(),
                     timing=timing(median, median - half, median + half), case_group=model,
                     case_params={"model": model})


def rows():
    a, b = "llama-3.1-8b/tp1", "gemma-2-9b/tp1/local"
    return [
        row(FI, 10.0, "a-dec", a, DECODE), row(FA3, 15.0, "a-dec", a, DECODE), row(FA2, 40.0, "a-dec", a, DECODE),
        row(FI, 130.0, "a-pre", a, PREFILL), row(FA3, 100.0, "a-pre", a, PREFILL), row(FA2, 160.0, "a-pre", a, PREFILL),
        row(FA3, 20.0, "b-dec", b, DECODE), row(FI, 20.2, "b-dec", b, DECODE),
    ]


def test_model_of_prefers_the_model_shape_name():
    r = rows()[0]
    assert model_of(r) == "llama-3.1-8b/tp1"
    assert model_of(r.model_copy(update={"case_params": {}})) == "H32/KV8 D128 bfloat16"


def test_answer_rows_winner_margin_tie_and_flags():
    recs = answer_records(answers(rows(), tie=0.03))
    assert [(r["model shape"], r["workload"]) for r in recs] == [
        ("llama-3.1-8b/tp1", "decode"), ("llama-3.1-8b/tp1", "prefill"), ("gemma-2-9b/tp1/local", "decode")]
    dec, pre, tie = recs
    assert dec["winner"] == "flashinfer [decode_tensor_cores=True,prefill_backend=auto]"
    assert dec["margin [interval]"].startswith("+50.0% [")  # fa3 15 / flashinfer 10
    assert dec["vLLM"].startswith("--attention-backend FLASHINFER") and "VLLM_ATTENTION_BACKEND=FLASHINFER" in dec["vLLM"]
    assert dec["SGLang"] == "--decode-attention-backend flashinfer"
    assert pre["winner"] == "flash-attn [fa_version=3]"
    assert "--attention-backend FLASH_ATTN --attention-config '{\"flash_attn_version\": 3}'" in pre["vLLM"]
    assert "VLLM_FLASH_ATTN_VERSION=3" in pre["vLLM"]
    assert pre["SGLang"] == "--prefill-attention-backend fa3"
    assert tie["winner"].startswith("tie: flash-attn [fa_version=3] ~ flashinfer")


def test_vllm_one_backend_per_model_with_its_cost():
    per, single = engine_settings(rows(), "vllm")
    llama = next(s for s in per if s["model shape"] == "llama-3.1-8b/tp1")
    # FlashInfer: 10 * 130 < FA3: 15 * 100; it costs 30% on the prefill, sqrt(1.3) - 1 geomean.
    assert llama["flags"] == "--attention-backend FLASHINFER"
    assert llama["worst_cost_pct"] == pytest.approx(30.0)
    assert llama["geomean_cost_pct"] == pytest.approx((math.sqrt(1.3) - 1) * 100)
    assert single["cases"] == 3 and single["flags"] in ("--attention-backend FLASHINFER",
                                                         "--attention-backend FLASH_ATTN --attention-config "
                                                         "'{\"flash_attn_version\": 3}'")


def test_sglang_sets_prefill_and_decode_apart():
    per, single = engine_settings(rows(), "sglang")
    llama = next(s for s in per if s["model shape"] == "llama-3.1-8b/tp1")
    assert llama["flags"] == "--prefill-attention-backend fa3 --decode-attention-backend flashinfer"
    assert llama["worst_cost_pct"] == pytest.approx(0.0)
    gemma = next(s for s in per if s["model shape"] == "gemma-2-9b/tp1/local")
    assert gemma["flags"] == "--attention-backend fa3"  # only decode measured there


def test_engine_tables():
    assert TABLE_ONLY.sglang_setting("flash-attn", {"fa_version": 2}) is None  # SGLang has no FA2 backend
    assert TABLE_ONLY.sglang_setting("flash-attn", {"fa_version": 4})["attention_backend"] == "fa4"
    assert TABLE_ONLY.sglang_setting("flashinfer", {"prefill_backend": "fa3"})["exact"] is False
    assert TABLE_ONLY.sglang_setting("torch-math", {}) is None
    assert sglang_flags("fa3", "fa3") == "--attention-backend fa3"
    assert [TABLE_ONLY.from_vllm_name(n) for n in ("FLASH_ATTN", "flash", "FLASHINFER", "TRITON_ATTN", "FLASHMLA",
                                        "FLASH_ATTN_MLA", "FLASHINFER_MLA")] == [
        "flash-attn", "flash-attn", "flashinfer", None, "flashmla", "flash-attn-mla", None]


@pytest.mark.parametrize("engine, want", [("vllm", "--attention-backend FLASHINFER"),
                                          ("sglang", "--prefill-attention-backend fa3 --decode-attention-backend flashinfer")])
def test_recommend_engine_cli(tmp_path, capsys, engine, want):
    out = tmp_path / "run"
    with ResultWriter(out) as w:
        for r in rows():
            w.write(ResultRow.model_validate(r))
    write_header(out, RunHeader.model_validate({"device": {"type": "cuda", "name": "NVIDIA H200", "capability": "9.0", "driver": "570.1",
                                  "cuda_runtime": "12.8"}, "torch": "2.9.0",
                       "backends": {"flash-attn": {"available": True, "fa3": "3.0.0", "torch": "2.9.0"},
                                    "flashinfer": {"available": True, "flashinfer": "0.6.18"}}}))
    assert main(["recommend", str(out), "--engine", engine, "--out", str(tmp_path / "rec")]) == 0
    md = capsys.readouterr().out
    import json

    js = json.loads((tmp_path / "rec" / f"{engine}-per-model.json").read_text())
    assert js["engine"] == engine and js["per_model"][0]["flags"] == want
    assert (tmp_path / "rec" / f"{engine}-per-model.md").read_text().startswith("# ")
    assert "NVIDIA H200, driver 570.1, CUDA runtime 12.8, torch 2.9.0, fa3 3.0.0, flashinfer 0.6.18" in md
    assert f"| llama-3.1-8b/tp1 | {want} |" in md
    assert "Single setting over all shapes" in md and md.index("settings per model shape") < md.index("# ")  + 40


def test_report_opens_with_the_per_model_answer(tmp_path):
    from harness.report import build_sections, load

    out = tmp_path / "run"
    with ResultWriter(out) as w:
        for r in rows():
            w.write(ResultRow.model_validate(r))
    secs = build_sections(load([out]))
    assert secs[0].id == "answer-per-model"
    tables = [b for b in secs[0].blocks if b["kind"] == "table"]
    assert [t["title"] for t in tables] == ["Winner per model shape and workload", "vLLM: one setting per model shape",
                                            "SGLang: one setting per model shape"]
    html = "".join(str(t) for t in tables)
    assert "llama-3.1-8b/tp1" in html and "--decode-attention-backend flashinfer" in html
    assert "--prefill-attention-backend fa3 --decode-attention-backend flashinfer" in html
