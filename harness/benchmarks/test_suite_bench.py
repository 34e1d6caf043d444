"""A suite's cells as pytest-benchmark tests (opt-in: nothing runs without --bench-suite).

    pytest --bench-suite suites/decode.yaml --bench-backends flash-attn --benchmark-json out.json

(the attn-harness pytest plugin collects this module when --bench-suite is given and no test
paths are, so it works after `pip install 'attn-harness[bench]'` from any directory)

Every cell is checked against the reference first (a wrong result fails the test, an
unsupported or skipped cell is skipped with its reason); the harness timer's samples are then
replayed into pytest-benchmark through ``harness_clock`` (see harness/pytest_plugin.py), so the
stored JSON holds device times, one round per harness sample.
"""

from __future__ import annotations

import pytest

from harness.pytest_plugin import CaseRunner, cell_id, harness_clock, load_samples, make_plan, replay_one_sample
from harness.records.results import Status

# pytest-benchmark's timer for these tests is the harness's (replayed) device clock.
pytestmark = pytest.mark.benchmark(timer=harness_clock, disable_gc=False, warmup=False)

_RUNNERS: dict[int, CaseRunner] = {}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "harness_cell" not in metafunc.fixturenames:
        return
    plan = make_plan(metafunc.config)
    if plan is None:
        why = "opt-in: pass --bench-suite SUITE.yaml (options come from the attn-harness pytest plugin)"
        metafunc.parametrize("harness_cell", [pytest.param(None, marks=pytest.mark.skip(reason=why))], ids=["no-suite"])
        return
    _RUNNERS[id(metafunc.config)] = CaseRunner(plan)
    metafunc.parametrize("harness_cell", plan.cells, ids=[cell_id(c) for c in plan.cells])


def test_suite_cell(harness_cell, benchmark, request):
    row = _RUNNERS[id(request.config)].row(harness_cell)
    if row.status in (Status.SKIPPED, Status.UNSUPPORTED):
        pytest.skip(f"{row.status}: {row.reason}")
    assert row.status == Status.PASS, f"{row.status}: {row.reason}\n  reproduce: {row.reproducer}"
    timing = row.timing
    raw = timing.raw_us if timing is not None else None
    assert timing is not None and raw, "the harness returned no per-sample times (TimingOptions.keep_raw)"
    benchmark.group = harness_cell.case.name
    benchmark.extra_info.update({
        "suite": row.suite, "case": row.case, "backend": row.backend, "variant": row.variant_label,
        "timer": f"harness {timing.method} (per-call samples replayed)",
        "calls_per_sample": timing.calls_per_sample, "cuda_graph": timing.cuda_graph.model_dump(),
        "harness_median_us": timing.median_us, "harness_ci_us": [timing.ci_low_us, timing.ci_high_us],
        "max_abs_err": row.check.max_abs_err if row.check else None,
        "flops": row.metrics.flops if row.metrics else None, "bytes": row.metrics.bytes if row.metrics else None,
        "reproducer": row.reproducer,
    })
    load_samples(raw)
    benchmark.pedantic(replay_one_sample, rounds=len(raw), iterations=1, warmup_rounds=0)
