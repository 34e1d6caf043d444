"""Cascade attention on the CPU: the merge is exact, the decision rule's branches, torch-cascade
passes the harness check on shared-prefix batches, the generator's sharing invariants, and the
GPU cascade backends' declarations, batch preconditions and host-side metadata."""

import math
from dataclasses import replace

import pytest
import torch

from backends.flash_attn import detect_features, hardware_reason
from backends.cascade.flash_attn_cascade import FACascadeMetadataBuilder, FlashAttnCascadeBackend
from backends.cascade.flashinfer_cascade import FlashInferCascadeBackend, cascade_levels
from backends.cascade.base import shifted_block_table
from backends.cascade.torch_cascade import TorchCascadeBackend
from attn_contract import cascade_batch_reason, merge_attn_states
from harness.analysis.cascade_agreement import rule_agreement
from harness.cell.cascade import DEFAULT_NUM_SMS, use_cascade_attention
from harness.case.reference import attention_one_request
from harness.cell.prepare import CaseContext
from harness.plan.cells import Cell, RunOptions
from harness.cell.run import run_cell
from harness.spec import CaseSpec, Suite
from harness.case.workload import generate

INF = float("inf")


def _case(groups=2, length=32, heads=(8, 2), bs=16, mixed=True, seed=0, **extra):
    batch = [{"kind": "decode", "count": 5, "context_len": {"dist": "uniform", "low": 0, "high": 40}}]
    if mixed:
        batch.append({"kind": "extend", "count": 3, "query_len": {"dist": "uniform", "low": 2, "high": 20},
                      "context_len": {"dist": "uniform", "low": 0, "high": 30}})
    sp = {"shared_prefix": {"length": length, "groups": groups}} if groups else {}
    return CaseSpec.model_validate(dict(name=f"c{seed}", num_heads=heads[0], num_kv_heads=heads[1], head_size=32,
                                        block_size=bs, seed=seed, batch=batch, **sp, **extra))


def _run(backend, case):
    opts = RunOptions(device=torch.device("cpu"), time=False)
    return run_cell(Cell(case, backend, {}), CaseContext(case, opts.device, True), Suite(suite="t", cases=[case]), opts)


