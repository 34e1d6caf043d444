"""The answer per model shape: which backend wins each workload kind of each model (or a tie,
with the margin and its interval), the flags to paste into vLLM and SGLang, and
``recommend --engine``'s one setting per model shape plus the single setting over all shapes
with its cost. Rows are grouped by the ``model`` a case came from (``case_params.model``, set
by ``model:`` / ``--model``), else by the layer shape."""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from harness.report import markdown
from harness.analysis.engines import (SGLANG_FACTS, SGLANG_MLA_FACT, TABLE_ONLY, EngineFacts, sglang_flags,
                                       sglang_page_note, vllm_flags)
from harness.analysis.recommend.load import load_inputs
from harness.analysis.recommend.rank import RAN_OK, BucketResult, Candidate, batch_of, case_batches, rank_bucket
from harness.analysis.recommend.vllm import VLLM_FACTS, vllm_setting
from harness.records.header import RunHeader
from harness.records.results import ResultRow

KIND_ORDER = {"decode": 0, "prefill": 1, "extend": 2, "mixed": 3}


def model_of(row: ResultRow) -> str:
    """The model shape a row belongs to: 'llama-3.1-8b/tp2', else 'H32/KV8 D128 bfloat16'."""
    m = row.model
    if m:
        return m
    c = row.config
    if c is None:
        return "unknown shape"
    s = f"H{c.num_heads}/KV{c.num_kv_heads} D{c.head_size} {c.dtype}"
    if c.kv_cache_dtype != "auto":
        s += f" kv {c.kv_cache_dtype}"
    if c.sliding_window:
        s += f" window {c.sliding_window}"
    if c.softcap:
        s += f" softcap {c.softcap}"
    if c.sinks:
        s += " sinks"
    return s


@dataclass
class Answer:
    model: str
    kind: str
    result: BucketResult


def answers(rows: Sequence[ResultRow], tie: float) -> list[Answer]:
    """Per model shape and workload kind, the candidates ranked (recommend's ranking rule)."""
    batches = case_batches(rows)
    groups: dict[tuple[str, str], list[ResultRow]] = defaultdict(list)
    order: dict[str, int] = {}
    for r in rows:
        b = batch_of(r, batches)
        if b is None:
            continue
        m = model_of(r)
        order.setdefault(m, len(order))
        groups[(m, b.kind)].append(r)
    out = [Answer(m, k, rank_bucket((m, k), rs, tie)) for (m, k), rs in groups.items()]  # type: ignore[arg-type]
    return sorted(out, key=lambda a: (order[a.model], KIND_ORDER.get(a.kind, 9), a.kind))


def _margin(res: BucketResult) -> str:
    if res.runner_up is None or res.runner_up.name not in res.ratios:
        return "only one candidate" if res.winner else ""
    r = res.ratios[res.runner_up.name]
    return f"{r.pct:+.1f}% [{(r.low - 1) * 100:+.1f}, {(r.high - 1) * 100:+.1f}] vs {res.runner_up.name}"


def answer_attention_kind(a: "Answer") -> str:
    """The attention kind of an answer's rows ("mha", or an MLA form: docs/mla.md)."""
    cfg = a.result.example.config
    return cfg.kind_of_attention if cfg is not None else "mha"


def sglang_flag(c: Candidate, kind: str, attention_kind: str = "mha", facts: EngineFacts = TABLE_ONLY) -> str:
    s = facts.sglang_setting(c.backend, c.variant, attention_kind)
    if s is None:
        return "no SGLang backend"
    flag = {"decode": "--decode-attention-backend", "prefill": "--prefill-attention-backend",
            "extend": "--prefill-attention-backend"}.get(kind, "--attention-backend")
    return f"{flag} {s['attention_backend']}" + ("" if s["exact"] else " (nearest)")


def vllm_flag(c: Candidate, facts: EngineFacts = TABLE_ONLY) -> str:
    s = vllm_setting(c, facts)
    if s is None:
        return "no vLLM setting"
    return vllm_flags(s) + ("" if s["exact"] else " (nearest)")


def answer_records(ans: list[Answer], facts: EngineFacts = TABLE_ONLY) -> list[dict[str, Any]]:
    """One table row per model shape and workload kind that has a timed passing candidate."""
    out = []
    for a in ans:
        w = a.result.winner
        if w is None:
            continue
        win = f"tie: {w.name} ~ {', '.join(a.result.tied_with)}" if a.result.tie else w.name
        out.append({"model shape": a.model, "workload": a.kind, "winner": win, "margin [interval]": _margin(a.result),
                    "vLLM": vllm_flag(w, facts), "SGLang": sglang_flag(w, a.kind, answer_attention_kind(a), facts)})
    return out


