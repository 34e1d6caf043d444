"""The project's mutation test: every deliberately broken backend of tests/mutants/cpu.py is
flagged `mismatch` on at least one cell of suites/conformance-cpu.yaml, while the real CPU
backends pass every cell they support. A conformance suite or check that lets a mutant
through has a blind spot."""

from pathlib import Path

import pytest
import torch

from harness.registry import resolve
from harness.plan.cells import RunOptions, group_by_case, plan_cells
from harness.cell.case import iterate_case
from harness.spec import load_suite
from mutants.cpu import MUTANTS
from mutants.gpu import BUGS, MATH_MUTANTS

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "suites" / "conformance-cpu.yaml"


@pytest.fixture(scope="module")
def rows_by_backend():
    suite = load_suite(SUITE)
    opts = RunOptions(device=torch.device("cpu"), time=False, suite_path=str(SUITE))
    by: dict[str, list] = {}
    # One pass: each case's batch and reference are made once for all backends.
    cells = plan_cells(suite, [resolve("torch-math"), resolve("sdpa"), *MUTANTS, *MATH_MUTANTS], opts)
    for group in group_by_case(cells):
        for row in iterate_case(group, suite, opts):
            by.setdefault(row.backend, []).append(row)
    return by


def test_there_are_enough_mutants():
    assert len(MUTANTS) >= 12
    assert len({m.name for m in MUTANTS}) == len(MUTANTS)


@pytest.mark.parametrize("backend", ["torch-math", "sdpa"])
def test_real_cpu_backends_pass_everything(rows_by_backend, backend):
    rows = rows_by_backend[backend]
    assert rows
    bad = [(r.case, r.status, r.reason) for r in rows if r.status not in ("pass", "unsupported")]
    assert not bad
    assert sum(r.status == "pass" for r in rows) >= 6


@pytest.mark.parametrize("mutant", MUTANTS + MATH_MUTANTS, ids=lambda m: m.name)
def test_every_mutant_is_flagged(rows_by_backend, mutant):
    rows = rows_by_backend[mutant.name]
    assert not [r for r in rows if r.status == "error"], [r.reason for r in rows if r.status == "error"]
    flagged = [r for r in rows if r.status == "mismatch"]
    assert flagged, f"{mutant.name} ({mutant.description}) passed every cell"
    # The row says which requests failed (or that the inputs were modified).
    r = flagged[0]
    assert r.check.num_failed_requests > 0 or r.check.inputs_modified or any(
        not c.passed for c in r.check.rechecks or [])


def test_mutant_loads_through_the_plugin_api():
    cls = resolve("mutants.cpu:TopLeftCausal")
    assert cls.name == "mutant-TopLeftCausal"


def test_gpu_mutant_wrappers_cover_the_bug_classes():
    """tests/mutants/gpu.py wraps any backend (FA, FlashInfer on the H200; torch-math here)."""
    import mutants.gpu as gpu

    assert len(BUGS) >= 12
    assert len(gpu.FA_MUTANTS) == len(gpu.FI_MUTANTS) == len(BUGS)
    for spec in gpu.SPECS[:2] + gpu.SPECS[-2:]:
        cls = resolve(spec)
        assert cls.name.startswith("mutant-") and cls.default_variants()
