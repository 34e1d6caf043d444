"""MLA as a workload (docs/mla.md): the CPU cells of suites/mla.yaml pass on the torch backends
and catch every MLA mutant (tests/mutants/mla.py); the reference, the workload's tensors, the
work accounting and the built-in models' shapes."""

import json
import math
from pathlib import Path

import pytest
import torch

from attn_contract import MLA_ABSORBED, MLA_EXPANDED, yarn_get_mscale
from harness.case.metrics import attention_work, layout_work
from harness.case.layout import case_layout
from harness.case.reference import reference_attention
from harness.case.workload import generate
from harness.cell.case import iterate_case
from harness.plan.cells import RunOptions, group_by_case, plan_cells
from harness.registry import resolve
from harness.spec import CaseSpec, Suite, load_suite
from harness.spec.models import builtin, parse_config, tp_slice
from harness.spec.models.catalog import CONFIG_DIR
from mutants.mla import MLA_MUTANTS

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "suites" / "mla.yaml"


def _cpu_suite() -> Suite:
    suite = load_suite(SUITE)
    return suite.model_copy(update={"cases": [c for c in suite.cases if c.name.startswith("cpu-")]})


@pytest.fixture(scope="module")
def rows_by_backend():
    suite = _cpu_suite()
    opts = RunOptions(device=torch.device("cpu"), time=False, suite_path=str(SUITE))
    by: dict[str, list] = {}
    backends = [resolve("torch-math"), resolve("sdpa"), resolve("flex-attention"), *MLA_MUTANTS]
    for group in group_by_case(plan_cells(suite, backends, opts)):
        for row in iterate_case(group, suite, opts):
            by.setdefault(row.backend, []).append(row)
    return by


@pytest.mark.parametrize("backend", ["torch-math", "sdpa"])
def test_torch_backends_pass_every_cpu_cell(rows_by_backend, backend):
    rows = rows_by_backend[backend]
    bad = [(r.case, r.status, r.reason) for r in rows if r.status != "pass"]
    assert not bad and len(rows) >= 10
    kinds = {r.config.attention_kind for r in rows}
    assert kinds == {MLA_ABSORBED, MLA_EXPANDED}
    assert all(r.check.lse_checked for r in rows) == (backend == "torch-math")


def test_flex_runs_the_expanded_form_and_says_why_not_the_absorbed(rows_by_backend):
    rows = rows_by_backend["flex-attention"]
    here = resolve("flex-attention").availability()
    if not here.available:  # torch before flex_attention's AuxRequest: every cell says so, none errors
        assert rows and all(r.status == "skipped" and "unavailable" in r.reason and "AuxRequest" in r.reason for r in rows)
        pytest.skip(here.reason)
    by_kind = {k: [r for r in rows if r.config.attention_kind == k] for k in (MLA_ABSORBED, MLA_EXPANDED)}
    assert by_kind[MLA_EXPANDED] and all(r.status == "pass" for r in by_kind[MLA_EXPANDED])
    assert all(r.status == "unsupported" and "attention kind mla_absorbed not supported" in r.reason
               for r in by_kind[MLA_ABSORBED])


@pytest.mark.parametrize("mutant", MLA_MUTANTS, ids=lambda m: m.name)
def test_every_mla_mutant_is_flagged(rows_by_backend, mutant):
    rows = rows_by_backend[mutant.name]
    assert not [r for r in rows if r.status == "error"], [r.reason for r in rows if r.status == "error"]
    flagged = [r for r in rows if r.status == "mismatch"]
    assert flagged, f"{mutant.name} ({mutant.description}) passed every cell"
    assert flagged[0].check.num_failed_requests > 0


def _case(form: str, **kw) -> CaseSpec:
    batch = [{"kind": "decode", "count": 2, "context_len": 40}, {"kind": "extend", "query_len": 5, "context_len": 20}]
    return CaseSpec(name="m", num_heads=4, attention="mla", mla_form=form, batch=batch, **kw)


