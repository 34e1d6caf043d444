"""The cascade decision rule: measured cascade-vs-plain cells per cascade backend, vLLM's rule
on them, and a rule fitted to them (``harness.analysis.selection_rules.fit_cascade_rule``)."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Sequence

from harness.analysis.cascade_agreement import rule_agreement
from harness.analysis.engines import TABLE_ONLY, EngineFacts
from harness.records.results import ResultRow
from harness.analysis.selection_rules import CascadeRule, fit_cascade_rule, leave_one_out


def _fit_name(backend: str, variant: dict[str, Any], facts: EngineFacts) -> str:
    """The cascade backend, with the kernel version its plain counterpart's vLLM setting selects ("... fa3")."""
    decl = facts.engine_name(facts.plain_counterpart(backend) or backend, "vllm")
    if decl is None or not decl.version_axis or decl.version_axis not in variant:
        return backend
    return f"{backend} {decl.version_tag}{variant[decl.version_axis]}"


def cascade_cells(rows: Sequence[ResultRow], facts: EngineFacts = TABLE_ONLY) -> dict[str, list[dict[str, Any]]]:
    """Measured cascade-vs-plain cells per cascade backend (+kernel version), first row of each
    cell kept, with the features the rules read. ``facts``: the runs' backend facts (default: the
    committed table)."""
    by_key: dict[tuple[str, str, str], ResultRow] = {}
    for r in rows:
        by_key.setdefault((r.case, r.backend, r.variant_label), r)
    seen = set()
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in rule_agreement(rows):
        vl = ",".join(f"{k}={v}" for k, v in sorted((e["variant"] or {}).items()))
        key = (e["case"], e["backend"], vl)
        if key in seen or e["rule_right"] is None:
            continue
        seen.add(key)
        r = by_key[key]
        costs, cfg, b = r.rule_costs, r.config, r.batch
        if not costs.get("min_prefix_len") or not costs.get("requests_per_prefix") or cfg is None:
            continue
        out[_fit_name(e["backend"], e["variant"] or {}, facts)].append({
            "case": e["case"], "prefix_len": costs["min_prefix_len"], "requests_per_prefix": costs["requests_per_prefix"],
            "num_kv_heads": cfg.num_kv_heads, "gqa": cfg.num_heads // cfg.num_kv_heads,
            "decode_only": not (b.num_prefill or b.num_extend),
            "cascade_us": e["cascade_us"], "plain_us": e["plain_us"], "cascade_wins": e["measured_winner"] == "cascade",
            "vllm_says_cascade": bool(e["rule_says_cascade"]),
        })
    return dict(out)


@dataclass
class CascadeFit:
    backend: str
    cells: list[dict[str, Any]]
    rule: CascadeRule
    fitted_agree: int
    loo_agree: int
    vllm_agree: int
    fitted_cost_pct: float  # geometric-mean time lost against always picking the faster path
    vllm_cost_pct: float


def _lost(picks: list[bool], cells: list[dict[str, Any]]) -> float:
    logs = [math.log((c["cascade_us"] if p else c["plain_us"]) / min(c["cascade_us"], c["plain_us"]))
            for p, c in zip(picks, cells)]
    return (math.exp(sum(logs) / len(logs)) - 1) * 100 if logs else 0.0


def fit_cascade(rows: Sequence[ResultRow], facts: EngineFacts = TABLE_ONLY) -> list[CascadeFit]:
    fits = []
    for name, cells in sorted(cascade_cells(rows, facts).items()):
        rule = fit_cascade_rule(name, cells)
        fitted = [rule.says_cascade(c) for c in cells]
        vllm = [c["vllm_says_cascade"] for c in cells]
        fits.append(CascadeFit(
            name, cells, rule,
            sum(p == c["cascade_wins"] for p, c in zip(fitted, cells)), leave_one_out(name, cells),
            sum(p == c["cascade_wins"] for p, c in zip(vllm, cells)), _lost(fitted, cells), _lost(vllm, cells)))
    return fits
