"""Recommendation: the measured winner per shape bucket, vLLM's default choice against it, and
the cascade decision rules (``harness recommend``, docs/recommend.md), from the same rows."""

from __future__ import annotations

import pandas as pd

from harness.records.header import RunHeader
from harness.report.core import Block, Table, Text, result_rows, section


def _no_default_why(headers: list[RunHeader], gpu: str) -> str:
    """Why vLLM's default is not evaluated (vLLM picks it per GPU compute capability), from the run headers."""
    devices = [h.device for h in headers]
    cpus = [d for d in devices if d.type == "cpu"]
    if cpus:
        name = cpus[0].name or "cpu"
        return (f"The run was on a CPU ({name}; run.json device type cpu), not a GPU: vLLM picks its default per GPU "
                "compute capability, so it is not evaluated here.")
    if not any(d.model_dump(exclude_none=True) for d in devices):
        return "GPU unknown (no run.json device next to these results): vLLM's default is not evaluated."
    return f"GPU capability unknown (run.json names {gpu} without one): vLLM's default is not evaluated."


@section("recommend", "Recommendation: measured selection against vLLM's default", order=40, cost=12,
         looked_for="timed passing rows of two or more backends/variants on one shape bucket, or cascade rows with "
                    "call.rule_says_cascade and a timed plain counterpart")
def recommend(df: pd.DataFrame) -> list[Block]:
    if df.empty:
        return []
    # Imported here, not at the top: only pages with timed rows need harness.analysis.recommend
    # (ranking is the costliest part of the page, so cost=12 starts it first among the workers).
    from harness.analysis.recommend import (
        RecommendError, cascade_records, defaults_records, defaults_summary, inputs_of, recommend_rows, winners_records,
    )

    runs = list(df.attrs.get("runs", []))
    try:
        rec = recommend_rows(inputs_of(result_rows(df), runs))
    except RecommendError as e:  # e.g. runs of two GPUs: the rest of the report still renders
        return [Text(f"No recommendation: {e}", cls="warn")]
    win, casc = winners_records(rec), cascade_records(rec)
    if not win and not casc:
        return []
    out: list[Block] = [Text(
        f"{len(rec.measured)} of {len(rec.buckets)} shape buckets measured on {rec.inputs.gpu}. Ranked: candidates that "
        f"passed the check on every case of the bucket, by the geometric mean of their medians. Margin: runner-up / "
        f"winner - 1, interval from the rows' median CIs; tie when it reaches 0 or is under {rec.tie * 100:g}%. "
        "Same numbers as `harness recommend` (policy.json, vllm.json).", cls="note")]
    if win:
        out.append(Table(pd.DataFrame(win), title="Winner per bucket", wrap=("bucket",)))
    defaults = defaults_records(rec)
    if defaults:
        sm = defaults_summary(rec)
        cost = "" if sm["geomean_cost_pct"] is None else (
            f" Its cost where measured: {sm['geomean_cost_pct']:+.1f}% geometric mean, worst "
            f"{sm['worst_cost_pct']:+.1f}%.")
        out.append(Table(pd.DataFrame(defaults), title="vLLM's default choice against the measurement",
                         note=f"The default is the winner in {sm.get('winner', 0)} of {sm['buckets']} buckets, tied in "
                              f"{sm.get('tied', 0)}, slower in {sm.get('slower', 0)}, not measured in "
                              f"{sm.get('not measured', 0)}.{cost}", wrap=("bucket",)))
    elif win:
        out.append(Text(_no_default_why([run.header for run in runs], rec.inputs.gpu), cls="note"))
    if casc:
        out.append(Table(pd.DataFrame(casc), title="Cascade decision rule: vLLM's and the one fitted to these cells",
                         note="Agreement: the rule picks the measured faster path. Leave-one-out: each cell predicted "
                              "by the rule fitted on the others.", wrap=("fitted rule",)))
    return out