# ---------------------------------------------------------------- one setting per engine


# The one notion of cost in these tables, as in recommend's winner and default tables: a
# setting's time over the fastest passing row of the case, whatever backend gave it (an engine
# that cannot run the winner pays for it). ``BEST`` holds that fastest time in each case's dict.
BEST = "__fastest_measured__"
MLA_PREFILL = "mla prefill"  # a case's kind in the engine tables: MLA's expanded form


def _engine_times(rows: Sequence[ResultRow], engine: str, facts: EngineFacts) -> tuple[dict[str, dict[str, float]], dict[str, str]]:
    """case id -> {engine setting: fastest median of the harness candidates it runs, and
    ``BEST``: the case's fastest passing row of any backend}, and each case's kind. Only
    candidates the engine runs exactly count as settings."""
    batches = case_batches(rows)
    times: dict[str, dict[str, float]] = defaultdict(dict)
    kinds: dict[str, str] = {}
    best: dict[str, float] = {}
    for r in rows:
        t = r.interval_us if r.status == RAN_OK else None
        b = batch_of(r, batches)
        if t is None or b is None:
            continue
        best[r.case_id] = min(t[0], best.get(r.case_id, math.inf))
        variant = r.variant
        attention_kind = r.config.kind_of_attention if r.config is not None else "mha"
        if engine == "vllm":
            s = vllm_setting(Candidate(r.backend, variant, r.variant_label, {}, attention_kind=attention_kind), facts)
            key = s["cli"] if s and s["exact"] else None
        else:
            s = facts.sglang_setting(r.backend, variant, attention_kind)
            key = s["attention_backend"] if s and s["exact"] else None
        if key is None:
            continue
        cid = r.case_id
        # An MLA prefill (expanded form) is set apart from the decode in vLLM too (mla_prefill_backend).
        kinds[cid] = MLA_PREFILL if attention_kind == "mla_expanded" else b.kind
        times[cid][key] = min(t[0], times[cid].get(key, math.inf))
    for cid in times:
        times[cid][BEST] = best[cid]
    return times, kinds


def _cost(pick: dict[str, str], times: dict[str, dict[str, float]],
          weights: dict[str, float] | None = None) -> tuple[float, float] | None:
    """(geomean, worst) slowdown of the per-case settings ``pick`` against each case's fastest
    passing row of any backend (``BEST``), the geomean weighted by ``weights`` (a case's share of
    the model's layers) when given."""
    logs, total = [], 0.0
    for cid, key in pick.items():
        if key not in times[cid]:
            return None
        w = (weights or {}).get(cid, 1.0)
        logs.append((w, math.log(times[cid][key] / times[cid][BEST])))
        total += w
    if not logs or total <= 0:
        return None
    return math.exp(sum(w * x for w, x in logs) / total) - 1, math.exp(max(x for _, x in logs)) - 1


def _best(cases: list[str], times: dict[str, dict[str, float]], weights: dict[str, float] | None = None) -> str | None:
    """The setting every case ran with the least (weighted) sum of log times."""
    keys = set.intersection(*(set(times[c]) - {BEST} for c in cases)) if cases else set()
    w = weights or {}
    scored = [(sum(w.get(c, 1.0) * math.log(times[c][k]) for c in cases), k) for k in keys]
    return min(scored)[1] if scored else None


def engine_setting(cases: list[str], times: dict[str, dict[str, float]], kinds: dict[str, str],
                   engine: str, weights: dict[str, float] | None = None) -> dict[str, Any] | None:
    """The one setting an engine deployment would use over ``cases``: vLLM one backend; SGLang
    a prefill backend (prefill, extend, mixed batches) and a decode backend. ``weights``: each
    case's weight (its layer kind's layer count) in the choice and the geomean cost."""
    if not cases:
        return None
    if engine == "vllm":  # one backend; an MLA model's prefill kernel is a setting of its own
        pre = [c for c in cases if kinds[c] == MLA_PREFILL]
        rest = [c for c in cases if kinds[c] != MLA_PREFILL]
        k, kp = _best(rest, times, weights), _best(pre, times, weights)
        if (rest and k is None) or (pre and kp is None):
            return None
        flags = " ".join(x for x in (k, kp) if x)
        pick = {**{c: k for c in rest if k is not None}, **{c: kp for c in pre if kp is not None}}
    else:
        dec = [c for c in cases if kinds[c] == "decode"]
        pre = [c for c in cases if kinds[c] != "decode"]
        d, p = _best(dec, times, weights), _best(pre, times, weights)
        if (dec and d is None) or (pre and p is None):
            return None
        flags = sglang_flags(p, d)
        pick = {**{c: d for c in dec if d is not None}, **{c: p for c in pre if p is not None}}
    cost = _cost(pick, times, weights)
    return {"flags": flags, "cases": len(cases), "geomean_cost_pct": None if cost is None else cost[0] * 100,
            "worst_cost_pct": None if cost is None else cost[1] * 100}


