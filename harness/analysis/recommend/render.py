"""The markdown renderings: the winner per bucket, vLLM's default against it, the single setting,
the cascade rule and the coverage; the records behind them feed the HTML report too."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from typing import Any

from harness.report import markdown
from harness.report.markdown import fmt_time
from harness.analysis.recommend.rank import Ratio
from harness.analysis.recommend.recommendation import Recommendation
from harness.analysis.recommend.vllm import VLLM_NOT_EXPRESSIBLE


def _pct(x: float | None, spec: str = "+.1f") -> str:
    return "" if x is None else f"{x:{spec}}%"


def ratio_text(r: Ratio | None) -> str:
    if r is None:
        return ""
    return f"{r.pct:+.1f}% [{(r.low - 1) * 100:+.1f}, {(r.high - 1) * 100:+.1f}]"


def _esc(s: str) -> str:
    return s.replace("|", "\\|")


def _md(records: list[dict[str, Any]]) -> str:
    """Records (one dict a row, same keys) as a markdown table."""
    if not records:
        return ""
    cols = list(records[0])
    return "\n".join(markdown.table(cols, [[r[c] for c in cols] for r in records])) + "\n"


def winners_records(rec: Recommendation) -> list[dict[str, Any]]:
    out = []
    for res in rec.measured:
        w, ru = res.top, res.runner_up
        r = res.ratios.get(ru.name) if ru else None
        verdict = ("tie (noise)" if res.tie == "noise" else f"tie (< {rec.tie * 100:g}%)" if res.tie == "band"
                   else "clear" if ru else "only candidate")
        if res.tied_with and len(res.tied_with) > 1:
            verdict += f", {len(res.tied_with)} tied"
        out.append({"bucket": res.bucket.label, "winner": w.name,
                    "median": fmt_time(statistics.median(t.median for t in w.times.values())),
                    "runner-up": ru.name if ru else "-", "margin [interval]": ratio_text(r), "verdict": verdict,
                    "cases": len(res.cases), "call form": str(w.variant.get("call_form", "-"))})
    return out


def winners_table(rec: Recommendation) -> str:
    return _md(winners_records(rec))


def defaults_summary(rec: Recommendation) -> dict[str, Any]:
    """How often vLLM's default is the winner, a tie, slower, or unmeasured, and what it costs
    (geometric mean and worst over the buckets where it was measured)."""
    counts: dict[str, int] = defaultdict(int)
    logs = []
    worst = (0.0, "")
    for d in rec.defaults:
        counts[d.status.split(":")[0]] += 1
        if d.cost is not None:
            logs.append(math.log(d.cost.point))
            if d.cost.pct > worst[0]:
                worst = (d.cost.pct, d.bucket.label)
    return {"buckets": len(rec.defaults), **counts,
            "geomean_cost_pct": (math.exp(sum(logs) / len(logs)) - 1) * 100 if logs else None,
            "worst_cost_pct": worst[0], "worst_bucket": worst[1]}


def defaults_table(rec: Recommendation) -> str:
    if not rec.defaults and rec.inputs.cpu:
        return "A CPU run: vLLM's default choice is a GPU rule and is not evaluated.\n"
    if not rec.defaults:
        where = "no run.json device" if rec.inputs.gpu == "unknown" else f"none for {rec.inputs.gpu}"
        return f"GPU capability unknown ({where}): vLLM's default cannot be evaluated.\n"
    sm = defaults_summary(rec)
    head = (f"Over {sm['buckets']} measured buckets the default is the winner in {sm.get('winner', 0)}, tied in "
            f"{sm.get('tied', 0)}, slower in {sm.get('slower', 0)}, not measured in {sm.get('not measured', 0)}"
            f" (this machine could not run it in {sm.get('not measured here', 0)}, its kernel does not support the "
            f"shape in {sm.get('not supported by the kernel', 0)}, excluded by the check in {sm.get('excluded', 0)})"
            ". Cost where measured: geometric mean "
            f"{_pct(sm['geomean_cost_pct'])}, worst {_pct(sm['worst_cost_pct'])} ({sm['worst_bucket'] or '-'}).\n\n")
    return head + _md(defaults_records(rec))


def defaults_records(rec: Recommendation) -> list[dict[str, Any]]:
    winners = {r.bucket: r.top.name for r in rec.measured}
    out = []
    for d in rec.defaults:
        cost = ratio_text(d.cost) if d.status in ("slower", "tied") else ("0" if d.status == "winner" else "")
        out.append({"bucket": d.bucket.label, "vLLM default": f"{d.choice.label} = {d.candidate or '-'}",
                    "measured winner": winners[d.bucket], "default is": d.status,
                    "cost of the default [interval]": cost})
    return out


def cascade_records(rec: Recommendation) -> list[dict[str, Any]]:
    out = []
    for f in rec.cascade:
        n = len(f.cells)
        out.append({"cascade backend": f.backend, "cells": n,
                    "vLLM rule agrees": f"{f.vllm_agree}/{n} ({f.vllm_agree / n:.0%})",
                    "time lost (vLLM rule)": f"{f.vllm_cost_pct:.1f}%", "fitted rule": f.rule.text(),
                    "agrees": f"{f.fitted_agree}/{n} ({f.fitted_agree / n:.0%})",
                    "leave-one-out": f"{f.loo_agree}/{n} ({f.loo_agree / n:.0%})",
                    "time lost (fitted)": f"{f.fitted_cost_pct:.1f}%"})
    return out


def cascade_table(rec: Recommendation) -> str:
    if not rec.cascade:
        return "No cascade cells (rows with `call.rule_says_cascade` and a timed plain counterpart).\n"
    return _md(cascade_records(rec))


def coverage_text(rec: Recommendation) -> str:
    un, one = rec.unmeasured, rec.single_candidate
    out = [f"{len(rec.measured)} of {len(rec.buckets)} buckets measured; {len(un)} without a timed passing row"
           f" ({len(one)} more with a single candidate, no comparison)."]
    if rec.unbucketed:
        out.append(f"{len(rec.unbucketed)} case(s) ran on no backend, so their batch is unknown: "
                   + ", ".join(rec.unbucketed[:5]) + (" ..." if len(rec.unbucketed) > 5 else ""))
    if un:
        # Grouped by layer shape so the list stays short; each group names its missing cells.
        groups: dict[str, list[str]] = defaultdict(list)
        whys: dict[str, set[str]] = defaultdict(set)
        for res in un:
            b, ly = res.bucket, res.bucket.layer_fields
            key = f"{ly['num_heads']}/{ly['num_kv_heads']}x{ly['head_size']} {ly['dtype']}/{ly['kv_cache_dtype']} {b.features}"
            groups[key].append(f"page {ly['block_size']} {ly['kv_layout']} {b.kind} b={b.batch} ctx={b.context}")
            whys[key].add("not timed" if any(c.excluded == "not timed" for c in res.excluded) else
                          "no candidate passed" if res.excluded else "no rows")
        out += ["", "| layer shape | buckets without a measurement | why |", "|---|---|---|"]
        for key, cells in groups.items():
            out.append(f"| {_esc(key)} | {len(cells)}: {_esc('; '.join(cells))} | {', '.join(sorted(whys[key]))} |")
    return "\n".join(out) + "\n"


def to_markdown(rec: Recommendation, command: str = "", vllm_sections: bool = True) -> str:
    """The recommendation as markdown; ``vllm_sections`` False (``--engine sglang``) leaves out
    vLLM's default and single-setting sections, which the SGLang answer would only repeat."""
    inp = rec.inputs
    device = (f"CPU run ({inp.gpu}): no GPU was measured, so nothing here speaks for a GPU" if inp.cpu else
              f"GPU: {inp.gpu} (capability {inp.capability or 'unknown'})")
    parts = [
        "# Measured backend recommendation", "",
        f"{device}; {len(inp.rows)} rows from "
        f"{len(inp.sources)} result(s). Tie band {rec.tie * 100:g}%.", "",
    ]
    if command:
        parts += ["```bash", command, "```", ""]
    parts += [f"- {n}" for n in inp.notes]
    parts += [
        "## Winner per bucket", "",
        "Ranked: backend+variant that passed the check on every case of the bucket, by the geometric mean of the "
        "median times. Margin: how much slower the runner-up is; interval from the rows' median CIs "
        "(interval arithmetic, geometric mean over cases). Tie: the interval reaches 0 (noise) or the margin is "
        "under the tie band.", "", winners_table(rec),
    ]
    if vllm_sections:
        parts += _vllm_sections(rec)
    else:
        parts += ["vLLM's default and single-setting sections: `harness recommend` without `--engine sglang`.", ""]
    parts += [
        "## Cascade decision rule", "",
        "Per cascade backend: the cells where both the cascade and the plain backend passed and were timed. "
        "Agreement: the rule picks the measured faster path. Time lost: geometric mean over the cells of "
        "(time of the picked path / time of the faster path) - 1. Leave-one-out: each cell predicted by the rule "
        "fitted to the others.", "", cascade_table(rec),
        "## Coverage", "", coverage_text(rec),
    ]
    return "\n".join(parts)


