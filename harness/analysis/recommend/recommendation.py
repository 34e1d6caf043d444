"""Everything recommend computes from the rows of one GPU, in one object."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from harness.analysis.recommend.fit import CascadeFit, fit_cascade
from harness.analysis.recommend.load import Inputs, RecommendError, load_inputs
from harness.analysis.recommend.rank import DEFAULT_TIE, BucketResult, rank
from harness.analysis.recommend.vllm import DefaultCost, default_costs, single_setting


@dataclass
class Recommendation:
    inputs: Inputs
    tie: float
    buckets: list[BucketResult]
    unbucketed: list[str]
    defaults: list[DefaultCost]
    single: list[dict[str, Any]]
    cascade: list[CascadeFit]

    @property
    def measured(self) -> list[BucketResult]:
        return [b for b in self.buckets if b.ranked]

    @property
    def unmeasured(self) -> list[BucketResult]:
        return [b for b in self.buckets if not b.ranked]

    @property
    def single_candidate(self) -> list[BucketResult]:
        return [b for b in self.buckets if len(b.ranked) == 1]


def recommend(paths: Sequence[str | Path], tie: float = DEFAULT_TIE, call_form: str = "vllm") -> Recommendation:
    inputs = load_inputs(paths, call_form)
    return recommend_rows(inputs, tie)


def recommend_rows(inputs: Inputs, tie: float = DEFAULT_TIE) -> Recommendation:
    if not 0 <= tie < 1:
        raise RecommendError(f"--tie {tie}: expected a fraction in [0, 1), e.g. 3%")
    buckets, unbucketed = rank(inputs.rows, tie)
    facts = inputs.facts
    return Recommendation(inputs, tie, buckets, unbucketed, default_costs(buckets, inputs.capability, tie, facts=facts),
                          single_setting(buckets, facts), fit_cascade(inputs.rows, facts))
