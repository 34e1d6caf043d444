"""The reference against an independent, deliberately naive implementation: scalar loops in
fp64 over every (query, head, key), with masks written from their definitions."""

import math

import pytest
import torch

from harness.case.reference import attention_one_request


def naive(q, k, v, scale, causal, window, softcap, slopes, sinks):
    q, k, v = q.double(), k.double(), v.double()
    nq, hq, d = q.shape
    ns, hk, _ = k.shape
    out = torch.zeros(nq, hq, d, dtype=torch.float64)
    lse = torch.full((nq, hq), -math.inf, dtype=torch.float64)
    for h in range(hq):
        kh = h // (hq // hk)
        for i in range(nq):
            pos = i + ns - nq  # absolute position of query i among the keys
            logits, values = [], []
            for j in range(ns):
                if causal and j > pos:
                    continue
                if window is not None and abs(pos - j) >= window and (j <= pos or not causal):
                    continue
                s = float(q[i, h] @ k[j, kh]) * scale
                if softcap:
                    s = softcap * math.tanh(s / softcap)
                if slopes is not None:
                    s -= float(slopes[h]) * abs(pos - j)
                logits.append(s)
                values.append(v[j, kh])
            all_logits = logits + ([float(sinks[h])] if sinks is not None else [])
            if not all_logits:
                continue
            m = max(all_logits)
            denom = sum(math.exp(x - m) for x in all_logits)
            lse[i, h] = m + math.log(denom)
            for x, val in zip(logits, values):
                out[i, h] += math.exp(x - m) / denom * val
    return out, lse


@pytest.mark.parametrize(
    "nq, ns, hq, hk, causal, window, softcap, alibi, sinks",
    [
        (1, 9, 4, 1, True, None, 0.0, False, False),  # decode, MQA
        (5, 5, 4, 2, True, None, 0.0, False, False),  # prefill, GQA
        (3, 8, 2, 2, True, None, 0.0, False, False),  # chunked prefill: bottom-right alignment
        (4, 6, 2, 1, False, None, 0.0, False, False),  # non-causal
        (4, 10, 2, 2, True, 3, 0.0, False, False),  # sliding window
        (4, 10, 2, 2, False, 3, 0.0, False, False),  # symmetric window
        (3, 7, 4, 2, True, None, 5.0, False, False),  # softcap
        (3, 7, 4, 4, True, None, 0.0, True, False),  # ALiBi
        (3, 7, 4, 2, True, None, 0.0, False, True),  # sinks
        (3, 7, 4, 2, True, 2, 30.0, True, True),  # everything at once
    ],
)
def test_reference_matches_naive(nq, ns, hq, hk, causal, window, softcap, alibi, sinks):
    g = torch.Generator().manual_seed(nq * 100 + ns)
    d = 8
    q = torch.randn(nq, hq, d, generator=g) * 2
    k = torch.randn(ns, hk, d, generator=g) * 2
    v = torch.randn(ns, hk, d, generator=g)
    slopes = torch.rand(hq, generator=g) if alibi else None
    sink = torch.randn(hq, generator=g) if sinks else None
    scale = 1 / math.sqrt(d)
    out, lse = attention_one_request(q, k, v, scale=scale, causal=causal, sliding_window=window, softcap=softcap,
                                     alibi_slopes=slopes, sinks=sink, compute_dtype=torch.float64)
    ref_out, ref_lse = naive(q, k, v, scale, causal, window, softcap, slopes, sink)
    torch.testing.assert_close(out, ref_out, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(lse, ref_lse, rtol=1e-10, atol=1e-10)


def test_rows_that_see_nothing_are_zero_with_minus_inf_lse():
    # 4 queries over 2 keys, causal bottom-right: the first two queries see no key.
    q = torch.randn(4, 1, 8, dtype=torch.float64)
    k = torch.randn(2, 1, 8, dtype=torch.float64)
    out, lse = attention_one_request(q, k, k, scale=0.3, causal=True, compute_dtype=torch.float64)
    assert torch.equal(out[:2], torch.zeros_like(out[:2]))
    assert torch.isneginf(lse[:2]).all() and torch.isfinite(lse[2:]).all()


def test_top_left_alignment_would_differ():
    # Guard against SDPA's is_causal (top-left) sneaking in: for 2 queries over 5 keys the
    # first query must see 4 keys, not 1.
    q = torch.randn(2, 1, 4, dtype=torch.float64)
    k = torch.randn(5, 1, 4, dtype=torch.float64)
    v = torch.eye(5, 4, dtype=torch.float64).unsqueeze(1) + 1.0
    out, _ = attention_one_request(q, k, v, scale=1.0, causal=True, compute_dtype=torch.float64)
    top_left, _ = naive(q, k, v, 1.0, False, None, 0.0, None, None)
    assert not torch.allclose(out[0], v[0, 0])  # would equal v[0] if only key 0 were visible
    assert torch.allclose(out[1], top_left[1])  # the last query sees everything either way