def _vllm_sections(rec: Recommendation) -> list[str]:
    return [
        "## vLLM's default choice against the measurement", "",
        "`harness.analysis.selection_rules.vllm_default`: the backend vLLM would pick with no `--attention-backend`, "
        "mapped to the harness candidate that runs it. Cost: how much slower the default is than the winner.", "",
        defaults_table(rec),
        "## One setting for a whole deployment (vLLM)", "",
        "Each setting vLLM can express exactly, against the per-bucket winner, over the buckets where it was "
        "measured (plain attention: what vLLM runs by default; its cascade rule applies on shared-prefix batches "
        "only with `--no-disable-cascade-attn` since vLLM PR #36318, 2026-03-07).", "",
        _single_table(rec), "", "What vLLM cannot express:", "",
        *[f"- {t}" for t in VLLM_NOT_EXPRESSIBLE], "",
    ]


def _single_table(rec: Recommendation) -> str:
    if not rec.single:
        return "No bucket was measured with a candidate vLLM can select."
    lines = ["| vLLM setting | buckets measured | wins | geomean cost vs winner | worst cost (bucket) |",
             "|---|---|---|---|---|"]
    for s in rec.single:
        lines.append(f"| `{s['cli']}` | {s['buckets']} | {s['wins']} | {s['geomean_cost_pct']:+.1f}% | "
                     f"{s['worst_cost_pct']:+.1f}% ({_esc(s['worst_bucket'])}) |")
    return "\n".join(lines)
