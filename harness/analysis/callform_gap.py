"""Call forms in verdicts: which rows a serving recommendation ranks, and the gap between the
two forms.

A flash-attn or flashinfer row times one way of calling the library (``variant.call_form``,
docs/measurement.md section 10): ``vllm`` (as vLLM calls it) or ``fastest`` (the library's
fastest documented call). A serving recommendation is about what an engine runs, so it ranks
the ``vllm`` form by default; rows without the axis (other backends, older rows) and rows that
stand for both forms (``variant_axes.not_applied.call_form``: the form changes nothing on that
batch) count under every form.

The gap: for each case x backend x other variant axes timed in both forms, fastest / vllm with
the interval ``harness recommend`` uses for a margin (the medians' CIs, interval arithmetic),
judged with recommend's tie rule (the interval reaches 1, or the difference is under the tie
band). Pairs beyond both are listed; the others are counted.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from attn_contract.standalone import CALL_FORM_AXIS
from harness.report import markdown
from harness.analysis.recommend.rank import RAN_OK, Candidate, Ratio, merge_timed, ratio, tie_kind
from harness.records.results import ResultRow

CALL_FORMS = ("vllm", "fastest", "any")
DEFAULT_CALL_FORM = "vllm"
AXIS = CALL_FORM_AXIS


def _stands_for_both(row: ResultRow) -> bool:
    return row.variant_axes is not None and AXIS in row.variant_axes.not_applied


def keeps(row: ResultRow, form: str) -> bool:
    """Whether a serving verdict in ``form`` counts this row."""
    v = row.variant.get(AXIS)
    return form == "any" or v is None or str(v) == form or _stands_for_both(row)


def only_call_form(rows: Iterable[ResultRow], form: str = DEFAULT_CALL_FORM) -> list[ResultRow]:
    """The rows a verdict in ``form`` ranks (``any``: all of them)."""
    if form not in CALL_FORMS:
        raise ValueError(f"--call-form {form}: expected one of {', '.join(CALL_FORMS)}")
    return [r for r in rows if keeps(r, form)]


def form_note(form: str, rows: Sequence[ResultRow]) -> str:
    """One line saying which call form the verdicts use and what that left out."""
    left = sum(not keeps(r, form) for r in rows)
    if form == "any":
        return ("Call form: any (flash-attn / flashinfer rows of both `call_form` values are ranked as separate "
                "candidates).")
    return (f"Call form: `{form}` (rows of the other `call_form` left out: {left}; rows without the axis, and rows "
            f"where the form changes nothing, count as they are; `harness recommend --call-form vllm|fastest|any` "
            f"selects).")


# ---------------------------------------------------------------- the gap


@dataclass
class Gap:
    case: str
    backend: str
    variant: str  # the other variant axes
    vllm: Candidate
    fastest: Candidate
    r: Ratio  # fastest / vllm
    tie: str  # '' beyond the noise and the band; 'noise' / 'band'


def _other_label(variant: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(variant.items()) if k != AXIS)


def gaps(rows: Sequence[ResultRow], tie: float) -> list[Gap]:
    """Every case x backend x other-variant pair with both forms timed on passing rows."""
    per: dict[tuple[str, str, str], dict[str, list[tuple[float, float, float]]]] = defaultdict(lambda: defaultdict(list))
    variants: dict[tuple[str, str, str], dict[str, Any]] = {}
    for r in rows:
        form = r.variant.get(AXIS)
        if form not in ("vllm", "fastest") or _stands_for_both(r) or r.status != RAN_OK:
            continue
        t = r.interval_us
        if t is None:
            continue
        key = (r.case_id, str(r.backend), _other_label(r.variant))
        per[key][str(form)].append(t)
        variants[key] = r.variant
    out = []
    for key in sorted(per):
        forms = per[key]
        if set(forms) != {"vllm", "fastest"}:
            continue
        case, backend, other = key
        cand = {f: Candidate(backend, {**variants[key], AXIS: f}, other, {case: merge_timed(forms[f])}) for f in forms}
        fv = ratio(cand["fastest"], cand["vllm"])
        if fv is None:
            continue
        # recommend's tie rule reads "slower / faster"; judge the gap the same way round.
        slow_over_fast = fv if fv.point >= 1 else (ratio(cand["vllm"], cand["fastest"]) or fv)
        out.append(Gap(case, backend, other, cand["vllm"], cand["fastest"], fv, tie_kind(slow_over_fast, tie)))
    return out


def _us(c: Candidate) -> str:
    t = next(iter(c.times.values()))
    return f"{t.median:.4g} [{t.low:.4g}, {t.high:.4g}]"


def gap_records(gs: Sequence[Gap]) -> list[dict[str, Any]]:
    """The pairs whose forms differ beyond the noise, largest gap first."""
    beyond = sorted((g for g in gs if not g.tie), key=lambda g: -abs(g.r.pct))
    return [{"case": g.case, "backend": g.backend, "other variant axes": g.variant or "-",
             "vllm us [CI]": _us(g.vllm), "fastest us [CI]": _us(g.fastest),
             "fastest / vllm [interval]": f"{g.r.point:.3f} [{g.r.low:.3f}, {g.r.high:.3f}]",
             "faster form": "fastest" if g.r.point < 1 else "vllm"} for g in beyond]


def gap_summary(gs: Sequence[Gap], tie: float) -> str:
    n_beyond = sum(not g.tie for g in gs)
    return (f"{len(gs)} case x backend x variant pair(s) timed in both call forms: {n_beyond} differ beyond the noise "
            f"(listed), {len(gs) - n_beyond} within it (the ratio's interval reaches 1 or the gap is under "
            f"{tie * 100:g}%). Ratio: fastest-form median / vllm-form median; interval from the medians' CIs, as "
            "recommend's margins.")


def gap_markdown(rows: Sequence[ResultRow], tie: float) -> str:
    """``harness recommend``'s call-form gap block ('' when no pair has both forms timed)."""
    gs = gaps(rows, tie)
    if not gs:
        return ""
    recs = gap_records(gs)
    out = ["## Call-form gap", "", gap_summary(gs, tie), ""]
    if recs:
        cols = list(recs[0])
        out += markdown.table(cols, [[r[c] for c in cols] for r in recs])
    return "\n".join(out) + "\n"
