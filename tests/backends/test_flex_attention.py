"""The flex-attention backend on the CPU (eager flex_attention): conformance against the
reference on GQA/MQA, sliding window, softcap, ALiBi, sinks, causal prefill, decode and fp8;
the NaN-filled unused slots of --adversarial; mutants it must catch; its declarations."""

from pathlib import Path

import pytest
import torch

from backends.flex_attention import (GPU_KEY_ELEMS, GPU_SCORE_ELEMS, KV_BLOCK, FlexAttentionBackend, _bucket,
                                     max_call_keys, pack_segments)
from harness.registry import resolve
from harness.cell.prepare import CaseContext
from harness.plan.cells import Cell, RunOptions, group_by_case, plan_cells
from harness.cell.case import iterate_case
from harness.cell.run import run_cell
from harness.spec import CaseSpec, Suite, load_suite
from mutants.flex import FLEX_MUTANTS

ROOT = Path(__file__).resolve().parents[2]
CPU = torch.device("cpu")
FLEX = "backends.flex_attention:FlexAttentionBackend"  # works before the entry point is installed


def _case(heads=(8, 2), causal=True, dtype="bfloat16", kvd="auto", bs=16, layout="NHD", batch=None, **extra):
    return CaseSpec.model_validate(dict(
        name="flex", num_heads=heads[0], num_kv_heads=heads[1], head_size=32, dtype=dtype, kv_cache_dtype=kvd,
        block_size=bs, kv_layout=layout, causal=causal, seed=7,
        batch=batch or [{"kind": "decode", "count": 3, "context_len": {"dist": "uniform", "low": 1, "high": 70}},
                        {"kind": "prefill", "count": 1, "query_len": {"dist": "uniform", "low": 1, "high": 40}},
                        {"kind": "extend", "count": 2, "query_len": {"dist": "uniform", "low": 2, "high": 30},
                         "context_len": {"dist": "uniform", "low": 1, "high": 50}}],
        **extra))


def _run(backend, case, suite=None):
    opts = RunOptions(device=CPU, time=False)
    suite = suite or Suite(suite="flex", cases=[case])
    return run_cell(Cell(case, resolve(backend), {}), CaseContext(case, CPU, True), suite, opts)


PREFILL = [{"kind": "prefill", "count": 2, "query_len": {"dist": "list", "values": [150, 33]}}]
DECODE = [{"kind": "decode", "count": 5, "context_len": {"dist": "list", "values": [1, 17, 200, 64, 129]}}]


@pytest.mark.parametrize("kw", [
    dict(heads=(8, 2)), dict(heads=(8, 1), dtype="float16"), dict(heads=(4, 4), causal=False),
    dict(sliding_window=7), dict(sliding_window=5, causal=False), dict(softcap=8.0), dict(alibi=True),
    dict(sinks=True), dict(batch=PREFILL), dict(batch=DECODE, bs=1), dict(kvd="fp8_e4m3", layout="HND", bs=32),
    dict(batch=PREFILL, sliding_window=40, softcap=5.0),
], ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items() if k != "batch") + (",batch" if "batch" in kw else ""))
def test_flex_matches_the_reference(kw):
    row = _run(FLEX, _case(**kw))
    assert row.status == "pass", row.reason
    assert row.check.lse_checked
    assert row.call.flex_mode.startswith("eager")  # torch.compile on CPU cannot return the LSE


def test_flex_reads_no_unowned_slot():
    suite = load_suite(ROOT / "suites" / "conformance-adversarial.yaml")
    case = _case(adversarial=True, batch=[
        {"kind": "decode", "count": 3, "context_len": {"dist": "list", "values": [0, 63, 130]}},
        {"kind": "extend", "count": 1, "query_len": 17, "context_len": 64}])
    assert _run(FLEX, case, suite).status == "pass"


@pytest.fixture(scope="module")
def conformance_cpu_rows():
    path = ROOT / "suites" / "conformance-cpu.yaml"
    suite = load_suite(path)
    opts = RunOptions(device=CPU, time=False, suite_path=str(path))
    by: dict[str, list] = {}
    for group in group_by_case(plan_cells(suite, [resolve(FLEX), *FLEX_MUTANTS], opts)):
        for row in iterate_case(group, suite, opts):
            by.setdefault(row.backend, []).append(row)
    return by


