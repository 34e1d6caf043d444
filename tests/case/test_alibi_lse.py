"""ALiBi LSE conventions: FA2's causal ALiBi adds ``+slope * j`` instead of the
relative ``-slope * |i + s - q - j|``. Outputs agree (softmax is shift-invariant per row); the
LSE differs by ``slope * (i + s - q)``. A backend declares its convention
(``Capabilities.alibi_lse``) and the check compares its LSE with the reference moved by exactly
that constant; an LSE off by a row constant it did not declare is a mismatch."""

import math

import pytest
import torch

from attn_contract import AlibiLse
from harness.case.reference import alibi_lse_shift, reference_attention, reference_lse_for
from harness.registry import resolve
from harness.plan.cells import RunOptions, group_by_case, plan_cells
from harness.cell.case import iterate_case
from harness.spec import CaseSpec, load_suite
from harness.case.workload import generate

CPU = torch.device("cpu")

SUITE = """\
suite: alibi-lse
defaults: {num_heads: 8, num_kv_heads: 2, head_size: 32, block_size: 16, seed: 3, alibi: true}
cases:
  - name: alibi
    dtype: float16
    causal: [true, false]
    batch:
      - {kind: decode, count: 2, context_len: {dist: list, values: [200, 37]}}
      - {kind: extend, count: 1, query_len: 20, context_len: 60}
"""


def _naive_key_index_lse(q, k, scale, slopes, causal):
    """Scalar fp64 LSE of one request with FA2's causal form: logit = scale q.k + slope * j."""
    nq, hq, _ = q.shape
    ns, hk, _ = k.shape
    lse = torch.empty(nq, hq, dtype=torch.float64)
    for h in range(hq):
        for i in range(nq):
            pos = i + ns - nq
            logits = [float(q[i, h].double() @ k[j, h // (hq // hk)].double()) * scale + float(slopes[h]) * j
                      for j in range(ns) if not causal or j <= pos]
            m = max(logits)
            lse[i, h] = m + math.log(sum(math.exp(x - m) for x in logits))
    return lse


def test_reference_lse_for_key_index_matches_naive_fp64():
    b = generate(CaseSpec.model_validate(dict(
        name="a", num_heads=4, num_kv_heads=2, head_size=8, dtype="float16", block_size=4, seed=1, alibi=True,
        batch=[{"kind": "decode", "count": 1, "context_len": 30}, {"kind": "extend", "count": 1, "query_len": 5,
                                                                   "context_len": 9}])), CPU)
    _, ref_lse = reference_attention(b)
    got = reference_lse_for(b, ref_lse, AlibiLse.KEY_INDEX_CAUSAL)
    qsl = b.query_start_loc
    want = torch.cat([_naive_key_index_lse(b.query[qsl[i]:qsl[i + 1]], b.dequantized_kv(i)[0], b.config.softmax_scale,
                                           b.layer.alibi_slopes, True) for i in range(b.num_reqs)])
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-9)
    # The shift is the slope times the query's diagonal position: ~slope * context (FA2 on the
    # H200: 0.84 * 957 = 805 for 32 heads at kv 958, the error the committed rows show).
    assert float((got - ref_lse).max()) == pytest.approx(float(b.layer.alibi_slopes[0]) * (max(b.seq_lens) - 1))
    assert reference_lse_for(b, ref_lse, AlibiLse.RELATIVE) is ref_lse


def test_no_shift_without_causal_or_alibi():
    spec = dict(name="a", num_heads=4, num_kv_heads=2, head_size=8, dtype="float16", block_size=4, seed=1,
                batch=[{"kind": "decode", "count": 1, "context_len": 30}])
    assert alibi_lse_shift(generate(CaseSpec.model_validate({**spec, "alibi": True, "causal": False}), CPU),
                           AlibiLse.KEY_INDEX_CAUSAL) is None
    assert alibi_lse_shift(generate(CaseSpec.model_validate(spec), CPU), AlibiLse.KEY_INDEX_CAUSAL) is None


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    path = tmp_path_factory.mktemp("s") / "alibi.yaml"
    path.write_text(SUITE)
    suite = load_suite(path)
    opts = RunOptions(device=CPU, time=False, suite_path=str(path))
    backends = [resolve("torch-math"), resolve("mutants.cpu:AlibiKeyIndexDeclared"),
                resolve("mutants.cpu:AlibiKeyIndexUndeclared")]
    out: dict[tuple[str, bool], object] = {}
    for group in group_by_case(plan_cells(suite, backends, opts)):
        for row in iterate_case(group, suite, opts):
            out[(row.backend, row.config.causal)] = row
    return out


def test_declared_key_index_convention_passes(rows):
    for causal in (True, False):
        assert rows[("torch-math", causal)].status == "pass", rows[("torch-math", causal)].reason
        r = rows[("mutant-AlibiKeyIndexDeclared", causal)]
        assert r.status == "pass", r.reason


def test_lse_off_by_an_undeclared_row_constant_is_a_mismatch(rows):
    r = rows[("mutant-AlibiKeyIndexUndeclared", True)]
    assert r.status == "mismatch"
    assert "LSE max abs err" in r.reason and "rel L2" not in r.reason  # the outputs agree
    assert r.check.rel_l2_err < 1e-3
    # Non-causal, the kernel uses the relative form too: nothing to declare, it passes.
    assert rows[("mutant-AlibiKeyIndexUndeclared", False)].status == "pass"
