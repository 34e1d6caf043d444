"""The speculative-decoding answer (suites with ``graph_modes: true``, docs/spec_decode.md): per model
shape and verify length q, the backend and graph mode whose **effective** step time (the time of
the mode vLLM would run it in, ``GraphModes.effective_us``) is least, its cost against q = 1, the
engine flags, and where two backends' ranking flips along q or context. A reader: rows only."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Iterable

from harness.analysis.engines import TABLE_ONLY, EngineFacts
from harness.records.graph_modes import VLLM_RELEASE, GraphModes
from harness.records.results import ResultRow

# Flag spellings: vLLM as of VLLM_RELEASE's engine args; SGLang's server_args (EAGLE; flag names
# only, no release pinned here: check `python -m sglang.launch_server --help` of yours).
SPEC_CONFIG = '--speculative-config \'{"method": "eagle3", "num_speculative_tokens": %d}\''
CUDAGRAPH = '--compilation-config \'{"cudagraph_mode": "%s"}\''
SGLANG_SPEC = "--speculative-algorithm EAGLE --speculative-num-steps %d --speculative-eagle-topk 1 --speculative-num-draft-tokens %d"


def model_of(r: ResultRow) -> str:
    c = r.config
    assert c is not None
    if c.attention_kind not in (None, "mha"):  # rows before MLA carry no attention_kind
        return f"MLA {c.num_heads} heads ({c.attention_kind})"
    return f"GQA {c.num_heads}/{c.num_kv_heads} heads, head {c.head_size}"


def spec_rows(rows: Iterable[ResultRow]) -> list[ResultRow]:
    """Passing rows with an effective time (a GPU run of a graph-modes suite), uniform batches."""
    return [r for r in rows if r.status == "pass" and r.graph_modes is not None and r.graph_modes.effective_us
            and not (r.batch.num_prefill or r.batch.num_extend)]


def graph_modes_of(r: ResultRow) -> GraphModes:
    """The graph modes of a row spec_rows kept (it keeps only rows that have them)."""
    assert r.graph_modes is not None
    return r.graph_modes


def effective_us(r: ResultRow) -> float:
    """The effective step time of a row spec_rows kept (it keeps only rows that have one)."""
    us = graph_modes_of(r).effective_us
    assert us is not None
    return us


def _shared_points(per_label: dict[str, dict[tuple[int, int], ResultRow]]) -> set[tuple[int, int]]:
    """The (batch, context) points every label ran (per_label is not empty)."""
    sets = [set(pts) for pts in per_label.values()]
    return sets[0].intersection(*sets[1:])


def _point(r: ResultRow) -> tuple[int, int]:
    """(requests, context of the longest request): the same point at every q."""
    return (r.batch.num_reqs or 0, (r.batch.max_seq_len or 0) - (r.batch.max_query_len or 1))


def _rec(model: str, q: int, r: ResultRow) -> dict[str, Any]:
    """What ``flags`` reads of a candidate (its sample row at model and q)."""
    return {"model": model, "q": q, "backend": r.backend, "variant": dict(r.variant),
            "attention_kind": (r.config.attention_kind if r.config else None) or "mha"}


def answer(rows: Iterable[ResultRow], facts: EngineFacts = TABLE_ONLY) -> list[dict[str, Any]]:
    """One record per (model, q): the best backend+variant an engine can run (by geometric-mean
    effective time over the (batch, context) points every candidate ran), its engine mode there,
    the runner-up among those, its cost against the best q = 1 backend on the same points, and
    the fastest call no engine runs where one beats it (``unrun_faster``: a finding, not an
    answer: its flags would be a sentence, not a setting)."""
    by: dict[tuple[str, int], dict[str, dict[tuple[int, int], ResultRow]]] = defaultdict(lambda: defaultdict(dict))
    for r in spec_rows(rows):
        by[(model_of(r), r.batch.max_query_len or 1)][r.label][_point(r)] = r
    out = []
    for (model, q), cands in sorted(by.items()):
        common = _shared_points(cands)
        if not common:
            continue

        def gm(label: str, pts: set = common, table: dict = cands) -> float:
            return math.exp(sum(math.log(effective_us(table[label][p])) for p in pts) / len(pts))

        def runnable(label: str, table: dict = cands, pts: set = common, q_: int = q, m: str = model) -> bool:
            return not no_engine_runs(_rec(m, q_, table[label][min(pts)]), facts)

        ranked = sorted(cands, key=gm)
        usable = [lab for lab in ranked if runnable(lab)] or ranked
        best = usable[0]
        # the calls ranked before the answer are the ones no engine runs; ahead by at least 0.1%:
        # a hair's breadth is not "faster"
        ahead = [lab for lab in ranked[:ranked.index(best)] if gm(lab) < 0.999 * gm(best)]
        base = by.get((model, 1), {})
        base_pts = common & _shared_points(base) if base else set()
        cost = None
        if base_pts and q > 1:
            base_usable = [lab for lab in base if runnable(lab, base, base_pts, 1)] or list(base)
            best1 = min(base_usable, key=lambda lab: gm(lab, base_pts, base))
            cost = gm(best, base_pts) / gm(best1, base_pts, base)
        sample = cands[best][min(common)]
        modes = sorted({graph_modes_of(cands[best][p]).engine for p in common})
        up = usable[1] if len(usable) > 1 else None
        out.append({**_rec(model, q, sample), "best": best, "effective_us": gm(best), "engine_modes": modes,
                    "declared": graph_modes_of(sample).declared, "runner_up": up,
                    "margin": gm(up) / gm(best) - 1 if up else None, "cost_vs_q1": cost, "points": len(common),
                    "unrun_faster": ({"label": ahead[0], "effective_us": gm(ahead[0]),
                                      "ahead": 1 - gm(ahead[0]) / gm(best)} if ahead else None)})
    return out


def crossovers(rows: Iterable[ResultRow], along: str = "q") -> list[dict[str, Any]]:
    """Where two backends' effective-time ranking flips: along q at each (model, batch, context),
    or along context (``along="context"``) at each (model, q, batch). One record per flip."""
    series: dict[tuple, dict[str, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    for r in spec_rows(rows):
        (n, ctx), q = _point(r), r.batch.max_query_len or 1
        key, x = ((model_of(r), n, ctx), q) if along == "q" else ((model_of(r), q, n), ctx)
        series[key][r.label][x] = effective_us(r)
    out = []
    for key, per in sorted(series.items()):
        labels = sorted(per)
        for i, a in enumerate(labels):
            for b in labels[i + 1:]:
                xs = sorted(set(per[a]) & set(per[b]))
                signs = [(x, per[a][x] < per[b][x]) for x in xs]
                for (x0, s0), (x1, s1) in zip(signs, signs[1:]):
                    if s0 != s1:
                        out.append({"key": key, "along": along, "a": a, "b": b, "from": x0, "to": x1,
                                    "faster_before": a if s0 else b, "faster_after": a if s1 else b})
    return out


def flip_point(flip: dict[str, Any]) -> str:
    """Where a crossover record's series sits, in words: the model and the two fixed axes."""
    model, a, b = flip["key"]
    fixed = f"batch {a}, context {b}" if flip["along"] == "q" else f"q {a}, batch {b}"
    return f"{model}, {fixed}"


