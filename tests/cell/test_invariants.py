"""Metamorphic invariants (harness/cell/invariants.py): correct CPU backends hold all three; a
backend that mixes up requests or pages breaks them."""

import torch

from harness.cell.invariants import check_invariants, permuted_pages
from harness.case.reference import reference_attention
from harness.registry import resolve
from harness.spec import CaseSpec
from harness.case.workload import generate

CPU = torch.device("cpu")


def _batch():
    return generate(CaseSpec.model_validate(dict(
        name="inv", num_heads=8, num_kv_heads=2, head_size=32, dtype="bfloat16", block_size=16, seed=5,
        batch=[{"kind": "decode", "count": 2, "context_len": {"dist": "list", "values": [40, 90]}},
               {"kind": "extend", "count": 1, "query_len": 12, "context_len": 30},
               {"kind": "prefill", "count": 1, "query_len": 25}])), CPU)


def test_permuted_pages_hold_the_same_logical_kv():
    b = _batch()
    p = permuted_pages(b)
    assert not torch.equal(p.block_table, b.block_table)
    ref, _ = reference_attention(b)
    ref_p, _ = reference_attention(p)  # the reference reads logical K/V: unchanged by construction
    assert torch.equal(ref, ref_p)


def test_correct_backends_hold_every_invariant():
    b = _batch()
    for name in ("torch-math", "sdpa"):
        res = check_invariants(resolve(name), {}, b, CPU)
        assert [r.invariant for r in res] == ["batch-invariance", "page-permutation", "decode-vs-prefill",
                                                 "split-kv", "cascade-vs-plain"]
        by = {r.invariant: r.status for r in res}
        # Neither declares a split knob nor a plain counterpart: those two cannot run.
        assert by.pop("split-kv") == by.pop("cascade-vs-plain") == "unsupported", (name, res)
        assert set(by.values()) == {"pass"}, (name, res)


def _inv(backend, batch):
    return {r.invariant: r for r in check_invariants(resolve(backend), {}, batch, CPU)}


def test_split_kv_agrees_for_a_correct_merge_and_not_for_a_broken_one():
    b = _batch()
    good = _inv("mutants.cpu:SplitKVMath", b)["split-kv"]
    assert good.status == "pass", good
    assert good.detail.startswith("num_splits=4 vs num_splits=1")
    bad = _inv("mutants.cpu:SplitKVBadMerge", b)["split-kv"]
    assert bad.status == "mismatch" and "rel L2 difference" in bad.detail, bad


def _shared_prefix_batch():
    return generate(CaseSpec.model_validate(dict(
        name="cas", num_heads=8, num_kv_heads=2, head_size=32, dtype="bfloat16", block_size=16, seed=7,
        shared_prefix={"length": 48, "groups": 2},
        batch=[{"kind": "decode", "count": 4, "context_len": {"dist": "list", "values": [5, 30, 0, 17]}},
               {"kind": "extend", "count": 2, "query_len": 9, "context_len": 12}])), CPU)


def test_cascade_equals_plain_and_a_cascade_without_its_prefix_does_not():
    b = _shared_prefix_batch()
    good = _inv("torch-cascade", b)["cascade-vs-plain"]
    assert good.status == "pass" and good.detail.startswith("vs torch-math"), good
    bad = _inv("mutants.cpu:CascadeDropsPrefix", b)["cascade-vs-plain"]
    assert bad.status == "mismatch", bad


def test_a_request_swapping_backend_breaks_batch_invariance():
    res = {r.invariant: r for r in check_invariants(resolve("mutants.cpu:SwappedRequests"), {}, _batch(), CPU)}
    assert res["batch-invariance"].status == "mismatch"
    assert res["batch-invariance"].detail.startswith("request 0")


def test_run_flag_records_invariants_in_the_row(tmp_path):
    from harness.cli import main

    out = tmp_path / "r"
    rc = main(["run", "suites/conformance-cpu.yaml", "--case", "mixed", "--backends", "torch-math,mutants.cpu:SwappedRequests",
               "--device", "cpu", "--no-time", "--invariants", "--no-isolation", "--quiet", "--out", str(out)])
    assert rc == 0
    import json
    rows = {r["backend"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    assert {i["status"] for i in rows["torch-math"]["check"]["invariants"]} == {"pass", "unsupported"}
    assert rows["torch-math"]["status"] == "pass"  # an invariant a backend cannot run breaks nothing
    assert rows["mutant-SwappedRequests"]["status"] == "mismatch"
