"""The call-form gap, after the answer sections: where timing a library as vLLM calls it and
through its fastest documented call differ beyond the noise (harness/analysis/callform_gap.py, the same
numbers as ``harness recommend``'s block)."""

from __future__ import annotations

import pandas as pd

from harness.report.core import Block, Table, Text, result_rows, section


@section("callform-gap", "Call-form gap: the vLLM call against the library's fastest call", order=35,
         looked_for="timed passing flash-attn / flashinfer rows of one case in both variant.call_form values")
def callform_gap(df: pd.DataFrame) -> list[Block]:
    if df.empty or "variant.call_form" not in df.columns:
        return []
    # Imported here: a page without call-form rows never needs harness.analysis.recommend.
    from harness.analysis.callform_gap import gap_records, gap_summary, gaps
    from harness.analysis.recommend import DEFAULT_TIE

    gs = gaps(result_rows(df), DEFAULT_TIE)
    if not gs:
        return []
    out: list[Block] = [Text(gap_summary(gs, DEFAULT_TIE) + " The answer above ranks the vllm form.", cls="note")]
    recs = gap_records(gs)
    if recs:
        out.append(Table(pd.DataFrame(recs), title="Pairs whose call forms differ beyond the noise"))
    return out
