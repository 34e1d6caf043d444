"""vLLM's batch-spec grammar (``2q1k_32q1s1k``) and its study files, run unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli import main
from harness.spec import SpecError, load_suite, parse_suite
from harness.spec.batch_spec import BatchSpecError, parse_batch_spec

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize("spec, groups", [
    ("q2k", [{"kind": "prefill", "count": 1, "query_len": 2048}]),
    ("q1s1k", [{"kind": "decode", "count": 1, "context_len": 1023}]),
    ("8q1s1k", [{"kind": "decode", "count": 8, "context_len": 1023}]),
    ("16q4s1k", [{"kind": "decode", "count": 16, "context_len": 1020, "query_len": 4}]),  # spec decode
    ("q1ks2k", [{"kind": "extend", "count": 1, "query_len": 1024, "context_len": 1024}]),
    ("2q1k_32q1s1k", [{"kind": "prefill", "count": 2, "query_len": 1024},
                      {"kind": "decode", "count": 32, "context_len": 1023}]),
    ("q9s100", [{"kind": "extend", "count": 1, "query_len": 9, "context_len": 91}]),
    # vLLM reads q1 (q_len 1 = seq_len 1) as a decode (is_decode is tested first), not a 1-token prefill.
    ("q1", [{"kind": "decode", "count": 1, "context_len": 0}]),
    ("4q1_q2", [{"kind": "decode", "count": 4, "context_len": 0}, {"kind": "prefill", "count": 1, "query_len": 2}]),
])
def test_grammar(spec, groups):
    assert parse_batch_spec(spec) == groups


@pytest.mark.parametrize("spec, bad", [
    ("2q1k_32x1s1k", "32x1s1k"), ("q", "q"), ("q1s1kk", "q1s1kk"), ("2q1k__q1s2", "''"), ("q1k_s2k", "s2k"),
])
def test_bad_segment_is_named(spec, bad):
    with pytest.raises(BatchSpecError, match=f"segment '?{bad.strip(chr(39))}'?"):
        parse_batch_spec(spec)


@pytest.mark.parametrize("spec, msg", [("q2ks1k", r"seq_len \(1024\) .* q_len \(2048\)"), ("0q1s1k", "at least 1"),
                                       ("q0", "at least 1")])
def test_impossible_segments(spec, msg):
    with pytest.raises(BatchSpecError, match=msg):
        parse_batch_spec(spec)


def _suite(case):
    return {"suite": "t", "cases": [{"num_heads": 8, "num_kv_heads": 2, "head_size": 64, **case}]}


def test_spec_string_names_the_case_and_a_list_sweeps():
    s = parse_suite(_suite({"batch": "2q1k_32q1s1k"}))
    (c,) = s.cases
    assert c.name == "2q1k_32q1s1k" and c.num_requests == 34 and c.params["batch_spec"] == "2q1k_32q1s1k"
    s = parse_suite(_suite({"name": "mix", "batch": ["q512", "8q1s1k"], "block_size": [16, 32]}))
    assert [c.name for c in s.cases] == ["mix/q512[block_size=16]", "mix/q512[block_size=32]",
                                         "mix/8q1s1k[block_size=16]", "mix/8q1s1k[block_size=32]"]


def test_bad_spec_in_a_suite_names_file_case_and_field():
    with pytest.raises(SpecError, match=r"s.yaml: case 'cases\[0\]': field batch: segment '3x'"):
        parse_suite(_suite({"batch": "q2k_3x"}), "s.yaml")
    with pytest.raises(SpecError, match=r"case 'm': field batch\[1\]: segment 'zz'"):
        parse_suite(_suite({"name": "m", "batch": ["q2k", "zz"]}), "s.yaml")
    with pytest.raises(SpecError, match="mixes batch-spec strings and request groups"):
        parse_suite(_suite({"batch": ["q2k", {"kind": "prefill", "query_len": 3}]}), "s.yaml")


def test_study_file_maps_what_has_a_counterpart():
    s = load_suite(DATA / "vllm_study_standard.yaml")
    assert s.suite == "vllm_study_standard" and s.backends == ["flash-attn", "flashinfer"]
    assert [c.name for c in s.cases] == ["q512", "8q1s1k", "2q1k_8q1s1k", "q1ks2k", "4q4s1k"]
    assert {(c.num_heads, c.num_kv_heads, c.head_size, c.block_size) for c in s.cases} == {(32, 8, 128, 16)}
    notes = "\n".join(s.notes)
    for ignored in ("TRITON_ATTN", "model.num_layers", "repeats", "warmup_iters", "device", "profile_memory"):
        assert ignored in notes
    assert [g.kind for g in s.cases[4].batch] == ["decode"]  # 4q4s1k: speculative decode


def test_study_model_parameter_sweep():
    s = load_suite(DATA / "vllm_study_head_dim.yaml")
    assert [(c.name, c.head_size) for c in s.cases] == [
        ("16q1s2k[head_size=64]", 64), ("16q1s2k[head_size=128]", 128), ("q1k[head_size=64]", 64),
        ("q1k[head_size=128]", 128)]
    assert {c.block_size for c in s.cases} == {32} and s.backends == ["flash-attn", "flashinfer"]
    assert any("label_format" in n for n in s.notes) and any(n.startswith("output:") for n in s.notes)


def test_mla_study_without_the_latent_fields_is_mla_with_the_defaults_noted(capsys):
    """An MLA backend on a head-576 layer is an MLA study (never a plain MHA cell of head 576)."""
    assert main(["validate", str(DATA / "vllm_study_mla.yaml")]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "model.kv_lora_rank absent: the MLA default" in err and "Traceback" not in err
    s = load_suite(DATA / "vllm_study_mla.yaml")
    assert [(c.attention, c.mla_form, c.num_kv_heads, c.head_size) for c in s.cases] == [("mla", "absorbed", 1, 576)]


def test_cli_batch_spec_and_study_notes(tmp_path, capsys):
    out = tmp_path / "o"
    rc = main(["run", str(DATA / "vllm_study_standard.yaml"), "--batch-spec", "2q1s48,q40", "--device", "cpu",
               "--backends", "torch-math", "--no-time", "--quiet", "--no-isolation", "--out", str(out)])
    assert rc == 0
    err = capsys.readouterr().err
    assert "ignored: backends TRITON_ATTN" in err
    from harness.records.results import read_rows

    assert sorted({r.case for r in read_rows(out)}) == ["2q1s48", "q40"]


def test_study_sweep_of_whole_geometries():
    s = load_suite(DATA / "vllm_study_geometries.yaml")
    shapes = [(c.name, c.num_heads, c.num_kv_heads, c.head_size, c.block_size) for c in s.cases]
    assert shapes == [("d128_h32_kv8/q2k", 32, 8, 128, 32), ("d128_h32_kv8/32q1s4k", 32, 8, 128, 32),
                      ("d256_h16_kv8/q2k", 16, 8, 256, 32), ("d256_h16_kv8/32q1s4k", 16, 8, 256, 32)]
    assert any("num_layers" in n for n in s.notes)


def test_study_geometry_missing_a_field_names_it(tmp_path):
    bad = tmp_path / "s.yaml"
    bad.write_text("batch_specs: [q2k]\nmodel_parameter_sweep:\n  values:\n    - {num_q_heads: 8}\n")
    with pytest.raises(SpecError, match=r"model_parameter_sweep.values\[0\].head_dim: missing"):
        load_suite(bad)