def test_spec_derives_the_geometry_of_each_form():
    a, e = _case("absorbed"), _case("expanded")
    assert (a.num_kv_heads, a.head_size, a.v_head_size) == (1, 576, 512)
    assert (e.num_kv_heads, e.head_size, e.v_head_size) == (4, 192, 128)
    auto = CaseSpec(name="d", num_heads=4, attention="mla", batch=[{"kind": "decode", "context_len": 9}])
    assert auto.mla_form == "absorbed" and _case("auto").mla_form == "expanded"
    with pytest.raises(ValueError, match="field head_size: an MLA absorbed layer has 576"):
        _case("absorbed", head_size=128)
    with pytest.raises(ValueError, match="field sliding_window: not supported with attention: mla"):
        _case("absorbed", sliding_window=8)
    with pytest.raises(ValueError, match="field kv_lora_rank: only with attention: mla"):
        CaseSpec(name="x", num_heads=4, num_kv_heads=4, head_size=64, kv_lora_rank=256,
                 batch=[{"kind": "decode", "context_len": 9}])


def test_workload_tensors_follow_the_contract():
    a = generate(_case("absorbed", mla_mscale=1.37))
    assert a.kv_cache.shape[1:] == (16, 576) and a.query.shape == (7, 4, 576)
    assert a.key.shape == (7, 1, 576) and a.value.shape == (7, 1, 512)
    # The new tokens' latent vectors are the cache entries at their slots; values are their first 512.
    flat = a.kv_cache.view(-1, 576)
    assert torch.equal(flat[a.slot_mapping], a.key[:, 0]) and torch.equal(a.value, a.key[..., :512])
    e = generate(_case("expanded"))
    assert e.key.shape == (sum(e.seq_lens), 4, 192) and e.value.shape == (sum(e.seq_lens), 4, 128)
    # The rope part of every key is the same for every head (one kpe per token).
    assert torch.equal(e.key[:, 0, 128:], e.key[:, 3, 128:])
    assert e.layer.mla_w_uk.shape == (4, 128, 512) and e.layer.mla_w_uv.shape == (4, 512, 128)


def test_reference_uses_the_192_scale_with_mscale_and_the_latent_values():
    case = _case("absorbed", mla_mscale=1.37)
    b = generate(case)
    out, lse = reference_attention(b)
    assert out.shape == (7, 4, 512) and lse.shape == (7, 4)
    # Request 0 by hand: keys = its latent vectors, values = their first 512 entries.
    lat = b.k_logical[0][:, 0].double()
    q = b.query[0].double()
    s = q @ lat.T * (192 ** -0.5 * 1.37 ** 2)
    p = torch.softmax(s, -1)
    assert torch.allclose(out[0], p @ lat[:, :512], atol=1e-9)
    assert torch.allclose(lse[0], torch.logsumexp(s, -1), atol=1e-9)


def test_mla_work_counts_one_latent_vector_per_key():
    case = CaseSpec(name="w", num_heads=16, attention="mla", mla_form="absorbed",
                    batch=[{"kind": "decode", "count": 2, "context_len": 1023}])
    w = layout_work(case_layout(case))
    keys = 2 * 1024
    assert w.bytes_kv == keys * 1152  # 576 bf16 values per token, read once for all heads
    assert w.flops == 2 * 16 * (576 + 512) * keys
    assert w.bytes_o == 2 * 16 * 512 * 2 and case_layout(case).kv_token_bytes == 1152
    fp8 = attention_work([1], [100], num_heads=16, num_kv_heads=1, head_size=576, dtype="bfloat16",
                         kv_cache_dtype="fp8_e4m3", block_size=64, causal=True, sliding_window=None,
                         v_head_size=512, attention_kind=MLA_ABSORBED)
    assert fp8.bytes_kv == 100 * 576
    exp = attention_work([10], [100], num_heads=16, num_kv_heads=16, head_size=192, dtype="bfloat16",
                         kv_cache_dtype="auto", block_size=64, causal=True, sliding_window=None,
                         v_head_size=128, attention_kind=MLA_EXPANDED)
    assert exp.bytes_kv == 100 * 16 * (192 + 128) * 2 and exp.flops == 2 * 16 * 320 * exp.visible_pairs


