"""Every CPU backend passes the harness's own check on a randomized grid, and the check
catches a wrong or unwritten output."""

import itertools
import random

import pytest
import torch

from harness.cell.check import check_output, tolerance_for
from harness.case.reference import reference_attention
from harness.registry import resolve
from harness.cell.prepare import CaseContext
from harness.plan.cells import Cell, RunOptions
from harness.cell.run import run_cell
from harness.spec import CaseSpec, Suite
from harness.case.workload import generate

GRID = list(itertools.product(
    ["float16", "bfloat16"],  # dtype
    ["auto", "fp8_e4m3", "fp8_e5m2"],  # kv cache dtype
    [1, 16, 32],  # block size
    [(4, 4), (8, 2), (8, 1)],  # heads: MHA, GQA, MQA
    [True, False],  # causal
    ["NHD", "HND"],
))
random.Random(0).shuffle(GRID)


def _case(dtype, kvd, bs, heads, causal, layout, seed, **extra):
    return CaseSpec.model_validate(dict(
        name=f"grid{seed}", num_heads=heads[0], num_kv_heads=heads[1], head_size=32, dtype=dtype,
        kv_cache_dtype=kvd, block_size=bs, kv_layout=layout, causal=causal, seed=seed,
        batch=[{"kind": "decode", "count": 3, "context_len": {"dist": "uniform", "low": 1, "high": 70}},
               {"kind": "prefill", "count": 1, "query_len": {"dist": "uniform", "low": 1, "high": 40}},
               {"kind": "extend", "count": 2, "query_len": {"dist": "uniform", "low": 2, "high": 30},
                "context_len": {"dist": "uniform", "low": 1, "high": 50}}],
        **extra,
    ))


def _run(backend_name, case):
    backend = resolve(backend_name)
    opts = RunOptions(device=torch.device("cpu"), time=False)
    suite = Suite(suite="grid", cases=[case])
    return run_cell(Cell(case, backend, {}), CaseContext(case, opts.device, True), suite, opts)


@pytest.mark.parametrize("backend", ["torch-math", "sdpa"])
@pytest.mark.parametrize("params", GRID[:14], ids=lambda p: "-".join(map(str, p)))
def test_cpu_backends_pass_randomized_grid(backend, params):
    row = _run(backend, _case(*params, seed=hash(params) % 1000))
    assert row.status == "pass", row.reason
    assert row.check.max_abs_err < row.check.atol + row.check.rtol


@pytest.mark.parametrize("extra", [{"sliding_window": 7}, {"softcap": 8.0}, {"alibi": True}, {"sinks": True},
                                   {"sliding_window": 5, "causal": False}])
def test_torch_math_features(extra):
    params = dict(dtype="bfloat16", kvd="auto", bs=16, heads=(8, 2), causal=True, layout="NHD")
    params["causal"] = extra.pop("causal", True)
    row = _run("torch-math", _case(params["dtype"], params["kvd"], params["bs"], params["heads"], params["causal"],
                                   params["layout"], seed=5, **extra))
    assert row.status == "pass", row.reason
    assert row.check.lse_checked


def test_sdpa_declares_what_it_cannot_do():
    sdpa = resolve("sdpa")
    for extra, word in [({"softcap": 5.0}, "softcap"), ({"sinks": True}, "sinks")]:
        case = _case("bfloat16", "auto", 16, (4, 4), True, "NHD", 1, **extra)
        reason = sdpa.check_support(case.attention_config(), {}, "cpu")
        assert reason and word in reason


def test_check_catches_wrong_and_unwritten_outputs():
    b = generate(_case("bfloat16", "auto", 16, (8, 2), True, "NHD", 9))
    ref, lse = reference_attention(b)
    tol = tolerance_for("bfloat16", False)
    good = ref.to(torch.bfloat16)
    assert check_output(good, ref, tol, lse.float(), lse).passed
    wrong = good.clone()
    wrong[3, 1, 5] += 0.5
    r = check_output(wrong, ref, tol)
    assert not r.passed and "outside" in r.message and r.max_abs_err > 0.4
    holes = good.clone()
    holes[-1] = float("nan")
    unwritten = torch.zeros_like(holes, dtype=torch.bool)
    unwritten[-1] = True
    r = check_output(holes, ref, tol, unwritten=unwritten)
    assert not r.passed and "never written" in r.message
    bad_lse = lse.clone()
    bad_lse[0, 0] += 1.0
    r = check_output(good, ref, tol, bad_lse, lse)
    assert not r.passed and "LSE" in r.message


