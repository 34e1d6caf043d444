"""Speculative decoding (graph-modes rows, docs/spec_decode.md): effective step time against the
verify length q per backend, the mode vLLM would run each point in marked (filled: full graph,
hollow: attention eager, piecewise or no graph), and the per-model answer of harness recommend."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pandas as pd

from harness.report.core import Block, Figure, Table, Text, result_rows, section
from harness.report.plots import legend_right, markers, palette, plt, us_axis

MAX_PANELS = 8


@section("spec-decode", "Speculative decoding: step time vs drafts, in the engine's graph mode", order=60, cost=4,
         looked_for="passing GPU rows of a suite with graph_modes: true (suites/spec_decode.yaml) carrying an "
                    "effective time")
def spec_decode(df: pd.DataFrame) -> list[Block]:
    from harness.analysis.engines import EngineFacts
    from harness.analysis.spec_decode import answer, effective_us, flags, graph_modes_of, model_of, spec_rows

    rows = spec_rows(result_rows(df))
    if not rows:
        return []
    series: dict[str, dict[tuple[int, int], dict[str, list[tuple[int, float, str]]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list)))
    for r in rows:
        n, q = r.batch.num_reqs or 0, r.batch.max_query_len or 1
        ctx = (r.batch.max_seq_len or 0) - q
        series[model_of(r)][(n, ctx)][r.label].append((q, float(effective_us(r)), graph_modes_of(r).engine))
    labels = sorted({r.label for r in rows})
    colors, marks = palette(labels), markers(labels)
    out: list[Block] = [Text("Effective time per attention call: the full-graph replay where vLLM (FULL_AND_PIECEWISE) "
                             "would replay this batch from a full graph (filled marker), else the same call launched "
                             "eagerly back to back (hollow: piecewise or no graph, launch overhead included). Both are "
                             "timed in the same cell; harness recommend's speculative-decoding section ranks them.",
                             cls="note")]
    pyplot = plt()
    for model, points in series.items():
        keys = sorted(points)[:MAX_PANELS]
        ncols = min(4, len(keys))
        nrows = -(-len(keys) // ncols)
        fig, axes = pyplot.subplots(nrows, ncols, figsize=(3.4 * ncols + 0.6, 2.8 * nrows + 0.6), squeeze=False,
                                    layout="constrained", sharey=True)
        flat = [a for row in axes for a in row]
        handles: dict[str, Any] = {}
        for ax, key in zip(flat, keys):
            for lab, pts in sorted(points[key].items()):
                pts.sort()
                qs, us = [p[0] for p in pts], [p[1] for p in pts]
                (h,) = ax.plot(qs, us, color=colors[lab], linewidth=1.2)
                handles.setdefault(lab, h)
                for q, u, mode in pts:
                    ax.plot([q], [u], marker=marks[lab], color=colors[lab], markersize=5,
                            markerfacecolor=colors[lab] if mode == "full" else "none")
            ax.set_title(f"b{key[0]} · ctx {key[1]}", fontsize=9)
            ax.set_xlabel("query tokens per request (1 + drafts)", fontsize=8)
            ax.set_xticks(sorted({q for pts in points[key].values() for q, _, _ in pts}))
            ax.grid(True, which="both", alpha=0.3)
            ax.tick_params(labelsize=7.5)
        for ax in flat[len(keys):]:
            ax.set_visible(False)
        for row in axes:
            us_axis(row[0])
        fig.suptitle(f"speculative decode: {model} (filled: full graph, hollow: attention eager)", fontsize=10,
                     x=0.0, ha="left")
        legend_right(fig, list(handles.values()), list(handles), "backend [variant]")
        out.append(Figure(fig, alt=f"effective step time vs q, {model}"))
    facts = EngineFacts.of(df.attrs.get("runs", []))  # the runs' backend facts, over the table
    recs = answer(rows, facts)
    if recs:
        table = pd.DataFrame([{
            "model": r["model"], "q": r["q"], "backend": r["best"], "vLLM mode": "/".join(r["engine_modes"]),
            "declared": r["declared"], "effective us": f"{r['effective_us']:.2f}",
            "cost vs q=1": f"x{r['cost_vs_q1']:.2f}" if r["cost_vs_q1"] else "",
            "runner-up": f"{r['runner_up']} (+{100 * r['margin']:.1f}%)" if r["runner_up"] else "",
            "flags": "; ".join(f"{e}: {f}" for e, f in flags(r, facts).items()),
            "faster, no engine runs it": (f"{r['unrun_faster']['label']} (-{100 * r['unrun_faster']['ahead']:.1f}%)"
                                          if r["unrun_faster"] else "")} for r in recs])
        out.append(Table(table, title="Per model and draft length: the backend to use", wrap=("flags",)))
    return out
