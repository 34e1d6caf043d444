"""The first lines of ``harness run``'s closing verdict when cases came from model shapes
(``model:`` / ``--model``): per model shape and workload kind, the winner or a tie with its
margin [interval], and the vLLM and SGLang flags that run it. Ranking, grouping and flags are
harness/analysis/per_model.py's (the report's "answer per model"), so terminal and report agree."""

from __future__ import annotations

import textwrap
from typing import Any, Sequence

from rich.console import Console
from rich.markup import escape

from harness.records.results import ResultRow


def model_answer_lines(rows: Sequence[ResultRow], ids: dict[tuple[str, str], str]) -> list[tuple[str, str, str]]:
    """(head, vLLM flags, SGLang flags) per model shape and workload kind with a timed passing backend; empty when
    no row names a model shape. ``ids``: the summary table's backend+variant letters."""
    from harness.analysis.callform_gap import DEFAULT_CALL_FORM, only_call_form
    from harness.analysis.per_model import answer_attention_kind, answers, sglang_flag, vllm_flag
    from harness.analysis.recommend import DEFAULT_TIE, ratio_text

    modelled = [r for r in rows if (r.case_params or {}).get("model")]
    if not modelled:
        return []
    out = []
    for a in answers(only_call_form(modelled, DEFAULT_CALL_FORM), DEFAULT_TIE):
        res, w = a.result, a.result.winner
        if w is None:
            continue

        def name(c: Any) -> str:
            return f"{ids.get((c.backend, c.variant_label), '?')} {c.backend}"

        ru = res.runner_up
        r = res.ratios.get(ru.name) if ru is not None else None
        if ru is None:
            what = f"{name(w)}, the only one timed"
        elif res.tie:
            why = "interval reaches 0" if res.tie == "noise" else f"under {DEFAULT_TIE * 100:g}%"
            tied = [name(c) for c in res.ranked if c.name in res.tied_with]
            what = f"tie ({why}): {' ~ '.join([name(w), *tied])}, {ratio_text(r)}"
        else:
            what = f"{name(w)}, {ratio_text(r)} over {name(ru)}"
        sglang = sglang_flag(w, a.kind, answer_attention_kind(a))
        out.append((f"{a.model} {a.kind}: {what}", f"vLLM: {vllm_flag(w)}", f"SGLang: {sglang}"))
    return out


def model_setting_lines(rows: Sequence[ResultRow]) -> list[str]:
    """One line per model and TP degree: the vLLM and SGLang setting for all its layers, its
    kinds of layer weighted by layer count (harness/analysis/per_model.py's model_settings)."""
    from harness.analysis.callform_gap import DEFAULT_CALL_FORM, only_call_form
    from harness.analysis.per_model import model_settings

    modelled = only_call_form([r for r in rows if (r.case_params or {}).get("model_id")], DEFAULT_CALL_FORM)
    if not modelled:
        return []
    by_engine = {e: {s["model"]: s for s in model_settings(modelled, e)} for e in ("vllm", "sglang")}
    out = []
    for model, v in by_engine["vllm"].items():
        sg = by_engine["sglang"].get(model, {})

        def cost(s: dict[str, Any]) -> str:
            g = s.get("geomean_cost_pct")
            return f" ({g:+.1f}% layer-weighted)" if isinstance(g, (int, float)) else ""

        out.append(f"{model} ({v['layers']} layers): vLLM {v['flags']}{cost(v)}; "
                   f"SGLang {sg.get('flags', 'no setting')}{cost(sg)}")
    return out


def print_model_answers(rows: Sequence[ResultRow], ids: dict[tuple[str, str], str], console: Console) -> None:
    lines = model_answer_lines(rows, ids)
    if not lines:
        return
    width = max(console.width, 40)
    title = ("Answer per model shape and workload (vLLM call form; id as above): winner, runner-up slower by "
             "[95% interval], or a tie; then the flags to paste (docs/models.md)")
    console.print(escape(textwrap.fill(title, width)), highlight=False, soft_wrap=True)
    # Wrapped between words with a hanging indent: at 80 columns a long flag string continues on
    # the next line, indented under its own line, never cut inside a word nor padded with spaces.
    for head, *flags in lines:
        for text, first in ((head, "  "), *((f, "    ") for f in flags)):
            wrapped = textwrap.fill(text, width, initial_indent=first, subsequent_indent=first + "    ",
                                    break_long_words=False, break_on_hyphens=False)
            console.print(escape(wrapped), highlight=False, soft_wrap=True)
    per_model = model_setting_lines(rows)
    if per_model:
        console.print("One setting per model (a deployment takes one; kinds of layer weighted by layer count):",
                      highlight=False, soft_wrap=True)
        for text in per_model:
            console.print(escape(textwrap.fill(text, width, initial_indent="  ", subsequent_indent="      ",
                                               break_long_words=False, break_on_hyphens=False)),
                          highlight=False, soft_wrap=True)
