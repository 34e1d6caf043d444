"""The MLA checks added where the first ones were thin (tests/mutants/mla_gaps.py): each gap
mutant is flagged on the cells (or by the gate) made for it and on no other ``cpu-*`` cell of
suites/mla.yaml, i.e. the earlier cells and gates let it through. The correct backends pass the
same cells (tests/test_mla.py runs them on every ``cpu-*`` cell)."""

from pathlib import Path

import pytest
import torch

from harness.cell.case import iterate_case
from harness.cell.check import rel_l2_limit
from harness.plan.cells import RunOptions, group_by_case, plan_cells
from harness.spec import load_suite
from mutants.mla_gaps import GAP_MUTANTS, FinalKeyDropped, LastPageLenModulo, ScaleV3HardCoded

SUITE = Path(__file__).resolve().parent.parent / "suites" / "mla.yaml"
# The cells each mutant must be flagged on, and only there.
CAUGHT_ON = {ScaleV3HardCoded.name: "cpu-prefill-scales[", LastPageLenModulo.name: "cpu-page-boundary[",
             FinalKeyDropped.name: "cpu-prefill-long["}


@pytest.fixture(scope="module")
def rows():
    suite = load_suite(SUITE)
    suite = suite.model_copy(update={"cases": [c for c in suite.cases if c.name.startswith("cpu-")]})
    opts = RunOptions(device=torch.device("cpu"), time=False, suite_path=str(SUITE))
    return [r for g in group_by_case(plan_cells(suite, GAP_MUTANTS, opts)) for r in iterate_case(g, suite, opts)]


@pytest.mark.parametrize("mutant", GAP_MUTANTS, ids=lambda m: m.name)
def test_each_gap_mutant_is_caught_only_by_its_check(rows, mutant):
    mine = [r for r in rows if r.backend == mutant.name and r.status != "unsupported"]
    assert not [r for r in mine if r.status == "error"], [r.reason for r in mine if r.status == "error"]
    flagged = {r.case for r in mine if r.status == "mismatch"}
    target = {r.case for r in mine if r.case.startswith(CAUGHT_ON[mutant.name])}
    assert target and flagged == target, (mutant.name, sorted(flagged), sorted(target))


def test_final_key_dropped_is_caught_by_the_last_row_gate_alone_and_with_the_model_dtype_tolerance(rows):
    long = [r for r in rows if r.backend == FinalKeyDropped.name and r.case.startswith("cpu-prefill-long[")]
    assert {r.config.kv_cache_dtype for r in long} == {"auto", "fp8_e4m3"}
    for r in long:
        bad = [p for p in r.check.per_request if not p.passed]
        assert bad and all(p.problems.startswith("last query row rel L2") for p in bad), [p.problems for p in bad]
        assert all(p.rel_l2_limit == pytest.approx(rel_l2_limit("bfloat16", "auto", p.seq_len)) for p in bad)
        if r.config.kv_cache_dtype == "fp8_e4m3":
            # The fp8 allowance (what an fp8 latent's expanded cells had) would have passed it.
            assert all(p.last_row_rel_l2_err < rel_l2_limit("bfloat16", "fp8_e4m3", p.seq_len) for p in bad)
            assert r.check.max_abs_err < 6e-2 and r.check.lse_max_abs_err < 1e-1


def test_expanded_rows_say_the_up_projection_is_not_timed(rows):
    """vLLM up-projects the context every chunked-prefill step; no backend's timed call here does."""
    for r in rows:
        if r.status in ("pass", "mismatch"):
            note = r.call.untimed_work if r.call else None
            assert (note is not None and "up-projection" in note) == (r.config.attention_kind == "mla_expanded"), r.case


def test_last_row_gate_flags_an_error_the_request_figure_averages_away():
    from harness.cell.check import check_output, tolerance_for

    torch.manual_seed(0)
    ref = 0.05 * torch.randn(64, 4, 32, dtype=torch.float64)  # output-sized values: the atol gate stays quiet
    out = ref.clone()
    out[63] *= 1.03  # 3% on the last of 64 rows: 0.4% over the request, under the 1.17% limit
    c = check_output(out, ref, tolerance_for("bfloat16", False), query_start_loc=[0, 64], kinds=["prefill"],
                     seq_lens=[64])
    (p,) = c.per_request
    assert not c.passed and p.problems.startswith("last query row rel L2") and p.rel_l2_err < p.rel_l2_limit
    out[63] = ref[63]
    assert check_output(out, ref, tolerance_for("bfloat16", False), query_start_loc=[0, 64], seq_lens=[64]).passed