def test_flex_passes_the_cpu_conformance_suite(conformance_cpu_rows):
    rows = conformance_cpu_rows["flex-attention"]
    bad = [(r.case, r.status, r.reason) for r in rows if r.status not in ("pass", "unsupported")]
    assert not bad
    assert sum(r.status == "pass" for r in rows) >= 6


@pytest.mark.parametrize("mutant", FLEX_MUTANTS, ids=lambda m: m.name)
def test_flex_mutants_are_flagged(conformance_cpu_rows, mutant):
    rows = conformance_cpu_rows[mutant.name]
    assert not [r for r in rows if r.status == "error"]
    assert [r for r in rows if r.status == "mismatch"], f"{mutant.name} passed every cell"


def test_flex_declarations():
    caps = FlexAttentionBackend.capabilities()
    assert caps.returns_lse and caps.sinks and caps.alibi and caps.softcap and caps.sliding_window
    assert {"cpu", "cuda"} <= caps.devices
    reason = FlexAttentionBackend.check_support(_case().attention_config().__class__(
        num_heads=8, num_kv_heads=2, head_size=96), {}, "cpu")
    assert reason and "head_size 96" in reason


def test_shape_buckets_recur_and_bound_the_padding():
    sizes = [_bucket(n, 128) for n in range(1, 200_000, 997)]
    assert all(s % 128 == 0 for s in sizes)
    assert all(_bucket(n, 128) >= n and _bucket(n, 128) <= max(128 * 8, n * 1.125 + 128) for n in range(1, 200_000, 997))
    assert len(set(sizes)) < len(sizes) / 4  # shapes recur: one compile serves many batches


def test_cpu_calls_are_bounded():
    segs = [(r, 0, 64, 512) for r in range(16)]
    calls = pack_segments(segs, [64] * 16, [512] * 16, 8, 1 << 20)
    assert len(calls) > 1 and sum(len(c) for c in calls) == 16
    assert all(8 * sum(s[2] - s[1] for s in c) * sum(s[3] for s in c) <= 1 << 20 for c in calls if len(c) > 1)


def test_cuda_calls_keep_packed_kv_under_2_31_elements():
    # The H200 decode batch that came out wrong (256 decodes, 2.56e9 packed K elements in one
    # call) and the one that hit an illegal address (head 256, 2.72e9): each call now stays
    # under 2**31 elements after its padding, every segment once and in order.
    from attn_contract import AttentionConfig

    for hk, d, n, keys in ((8, 128, 256, 10_000), (8, 256, 128, 10_373)):
        cfg = AttentionConfig(num_heads=32, num_kv_heads=hk, head_size=d)
        segs = [(r, 0, 1, keys) for r in range(n)]
        calls = pack_segments(segs, [1] * n, [keys] * n, 32, GPU_SCORE_ELEMS, max_call_keys(cfg, torch.device("cuda")))
        assert len(calls) > 1 and [s for c in calls for s in c] == segs
        assert all(_bucket(sum(s[3] for s in c), KV_BLOCK) * hk * d <= GPU_KEY_ELEMS for c in calls)
    assert max_call_keys(AttentionConfig(num_heads=8, num_kv_heads=8, head_size=128), torch.device("cpu")) is None


# ---------------------------------------------------------------- sdpa-kernel (forced SDPA kernels)
def test_sdpa_kernel_variants_and_reasons_without_a_gpu():
    from backends.sdpa import SDPABackend
    from backends.sdpa_kernel import SDPAKernelBackend

    assert SDPABackend.variant_axes == {} and SDPABackend.default_variants() == [{}]  # sdpa's rows unchanged
    assert set(SDPAKernelBackend.variant_axes["sdpa_backend"]) == {"cudnn", "flash", "efficient"}
    assert {"sdpa_backend": "cudnn"} in SDPAKernelBackend.default_variants()
    cfg = _case().attention_config()
    for kernel in ("cudnn", "flash", "efficient"):
        v = {"sdpa_backend": kernel}
        reason = SDPAKernelBackend.check_support(cfg, v, "cpu")
        assert reason and "runs on cuda, not cpu" in reason
        if not torch.cuda.is_available():
            av = SDPAKernelBackend.availability(v)
            assert not av.available and kernel in av.reason and "CUDA" in av.reason
    case = _case()
    suite, opts = Suite(suite="k", cases=[case]), RunOptions(device=CPU, time=False)
    rows = [r for g in group_by_case(plan_cells(suite, [SDPAKernelBackend], opts)) for r in iterate_case(g, suite, opts)]
    assert rows and all(r.status in ("unsupported", "skipped") and r.reason for r in rows)
