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
from harness.analysis.engines import SGLANG_FACTS, sglang_flags, sglang_page_note, sglang_setting, vllm_flags
from harness.analysis.recommend import rows as R
from harness.analysis.recommend.buckets import batch_kind
from harness.analysis.recommend.load import load_inputs
from harness.analysis.recommend.rank import RAN_OK, BucketResult, Candidate, case_batches, rank_bucket
from harness.analysis.recommend.vllm import VLLM_FACTS, vllm_setting
from harness.records.results import ResultRow, read_header

KIND_ORDER = {"decode": 0, "prefill": 1, "extend": 2, "mixed": 3}


def model_of(row: ResultRow) -> str:
    """The model shape a row belongs to: 'llama-3.1-8b/tp2', else 'H32/KV8 D128 bfloat16'."""
    m = R.model(row)
    if m:
        return m
    c = R.config(row)
    if not c:
        return "unknown shape"
    s = f"H{c.get('num_heads')}/KV{c.get('num_kv_heads')} D{c.get('head_size')} {c.get('dtype')}"
    if c.get("kv_cache_dtype") not in (None, "auto"):
        s += f" kv {c['kv_cache_dtype']}"
    for key, text in (("sliding_window", "window {}"), ("softcap", "softcap {}"), ("sinks", "sinks")):
        if c.get(key):
            s += " " + text.format(c[key])
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
        b = R.batch(r) or batches.get(R.case_id(r))
        if not b:
            continue
        m = model_of(r)
        order.setdefault(m, len(order))
        groups[(m, batch_kind(b))].append(r)
    out = [Answer(m, k, rank_bucket((m, k), rs, tie)) for (m, k), rs in groups.items()]  # type: ignore[arg-type]
    return sorted(out, key=lambda a: (order[a.model], KIND_ORDER.get(a.kind, 9), a.kind))


def _margin(res: BucketResult) -> str:
    if res.runner_up is None or res.runner_up.name not in res.ratios:
        return "only one candidate" if res.winner else ""
    r = res.ratios[res.runner_up.name]
    return f"{r.pct:+.1f}% [{(r.low - 1) * 100:+.1f}, {(r.high - 1) * 100:+.1f}] vs {res.runner_up.name}"


def answer_attention_kind(a: "Answer") -> str:
    """The attention kind of an answer's rows ("mha", or an MLA form: docs/mla.md)."""
    return R.config(a.result.example).get("attention_kind") or "mha"


def sglang_flag(c: Candidate, kind: str, attention_kind: str = "mha") -> str:
    s = sglang_setting(c.backend, c.variant, attention_kind)
    if s is None:
        return "no SGLang backend"
    flag = {"decode": "--decode-attention-backend", "prefill": "--prefill-attention-backend",
            "extend": "--prefill-attention-backend"}.get(kind, "--attention-backend")
    return f"{flag} {s['attention_backend']}" + ("" if s["exact"] else " (nearest)")


def vllm_flag(c: Candidate) -> str:
    s = vllm_setting(c)
    if s is None:
        return "no vLLM setting"
    return vllm_flags(s) + ("" if s["exact"] else " (nearest)")


def answer_records(ans: list[Answer]) -> list[dict[str, Any]]:
    """One table row per model shape and workload kind that has a timed passing candidate."""
    out = []
    for a in ans:
        w = a.result.winner
        if w is None:
            continue
        win = f"tie: {w.name} ~ {', '.join(a.result.tied_with)}" if a.result.tie else w.name
        out.append({"model shape": a.model, "workload": a.kind, "winner": win, "margin [interval]": _margin(a.result),
                    "vLLM": vllm_flag(w), "SGLang": sglang_flag(w, a.kind, answer_attention_kind(a))})
    return out


# ---------------------------------------------------------------- one setting per engine


def _engine_times(rows: Sequence[ResultRow], engine: str) -> tuple[dict[str, dict[str, float]], dict[str, str]]:
    """case id -> {engine setting: fastest median of the harness candidates it runs}, and each
    case's kind. Only candidates the engine runs exactly count."""
    batches = case_batches(rows)
    times: dict[str, dict[str, float]] = defaultdict(dict)
    kinds: dict[str, str] = {}
    for r in rows:
        t = R.timing(r) if R.status(r) == RAN_OK else None
        b = R.batch(r) or batches.get(R.case_id(r))
        if t is None or not b:
            continue
        variant = R.variant(r)
        if engine == "vllm":
            s = vllm_setting(Candidate(r.backend, variant, r.variant_label, {}))
            key = s["cli"] if s and s["exact"] else None
        else:
            s = sglang_setting(r.backend, variant, R.config(r).get("attention_kind") or "mha")
            key = s["attention_backend"] if s and s["exact"] else None
        if key is None:
            continue
        cid = R.case_id(r)
        kinds[cid] = batch_kind(b)
        times[cid][key] = min(t[0], times[cid].get(key, math.inf))
    return times, kinds


