"""The answer per model, first: one row per model shape and workload kind with the winner (or
"tie"), its margin with the interval, and the vLLM and SGLang flags that run it; then each
engine's one setting per model shape and what it costs (harness/analysis/per_model.py, the same
numbers as ``harness recommend --engine``)."""

from __future__ import annotations

import pandas as pd

from harness.report.core import Block, Table, Text, result_rows, section


def _pct(x: object) -> str:
    return f"+{x:.1f}%" if isinstance(x, (int, float)) else ""


@section("answer-per-model", "The answer per model: winner and the engine flags to paste", order=5,
         looked_for="timed passing rows; cases made with model: / --model are named by their model shape")
def answer_per_model(df: pd.DataFrame) -> list[Block]:
    if df.empty:
        return []
    # Imported here, as in recommend.py: only pages with timed rows need the analysis.
    from harness.analysis.callform_gap import DEFAULT_CALL_FORM, form_note, only_call_form
    from harness.analysis.engines import EngineFacts
    from harness.analysis.per_model import answer_records, answers, engine_settings, model_settings
    from harness.analysis.recommend import DEFAULT_TIE

    facts = EngineFacts.of(df.attrs.get("runs", []))  # the runs' backend facts, over the table

    rows = [r for r in result_rows(df) if r.batch.given]
    if not any(r.model for r in rows):
        # Without model-shaped cases the layer shapes already lead the page (the answer section):
        # a second, longer table of them would only push that answer off the first screen.
        return [Text("No case of these results was made from a model (`model:` in a suite, or "
                     "`harness run SUITE --model ID --tp N`): the answer per layer shape is below. Run with "
                     "--model for the winner and the vLLM / SGLang flags per model shape.", cls="lead")]
    note = form_note(DEFAULT_CALL_FORM, rows)
    rows = only_call_form(rows, DEFAULT_CALL_FORM)  # a serving answer: the form vLLM calls
    ans = answers(rows, DEFAULT_TIE)
    recs = answer_records(ans, facts)
    if not recs:
        return []
    untimed = len(ans) - len(recs)
    out: list[Block] = [
        Text(f"Per model shape (model/TP degree/kind of layer) and workload kind: the fastest backend that passed the "
             f"check, by the geometric mean of its medians; margin: runner-up / winner - 1 with the interval from the "
             f"medians' CIs; tie when the interval reaches 0 or the margin is under {DEFAULT_TIE * 100:g}%. vLLM runs "
             "one backend per process; SGLang may set prefill and decode apart."
             + (f" {untimed} model shape / workload pair(s) without timed passing rows are left out (conformance-only"
                " runs, or every backend unsupported)." if untimed else "") + " " + note, cls="lead"),
        Table(pd.DataFrame(recs), title="Winner per model shape and workload", wrap=("winner", "margin [interval]", "vLLM", "SGLang"))]
    for engine, name in (("vllm", "vLLM"), ("sglang", "SGLang")):
        per, single = engine_settings(rows, engine, facts)
        if not per:
            continue
        whole = model_settings(rows, engine, facts)
        if whole:
            out.append(Table(pd.DataFrame([{"model": s["model"], "layers": s["layers"], "setting": s["flags"],
                                            "cost geomean (layer-weighted)": _pct(s.get("geomean_cost_pct")),
                                            "cost worst": _pct(s.get("worst_cost_pct"))} for s in whole]),
                             title=f"{name}: one setting per model (its kinds of layer weighted by layer count)",
                             wrap=("setting",)))
        data = pd.DataFrame([{"model shape": s["model shape"], "setting": s["flags"],
                              "cost geomean": _pct(s.get("geomean_cost_pct")), "cost worst": _pct(s.get("worst_cost_pct"))}
                             for s in per])
        note = "" if single is None else (f"Single setting over all shapes: {single['flags']}, cost "
                                          f"{_pct(single['geomean_cost_pct'])} geomean, {_pct(single['worst_cost_pct'])} worst.")
        out.append(Table(data, title=f"{name}: one setting per model shape", note=note, wrap=("setting",)))
    return out
