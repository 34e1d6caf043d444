"""Broken context-parallel combines, one bug each, registered under their own names in
``harness.cell.context_parallel.combine.COMBINES`` (the mutation test of tests/cell/test_context_parallel.py
runs suites/context_parallel.yaml cells with them and requires each to be flagged)."""

from __future__ import annotations

from harness.cell.context_parallel.combine import COMBINES, Combine

CP_MUTANTS: dict[str, Combine] = {
    # A reducer written for FlashInfer's base-2 LSEs fed FA's natural-log ones.
    "mutant-wrong-lse-base": Combine("ag_rs", lse_base=2),
    # No -inf handling: an empty shard's partial (never written, NaN) is multiplied by weight 0.
    "mutant-no-inf-guard": Combine("a2a", inf_guard=False),
    # exp(lse) without subtracting the max: overflows at large logits.
    "mutant-no-max-shift": Combine("ag_rs", max_shift=False, inf_guard=False),
    # The all-gathered LSEs in reverse rank order: each rank rescales by another rank's LSE.
    "mutant-swapped-gather": Combine("ag_rs", gather_order="reversed"),
}
COMBINES.update(CP_MUTANTS)
