"""CaseLayout: a case's lengths, blocks and byte sizes, computed once from the spec, are exactly
what the generator builds; the one dtype table gives every element size (fp8 included); the
planner, the CPU size limits and the work accounting read the layout; rows carry it."""

import json

import pytest
import torch

from harness.cli import main as cli_main
from harness.case.layout import case_layout
from harness.spec.dtypes import dtype_bytes, kv_element_bytes
from attn_contract import TORCH_DTYPES
from harness.case.metrics import attention_work, layout_work
from harness.plan.cells import RunOptions, too_large_reason
from harness.spec import parse_suite
from harness.case.workload import generate
from test_workload import case  # the same mixed decode/prefill/extend case


@pytest.mark.parametrize("kw", [{}, {"kv_cache_dtype": "fp8_e4m3"}, {"shared_prefix": {"length": 8, "groups": 2}},
                                {"block_size": 16, "dtype": "float16"}])
def test_layout_is_exactly_the_generated_batch(kw):
    c = case(**kw)
    lay = case_layout(c)
    b = generate(c)
    assert list(lay.query_lens) == b.query_lens and list(lay.seq_lens) == b.seq_lens
    assert list(lay.kinds) == b.kinds
    assert lay.num_tokens == b.num_tokens and lay.num_reqs == b.num_reqs
    assert lay.num_blocks == b.kv_cache.shape[0] and lay.num_blocks_used == b.num_blocks_used
    assert lay.max_blocks_per_req == b.block_table.shape[1]
    assert lay.prefix_groups == len(b.prefix_group_lens) and lay.group_of_req == b.prefix_group_of_req
    assert lay.kv_elt_bytes == b.kv_cache.element_size() and lay.elt_bytes == b.query.element_size()
    assert lay.kv_cache_bytes == b.kv_cache.numel() * b.kv_cache.element_size()
    assert lay.logical_kv_bytes == sum(k.numel() * k.element_size() + v.numel() * v.element_size()
                                       for k, v in zip(b.k_logical, b.v_logical))
    assert b.layout is not None and b.layout == lay  # generate computes nothing the layout has
    again = generate(c, layout=lay).kv_cache
    assert again.view(torch.uint8).equal(b.kv_cache.view(torch.uint8))  # bytes: fp8 has no CPU equal before torch 2.10


def test_one_dtype_table_gives_every_element_size():
    for name, dt in TORCH_DTYPES.items():
        assert dtype_bytes(name) == torch.empty((), dtype=dt).element_size()
    assert dtype_bytes("fp8_e4m3") == dtype_bytes("fp8_e5m2") == 1 and dtype_bytes("bfloat16") == 2
    assert kv_element_bytes("bfloat16", "auto") == 2 and kv_element_bytes("float16", "fp8_e5m2") == 1
    with pytest.raises(ValueError, match="kv_cache_dtype 'int4': unknown element size"):
        kv_element_bytes("bfloat16", "int4")


def test_layout_work_is_attention_work_on_the_layout():
    c = case(kv_cache_dtype="fp8_e4m3", sliding_window=7)
    lay = case_layout(c)
    w = attention_work(list(lay.query_lens), list(lay.seq_lens), num_heads=8, num_kv_heads=2, head_size=16,
                       dtype="bfloat16", kv_cache_dtype="fp8_e4m3", block_size=4, causal=True, sliding_window=7)
    assert layout_work(lay) == w


def test_cpu_kv_limit_counts_fp8_at_one_byte():
    """The CPU size limit used to count 2 bytes per KV element whatever the cache dtype."""
    ctx = {"kind": "decode", "count": 64, "context_len": 8000}
    bf16 = case(num_kv_heads=8, head_size=64, batch=[ctx])
    fp8 = case(num_kv_heads=8, head_size=64, batch=[ctx], kv_cache_dtype="fp8_e4m3")
    # 64 * 8001 tokens * 2 (K, V) * 8 heads * 64 * 2 bytes = 1000 MiB; fp8: 500 MiB
    opts = RunOptions(device=torch.device("cpu"), cpu_max_gflop=1e9, cpu_max_kv_mib=750)
    assert "KV cache 1000 MiB" in too_large_reason(bf16, opts)
    assert too_large_reason(fp8, opts) is None
    assert fp8.work_bound()[1] * 2 == bf16.work_bound()[1]


SWEEP = """
suite: s
cases:
  - name: decode
    num_heads: 4
    num_kv_heads: 1
    head_size: 16
    block_size: [8, 16]
    batch: [{kind: decode, count: [1, 2], context_len: 20}]
  - name: plain
    num_heads: 4
    num_kv_heads: 1
    head_size: 16
    batch: [{kind: decode, count: 1, context_len: 20}]
"""


def test_expanded_cases_carry_their_group_and_swept_values():
    import yaml

    cases = parse_suite(yaml.safe_load(SWEEP)).cases
    assert [c.name for c in cases][:2] == ["decode[block_size=8,count=1]", "decode[block_size=8,count=2]"]
    assert [(c.group, c.params) for c in cases] == [
        ("decode", {"block_size": 8, "count": 1}), ("decode", {"block_size": 8, "count": 2}),
        ("decode", {"block_size": 16, "count": 1}), ("decode", {"block_size": 16, "count": 2}),
        ("plain", {})]
    from harness.spec import SpecError

    with pytest.raises(SpecError, match="unknown field"):
        parse_suite(yaml.safe_load(SWEEP.replace("  - name: plain", "  - name: plain\n    params: {}")))


def test_rows_carry_the_case_parameters_and_layout(tmp_path):
    suite = tmp_path / "s.yaml"
    suite.write_text(SWEEP)
    out = tmp_path / "r"
    assert cli_main(["run", str(suite), "--device", "cpu", "--backends", "torch-math", "--quiet", "--no-time",
                     "--no-isolation", "--out", str(out)]) == 0
    rows = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    by_case = {r["case"]: r for r in rows}
    r = by_case["decode[block_size=16,count=2]"]
    assert r["case_group"] == "decode" and r["case_params"] == {"block_size": 16, "count": 2}
    assert r["layout"]["block_size"] == 16 and r["layout"]["num_reqs"] == 2
    assert r["layout"]["kv_cache_bytes"] == r["batch"]["num_blocks"] * 16 * 2 * 1 * 16 * 2
    # An unswept case has no parameters (its row omits the empty field; the model reads it as {}).
    assert by_case["plain"]["case_group"] == "plain" and by_case["plain"].get("case_params", {}) == {}
    from harness.records.results import read_rows

    assert {r.case: r.case_params for r in read_rows(out)}["plain"] == {}