def not_run(variant: dict[str, Any], runs: dict[str, Any]) -> dict[str, Any]:
    """The axes where ``variant`` is not what the engine runs (its ``EngineName.runs``); a
    variant without an axis ran its default, which ``runs`` names."""
    return {k: variant[k] for k, want in runs.items() if k in variant and str(variant[k]) != str(want)}


def flags(rec: dict[str, Any], facts: EngineFacts = TABLE_ONLY) -> dict[str, str]:
    """vLLM and SGLang flags for an answer record (empty where the engine has no such backend),
    from the runs' backend facts. Where the engine has the backend but does not run this variant
    (its ``runs`` differ), a sentence saying so instead of flags: they would run another call."""
    k = rec["q"] - 1
    out: dict[str, str] = {}
    vname = facts.engine_name(rec["backend"], "vllm")
    mode = "FULL_AND_PIECEWISE"
    if vname is not None:
        other = not_run(rec["variant"], vname.runs)
        if other:
            out["vllm"] = (f"no setting runs this call: {VLLM_RELEASE}'s {vname.name} runs "
                           + ",".join(f"{a}={vname.runs[a]}" for a in other))
        else:
            spec = (SPEC_CONFIG % k + " ") if k else ""
            out["vllm"] = f"{spec}--attention-backend {vname.name} {CUDAGRAPH % mode} ({VLLM_RELEASE})"
    s = facts.sglang_setting(rec["backend"], rec["variant"], rec["attention_kind"])
    if s is not None:
        decl = facts.engine_name(rec["backend"], "sglang")
        other = not_run(rec["variant"], decl.runs if decl else {})
        if other and decl is not None:
            out["sglang"] = (f"no setting runs this call: SGLang's {s['attention_backend']} runs "
                             + ",".join(f"{a}={decl.runs[a]}" for a in other))
        else:
            spec = (SGLANG_SPEC % (k, rec["q"]) + " ") if k else ""
            out["sglang"] = f"{spec}--attention-backend {s['attention_backend']}"
    return out