def engine_settings(rows: Sequence[ResultRow], engine: str, facts: EngineFacts = TABLE_ONLY) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """One setting per model shape, and the single setting over all of them."""
    times, kinds = _engine_times(rows, engine, facts)
    per_model: dict[str, list[str]] = defaultdict(list)
    for r in rows:
        cid = r.case_id
        if cid in times and cid not in per_model[model_of(r)]:
            per_model[model_of(r)].append(cid)
    out = []
    for m, cases in per_model.items():
        s = engine_setting(cases, times, kinds, engine)
        out.append({"model shape": m, **(s or {"flags": f"no {engine} setting ran every case"})})
    return out, engine_setting(sorted(times), times, kinds, engine)


@functools.lru_cache(maxsize=None)
def _builtin_layer_count(model_id: str, kind: str) -> int | None:
    """Layers of one kind of a built-in model (rows written before ``layer_count`` was recorded)."""
    from harness.spec.models import ModelError, builtin

    try:
        return next((k.layers for k in builtin(model_id).kinds if k.name == kind and k.layers), None)
    except ModelError:
        return None


def layer_weight(row: ResultRow) -> int | None:
    """How many of its model's layers a model-shape row stands for: ``case_params.layer_count``,
    else the built-in table's count for its model and kind; None when neither says."""
    p = row.case_params or {}
    n = p.get("layer_count")
    if isinstance(n, int) and not isinstance(n, bool) and n > 0:
        return n
    if p.get("model_id") and p.get("layers"):
        return _builtin_layer_count(str(p["model_id"]), str(p["layers"]))
    return None


def model_settings(rows: Sequence[ResultRow], engine: str, facts: EngineFacts = TABLE_ONLY) -> list[dict[str, Any]]:
    """One setting per model and TP degree (what a deployment takes), its layer kinds weighted
    by how many layers each has (gemma-2-9b: 21 local, 21 global), beside the per-kind settings
    of ``engine_settings``. Rows without a model are left out."""
    times, kinds = _engine_times(rows, engine, facts)
    cases: dict[str, list[str]] = defaultdict(list)
    weights: dict[str, float] = {}
    layers: dict[str, dict[str, int | None]] = defaultdict(dict)
    for r in rows:
        p, cid = r.case_params or {}, r.case_id
        if not p.get("model_id") or cid not in times:
            continue
        key = f"{p['model_id']}/tp{p.get('tp', 1)}"
        if cid not in cases[key]:
            cases[key].append(cid)
        n = layer_weight(r)
        weights[cid] = float(n or 1)
        layers[key][str(p.get("layers", "all"))] = n
    out = []
    for key, cids in cases.items():
        split = layers[key]
        known = all(v for v in split.values())
        text = ("unknown (kinds weighted equally)" if not known else f"{split['all']}, one kind" if list(split) == ["all"]
                else " + ".join(f"{v} {k}" for k, v in split.items()))
        s = engine_setting(cids, times, kinds, engine, weights if known else None)
        out.append({"model": key, "layers": text, **(s or {"flags": f"no {engine} setting ran every case"})})
    return out


def measured_with(headers: Sequence[RunHeader]) -> str:
    """GPU, driver and library versions of the runs, from their run.json headers."""
    parts = []
    for h in headers:
        d = h.device
        # Each backend's libraries and their versions (``available``/``reason`` aside; torch is said once).
        found = {lib: v for info in h.backends.values() for lib, v in info.items()
                 if lib not in ("available", "reason", "torch") and isinstance(v, str)}
        libs = ", ".join(f"{k} {v}" for k, v in sorted(found.items()))
        name = d.name if d.name is not None else "unknown device"
        parts.append(f"{name}, driver {d.driver or '?'}, CUDA runtime "
                     f"{d.cuda_runtime or '?'}, torch {h.torch or '?'}" + (f", {libs}" if libs else ""))
    return "; ".join(dict.fromkeys(parts)) or "no run.json header"


def _pct(x: Any) -> str:
    return f"+{x:.1f}%" if isinstance(x, (int, float)) else ""


