"""harness recommend: ranking, ties, noise, coverage, GPU mixing, vLLM's default rule, the
fitted cascade rule on the committed H200 data, and --suggest producing a valid suite."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness import cli
from harness.analysis.recommend import Inputs, RecommendError, load_inputs, policy, recommend_rows, vllm_export
from harness.records.results import Call, ResultRow, ResultWriter, write_header
from harness.analysis.selection_rules import vllm_default, vllm_flash_attn_version
from helpers.typed_rows import CFG, check, host, timing

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "tests" / "data" / "h200" / "session-a"  # copies of reports/h200/2026-11-29 rows

BATCH = {"num_reqs": 64, "num_tokens": 64, "num_decode": 64, "num_prefill": 0, "num_extend": 0,
         "max_query_len": 1, "max_seq_len": 4000, "mean_seq_len": 3000.0, "prefix_groups": 0}


def row(backend: str, median: float | None, *, variant: dict | None = None, case: str = "c1", half: float = 0.5,
        status: str = "pass", cfg: dict | None = None, batch: dict | None = None) -> ResultRow:
    variant = variant or {}
    ran = status in ("pass", "mismatch")
    t = None if median is None or not ran else timing(median, median - half, median + half)
    return ResultRow(suite="s", case=case, backend=backend, variant=variant,
                     variant_label=",".join(f"{k}={v}" for k, v in sorted(variant.items())), status=status,
                     reason="" if status == "pass" else f"test: {status}",
                     config={**CFG, **(cfg or {})}, batch={} if status == "unsupported" else {**BATCH, **(batch or {})},
                     check=check(status == "pass") if ran else None, host=host() if ran else None,
                     timing=t)


def rec_of(rows: list[dict], tie: float = 0.03, capability: str | None = "9.0"):
    return recommend_rows(Inputs(rows, ["<test>"], "NVIDIA H200", capability), tie)


FA3 = {"fa_version": 3}
FA4 = {"fa_version": 4}
FI = {"decode_tensor_cores": True, "prefill_backend": "auto"}


def test_ranking_picks_fastest_and_reports_margin_with_interval():
    rows = [row("flash-attn", 100.0, variant=FA3), row("flash-attn", 130.0, variant=FA4),
            row("flashinfer", 110.0, variant=FI)]
    rec = rec_of(rows)
    (res,) = rec.measured
    assert res.winner.name == "flash-attn [fa_version=3]"
    assert res.runner_up.name == "flashinfer [decode_tensor_cores=True,prefill_backend=auto]"
    r = res.ratios[res.runner_up.name]
    assert r.pct == pytest.approx(10.0)
    # interval arithmetic on the rows' CIs: [109.5/100.5, 110.5/99.5]
    assert r.low == pytest.approx(109.5 / 100.5) and r.high == pytest.approx(110.5 / 99.5)
    assert res.tie == "" and res.tied_with == []
    pol = policy(rec)
    assert pol["rules"][0]["use"] == {"backend": "flash-attn", "variant": FA3}
    assert pol["rules"][0]["when"]["num_reqs"] == {"min": 33, "max": 128}
    assert pol["rules"][0]["when"]["mean_seq_len"] == {"gt": 1024, "le": 4096}
    json.dumps(pol, allow_nan=False)


def test_margin_under_tie_band_is_a_tie_and_band_is_configurable():
    rows = [row("flash-attn", 100.0, variant=FA3, half=0.1), row("flashinfer", 102.0, variant=FI, half=0.1)]
    assert rec_of(rows, tie=0.03).measured[0].tie == "band"
    assert rec_of(rows, tie=0.01).measured[0].tie == ""


def test_overlapping_cis_are_a_tie_even_with_a_large_point_margin():
    # 5% apart, but each median's CI is +-4%: the intervals overlap, so this is noise
    rows = [row("flash-attn", 100.0, variant=FA3, half=4.0), row("flashinfer", 105.0, variant=FI, half=4.0)]
    res = rec_of(rows, tie=0.0).measured[0]
    assert res.tie == "noise"
    assert res.tied_with == ["flashinfer [decode_tensor_cores=True,prefill_backend=auto]"]


def test_repeated_runs_merge_into_median_and_envelope():
    rows = [row("flash-attn", 100.0, variant=FA3), row("flash-attn", 104.0, variant=FA3),
            row("flash-attn", 101.0, variant=FA3), row("flashinfer", 110.0, variant=FI)]
    res = rec_of(rows).measured[0]
    t = res.winner.times["s/c1"]
    assert (t.median, t.low, t.high, t.runs) == (101.0, 99.5, 104.5, 3)


def test_failed_check_excludes_the_fastest_candidate():
    rows = [row("flashinfer", 50.0, variant=FI, status="mismatch"), row("flash-attn", 100.0, variant=FA3),
            row("flash-attn", 120.0, variant=FA4)]
    res = rec_of(rows).measured[0]
    assert res.winner.name == "flash-attn [fa_version=3]"
    assert any("failed the check" in c.excluded for c in res.excluded)


def test_buckets_split_by_batch_size_context_and_page():
    rows = [row("flash-attn", 10.0, variant=FA3, case="a", batch={"num_reqs": 1, "num_decode": 1, "mean_seq_len": 500.0}),
            row("flashinfer", 12.0, variant=FI, case="a", batch={"num_reqs": 1, "num_decode": 1, "mean_seq_len": 500.0}),
            row("flash-attn", 10.0, variant=FA3, case="b", cfg={"block_size": 64}),
            row("flashinfer", 9.0, variant=FI, case="b", cfg={"block_size": 64})]
    rec = rec_of(rows)
    labels = sorted(r.bucket.label for r in rec.measured)
    assert len(labels) == 2
    assert any("page 16" in x and "b=1 ctx=<=1k" in x for x in labels)
    assert any("page 64" in x and "b=33-128 ctx=1k-4k" in x for x in labels)


def test_missing_buckets_are_listed_and_suggest_writes_a_valid_suite(tmp_path, capsys):
    rows = [row("flash-attn", 100.0, variant=FA3), row("flashinfer", 90.0, variant=FI),
            # a second shape that only ran without timing (a --no-time conformance run)
            row("flash-attn", None, variant=FA3, case="c2", cfg={"head_size": 64, "num_kv_heads": 4}),
            row("flashinfer", None, variant=FI, case="c2", cfg={"head_size": 64, "num_kv_heads": 4})]
    res_dir = tmp_path / "run"
    write_header(res_dir, {"device": {"type": "cuda", "name": "NVIDIA H200", "capability": "9.0"}})
    with ResultWriter(res_dir) as w:
        for r in rows:
            w.write(ResultRow.model_validate(r))
    suite = tmp_path / "fill.yaml"
    assert cli.main(["recommend", str(res_dir), "--suggest", str(suite), "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "1 of 2 buckets measured; 1 without a timed passing row" in out
    assert "32/4x64 bfloat16/auto" in out
    assert suite.exists()
    assert cli.main(["validate", str(suite)]) == 0
    text = suite.read_text()
    assert "num_kv_heads: 4" in text and "head_size: 64" in text and "count: 64" in text
    pol = json.loads((tmp_path / "out" / "policy.json").read_text())
    assert len(pol["rules"]) == 1 and len(pol["unmeasured"]) == 1


def _run_dir(path: Path, gpu: str, rows: list[dict]) -> Path:
    write_header(path, {"device": {"type": "cuda", "name": gpu, "capability": "9.0"}})
    with ResultWriter(path) as w:
        for r in rows:
            w.write(ResultRow.model_validate(r))
    return path


def test_mixed_gpus_are_refused_with_a_clear_error_and_nothing_written(tmp_path, capsys):
    a = _run_dir(tmp_path / "a", "NVIDIA H200", [row("flash-attn", 100.0, variant=FA3)])
    b = _run_dir(tmp_path / "b", "NVIDIA A100-SXM4-80GB", [row("flash-attn", 200.0, variant=FA3)])
    with pytest.raises(RecommendError, match="different GPUs"):
        load_inputs([a, b])
    assert cli.main(["recommend", str(a), str(b), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "NVIDIA H200" in err and "A100" in err and "one GPU at a time" in err
    assert not (tmp_path / "out").exists()


def test_bad_tie_and_missing_folder_exit_2(tmp_path, capsys):
    a = _run_dir(tmp_path / "a", "NVIDIA H200", [row("flash-attn", 100.0, variant=FA3)])
    assert cli.main(["recommend", str(a), "--tie", "lots"]) == 2
    assert "--tie" in capsys.readouterr().err
    assert cli.main(["recommend", str(tmp_path / "nope")]) == 2


# ---------------------------------------------------------------- vLLM's default rule

KNOWN = [
    # (capability, overrides, backend, fa_version)
    ("9.0", {}, "FLASH_ATTN", 3),                                   # Hopper: FA first, FA3
    ("9.0", {"alibi": True}, "FLASH_ATTN", 2),                      # ALiBi: FA2
    ("9.0", {"head_size": 512}, "FLASH_ATTN", 4),                   # FA3 -> FA4 above head 256 on sm90
    ("9.0", {"kv_cache_dtype": "fp8_e4m3"}, "FLASH_ATTN", 3),       # FA3 reads fp8 e4m3 on sm90
    ("9.0", {"kv_cache_dtype": "fp8_e5m2"}, "FLASHINFER", None),    # FA has no e5m2: next in priority
    ("9.0", {"block_size": 128}, "FLASH_ATTN", 3),
    ("9.0", {"block_size": 1}, "TRITON_ATTN", None),                # neither accepts page 1
    ("9.0", {"head_size": 96, "block_size": 128}, "FLASH_ATTN", 3),
    ("9.0", {"head_size": 96, "block_size": 1}, "TRITON_ATTN", None),
    ("9.0", {"sinks": True}, "FLASH_ATTN", 3),
    ("8.0", {}, "FLASH_ATTN", 2),                                   # Ampere: FA2
    ("8.0", {"kv_cache_dtype": "fp8_e4m3"}, "FLASHINFER", None),    # FA2 has no fp8 KV
    ("8.0", {"sinks": True}, "TRITON_ATTN", None),                  # FA2: no sinks; FlashInfer: sinks on sm100 only
    ("10.0", {}, "FLASHINFER", None),                               # Blackwell, causal: FlashInfer first
    ("10.0", {"causal": False}, "FLASH_ATTN", 4),                   # non-causal: FA first, FA4
    ("10.0", {"causal": False, "head_size": 256}, "FLASH_ATTN", 2), # FA4 on sm100 only up to head 128
    ("10.0", {"head_size": 96}, "FLASH_ATTN", 4),                   # FlashInfer has no head 96
    ("7.5", {}, "TRITON_ATTN", None),                               # no FA, no FlashInfer below sm80
]


@pytest.mark.parametrize("cap,over,backend,fa", KNOWN)
def test_vllm_default_rule_on_known_cases(cap, over, backend, fa):
    args = {"num_heads": 32, "num_kv_heads": 8, "head_size": 128, "dtype": "bfloat16", "kv_cache_dtype": "auto",
            "block_size": 16, "alibi": False, "sinks": False, "causal": True, **over}
    c = vllm_default(cap, **args)
    assert (c.backend, c.fa_version) == (backend, fa), c.rejected


def test_vllm_fa_version_overrides_and_fallbacks():
    assert vllm_flash_attn_version("10.0", override=3) == 4  # no FA3 on Blackwell
    assert vllm_flash_attn_version("9.0", override=2) == 2
    assert vllm_flash_attn_version("9.0", alibi=True, override=4) == 2
    assert vllm_flash_attn_version("9.0", available=(2,)) == 2  # FA3 not built: FA2
    assert vllm_flash_attn_version("7.5") is None


# ---------------------------------------------------------------- committed H200 results


@pytest.fixture(scope="module")
def h200():
    runs = ["decode-1", "decode-2", "page-sizes", "cascade-sweep", "cascade-4k", "orientation"]
    return recommend_rows(load_inputs([H200 / r for r in runs]))


def test_fitted_cascade_rule_reaches_90_percent_on_committed_cells(h200):
    fits = {f.backend: f for f in h200.cascade}
    # vLLM's rule, as reports/h200/2026-11-29/cascade-rule.md counts it
    assert {k: (f.vllm_agree, len(f.cells)) for k, f in fits.items()} == {
        "flash-attn-cascade fa3": (14, 25), "flash-attn-cascade fa4": (13, 24), "flashinfer-cascade": (9, 24)}
    for f in fits.values():
        assert f.fitted_agree >= 0.9 * len(f.cells), f.rule.text()
        assert len(f.rule.terms) <= 2
        assert f.fitted_cost_pct <= f.vllm_cost_pct


def test_committed_results_give_a_default_comparison_and_vllm_export(h200):
    assert h200.inputs.gpu == "NVIDIA H200" and h200.inputs.capability == "9.0"
    assert len(h200.measured) >= 40
    statuses = {d.status for d in h200.defaults}
    assert {"winner", "slower"} <= statuses
    # page 1: neither FA nor FlashInfer accept it in vLLM -> Triton, which the harness does not run
    assert any(d.choice.backend == "TRITON_ATTN" and d.status == "not measured" for d in h200.defaults)
    exp = vllm_export(h200)
    assert exp["single_setting"]["attention_backend"] in ("FLASH_ATTN", "FLASHINFER")
    assert any("per batch" in t for t in exp["cannot_express"])
    for b in exp["buckets"]:
        assert b["vllm"] is None or b["vllm"]["attention_backend"] in ("FLASH_ATTN", "FLASHINFER")


def test_vllm_export_when_vllm_cannot_select_the_winner():
    rows = [row("flashinfer", 90.0, variant={"decode_tensor_cores": False, "prefill_backend": "auto"}),
            row("flashinfer", 100.0, variant=FI), row("flash-attn", 120.0, variant=FA3)]
    rec = rec_of(rows)
    (b,) = vllm_export(rec)["buckets"]
    assert b["measured_winner"].startswith("flashinfer [decode_tensor_cores=False")
    assert b["vllm"]["cli"] == "--attention-backend FLASHINFER"
    assert "cannot select the winner" in b["not_expressible"]
    assert b["cost_vs_winner"]["pct"] == pytest.approx(100 / 90 * 100 - 100, rel=1e-3)
    assert b["default_status"] == "slower" and b["default_cost"]["pct"] == pytest.approx(100 / 3, rel=1e-3)


def test_default_on_shared_prefix_batches_is_plain_unless_cascade_is_opted_in():
    from harness.analysis.recommend.vllm import default_costs

    prefix = {"prefix_groups": 1}
    casc = row("flash-attn-cascade", 50.0, variant=FA3, batch=prefix)
    casc.call = Call(rule_says_cascade=True, compare_with="flash-attn")
    rows = [row("flash-attn", 200.0, variant=FA3, batch=prefix), casc, row("flashinfer", 150.0, variant=FI, batch=prefix)]
    rec = rec_of(rows)
    # vLLM's default has cascade off (PR #36318, 2026-03-07): plain FA3, 4x slower.
    (d,) = rec.defaults
    assert d.status == "slower" and d.cost.pct == pytest.approx(300.0)
    # --no-disable-cascade-attn: vLLM's rule picks the cascade row where it says cascade.
    (d,) = default_costs(rec.measured, rec.inputs.capability, rec.tie, cascade_opt_in=True)
    assert d.status == "winner" and d.candidate == "flash-attn [fa_version=3] + vLLM cascade rule"
    casc.call = Call(rule_says_cascade=False, compare_with="flash-attn")
    rec2 = rec_of(rows)
    (d,) = default_costs(rec2.measured, rec2.inputs.capability, rec2.tie, cascade_opt_in=True)
    assert d.status == "slower" and d.cost.pct == pytest.approx(300.0)


def test_report_sections_read_the_typed_rows_behind_the_frame():
    from harness.report.core import Loaded, frame, result_rows

    rows = [row("flash-attn", 100.0, variant=FA3), row("flashinfer", 110.0, variant=FI),
            row("flash-attn", None, variant={"fa_version": 2}, status="unsupported")]
    df = frame(Loaded(rows, [{}], ["<test>"], [0, 0, 0]))
    # derived frames share the rows (pandas deep-copies attrs), and they are the rows as read
    assert result_rows(df[df["passed"]]) == result_rows(df) == rows
    assert result_rows(df[df["passed"]])[0] is rows[0]
    a, b = rec_of(rows), rec_of(result_rows(df))
    assert policy(a)["rules"] == policy(b)["rules"]
    assert policy(b)["rules"][0]["use"] == {"backend": "flash-attn", "variant": FA3}


def test_report_has_the_recommendation_section(tmp_path):
    from harness.report import build_sections, load

    runs = [H200 / r for r in ("decode-1", "cascade-sweep")]
    (sec,) = build_sections(load(runs), only=["recommend"])
    assert sec.has_data and not sec.error
    titles = [b.get("title") for b in sec.blocks if b["kind"] == "table"]
    assert titles[0] == "Winner per bucket" and "vLLM's default choice against the measurement" in titles
    casc = next(b for b in sec.blocks if b["kind"] == "table" and b["title"].startswith("Cascade"))
    assert any("flash-attn-cascade fa3" in r[0][0] for r in casc["rows"])
    # two GPUs: the section says why, the page still renders
    a = _run_dir(tmp_path / "a", "NVIDIA H200", [row("flash-attn", 100.0, variant=FA3)])
    b = _run_dir(tmp_path / "b", "NVIDIA A100-SXM4-80GB", [row("flash-attn", 200.0, variant=FA3)])
    sec = build_sections(load([a, b]), only=["recommend"])[0]
    assert any("different GPUs" in blk.get("text", "") for blk in sec.blocks)