def no_engine_runs(rec: dict[str, Any], facts: EngineFacts = TABLE_ONLY) -> bool:
    """True when no engine's setting runs this record's call (``flags`` has no flag for it): its
    engine mode is then what vLLM would do with the level the backend declares, not a mode any
    engine runs it in. False for a backend no engine names at all (nothing to tell apart)."""
    fl = flags(rec, facts)
    return bool(fl) and not any(f.startswith("--") for f in fl.values())


def spec_markdown(rows: Iterable[ResultRow], facts: EngineFacts = TABLE_ONLY) -> str:
    """The recommend section; empty without graph-modes rows."""
    rows = list(rows)
    recs = answer(rows, facts)
    if not recs:
        return ""
    lines = ["## Speculative decoding: backend and graph mode per model and draft length", "",
             "Effective time: the mode vLLM runs the batch in (full graph replay, or attention eager "
             "between piecewise graphs, launches included), geometric mean over the batch x context "
             "points every backend ran; cost vs q=1: against the best single-token decode on the same points. "
             "The answer is a call an engine runs; a faster call no engine runs (yet) is named in the last column.", "",
             "| model | q (drafts) | backend | vLLM mode | declared | effective us | runner-up (+%) | cost vs q=1 | flags "
             "| faster, no engine runs it |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in recs:
        up = f"{r['runner_up']} (+{100 * r['margin']:.1f}%)" if r["runner_up"] else "-"
        cost = f"x{r['cost_vs_q1']:.2f}" if r["cost_vs_q1"] else "-"
        fl = "; ".join(f"{e}: `{f}`" if f.startswith("--") else f"{e}: {f}"
                       for e, f in flags(r, facts).items()) or "-"
        mode = "/".join(r["engine_modes"])
        if no_engine_runs(r, facts):  # the declared level's mode, had an engine this call
            mode += " (no engine runs this call yet)"
        un = r["unrun_faster"]
        unrun = f"{un['label']}: {un['effective_us']:.1f} us (-{100 * un['ahead']:.1f}%)" if un else "-"
        lines.append(f"| {r['model']} | {r['q']} ({r['q'] - 1}) | {r['best']} | {mode} | "
                     f"{r['declared']} | {r['effective_us']:.1f} | {up} | {cost} | {fl} | {unrun} |")
    flips = crossovers(rows) + crossovers(rows, "context")
    if flips:
        lines += ["", "Ranking flips (effective time):", ""]
        for f in flips[:40]:
            lines.append(f"- {flip_point(f)}: {f['faster_before']} faster at {f['along']}={f['from']}, "
                         f"{f['faster_after']} at {f['along']}={f['to']}")
        if len(flips) > 40:
            lines.append(f"- ... {len(flips) - 40} more")
    return "\n".join(lines) + "\n"