def _cost(pick: dict[str, str], times: dict[str, dict[str, float]],
          weights: dict[str, float] | None = None) -> tuple[float, float] | None:
    """(geomean, worst) slowdown of the per-case settings ``pick`` against each case's fastest,
    the geomean weighted by ``weights`` (a case's share of the model's layers) when given."""
    logs, total = [], 0.0
    for cid, key in pick.items():
        if key not in times[cid]:
            return None
        w = (weights or {}).get(cid, 1.0)
        logs.append((w, math.log(times[cid][key] / min(times[cid].values()))))
        total += w
    if not logs or total <= 0:
        return None
    return math.exp(sum(w * x for w, x in logs) / total) - 1, math.exp(max(x for _, x in logs)) - 1


def _best(cases: list[str], times: dict[str, dict[str, float]], weights: dict[str, float] | None = None) -> str | None:
    """The setting every case ran with the least (weighted) sum of log times."""
    keys = set.intersection(*(set(times[c]) for c in cases)) if cases else set()
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
    if engine == "vllm":
        k = _best(cases, times, weights)
        if k is None:
            return None
        flags, pick = k, {c: k for c in cases}
    else:
        dec = [c for c in cases if kinds[c] == "decode"]
        pre = [c for c in cases if kinds[c] != "decode"]
        d, p = _best(dec, times, weights), _best(pre, times, weights)
        if (dec and d is None) or (pre and p is None):
            return None
        flags = sglang_flags(p, d)
        pick = {**{c: d for c in dec}, **{c: p for c in pre}}
    cost = _cost(pick, times, weights)
    return {"flags": flags, "cases": len(cases), "geomean_cost_pct": None if cost is None else cost[0] * 100,
            "worst_cost_pct": None if cost is None else cost[1] * 100}


def engine_settings(rows: Sequence[ResultRow], engine: str) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """One setting per model shape, and the single setting over all of them."""
    times, kinds = _engine_times(rows, engine)
    per_model: dict[str, list[str]] = defaultdict(list)
    for r in rows:
        cid = R.case_id(r)
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


def model_settings(rows: Sequence[ResultRow], engine: str) -> list[dict[str, Any]]:
    """One setting per model and TP degree (what a deployment takes), its layer kinds weighted
    by how many layers each has (gemma-2-9b: 21 local, 21 global), beside the per-kind settings
    of ``engine_settings``. Rows without a model are left out."""
    times, kinds = _engine_times(rows, engine)
    cases: dict[str, list[str]] = defaultdict(list)
    weights: dict[str, float] = {}
    layers: dict[str, dict[str, int | None]] = defaultdict(dict)
    for r in rows:
        p, cid = r.case_params or {}, R.case_id(r)
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


def measured_with(headers: Sequence[dict[str, Any]]) -> str:
    """GPU, driver and library versions of the runs, from their run.json headers."""
    parts = []
    for h in headers:
        d = h.get("device") or {}
        libs = ", ".join(f"{k} {v}" for k, v in sorted((h.get("backends") or {}).items()) if isinstance(v, str))
        parts.append(f"{d.get('name', 'unknown device')}, driver {d.get('driver') or '?'}, CUDA runtime "
                     f"{d.get('cuda_runtime') or '?'}, torch {h.get('torch') or '?'}" + (f", {libs}" if libs else ""))
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
    per, single = engine_settings(inputs.rows, engine)
    weighted = model_settings(inputs.rows, engine)
    return {"engine": engine, "call_form": call_form, "measured_with": measured_with([read_header(p) for p in paths]),
            "per_model_weighted": weighted, "per_model": per, "single": single,
            "notes": _engine_notes(inputs.rows, engine, [*per, *weighted, single or {}]),
            "answers": answer_records(answers(inputs.rows, tie))}


def _engine_notes(rows: Sequence[ResultRow], engine: str, settings: list[dict[str, Any]]) -> list[str]:
    """What the engine changes under these settings that the rows did not measure."""
    if engine != "sglang":
        return []
    note = sglang_page_note([str(s.get("flags", "")) for s in settings], [R.config(r).get("block_size") for r in rows])
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
    settings, single = engine_settings(inputs.rows, engine)
    recs = [{"model shape": s["model shape"], "setting": s["flags"], "cases": s.get("cases", ""),
             "cost geomean": _pct(s.get("geomean_cost_pct")), "cost worst": _pct(s.get("worst_cost_pct"))}
            for s in settings]
    name = {"vllm": "vLLM", "sglang": "SGLang"}[engine]
    weighted = model_settings(inputs.rows, engine)
    per_model = [{"model": s["model"], "layers": s["layers"], "setting": s["flags"], "cases": s.get("cases", ""),
                  "cost geomean (layer-weighted)": _pct(s.get("geomean_cost_pct")),
                  "cost worst": _pct(s.get("worst_cost_pct"))} for s in weighted]
    out = [f"# {name} settings per model shape", "",
           f"Measured with: {measured_with([read_header(p) for p in paths])}", "",
           "Cost: slowdown of that one setting against the fastest setting of each case (geometric mean, worst case).",
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
    facts = VLLM_FACTS if engine == "vllm" else SGLANG_FACTS
    out += [f"## {name}'s flags, with the release each is read from", "", *[f"- {f}" for f in facts], ""]
    out += ["## Winner per model shape and workload kind", "",
            _md(answer_records(answers(inputs.rows, tie)), "No timed passing rows."), ""]
    return "\n".join(out)
