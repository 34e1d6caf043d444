"""vLLM's cascade rule against the measurement: each timed cascade row (its ``call`` records what
the rule said and the plain backend to compare with) beside the fastest passing plain row of
the same case. Reads rows only (harness.cell.cascade applies the rule when a cell runs)."""

from __future__ import annotations

from typing import Any, Iterable

from attn_contract.status import Status
from harness.records.results import ResultRow


def rule_agreement(rows: Iterable[ResultRow]) -> list[dict[str, Any]]:
    """For each cascade row (``call.rule_says_cascade`` present) that passed and was timed,
    the fastest passing row of the backend it names in ``call.compare_with`` on the same case
    (preferring variants that agree on shared axes, e.g. the same ``fa_version``), the
    measured winner, and whether the rule picked it."""
    rows = list(rows)
    out: list[dict[str, Any]] = []
    for r in rows:
        call, timing = r.call, r.timing
        if call is None or call.rule_says_cascade is None or r.status != Status.PASS or timing is None:
            continue
        rv = r.variant
        plain = [(p, p.timing) for p in rows
                 if p.case == r.case and p.backend == call.compare_with and p.status == Status.PASS
                 and p.timing is not None]
        agree = [(p, t) for p, t in plain if all(str(p.variant.get(k, v)) == str(v) for k, v in rv.items())]
        pool = agree or plain
        entry = {
            "case": r.case,
            "backend": r.backend,
            "variant": rv,
            "rule_says_cascade": call.rule_says_cascade,
            "rule_reason": call.rule_reason or "",
            "cascade_us": timing.median_us,
            "plain_backend": call.compare_with,
            "plain_variant": None,
            "plain_us": None,
            "measured_winner": None,
            "rule_right": None,
        }
        if pool:
            best, best_t = min(pool, key=lambda pt: pt[1].median_us)
            entry["plain_variant"] = best.variant
            entry["plain_us"] = best_t.median_us
            cascade_wins = timing.median_us < best_t.median_us
            entry["measured_winner"] = "cascade" if cascade_wins else "plain"
            entry["rule_right"] = cascade_wins == call.rule_says_cascade
        out.append(entry)
    return out