def test_verbatim_deepseek_v3_config_gives_the_right_shapes_at_tp_1_and_8():
    data = json.loads((CONFIG_DIR / "deepseek-v3.json").read_text())
    verbatim = {k: v for k, v in data.items() if k != "_source"}
    assert verbatim["quantization_config"]["quant_method"] == "fp8" and len(verbatim) == 43
    model = parse_config(verbatim, "deepseek-v3", "config.json")
    mscale = 0.1 * 1.0 * math.log(40) + 1
    for tp, heads in ((1, 128), (8, 16)):
        (shape,) = tp_slice(model, tp)
        assert (shape.num_heads, shape.num_kv_heads, shape.kind.head_size) == (heads, 1, 576)
        dims = shape.kind.mla
        assert (dims.kv_lora_rank, dims.qk_rope_head_dim, dims.qk_nope_head_dim, dims.v_head_dim) == (512, 64, 128, 128)
        assert dims.mscale == pytest.approx(mscale) and dims.softmax_scale == pytest.approx(192 ** -0.5 * mscale ** 2)


def test_builtin_mla_models_and_their_yarn():
    assert builtin("deepseek-r1").kinds == builtin("deepseek-v3").kinds
    lite = builtin("deepseek-v2-lite").kinds[0]
    assert lite.num_heads == 16 and lite.mla.mscale == pytest.approx(yarn_get_mscale(40, 0.707))
    kimi = builtin("kimi-k2").kinds[0]
    assert kimi.num_heads == 64 and kimi.mla.mscale == pytest.approx(yarn_get_mscale(32, 1.0))
    # No rope scaling (or the default type): no mscale, as vLLM.
    data = {k: v for k, v in json.loads((CONFIG_DIR / "deepseek-v3.json").read_text()).items() if k != "_source"}
    plain = parse_config({**data, "rope_scaling": None}, "x", "c")
    assert plain.kinds[0].mla.mscale == 1.0


def test_model_cases_pick_the_form_from_the_batch():
    from harness.spec.loading import parse_suite

    s = parse_suite({"suite": "t", "cases": [{"model": "deepseek-v3", "tp": [1, 8], "batch": ["4q1s256", "q64"]}]})
    forms = {(c.params["tp"], c.batch[0].kind): (c.mla_form, c.num_heads, c.head_size) for c in s.cases}
    assert forms[(8, "decode")] == ("absorbed", 16, 576)
    assert forms[(1, "prefill")] == ("expanded", 128, 192)
    assert all(c.mla_mscale == pytest.approx(0.1 * math.log(40) + 1) for c in s.cases)


def test_vllm_default_mla_backend_is_data_from_vllms_priority_list():
    from harness.analysis.selection_rules import vllm_default

    def pick(cap, **kw):
        return vllm_default(cap, num_heads=16, num_kv_heads=1, head_size=576, attention_kind=MLA_ABSORBED, **kw)

    h200 = pick("9.0", block_size=64)
    assert h200.backend == "FLASH_ATTN_MLA" and h200.priorities[:2] == ("FLASH_ATTN_MLA", "FLASHMLA")
    fp8 = pick("9.0", block_size=64, kv_cache_dtype="fp8_e4m3")
    assert fp8.backend == "FLASHMLA" and "KV cache dtype" in fp8.rejected["FLASH_ATTN_MLA"]
    assert pick("10.0", block_size=64).backend == "FLASHINFER_MLA"
    assert pick("8.0", block_size=16).backend == "TRITON_MLA"
    # MHA layers keep their own list.
    assert vllm_default("9.0", num_heads=32, num_kv_heads=8, head_size=128).backend == "FLASH_ATTN"