# ---------------------------------------------------------------- merge
@pytest.mark.parametrize("heads", [(4, 4), (8, 2)])
def test_merge_equals_attention_over_the_union(heads):
    g = torch.Generator().manual_seed(0)
    hq, hk = heads
    q = torch.randn(7, hq, 16, generator=g, dtype=torch.float64)
    k = torch.randn(50, hk, 16, generator=g, dtype=torch.float64)
    v = torch.randn(50, hk, 16, generator=g, dtype=torch.float64)
    kw = dict(scale=0.3, causal=False, compute_dtype=torch.float64)
    oa, la = attention_one_request(q, k[:20], v[:20], **kw)
    ob, lb = attention_one_request(q, k[20:], v[20:], **kw)
    ou, lu = attention_one_request(q, k, v, **kw)
    o, l = merge_attn_states(oa, la, ob, lb)
    assert o.dtype == torch.float64
    torch.testing.assert_close(o, ou, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(l, lu, rtol=1e-12, atol=1e-12)
    # Order does not matter, and an (H, T) LSE layout works through a transposed view.
    o2, l2 = merge_attn_states(ob, lb.t().contiguous().t(), oa, la)
    torch.testing.assert_close(o2, ou, rtol=1e-12, atol=1e-12)


def test_merge_empty_and_infinite_rows():
    o_a = torch.randn(4, 2, 8, dtype=torch.float64)
    o_b = torch.randn(4, 2, 8, dtype=torch.float64)
    la = torch.tensor([[-INF, -INF], [INF, 0.5], [-INF, INF], [1.0, 2.0]], dtype=torch.float64)
    lb = torch.tensor([[0.3, -INF], [0.7, INF], [-INF, -INF], [1.0, 2.0]], dtype=torch.float64)
    o_a[0, 1] = float("nan")  # garbage in a row with weight 0 must not leak
    o_b[2] = float("nan")
    o, l = merge_attn_states(o_a, la, o_b, lb)
    # Row 0 head 0: only B -> B exactly; head 1: both empty -> 0, -inf.
    torch.testing.assert_close(o[0, 0], o_b[0, 0])
    assert l[0, 0] == 0.3
    assert torch.equal(o[0, 1], torch.zeros(8, dtype=torch.float64)) and l[0, 1] == -INF
    # +inf is read as -inf (FA2's empty rows): head 0 is B only, head 1 is A only.
    torch.testing.assert_close(o[1, 0], o_b[1, 0])
    torch.testing.assert_close(o[1, 1], o_a[1, 1])
    assert l[1, 0] == 0.7 and l[1, 1] == 0.5
    # Row 2: both empty (one +inf) -> zeros even though B's output is NaN.
    assert torch.equal(o[2], torch.zeros(2, 8, dtype=torch.float64)) and bool((l[2] == -INF).all())
    # Equal LSEs: the plain average, lse + log 2.
    torch.testing.assert_close(o[3], (o_a[3] + o_b[3]) / 2)
    torch.testing.assert_close(l[3], torch.tensor([1.0, 2.0], dtype=torch.float64) + math.log(2))


def test_merge_propagates_nan_with_weight_and_writes_in_place():
    o_a, o_b = torch.zeros(2, 1, 4), torch.ones(2, 1, 4)
    o_a[1] = float("nan")
    la, lb = torch.tensor([[0.0], [0.0]]), torch.tensor([[0.0], [float("nan")]])
    out = torch.empty(2, 1, 4, dtype=torch.bfloat16)
    lse = torch.empty(2, 1)
    ret, ret_lse = merge_attn_states(o_a, la, o_b, lb, out=out, out_lse=lse)
    assert ret is out and ret_lse is lse
    assert torch.equal(out[0].float(), torch.full((1, 4), 0.5))
    assert bool(torch.isnan(out[1].float()).all()) and bool(torch.isnan(lse[1]).all())


# ---------------------------------------------------------------- decision rule
def _rule(prefix=4096, groups=1, per_group=256, qlen=1, hq=32, hk=4, **kw):
    n = groups * per_group
    return use_cascade_attention([prefix] * groups, [r // per_group for r in range(n)], [qlen] * n, hq, hk, **kw)


def test_rule_branches():
    assert not use_cascade_attention((), (), [1, 1], 8, 8).use_cascade
    d = _rule(prefix=255)
    assert not d.use_cascade and "< 256" in d.reason
    assert not _rule(alibi=True).use_cascade
    assert not _rule(sliding_window=128).use_cascade
    d = _rule(per_group=7)
    assert not d.use_cascade and "< 8" in d.reason
    # Several groups: requests per shared prefix, not batch size, is what counts.
    assert not _rule(groups=64, per_group=4).use_cascade
    # No FlashDecoding in the plain path (MHA, or any query longer than 1): cascade.
    d = _rule(hk=32)
    assert d.use_cascade and "FlashDecoding" in d.reason and not d.costs["flash_decoding"]
    assert _rule(qlen=4).use_cascade


def test_rule_cost_model_matches_vllm_for_one_group():
    # 8 decodes, GQA 8, 4096-token prefix, 132 SMs (vLLM's numbers by hand):
    # cascade: 32 heads * ceil(8/128) = 32 CTAs -> 1 wave * 32 tiles = 32;
    # FlashDecoding: 8 reqs * 4 KV heads * ceil(8/128) * 32 tiles = 1024 CTAs -> ceil(1024/132) = 8.
    d = _rule(per_group=8)
    assert (d.costs["cascade_time"], d.costs["flash_decoding_time"]) == (32, 8)
    assert not d.use_cascade and "cost model" in d.reason
    # 256 decodes: cascade 64 CTAs -> 1 wave * 32 = 32; FlashDecoding 32768 CTAs -> 249 waves.
    d = _rule(per_group=256)
    assert (d.costs["cascade_time"], d.costs["flash_decoding_time"]) == (32, 249)
    assert d.use_cascade
    # Fewer SMs make FlashDecoding's many CTAs cost more waves.
    assert _rule(per_group=64, num_sms=DEFAULT_NUM_SMS).costs["num_sms"] == DEFAULT_NUM_SMS


def test_rule_cost_model_with_several_groups():
    # 8 groups of 32: cascade 8 * 32 CTAs = 256 -> 2 waves * 32 tiles = 64;
    # FlashDecoding 256 * 4 * 32 = 32768 -> 249.
    d = _rule(groups=8, per_group=32)
    assert (d.costs["cascade_ctas"], d.costs["cascade_time"], d.costs["flash_decoding_time"]) == (256, 64, 249)
    assert d.use_cascade and d.costs["num_groups"] == 8


# ---------------------------------------------------------------- generator invariants
@pytest.mark.parametrize("groups,bs,mixed", [(1, 16, False), (3, 4, True), (2, 1, True)])
def test_block_tables_alias_exactly_on_group_prefix_blocks(groups, bs, mixed):
    case = _case(groups=groups, length=8 * bs if bs > 1 else 5, bs=bs, mixed=mixed)
    b = generate(case)
    nb = b.prefix_group_lens[0] // bs
    group_of = b.prefix_group_of_req
    rows = [b.block_table[i, : -(-s // bs)].tolist() for i, s in enumerate(b.seq_lens)]
    for i in range(b.num_reqs):
        for j in range(i + 1, b.num_reqs):
            for ci, x in enumerate(rows[i]):
                for cj, y in enumerate(rows[j]):
                    shared = x == y
                    expected = group_of[i] == group_of[j] and ci == cj and ci < nb
                    assert shared == expected, (i, j, ci, cj)
    # Every group is non-empty, contiguous, and its prefix K/V are the same logical data.
    assert sorted(set(group_of)) == list(range(groups)) and list(group_of) == sorted(group_of)
    for i in range(b.num_reqs):
        first = group_of.index(group_of[i])
        assert torch.equal(b.k_logical[i][: nb * bs], b.k_logical[first][: nb * bs])
        assert b.context_lens[i] >= nb * bs  # queries come after the prefix


def test_group_sizes_follow_count_over_groups():
    case = _case(groups=4, mixed=False).model_copy(update={"batch": [
        _case().batch[0].model_copy(update={"count": 32})]})
    b = generate(case)
    assert [b.prefix_group_of_req.count(g) for g in range(4)] == [8, 8, 8, 8]


# ---------------------------------------------------------------- torch-cascade conformance
@pytest.mark.parametrize("groups,heads,mixed,extra", [
    (1, (4, 4), False, {}),
    (3, (8, 2), True, {}),
    (2, (8, 2), True, {"kv_layout": "HND", "dtype": "float16"}),
    (2, (8, 8), True, {"kv_cache_dtype": "fp8_e4m3"}),
    (2, (8, 2), True, {"softcap": 5.0, "sinks": True}),
    (2, (8, 2), True, {"causal": False}),
    (2, (4, 1), True, {"block_size": 1, "length": 7}),
])
def test_torch_cascade_passes_the_harness_check(groups, heads, mixed, extra):
    extra = dict(extra)
    length, bs = extra.pop("length", 32), extra.pop("block_size", 16)
    row = _run(TorchCascadeBackend, _case(groups=groups, heads=heads, mixed=mixed, length=length, bs=bs,
                                          seed=groups, **extra))
    assert row.status == "pass", row.reason
    assert row.check.lse_checked
    assert row.call.num_groups == groups and row.call.rule_says_cascade is not None and row.call.compare_with


def test_torch_cascade_check_catches_a_corrupted_shared_prefix():
    # The reference reads the logical K/V, the backend the paged cache: corrupting the shared
    # prefix blocks (read once, by the prefix pass) must turn the cell into a mismatch.
    case = _case(groups=1, mixed=False)
    opts = RunOptions(device=torch.device("cpu"), time=False)
    ctx = CaseContext(case, opts.device, True)
    nb = 32 // 16
    ctx.batch.kv_cache[ctx.batch.block_table[0, :nb].long()] += 1.0
    row = run_cell(Cell(case, TorchCascadeBackend, {}), ctx, Suite(suite="t", cases=[case]), opts)
    assert row.status == "mismatch"


@pytest.mark.parametrize("backend", [TorchCascadeBackend, FlashAttnCascadeBackend, FlashInferCascadeBackend])
def test_batches_without_a_shared_prefix_are_unsupported(backend):
    for case in (_case(groups=0), _case(length=0)):
        reason = backend.check_batch_support(generate(case).common_metadata(), {})
        assert reason and ("no shared prefix" in reason or "length is 0" in reason)
    row = _run(TorchCascadeBackend, _case(groups=0))
    assert row.status == "unsupported" and "no shared prefix" in row.reason


def test_batch_preconditions():
    b = generate(_case(groups=2))
    common = b.common_metadata()
    assert cascade_batch_reason(common, need_contiguous=True) is None
    # Decode-first reordering interleaves the groups: fine for torch, not for the GPU passes.
    shuffled, _ = b.reordered([0, 5, 1, 6, 2, 7, 3, 4])
    sc = shuffled.common_metadata()
    assert cascade_batch_reason(sc, need_contiguous=False) is None
    assert "not contiguous" in cascade_batch_reason(sc, need_contiguous=True)
    # A group whose rows do not alias on the prefix blocks would be silently wrong: refused.
    bad = b.block_table.clone()
    bad[1, 0] = bad[1, 0] + 1
    reason = cascade_batch_reason(replace(common, block_table=bad), need_contiguous=True)
    assert reason and "do not share the prefix blocks" in reason


# ---------------------------------------------------------------- GPU cascade backends, host side
def test_gpu_cascade_capabilities_and_check_support():
    from attn_contract import AttentionConfig

    base = AttentionConfig(num_heads=32, num_kv_heads=8, head_size=128)
    for backend in (FlashAttnCascadeBackend, FlashInferCascadeBackend):
        caps = backend.capabilities({})
        assert caps.cascade and caps.returns_lse and caps.gqa and caps.devices == frozenset({"cuda"})
        assert backend.check_support(base, {}, "cuda") is None
        assert "cpu" in backend.check_support(base, {}, "cpu")
        assert "sliding window" in backend.check_support(AttentionConfig(32, 8, 128, sliding_window=64), {}, "cuda")
        assert "ALiBi" in backend.check_support(AttentionConfig(32, 8, 128, alibi=True), {}, "cuda")
        assert "non-causal" in backend.check_support(AttentionConfig(32, 8, 128, causal=False), {}, "cuda")
        assert "kv_cache_dtype" in backend.check_support(AttentionConfig(32, 8, 128, kv_cache_dtype="fp8_e4m3"), {}, "cuda")
    assert "head_size" in FlashInferCascadeBackend.check_support(AttentionConfig(32, 8, 96), {}, "cuda")
    assert FlashAttnCascadeBackend.variants() == [{"fa_version": 3}, {"fa_version": 4}]


def test_gpu_cascade_availability_without_the_libraries():
    import importlib.util

    for backend, variants in ((FlashAttnCascadeBackend, [{"fa_version": 3}, {"fa_version": 4}]),
                              (FlashInferCascadeBackend, [{}])):
        for v in variants:
            avail = backend.availability(v)
            if torch.cuda.is_available():
                continue
            assert not avail.available and avail.reason
    if importlib.util.find_spec("flash_attn_interface") is None:
        # the same detection and wording as the plain flash-attn backend
        assert FlashAttnCascadeBackend.availability({"fa_version": 3}).reason == detect_features(3).error
        assert "flash_attn_interface" in detect_features(3).error
    assert hardware_reason(3, (8, 0)) and hardware_reason(3, (9, 0)) is None
    assert hardware_reason(4, (12, 0)) and hardware_reason(4, (10, 0)) is None


def test_fa_cascade_metadata_on_cpu():
    b = generate(_case(groups=3, bs=4, length=12, seed=3))
    common = b.common_metadata()
    from attn_contract import AttentionConfig

    md = FACascadeMetadataBuilder(AttentionConfig(8, 2, 32, block_size=4), {}, torch.device("cpu")).build(common)
    qsl, groups = b.query_start_loc, b.prefix_group_of_req
    firsts = [groups.index(g) for g in range(3)]
    assert md.prefix_cu_q.tolist() == [qsl[f] for f in firsts] + [qsl[-1]]
    assert md.prefix_lens.tolist() == [12, 12, 12]
    for g, f in enumerate(firsts):
        assert md.prefix_table[g].tolist() == b.block_table[f, :3].tolist()
    assert md.suffix_lens.tolist() == [s - 12 for s in b.seq_lens]
    for i, s in enumerate(md.suffix_lens.tolist()):
        n = -(-s // 4)
        assert md.suffix_table[i, :n].tolist() == b.block_table[i, 3 : 3 + n].tolist()
    assert md.prefix_table.is_contiguous() and md.suffix_table.is_contiguous()
    assert md.prefix_table.dtype == md.suffix_table.dtype == torch.int32


def test_flashinfer_cascade_levels_rebuild_every_request():
    bs = 4
    b = generate(_case(groups=3, bs=bs, length=8, seed=5))
    lv0, lv1 = cascade_levels(b.common_metadata())
    groups = b.prefix_group_of_req
    assert lv0.qo_indptr.tolist()[-1] == lv1.qo_indptr.tolist()[-1] == b.num_tokens
    assert lv0.last_page_len.tolist() == [bs] * 3
    for i in range(b.num_reqs):
        g = groups[i]
        p0 = lv0.indices[lv0.kv_indptr[g] : lv0.kv_indptr[g + 1]].tolist()
        p1 = lv1.indices[lv1.kv_indptr[i] : lv1.kv_indptr[i + 1]].tolist()
        n = -(-b.seq_lens[i] // bs)
        assert p0 + p1 == b.block_table[i, :n].tolist()
        kv_len = (len(p1) - 1) * bs + int(lv1.last_page_len[i])
        assert kv_len == b.seq_lens[i] - 8 and 1 <= int(lv1.last_page_len[i]) <= bs
        # The request's queries fall inside its group's level-0 query range.
        assert lv0.qo_indptr[g] <= b.query_start_loc[i] < lv0.qo_indptr[g + 1]


def test_shifted_block_table():
    t = torch.arange(12, dtype=torch.int32).view(3, 4)
    assert shifted_block_table(t, [0, 1, 4]).tolist() == [[0, 1, 2, 3], [5, 6, 7, 0], [0, 0, 0, 0]]


# ---------------------------------------------------------------- rule vs measurement
def test_rule_agreement_pairs_cascade_with_its_plain_backend():
    from harness.records.results import Call
    from helpers.typed_rows import ran_row

    def row(backend, variant, us, call=None, case="c"):
        return ran_row(us, backend=backend, case=case, variant=variant, call=Call.model_validate(call or {}))

    call = {"rule_says_cascade": True, "rule_reason": "x", "compare_with": "flash-attn"}
    rows = [
        row("flash-attn-cascade", {"fa_version": 3}, 10.0, call),
        row("flash-attn", {"fa_version": 3}, 12.0),
        row("flash-attn", {"fa_version": 4}, 5.0),  # faster, but another FA version
        row("flash-attn", {"fa_version": 3}, 1.0, case="other"),
    ]
    (entry,) = rule_agreement(rows)
    assert entry["plain_us"] == 12.0 and entry["measured_winner"] == "cascade" and entry["rule_right"] is True
    rows[0] = row("flash-attn-cascade", {"fa_version": 3}, 10.0, {**call, "rule_says_cascade": False})
    assert rule_agreement(rows)[0]["rule_right"] is False


def test_every_cascade_backend_is_a_cascade_backend_of_its_family():
    # The family's base declares what they share; each member names its plain counterpart once
    # (the capability the cascade-vs-plain invariant and the report read is that name) and, for
    # the GPU ones, takes the tested versions of the plain backend whose library it calls.
    from backends.cascade.base import CascadeBackend
    from harness import registry

    members = [registry.resolve(n) for n in ("torch-cascade", "flash-attn-cascade", "flashinfer-cascade")]
    for cls in members:
        assert issubclass(cls, CascadeBackend)
        caps = cls.capabilities(cls.variants()[0])
        assert caps.cascade and caps.returns_lse and caps.plain_counterpart == cls.plain_counterpart
        assert cls.get_impl_cls().plain_counterpart == cls.plain_counterpart  # the row's call.compare_with
        assert not caps.sliding_window and not caps.alibi
        plain = registry.resolve(cls.plain_counterpart)
        if "cuda" not in caps.devices or "cpu" in caps.devices:
            continue
        assert cls.tested_versions == plain.tested_versions and cls.library_modules == plain.library_modules
    assert [m.contiguous_groups for m in members] == [False, True, True]
