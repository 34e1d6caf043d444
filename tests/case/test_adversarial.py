"""--adversarial / suites/conformance-adversarial.yaml: every KV slot no request owns
holds NaN, so a kernel that reads one returns NaN; correct backends are unaffected."""

from pathlib import Path

import torch

from harness.registry import resolve
from harness.cell.prepare import CaseContext
from harness.plan.cells import Cell, RunOptions, select_cases
from harness.cell.run import run_cell
from harness.spec import CaseSpec, load_suite
from harness.case.workload import generate

ROOT = Path(__file__).resolve().parents[2]
CPU = torch.device("cpu")


def _case(**kw):
    base = dict(name="adv", num_heads=8, num_kv_heads=2, head_size=32, dtype="bfloat16", block_size=16, seed=3,
                adversarial=True, batch=[{"kind": "decode", "count": 3, "context_len": {"dist": "list", "values": [0, 63, 130]}},
                                         {"kind": "extend", "count": 1, "query_len": 17, "context_len": 64}])
    base.update(kw)
    return CaseSpec.model_validate(base)


def test_unused_slots_are_nan_and_used_ones_are_not():
    b = generate(_case())
    nan_tokens = torch.isnan(b.kv_cache.float()).flatten(3).all(-1)  # [blocks, 2, block_size]
    used = sum(b.seq_lens)
    assert int((~nan_tokens[:, 0]).sum()) == used  # exactly the owned slots are finite
    assert all(torch.isfinite(k.float()).all() for k in b.k_logical)


def _run(backend, case):
    opts = RunOptions(device=CPU, time=False)
    suite = load_suite(ROOT / "suites" / "conformance-adversarial.yaml")
    return run_cell(Cell(case, resolve(backend), {}), CaseContext(case, CPU, True), suite, opts)


def test_correct_backends_pass_and_a_page_misreader_fails():
    case = _case()
    for backend in ("torch-math", "sdpa"):
        row = _run(backend, case)
        assert row.status == "pass", (backend, row.reason)
    row = _run("mutants.cpu:PageOffByOne", case)
    assert row.status == "mismatch"


def test_huge_logits_case_passes_on_the_cpu_backends():
    case = _case(magnitude=12.0, dtype="float16")
    for backend in ("torch-math", "sdpa"):
        row = _run(backend, case)
        assert row.status == "pass", (backend, row.reason)


def test_flag_turns_any_suite_adversarial_and_the_reproducer_says_so():
    suite = load_suite(ROOT / "suites" / "conformance-cpu.yaml")
    cases = select_cases(suite, RunOptions(device=CPU, adversarial=True))
    assert cases and all(c.adversarial for c in cases)
    row = _run("torch-math", _case())
    assert "--adversarial" in row.reproducer