def test_per_request_verdict_catches_wrong_decodes_next_to_a_long_prefill():
    """Blind spot 1: one long prefill plus two decodes whose outputs are entirely wrong. The
    batch-wide statistics stay within fp8 tolerances; the per-request verdict does not."""
    case = CaseSpec.model_validate(dict(
        name="bs1", num_heads=8, num_kv_heads=2, head_size=64, dtype="bfloat16", kv_cache_dtype="fp8_e4m3",
        seed=3, batch=[{"kind": "prefill", "count": 1, "query_len": 1024},
                       {"kind": "decode", "count": 2, "context_len": 700}]))
    b = generate(case)
    ref, lse = reference_attention(b)
    bad = ref.to(torch.bfloat16).clone()
    bad[-2:] = bad[-2:].flip(0) * -1.0  # both decodes wrong
    tol = tolerance_for("bfloat16", "fp8_e4m3")
    whole = check_output(bad, ref, tol)  # one "request": the old batch-wide judgement
    assert whole.mismatch_fraction <= tol.max_mismatch_fraction and whole.rel_l2_err < 0.1
    r = check_output(bad, ref, tol, query_start_loc=b.query_start_loc, kinds=b.kinds, seq_lens=b.seq_lens)
    assert not r.passed and r.num_failed_requests == 2
    assert r.per_kind["decode"].failed == 2 and r.per_kind["prefill"].failed == 0
    assert r.worst_request.kind == "decode" and r.worst_request.rel_l2_err > 1.0
    assert "decode 2/2" in r.message


def test_rel_l2_gate_catches_small_signal_errors_below_atol():
    """Blind spot 2: a decode output at a 3k context is ~0.03; an error the size of atol is
    then ~50% relative. The elementwise gate alone lets it through, the rel-L2 gate does not."""
    case = CaseSpec.model_validate(dict(name="bs2", num_heads=4, num_kv_heads=4, head_size=64, dtype="bfloat16",
                                        seed=4, batch=[{"kind": "decode", "count": 2, "context_len": 3000}]))
    b = generate(case)
    ref, _ = reference_attention(b)
    assert ref.abs().mean() < 0.05
    off = (ref + 0.3 * ref.abs().mean() * (2 * torch.rand_like(ref) - 1)).to(torch.bfloat16)
    tol = tolerance_for("bfloat16", "auto")
    r = check_output(off, ref, tol, query_start_loc=b.query_start_loc, kinds=b.kinds, seq_lens=b.seq_lens)
    assert r.mismatch_fraction == 0.0  # every element within atol + rtol|ref|
    assert not r.passed and "rel L2" in r.message
    assert check_output(ref.to(torch.bfloat16), ref, tol, query_start_loc=b.query_start_loc, kinds=b.kinds,
                        seq_lens=b.seq_lens).passed


def test_k_and_v_scales_are_separate():
    base = dict(name="s", num_heads=4, num_kv_heads=2, head_size=32, dtype="bfloat16", kv_cache_dtype="fp8_e4m3",
                batch=[{"kind": "decode", "count": 2, "context_len": 20}])
    b = generate(CaseSpec.model_validate({**base, "k_scale": 0.02, "v_scale": 0.01}))
    assert (b.layer.k_scale, b.layer.v_scale) == (0.02, 0.01)
    b = generate(CaseSpec.model_validate({**base, "kv_scale": 0.03, "v_scale": 0.01}))
    assert (b.layer.k_scale, b.layer.v_scale) == (0.03, 0.01)  # kv_scale is the shorthand for both
    b = generate(CaseSpec.model_validate({**base, "kv_scale": 0.03}))
    assert b.layer.k_scale == b.layer.v_scale == 0.03
