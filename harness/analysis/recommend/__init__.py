"""``harness recommend``: measured backend selection per shape bucket, for serving engines.

The package by job: ``rows`` (every read of a row's fields), ``load``, ``buckets``, ``rank``,
``vllm`` (the engine mapping, vLLM's default against the measurement), ``fit`` (the cascade rule),
``render`` (markdown), ``export`` (policy.json, vllm.json), ``suggest`` (the fill-in suite).

From result rows of one GPU (one or many runs) this module:

- groups rows into shape buckets (heads / KV heads / head size, dtype / KV dtype, page size and
  KV layout, features, batch kind, batch-size range, context range);
- ranks, in each bucket, the backend+variant candidates that passed the check on every case of
  the bucket, by the geometric mean of their median times over the bucket's cases;
- gives the winner's margin over the runner-up with an interval built from the rows' own
  median confidence intervals, and calls it a tie when that interval reaches 0 (the CIs
  overlap) or the margin is under the tie band;
- compares with vLLM's default choice (``harness.analysis.selection_rules.vllm_default``) and with the
  cascade decision rules (vLLM's and one fitted to the measured cells);
- lists the buckets without a measurement and writes a suite that fills them.

How the margin interval is computed: each timed row carries a distribution-free confidence
interval of its median, ``[ci_low_us, ci_high_us]`` (``harness.timing``; coverage is recorded
as ``ci_coverage``, about 95%). Repeated runs of one case are merged into the median of their
medians with the envelope of their intervals (so run-to-run drift counts as noise). For one
case the runner-up/winner ratio lies in ``[ru_low / w_high, ru_high / w_low]`` (interval
arithmetic: if both intervals hold, the ratio is inside); over several cases the bounds are
averaged geometrically like the point estimate. This is conservative and not a formal test.
"""

from __future__ import annotations

from harness.analysis.recommend.buckets import BATCH_BINS, CONTEXT_BINS, Bucket, bucket_of
from harness.analysis.recommend.export import POLICY_FORMAT, compact_json, policy, vllm_export, write_outputs
from harness.analysis.recommend.fit import CascadeFit, cascade_cells, fit_cascade
from harness.analysis.recommend.load import Inputs, RecommendError, inputs_of, load_inputs
from harness.analysis.recommend.rank import (
    DEFAULT_TIE,
    RAN_OK,
    BucketResult,
    Candidate,
    Ratio,
    Timed,
    case_batches,
    rank,
    rank_bucket,
    rank_rows,
    ratio,
    tie_kind,
)
from harness.analysis.recommend.recommendation import Recommendation, recommend, recommend_rows
from harness.analysis.recommend.render import (
    ratio_text,
    cascade_records,
    cascade_table,
    coverage_text,
    defaults_records,
    defaults_summary,
    defaults_table,
    to_markdown,
    winners_records,
    winners_table,
)
from harness.analysis.recommend.suggest import suggest_suite, write_suggest
from harness.analysis.recommend.vllm import VLLM_NOT_EXPRESSIBLE, DefaultCost, default_costs, single_setting, vllm_setting

__all__ = [
    "BATCH_BINS", "CONTEXT_BINS", "DEFAULT_TIE", "POLICY_FORMAT", "RAN_OK", "VLLM_NOT_EXPRESSIBLE",
    "Bucket", "BucketResult", "Candidate", "CascadeFit", "DefaultCost", "Inputs", "Ratio", "Recommendation",
    "RecommendError", "Timed", "ratio_text", "bucket_of", "cascade_cells",
    "cascade_records", "cascade_table", "case_batches", "compact_json", "coverage_text", "default_costs",
    "defaults_records", "defaults_summary", "defaults_table", "fit_cascade", "inputs_of", "load_inputs",
    "policy", "rank", "rank_bucket", "rank_rows", "ratio", "recommend", "recommend_rows", "single_setting",
    "suggest_suite", "tie_kind", "to_markdown", "vllm_export", "vllm_setting", "winners_records", "winners_table",
    "write_outputs", "write_suggest",
]