def _md(records: list[dict[str, Any]], empty: str = "(none)") -> str:
    if not records:
        return empty + "\n"
    cols = list(dict.fromkeys(k for r in records for k in r))
    return "\n".join(markdown.table(cols, [[r.get(c, "") for c in cols] for r in records])) + "\n"


def engine_json(paths: Sequence[str | Path], engine: str, tie: float, call_form: str = "vllm") -> dict[str, Any]:
    """The same as ``engine_markdown``, machine-readable (``recommend --engine E --out DIR``)."""
    inputs = load_inputs(paths, call_form)
    facts = inputs.facts
    per, single = engine_settings(inputs.rows, engine, facts)
    weighted = model_settings(inputs.rows, engine, facts)
    return {"engine": engine, "call_form": call_form, "measured_with": measured_with(inputs.headers),
            "per_model_weighted": weighted, "per_model": per, "single": single,
            "notes": _engine_notes(inputs.rows, engine, [*per, *weighted, single or {}]),
            "answers": answer_records(answers(inputs.rows, tie), facts)}


def _engine_notes(rows: Sequence[ResultRow], engine: str, settings: list[dict[str, Any]]) -> list[str]:
    """What the engine changes under these settings that the rows did not measure."""
    if engine != "sglang":
        return []
    note = sglang_page_note([str(s.get("flags", "")) for s in settings],
                            [r.config.block_size if r.config is not None else None for r in rows])
    return [note] if note else []


def write_engine_outputs(paths: Sequence[str | Path], engine: str, tie: float, out_dir: str | Path,
                         call_form: str = "vllm") -> list[Path]:
    """``{engine}-per-model.md`` and ``.json`` in ``out_dir``."""
    import json

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    md, js = out / f"{engine}-per-model.md", out / f"{engine}-per-model.json"
    md.write_text(engine_markdown(paths, engine, tie, call_form), encoding="utf-8")
    js.write_text(json.dumps(engine_json(paths, engine, tie, call_form), indent=1) + "\n", encoding="utf-8")
    return [md, js]


def engine_markdown(paths: Sequence[str | Path], engine: str, tie: float, call_form: str = "vllm") -> str:
    """``recommend --engine``: per model shape, the engine's setting and what it costs against
    the per-case best; the single setting over all shapes; the answer table; the environment."""
    inputs = load_inputs(paths, call_form)
    known = inputs.facts
    settings, single = engine_settings(inputs.rows, engine, known)
    recs = [{"model shape": s["model shape"], "setting": s["flags"], "cases": s.get("cases", ""),
             "cost geomean": _pct(s.get("geomean_cost_pct")), "cost worst": _pct(s.get("worst_cost_pct"))}
            for s in settings]
    name = {"vllm": "vLLM", "sglang": "SGLang"}[engine]
    weighted = model_settings(inputs.rows, engine, known)
    per_model = [{"model": s["model"], "layers": s["layers"], "setting": s["flags"], "cases": s.get("cases", ""),
                  "cost geomean (layer-weighted)": _pct(s.get("geomean_cost_pct")),
                  "cost worst": _pct(s.get("worst_cost_pct"))} for s in weighted]
    out = [f"# {name} settings per model shape", "",
           f"Measured with: {measured_with(inputs.headers)}", "",
           "Cost: slowdown of that one setting against the fastest passing backend of each case, whichever it is "
           "(the winner of recommend's tables; geometric mean, worst case).",
           "", *inputs.notes[-1:], "",
           f"## One {name} setting per model", "",
           "What a deployment takes: one setting for all of a model's layers, chosen over its cases with each kind "
           "of layer weighted by how many layers it has (the geomean cost is weighted the same way).", "",
           _md(per_model, "No case of these results was made from a model (`model:`)."),
           "## Per kind of layer", "",
           _md(recs, f"No backend+variant in these results is one that {name} runs.")]
    if single:
        out += [f"Single setting over all shapes: `{single['flags']}` over {single['cases']} cases, cost "
                f"{_pct(single['geomean_cost_pct'])} geomean, {_pct(single['worst_cost_pct'])} worst.", ""]
    out += [f"Note: {n}\n" for n in _engine_notes(inputs.rows, engine, [*settings, *weighted, single or {}])]
    facts = VLLM_FACTS if engine == "vllm" else (*SGLANG_FACTS, SGLANG_MLA_FACT)
    out += [f"## {name}'s flags, with the release each is read from", "", *[f"- {f}" for f in facts], ""]
    out += ["## Winner per model shape and workload kind", "",
            _md(answer_records(answers(inputs.rows, tie), known), "No timed passing rows."), ""]
    return "\n".join(out)
