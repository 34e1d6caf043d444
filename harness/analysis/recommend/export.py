"""The machine-readable outputs: the JSON policy (ordered rules, first match wins), the vLLM
export, and writing recommend.md / policy.json / vllm.json."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from harness.records.fileio import atomic_write_text
from harness.analysis.recommend.rank import Ratio, ratio
from harness.analysis.recommend.recommendation import Recommendation
from harness.analysis.recommend.render import to_markdown
from harness.analysis.recommend.vllm import VLLM_NOT_EXPRESSIBLE, same_times, vllm_setting

POLICY_FORMAT = "attn-harness.policy/1"


def _ratio_json(r: Ratio | None) -> dict[str, Any] | None:
    if r is None:
        return None
    return {"pct": round(r.pct, 3), "low_pct": round((r.low - 1) * 100, 3), "high_pct": round((r.high - 1) * 100, 3),
            "cases": r.cases}


def policy(rec: Recommendation) -> dict[str, Any]:
    """The plain JSON policy: ordered rules, first match wins; each names the backend and
    variant to use, the margin and whether it is a tie (then any of ``tied_with`` is as good)."""
    rules = []
    for res in rec.measured:
        w, ru = res.winner, res.runner_up
        rules.append({
            "bucket": res.bucket.label,
            "when": res.bucket.predicate(),
            "use": {"backend": w.backend, "variant": w.variant},
            "median_us": round(statistics.median(t.median for t in w.times.values()), 3),
            "runner_up": {"backend": ru.backend, "variant": ru.variant} if ru else None,
            "margin": _ratio_json(res.ratios.get(ru.name)) if ru else None,
            "tie": res.tie or None,
            "tied_with": res.tied_with,
            "cases": len(res.cases),
        })
    return {
        "format": POLICY_FORMAT,
        "gpu": rec.inputs.gpu, "capability": rec.inputs.capability,
        "tie_band": rec.tie, "call_form": rec.inputs.call_form,
        "match": "first rule whose `when` holds: equal fields; num_reqs min <= n <= max (max null: no bound); "
                 "mean_seq_len gt < mean KV length per request <= le; features: the layer's non-default features "
                 "(window=W, softcap=X, alibi, sinks, non-causal, shared-prefix), all must match",
        "rules": rules,
        "cascade": [{**f.rule.to_dict(), "cells": len(f.cells), "agreement": f.fitted_agree,
                     "leave_one_out": f.loo_agree, "vllm_rule_agreement": f.vllm_agree} for f in rec.cascade],
        "unmeasured": [res.bucket.label for res in rec.unmeasured],
        "sources": rec.inputs.sources,
    }


def vllm_export(rec: Recommendation) -> dict[str, Any]:
    """Per bucket: the vLLM setting of the winner, or of the best tied candidate vLLM can
    express (preferring the default, which needs no flag); and the single best setting."""
    default_of = {d.bucket: d for d in rec.defaults}
    out = []
    for res in rec.measured:
        w = res.winner
        pool = [w] + [c for c in res.ranked if c.name in res.tied_with]
        d = default_of.get(res.bucket)
        choice = None
        if d is not None and d.pick is not None and d.status in ("winner", "tied"):
            choice = d.pick  # the default is as good: no flag needed
        if choice is None:
            choice = next((c for c in pool if (vllm_setting(c) or {}).get("exact")), None)
        fallback = choice is None
        if fallback:  # nothing vLLM can select ties with the winner: its fastest exact setting, at a cost
            choice = next((c for c in res.ranked if (vllm_setting(c) or {}).get("exact")), None)
        s = vllm_setting(choice) if choice else None
        if s is not None and choice.name_override:
            s = {**s, "note": "with vLLM's own per-batch cascade rule, which since vLLM PR #36318 (2026-03-07) "
                      "applies only with `--no-disable-cascade-attn`"}
        entry = {"bucket": res.bucket.label, "measured_winner": w.name,
                 "vllm": s, "runs": choice.name if choice else None,
                 "cost_vs_winner": (None if choice is None or choice is w or same_times(choice, w, res.cases)
                                    else _ratio_json(ratio(choice, w))),
                 "default": {"backend": d.choice.backend, "fa_version": d.choice.fa_version,
                             "skipped": d.choice.rejected} if d else None,
                 "default_status": d.status if d else None,
                 "default_cost": _ratio_json(d.cost) if d else None}
        if fallback:
            entry["not_expressible"] = (f"vLLM cannot select the winner {w.name}"
                                        + (f"; closest setting runs {choice.name}" if choice else "; no measured setting"))
        out.append(entry)
    return {"format": "attn-harness.vllm/1", "gpu": rec.inputs.gpu, "capability": rec.inputs.capability,
            "call_form": rec.inputs.call_form,
            "buckets": out, "single_setting": rec.single[0] if rec.single else None,
            "all_settings": rec.single, "cannot_express": VLLM_NOT_EXPRESSIBLE,
            "cascade": [{"backend": f.backend, "vllm_rule_agreement": f"{f.vllm_agree}/{len(f.cells)}",
                         "measured_rule": f.rule.text()} for f in rec.cascade]}


def compact_json(obj: dict[str, Any]) -> str:
    """JSON with one top-level key a line and one list entry (a rule, a bucket) a line: small
    enough to commit, and a diff shows which rule changed."""
    keys = list(obj)
    lines = ["{"]
    for i, k in enumerate(keys):
        v, sep = obj[k], "," if i < len(keys) - 1 else ""
        if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            inner = ",\n".join("  " + json.dumps(x, allow_nan=False) for x in v)
            lines.append(f" {json.dumps(k)}: [\n{inner}\n ]{sep}")
        else:
            lines.append(f" {json.dumps(k)}: {json.dumps(v, allow_nan=False)}{sep}")
    return "\n".join(lines + ["}"]) + "\n"


def atomic_write(path: Path, text: str) -> None:
    atomic_write_text(path, text)


def write_outputs(rec: Recommendation, out_dir: str | Path, command: str = "") -> list[Path]:
    """recommend.md, policy.json and vllm.json into ``out_dir``; everything is computed before
    the first file is written, and each file is written atomically."""
    out = Path(out_dir)
    texts = {
        "recommend.md": to_markdown(rec, command),
        "policy.json": compact_json(policy(rec)),
        "vllm.json": compact_json(vllm_export(rec)),
    }
    paths = []
    for name, text in texts.items():
        atomic_write(out / name, text)
        paths.append(out / name)
    return paths