def test_engine_names_of_a_torch_baseline_do_not_cover_mla():
    from harness.analysis.engines import TABLE_ONLY

    assert TABLE_ONLY.sglang_setting("sdpa", {})["attention_backend"] == "torch_native"
    assert TABLE_ONLY.sglang_setting("sdpa", {}, MLA_ABSORBED) is None
    assert not resolve("torch-math").engine_names


def test_vllm_style_chunked_prefill_equals_one_pass_attention(monkeypatch):
    """torch-math's MLA prefill (new tokens causal, then context chunks, LSE merges), with query
    rows blocked too, against the reference's one pass over every key."""
    import backends.mla.prefill as mp

    case = CaseSpec(name="c", num_heads=4, attention="mla", mla_form="expanded",
                    batch=[{"kind": "prefill", "query_len": 37}, {"kind": "extend", "query_len": 21, "context_len": 50},
                           {"kind": "decode", "context_len": 9}])
    b = generate(case)
    ref, ref_lse = reference_attention(b)
    kv_start = b.common_metadata().kv_start_loc_cpu.tolist()
    monkeypatch.setattr(mp, "SCORE_ELEMS", 4 * 64 * 3)  # blocks of 3 query rows
    out, lse = torch.zeros(ref.shape), torch.zeros(ref_lse.shape)
    mp.chunked_prefill(b.query, b.key, b.value, b.query_start_loc, kv_start, b.seq_lens, b.config.softmax_scale,
                       True, 16, out, lse)
    assert (out.double() - ref).abs().max() < 1e-5 and (lse.double() - ref_lse).abs().max() < 1e-5


def test_models_suite_runs_deepseek_v3_at_tp8_on_the_cpu():
    """`harness run suites/models.yaml --model deepseek-v3 --tp 8` on a CPU: the small cases run
    (sdpa) in the absorbed (decode) and expanded (prefill) forms; the big ones are skipped."""
    path = ROOT / "suites" / "models.yaml"
    suite = load_suite(path, override={"model": "deepseek-v3", "tp": "8"})
    shapes = {(c.name, c.mla_form, c.num_heads, c.num_kv_heads, c.head_size) for c in suite.cases}
    assert ("small/deepseek-v3/tp8/4q1s512", "absorbed", 16, 1, 576) in shapes
    assert ("small/deepseek-v3/tp8/q128", "expanded", 16, 16, 192) in shapes
    small = suite.model_copy(update={"cases": [c for c in suite.cases if c.name.startswith("small/")]})
    opts = RunOptions(device=torch.device("cpu"), time=False, suite_path=str(path))
    rows = [r for g in group_by_case(plan_cells(small, [resolve("sdpa")], opts)) for r in iterate_case(g, small, opts)]
    assert len(rows) == 2 and all(r.status == "pass" for r in rows), [(r.case, r.status, r.reason) for r in rows]


def test_invariants_hold_in_both_forms():
    """--invariants on MLA cells: sub-batches and the decode of a prefill's last token keep the
    expanded form's per-request key/value rows."""
    suite = _cpu_suite()
    mixed = suite.model_copy(update={"cases": [c for c in suite.cases if c.name.startswith("cpu-mixed")]})
    opts = RunOptions(device=torch.device("cpu"), time=False, invariants=True, suite_path=str(SUITE))
    rows = [r for g in group_by_case(plan_cells(mixed, [resolve("torch-math")], opts)) for r in iterate_case(g, mixed, opts)]
    assert {r.config.attention_kind for r in rows} == {MLA_ABSORBED, MLA_EXPANDED}
    for r in rows:
        got = {i.invariant: i.status for i in r.check.invariants}
        assert r.status == "pass" and got["decode-vs-prefill"] == got["batch-invariance"] == "pass", (r.case, got)
