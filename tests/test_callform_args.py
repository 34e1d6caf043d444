"""harness diag callform's argument ladder (harness/tools/diag/callform_args.py): which arguments
differ between the adapter's vllm-form call and the plain call, each reverted alone, and the one
named responsible, on CPU tensors and timing records (the GPU run times the real calls)."""

from __future__ import annotations

import pytest
import torch

from harness.tools.diag.callform_args import PLAIN_LINE, QUERY, VLLM, differing, responsible, reverted, same

B, H, D = 4, 8, 16


def _calls():
    q4 = torch.randn(B, 1, H, D)
    kc, vc = torch.randn(10, 16, 1, D), torch.randn(10, 16, 1, D)
    sl = torch.tensor([5, 9, 16, 30], dtype=torch.int32)
    pt = torch.arange(8, dtype=torch.int32).view(B, 2)
    wide = torch.cat([pt, torch.zeros(B, 6, dtype=torch.int32)], 1)  # the adapter's wider page table
    out = torch.empty(B, H, D)
    plain = ((q4, kc, vc), dict(seqused_k=sl, page_table=pt, causal=True, softmax_scale=0.25, num_splits=1))
    vllm = ((q4.view(B, H, D), kc, vc.clone()), dict(seqused_k=sl.clone(), page_table=wide, causal=True,
                                                     softmax_scale=0.25, num_splits=1, return_lse=False, out=out,
                                                     cu_seqlens_q=torch.arange(B + 1, dtype=torch.int32),
                                                     max_seqlen_q=1))
    return plain, vllm


def test_the_differing_arguments_are_named_once():
    plain, vllm = _calls()
    # equal contents are the same argument (a clone of seqused_k or of the V cache is not a factor)
    assert differing(plain, vllm) == [QUERY, "out", "page_table", "return_lse"]
    assert differing(plain, plain) == []


def test_each_reverted_alone():
    plain, vllm = _calls()
    a, kw = reverted(QUERY, plain, vllm)
    assert a[0].shape == (B, 1, H, D) and "cu_seqlens_q" not in kw and "max_seqlen_q" not in kw
    assert kw["out"].shape == (B, 1, H, D)  # out= follows the query's layout
    assert kw["page_table"].shape == (B, 8)  # the rest stays the vllm form's
    a, kw = reverted("page_table", plain, vllm)
    assert kw["page_table"].shape == (B, 2) and a[0].shape == (B, H, D)
    _, kw = reverted("return_lse", plain, vllm)
    assert "return_lse" not in kw and "out" in kw
    assert same(torch.ones(2), torch.ones(2)) and not same(torch.ones(2), torch.ones(3)) and not same(1, torch.ones(1))


def _line(us: float, half: float = 0.2) -> dict:
    return {"median_us": us, "ci95_us": [us - half, us + half]}


def test_the_argument_that_removes_the_gap_is_named():
    lines = {PLAIN_LINE: _line(41.0), VLLM: _line(45.0),
             f"vllm form, {QUERY} as in the plain call": _line(44.6),
             "vllm form, page_table as in the plain call": _line(41.3),
             "vllm form, out as in the plain call": _line(45.1)}
    r = responsible(lines)
    assert r["argument"] == "page_table" and r["share"] == pytest.approx(3.7 / 4.0)
    assert r["beyond_noise"] and "page_table" in r["why"] and "+9.8%" in r["why"]


def test_no_argument_named_within_the_noise():
    lines = {PLAIN_LINE: _line(41.0, 0.5), VLLM: _line(41.3, 0.5), "vllm form, out as in the plain call": _line(41.0)}
    r = responsible(lines)
    assert r["argument"] is None and "within the noise" in r["why"]
    assert responsible({VLLM: _line(45.0)})["argument"] is None
