"""Every CPU backend passes the harness's own check on a randomized grid, and the check
catches a wrong or unwritten output."""

import itertools
import random

import pytest
import torch

from harness.check import check_output, tolerance_for
from harness.reference import reference_attention
from harness.registry import resolve
from harness.runner import CaseContext, Cell, RunOptions, run_cell
from harness.spec import CaseSpec, Suite
from harness.workload import generate

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
    assert row.check["max_abs_err"] < row.check["atol"] + row.check["rtol"]


@pytest.mark.parametrize("extra", [{"sliding_window": 7}, {"softcap": 8.0}, {"alibi": True}, {"sinks": True},
                                   {"sliding_window": 5, "causal": False}])
def test_torch_math_features(extra):
    params = dict(dtype="bfloat16", kvd="auto", bs=16, heads=(8, 2), causal=True, layout="NHD")
    params["causal"] = extra.pop("causal", True)
    row = _run("torch-math", _case(params["dtype"], params["kvd"], params["bs"], params["heads"], params["causal"],
                                   params["layout"], seed=5, **extra))
    assert row.status == "pass", row.reason
    assert row.check["lse_checked"]


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
