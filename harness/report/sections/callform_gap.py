"""The call-form gap, after the answer sections: where timing a library as vLLM calls it and
through its fastest documented call differ beyond the noise (harness/analysis/callform_gap.py, the same
numbers as ``harness recommend``'s block)."""

from __future__ import annotations

import pandas as pd

import json
from pathlib import Path

from harness.report.core import Block, Table, Text, result_rows, section

DIAG_FILE = "callform-diag.json"  # `harness diag callform --out RESULTS` writes it beside the rows


def named_arguments(src: str) -> list[dict[str, str]]:
    """Per shape and library of a ``callform-diag.json`` beside the results: the vllm-form argument
    the diagnostic named responsible for its gap over the plain call, or why none."""
    p = Path(src)
    f = (p if p.is_dir() else p.parent) / DIAG_FILE
    try:
        data = json.loads(f.read_text(encoding="utf-8")) if f.is_file() else {}
    except (OSError, ValueError):
        return [{"shape": "-", "library": "-", "argument": "-", "why": f"{f.name}: not readable JSON"}]
    out = []
    results = data.get("results") if isinstance(data, dict) else None
    for r in results if isinstance(results, list) else []:
        resp = ((r.get("vllm_args") or {}).get("responsible") or {}) if isinstance(r, dict) else {}
        if resp:
            out.append({"shape": str(r.get("shape")), "library": str(r.get("lib")),
                        "argument": str(resp.get("argument") or "none named"), "why": str(resp.get("why", ""))})
    return out


@section("callform-gap", "Call-form gap: the vLLM call against the library's fastest call", order=35,
         looked_for="timed passing flash-attn / flashinfer rows of one case in both variant.call_form values "
                    f"(and {DIAG_FILE} beside them for the argument behind the gap)")
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
    named = [n for run in df.attrs.get("runs", []) for n in named_arguments(run.source)]
    if named:
        out.append(Table(pd.DataFrame(named), title=f"The vllm form's argument behind its gap ({DIAG_FILE}: "
                                                     "`harness diag callform`, one argument at a time)"))
    return out
