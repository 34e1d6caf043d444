"""The call_form variant axis of flash-attn and flashinfer: declared, planned, built and recorded
(no GPU: the builders and describe_call run on the CPU; the library calls do not)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from attn_contract import AttentionConfig, decode_first_order
from backends.flash_attn import FlashAttentionBackend, FlashAttentionImpl, FlashAttentionMetadataBuilder
from backends.flashinfer import FlashInferBackend
from harness.cli import main
from harness.plan.cells import RunOptions, plan_cells
from harness.spec import load_suite, parse_suite
from harness.case.workload import generate

ROOT = Path(__file__).resolve().parents[2]
CPU = torch.device("cpu")


def _suite(batch: list[dict]) -> dict:
    return {"suite": "cf", "cases": [{"name": "c", "num_heads": 8, "num_kv_heads": 2, "head_size": 64,
                                      "block_size": 16, "dtype": "bfloat16", "seed": 3, "batch": batch}]}


MIXED = [{"kind": "prefill", "count": 2, "query_len": 40},
         {"kind": "decode", "count": 5, "context_len": {"dist": "uniform", "low": 20, "high": 90}}]
DECODE = [{"kind": "decode", "count": 6, "context_len": 70}]


def _view(batch_spec: list[dict]):
    case = parse_suite(_suite(batch_spec), "<t>").cases[0]
    b = generate(case, "cpu")
    view, _ = b.reordered(decode_first_order(b.query_lens, 1))
    return view


def _built(v: int, form: str, spec: list[dict]):
    view = _view(spec)
    variant = {"fa_version": v, "call_form": form}
    md = FlashAttentionMetadataBuilder(view.config, variant, CPU).build(view.common_metadata())
    call = FlashAttentionImpl(view.config, variant, CPU, view.layer).describe_call(md)
    return view, md, call


def test_axis_is_declared_with_vllm_first():
    assert FlashAttentionBackend.variant_axes["call_form"] == ("vllm", "fastest")
    assert FlashInferBackend.variant_axes["call_form"] == ("vllm", "fastest")
    assert {(v["fa_version"], v["call_form"]) for v in FlashAttentionBackend.default_variants()} == {
        (n, f) for n in (2, 3, 4) for f in ("vllm", "fastest")}
    # FlashInfer's form changes the call only where decodes and prefills share a batch.
    assert "call_form" in FlashInferBackend.applicable_axes({"decode", "extend"})
    assert "call_form" not in FlashInferBackend.applicable_axes({"decode"})
    assert "call_form" not in FlashInferBackend.applicable_axes({"prefill"})
    assert "call_form" in FlashAttentionBackend.applicable_axes({"decode"})


@pytest.mark.parametrize("v", [2, 3, 4])
def test_vllm_form_is_one_varlen_call_over_the_batch(v):
    view, md, call = _built(v, "vllm", MIXED)
    (seg,) = md.segments
    assert seg.kind == "batch" and not seg.batched
    assert (seg.token_start, seg.token_end, seg.num_reqs) == (0, view.num_tokens, view.num_reqs)
    assert call["call_form"] == "vllm" and len(call["segments"]) == 1
    s = call["segments"][0]
    assert s["q"].startswith("varlen") and "cu_seqlens_q" in s["q"]
    assert s["kernel"].endswith("flash_attn_varlen_func" if v != 3 else "flash_attn_with_kvcache")
    # vLLM's builder bounds FA3's splits for a batch that fits its CUDA graphs; others: heuristic
    assert s["num_splits"] == (32 if v == 3 else 0)
    assert ("32" in call["num_splits_note"]) == (v == 3)
    assert call["return_lse"].startswith("checked call only")
    if v == 2:
        assert seg.cu_seqlens_k is not None  # FA2's varlen call takes K offsets, decodes included


@pytest.mark.parametrize("v", [2, 3, 4])
def test_fastest_form_batches_the_decodes(v):
    view, md, call = _built(v, "fastest", MIXED)
    dec, pre = md.segments
    assert dec.batched and not pre.batched and dec.kind == "decode"
    assert [s["q"].split()[0] for s in call["segments"]] == ["batched", "varlen"]
    assert call["segments"][0]["q"].startswith(f"batched [{dec.num_reqs}, 1, H, D]")
    assert all(s["num_splits"] == 0 for s in call["segments"])
    q = torch.randn(dec.num_tokens, 8, 64)
    gen = FlashAttentionImpl(view.config, {"fa_version": v}, CPU, view.layer).generation
    assert gen.q_for(q, dec).shape == (dec.num_reqs, 1, 8, 64)
    assert gen.q_for(q, dec).data_ptr() == q.data_ptr()  # a view: nothing copied
    lse = torch.randn(dec.num_reqs, 8, 1)
    from backends.flash_attn.common import lse_tokens
    assert torch.equal(lse_tokens(lse, dec), lse[:, :, 0])


def test_the_two_forms_differ_visibly_and_decode_only_batches_too():
    _, _, a = _built(3, "vllm", DECODE)
    _, _, b = _built(3, "fastest", DECODE)
    assert a["segments"][0]["q"] != b["segments"][0]["q"]
    assert a["segments"][0]["num_splits"] != b["segments"][0]["num_splits"]
    assert (a["call_form"], b["call_form"]) == ("vllm", "fastest")


def test_an_explicit_num_splits_variant_wins_over_either_form():
    view = _view(DECODE)
    for form in ("vllm", "fastest"):
        md = FlashAttentionMetadataBuilder(view.config, {"fa_version": 3, "call_form": form, "num_splits": 1},
                                           CPU).build(view.common_metadata())
        assert [s.num_splits for s in md.segments] == [1]


def test_vllm_num_splits_follows_the_cuda_graph_capture_size():
    from backends.flash_attn import FA3, FA4
    assert FA3.vllm_num_splits(512)[0] == 32 and FA3.vllm_num_splits(513)[0] == 0
    assert FA4.vllm_num_splits(8)[0] == 0


def test_unknown_call_form_is_a_clear_error_at_validate(tmp_path, capsys):
    bad = {**_suite(DECODE), "backends": ["flash-attn"], "variants": {"flash-attn": {"call_form": ["eager"]}}}
    import yaml
    path = tmp_path / "callform_bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    rc = main(["validate", str(path)])
    out, err = capsys.readouterr()
    assert rc == 2, out + err
    assert "call_form" in out + err and "Traceback" not in err
    view = _view(DECODE)
    with pytest.raises(ValueError, match="unknown call_form"):
        FlashAttentionMetadataBuilder(view.config, {"fa_version": 3, "call_form": "eager"}, CPU).build(
            view.common_metadata())


def test_callforms_suite_plans_both_forms_per_backend():
    suite = load_suite(ROOT / "suites" / "callforms.yaml")
    cells = plan_cells(suite, [FlashAttentionBackend, FlashInferBackend], RunOptions(device=CPU))
    by_case: dict[str, list] = {}
    for c in cells:
        by_case.setdefault(c.case.name, []).append(c)
    assert len(by_case) >= 9
    for name, cs in by_case.items():
        fa = {(c.variant["fa_version"], c.variant["call_form"]) for c in cs if c.backend is FlashAttentionBackend}
        assert fa == {(3, "vllm"), (3, "fastest"), (4, "vllm"), (4, "fastest")}, name
        fi = [c for c in cs if c.backend is FlashInferBackend]
        if name.startswith("mixed"):
            assert {c.variant["call_form"] for c in fi} == {"vllm", "fastest"}
        else:  # one cell stands for both forms, and says so
            (only,) = fi
            assert only.variant["call_form"] == "vllm"
            assert only.axes["not_applied"]["call_form"] == ["fastest", "vllm"]


def test_callforms_suite_validates_on_the_cpu(capsys):
    rc = main(["validate", str(ROOT / "suites" / "callforms.yaml")])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "valid, 11 cases" in out


@pytest.mark.parametrize("backend", [FlashAttentionBackend, FlashInferBackend])
def test_standalone_call_honours_the_call_form(backend):
    """What crosscheck and repro re-run is the row's own form: the sources differ and parse."""
    cfg = AttentionConfig(8, 2, 128)
    variant = {"fa_version": 3} if backend is FlashAttentionBackend else {}
    a = backend.standalone_call(cfg, {**variant, "call_form": "vllm"})
    b = backend.standalone_call(cfg, {**variant, "call_form": "fastest"})
    assert a and b and a != b
    assert "CALL_FORM = 'vllm'" in a and "CALL_FORM = 'fastest'" in b
    for src in (a, b):
        ast.parse(src)


def test_standalone_call_takes_the_rows_recorded_num_splits():
    cfg = AttentionConfig(8, 2, 128)
    src = FlashAttentionBackend.standalone_call(cfg, {"fa_version": 3, "call_form": "vllm"},
                                                {"fa_version": 3, "segments": [{"num_splits": 7}]})
    assert "RECORDED_SPLITS = [7]" in src
    src = FlashAttentionBackend.standalone_call(cfg, {"fa_version": 3, "call_form": "vllm"})
    assert "RECORDED_SPLITS = None" in src and "32 if QSL[n] <= 512 else 0" in src
