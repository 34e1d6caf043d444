"""Generator invariants: the paged cache holds exactly the logical K/V, through a shuffled
block table, with no aliasing except shared prefixes; lengths follow their distributions."""

import numpy as np
import pytest
import torch

from attn_contract import index_kv
from harness.spec import CaseSpec
from harness.case.workload import draw_lengths, generate, sample_lengths


def case(**kw):
    base = dict(
        name="w",
        num_heads=8,
        num_kv_heads=2,
        head_size=16,
        block_size=4,
        batch=[
            {"kind": "decode", "count": 3, "context_len": {"dist": "uniform", "low": 1, "high": 30}},
            {"kind": "prefill", "count": 2, "query_len": {"dist": "uniform", "low": 1, "high": 20}},
            {"kind": "extend", "count": 2, "query_len": 5, "context_len": 9},
        ],
        seed=3,
    )
    base.update(kw)
    return CaseSpec.model_validate(base)


def _slots_of(batch, i):
    bs = batch.config.block_size
    t = torch.arange(batch.seq_lens[i])
    return (batch.block_table[i, t // bs].long() * bs + t % bs).tolist()


@pytest.mark.parametrize("kv_cache_dtype", ["auto", "fp8_e4m3"])
def test_every_logical_token_has_one_slot_holding_its_kv(kv_cache_dtype):
    b = generate(case(kv_cache_dtype=kv_cache_dtype))
    bs = b.config.block_size
    seen = set()
    for i in range(b.num_reqs):
        slots = _slots_of(b, i)
        assert len(set(slots)) == len(slots)
        assert not seen & set(slots), "block tables alias without a shared prefix"
        seen |= set(slots)
        s = torch.tensor(slots)
        k = index_kv(b.kv_cache, s // bs, 0, s % bs)
        v = index_kv(b.kv_cache, s // bs, 1, s % bs)
        assert torch.equal(k.view(torch.uint8), b.k_logical[i].view(torch.uint8))
        assert torch.equal(v.view(torch.uint8), b.v_logical[i].view(torch.uint8))


def test_block_table_is_shuffled_and_spares_are_finite():
    b = generate(case())
    used = sorted({blk for i in range(b.num_reqs) for blk in b.block_table[i, : -(-b.seq_lens[i] // 4)].tolist()})
    flat = [blk for i in range(b.num_reqs) for blk in b.block_table[i, : -(-b.seq_lens[i] // 4)].tolist()]
    assert flat != list(range(len(flat))), "block table must not be the identity"
    spare = sorted(set(range(b.kv_cache.shape[0])) - set(used))
    assert spare, "the pool keeps spare blocks"
    assert torch.isfinite(b.kv_cache[spare].float()).all()
    assert b.kv_cache[spare].float().abs().sum() > 0


def test_slot_mapping_points_at_new_tokens():
    b = generate(case())
    qsl = b.query_start_loc
    for i in range(b.num_reqs):
        assert b.slot_mapping[qsl[i] : qsl[i + 1]].tolist() == _slots_of(b, i)[b.seq_lens[i] - b.query_lens[i] :]
        assert torch.equal(b.key[qsl[i] : qsl[i + 1]], b.k_logical[i][b.context_lens[i] :])


def test_kinds_and_lengths():
    b = generate(case())
    for kind, q, c in zip(b.kinds, b.query_lens, b.context_lens):
        if kind == "decode":
            assert q == 1 and 1 <= c <= 30
        elif kind == "prefill":
            assert c == 0 and 1 <= q <= 20
        else:
            assert (q, c) == (5, 9)


def test_reproducible_from_seed_and_seed_matters():
    a, b, c = generate(case()), generate(case()), generate(case(seed=4))
    assert torch.equal(a.query, b.query) and torch.equal(a.kv_cache, b.kv_cache) and a.seq_lens == b.seq_lens
    assert not torch.equal(a.query[:1], c.query[:1])


def test_distributions_follow_their_parameters():
    rng = np.random.default_rng(0)
    from harness.spec import Explicit, LogNormal, Normal, Uniform

    u = sample_lengths(Uniform(dist="uniform", low=10, high=20), 4000, rng)
    assert min(u) == 10 and max(u) == 20 and abs(np.mean(u) - 15) < 0.3
    n = sample_lengths(Normal(dist="normal", mean=100, std=10, min=90, max=200), 4000, rng)
    assert min(n) == 90 and abs(np.median(n) - 100) < 2
    ln = sample_lengths(LogNormal(dist="lognormal", median=1000, sigma=0.5, min=1, max=10**6), 4000, rng)
    assert abs(np.median(ln) / 1000 - 1) < 0.08
    assert sample_lengths(Explicit(dist="list", values=[3, 5]), 5, rng) == [3, 5, 3, 5, 3]


def test_shared_prefix_blocks_alias_only_within_a_group():
    c = case(block_size=4, shared_prefix={"length": 8, "groups": 2},
             batch=[{"kind": "decode", "count": 4, "context_len": {"dist": "uniform", "low": 1, "high": 9}}])
    b = generate(c)
    groups = b.prefix_group_of_req
    assert groups == (0, 0, 1, 1)
    prefix_rows = [tuple(b.block_table[i, :2].tolist()) for i in range(4)]
    assert prefix_rows[0] == prefix_rows[1] and prefix_rows[2] == prefix_rows[3] and prefix_rows[0] != prefix_rows[2]
    own = [set(b.block_table[i, 2 : -(-b.seq_lens[i] // 4)].tolist()) for i in range(4)]
    for i in range(4):
        for j in range(i + 1, 4):
            assert not own[i] & own[j]
        assert not own[i] & set(prefix_rows[0] + prefix_rows[2])
    assert torch.equal(b.k_logical[0][:8], b.k_logical[1][:8])
    assert not torch.equal(b.k_logical[0][:8], b.k_logical[2][:8])


def test_draw_lengths_matches_generate():
    c = case()
    _, q, ctx = draw_lengths(c)
    b = generate(c)
    assert b.query_lens == q and b.context_lens == ctx


def test_reordered_keeps_request_data_together():
    b = generate(case())
    order = [6, 0, 3, 1, 2, 4, 5]
    r, token_index = b.reordered(order)
    assert r.query_lens == [b.query_lens[i] for i in order]
    assert torch.equal(r.query, b.query[token_index])
    for new, old in enumerate(order):
        assert torch.equal(r.block_table[new], b.block_table[old])
