"""Context-parallel mode: sharding, both combines against the exact merge, real gloo process
groups (2 and 4 processes), suites/context_parallel.yaml end to end on torch-math, the same rows
with simulated and distributed ranks, and the broken combines of tests/mutants/cp.py caught."""

from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from harness.cell.context_parallel.combine import combine_rank
from harness.cell.context_parallel.ranks import run_simulated
from harness.cell.context_parallel.shard import shard_positions, tp_heads
from harness.registry import resolve
from harness.plan.cells import RunOptions, group_by_case, plan_cells
from harness.cell.case import iterate_case
from harness.spec import load_suite
from mutants.cp import CP_MUTANTS
from mutants.cp_gloo import gloo_rank, partials as _partials

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "suites" / "context_parallel.yaml"


def test_sharding_covers_every_position_once_and_leaves_empty_shards():
    for sharding in ("interleaved", "contiguous"):
        for s, n in ((10, 4), (3, 8), (1, 2), (17, 3)):
            parts = [shard_positions(s, n, r, sharding) for r in range(n)]
            assert sorted(torch.cat(parts).tolist()) == list(range(s))
            if s < n:
                assert sum(len(p) == 0 for p in parts) >= n - s
    assert shard_positions(10, 4, 1, "interleaved").tolist() == [1, 5, 9]  # t % N
    assert shard_positions(10, 4, 3, "contiguous").tolist() == [9]
    assert tp_heads(8, 2, 4, 3) == ([6, 7], [1])  # KV heads replicated under TP 4 > 2 KV heads


@pytest.mark.parametrize("name", ["ag_rs", "a2a"])
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_simulated_combine_is_the_exact_merge(name, n):
    outs, lses, ref, ref_lse = _partials(n)
    res = run_simulated(n, lambda c: combine_rank(outs[c.rank], lses[c.rank], c, name))
    for o, l in res:  # every rank ends with the full merged output
        torch.testing.assert_close(o.double(), ref, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(l.double(), ref_lse, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", sorted(CP_MUTANTS))
def test_each_broken_combine_is_wrong_on_partials(name):
    outs, lses, ref, _ = _partials(4, big=4.0 if "shift" in name else 1.0)
    o, _ = run_simulated(4, lambda c: combine_rank(outs[c.rank], lses[c.rank], c, name))[0]
    assert not torch.allclose(o.double(), ref, atol=1e-3, equal_nan=False)


@pytest.mark.slow
@pytest.mark.parametrize("n", [2, 4])
def test_gloo_process_group_gives_the_simulated_result(n):
    import socket

    ctx = mp.get_context("spawn")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    q = ctx.SimpleQueue()
    mp.start_processes(gloo_rank, args=(n, port, q), nprocs=n, join=True, start_method="spawn")
    got = [q.get() for _ in range(2 * n)]
    outs, lses, ref, _ = _partials(n)
    assert {(name, rank) for name, rank, _, _ in got} == {(c, r) for c in ("ag_rs", "a2a") for r in range(n)}
    for name, rank, o, l in got:
        o, l = torch.from_numpy(o), torch.from_numpy(l)
        sim = run_simulated(n, lambda c: combine_rank(outs[c.rank], lses[c.rank], c, name))  # noqa: B023  (called at once, in this iteration)
        torch.testing.assert_close(o, sim[rank][0], atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(l, sim[rank][1], atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(o.double(), ref, atol=1e-5, rtol=1e-5)


def _rows(suite, cases, backends=("torch-math",)):
    opts = RunOptions(device=torch.device("cpu"), time=False, suite_path=str(SUITE))
    suite = suite.model_copy(update={"cases": cases})
    rows = []
    for group in group_by_case(plan_cells(suite, [resolve(b) for b in backends], opts)):
        rows += list(iterate_case(group, suite, opts))
    return rows


def _cp(case, **changes):
    return case.model_copy(update={"context_parallel": case.context_parallel.model_copy(update=changes)})


@pytest.fixture(scope="module")
def suite():
    return load_suite(SUITE)


def test_suite_cells_pass_and_backends_without_lse_are_unsupported(suite):
    want = {"decode[num_kv_heads=1,degree=8,combine=a2a]", "chunked-prefill[degree=4,combine=ag_rs,sharding=contiguous]",
            "tp[degree=8,combine=ag_rs,tp_size=4]", "fp8[kv_cache_dtype=fp8_e5m2,combine=a2a]"}
    rows = _rows(suite, [c for c in suite.cases if c.name in want], ("torch-math", "sdpa"))
    assert len(rows) == 8
    for r in rows:
        if r.backend == "sdpa":
            assert r.status == "unsupported" and "LSE" in r.reason
            continue
        assert r.status == "pass", r.reason
        assert r.check.lse_checked and r.check.num_requests >= 3
        assert {i.invariant: i.status for i in r.check.invariants} == {"cp-combine": "pass", "cp-degree": "pass"}
        assert r.call.model_dump()["context_parallel"]["degree"] == r.case_params.get("degree", 4)
    decode = next(r for r in rows if r.case.startswith("decode") and r.backend == "torch-math")
    assert decode.call.model_dump()["context_parallel"]["empty_shards"] > 0  # a 2-token request at CP 8


@pytest.mark.slow
def test_distributed_ranks_give_the_same_rows(suite):
    case = next(c for c in suite.cases if c.name == "chunked-prefill[degree=2,combine=a2a,sharding=interleaved]")
    sim, dist_ = _rows(suite, [case, _cp(case, ranks="distributed").model_copy(update={"name": case.name + "-d"})])
    assert sim.status == dist_.status == "pass", (sim.reason, dist_.reason)
    assert sim.check.num_requests == dist_.check.num_requests
    assert [p.passed for p in sim.check.per_request] == [p.passed for p in dist_.check.per_request]
    assert abs(sim.check.rel_l2_err - dist_.check.rel_l2_err) < 1e-3


@pytest.mark.parametrize("mutant,case_name", [
    ("mutant-wrong-lse-base", "decode[num_kv_heads=2,degree=4,combine=ag_rs]"),
    ("mutant-no-inf-guard", "decode[num_kv_heads=2,degree=8,combine=a2a]"),
    ("mutant-no-max-shift", "large-logits[combine=ag_rs]"),
    ("mutant-swapped-gather", "chunked-prefill[degree=2,combine=ag_rs,sharding=contiguous]"),
])
def test_broken_combines_are_flagged(suite, mutant, case_name):
    case = next(c for c in suite.cases if c.name == case_name)
    (row,) = _rows(suite, [_cp(case, combine=mutant)])
    assert row.status == "mismatch", row.reason
    assert row.check.num_failed_requests > 0


def test_no_max_shift_is_right_at_ordinary_logits(suite):
    """The large-logits case is what catches the missing shift: at magnitude 1 it merges right."""
    case = next(c for c in suite.cases if c.name == "large-logits[combine=ag_rs]")
    (row,) = _rows(suite, [_cp(case.model_copy(update={"magnitude": 1.0}), combine="mutant-no-max-shift")])
    assert row.check.num_failed_requests == 0
