"""Latency curves (one figure per model shape) and the table of every timed cell."""

from __future__ import annotations

import math

import pandas as pd

from harness.report.core import Block, Figure, Table, Text, col, fmt_tokens, group_title, merged_cells, num, section, timed
from harness.report.plots import colors_of, legend_right, log2_tokens_axis, markers, plt, us_axis
from harness.report.sections.answer import groups_in_order

MAX_PANELS = 8


def _lines(ax, cells: pd.DataFrame, x: str, colors: dict[str, str], marks: dict[str, str], handles: dict) -> None:
    for lab, s in cells.groupby("label", sort=True):
        s = s.sort_values(x)
        (h,) = ax.plot(s[x], s["median"], marker=marks[lab], color=colors[lab], linewidth=1.3, markersize=4)
        handles.setdefault(lab, (h, s["short"].iloc[0]))
        if s["ci_lo"].notna().all() and s["ci_hi"].notna().all() and len(s) > 1:
            ax.fill_between(s[x], s["ci_lo"], s["ci_hi"], color=colors[lab], alpha=0.15, linewidth=0)


def _has_figure(g: pd.DataFrame) -> bool:
    """Whether ``_figure`` draws one for this group (a curve over context or over batch size)."""
    if g["case"].nunique() < 3:
        return False  # two points are a ratio, not a curve: the verdict table has them
    cells = merged_cells(g, ["suite", "case", "n_req", "ctx_mean"])
    per_batch = cells.groupby("n_req")["ctx_mean"].nunique()
    return bool((per_batch >= 2).any()) or cells["n_req"].nunique() >= 2


def _figure(g: pd.DataFrame, title: str, colors: dict[str, str]) -> Figure | None:
    cells = merged_cells(g, ["suite", "case", "n_req", "ctx_mean"])
    marks = markers(list(colors))
    per_batch = cells.groupby("n_req")["ctx_mean"].nunique()
    by_context = per_batch[per_batch >= 2].index.tolist()
    pyplot = plt()
    handles: dict[str, tuple] = {}
    if by_context:
        panels = by_context[:MAX_PANELS]
        ncols = min(4, len(panels))
        nrows = -(-len(panels) // ncols)
        fig, axes = pyplot.subplots(nrows, ncols, figsize=(3.3 * ncols + 0.6, 2.7 * nrows + 0.6), squeeze=False,
                                    sharey=True, layout="constrained")
        flat = [a for r in axes for a in r]
        for ax, b in zip(flat, panels):
            _lines(ax, cells[cells["n_req"] == b], "ctx_mean", colors, marks, handles)
            log2_tokens_axis(ax)
            ax.set_title(f"batch {b:.0f}", fontsize=9)
            ax.set_xlabel("mean context (tokens, log2)", fontsize=8)
            ax.grid(True, which="both", alpha=0.3)
            ax.tick_params(labelsize=7.5)
        for ax in flat[len(panels):]:
            ax.set_visible(False)
        for r in axes:
            us_axis(r[0])
            r[0].yaxis.label.set_fontsize(8)
        hidden = len(by_context) - len(panels)
    else:
        if cells["n_req"].nunique() < 2:
            return None
        fig, ax = pyplot.subplots(figsize=(6.0, 3.4), layout="constrained")
        _lines(ax, cells, "n_req", colors, marks, handles)
        log2_tokens_axis(ax)
        ax.set_xlabel("batch size (requests, log2)", fontsize=8)
        us_axis(ax)
        ax.grid(True, which="both", alpha=0.3)
        hidden = 0
    fig.suptitle(title, fontsize=10, x=0.0, ha="left")
    legend_right(fig, [h for h, _ in handles.values()], [s for _, s in handles.values()], "backend [variant]")
    return Figure(fig, alt=f"latency {title}",
                  caption=f"{hidden} more batch sizes in the table below." if hidden else "")


LATENCY_PARTS = 4  # its figures are the page's longest section: built in 4 pieces (core.section ``parts``)


@section("latency", "Latency", order=200, cost=10, parts=LATENCY_PARTS,
         looked_for="rows that passed with timing.median_us")
def latency(df: pd.DataFrame, part: tuple[int, int] = (0, 1)) -> list[Block]:
    """Part ``i`` of ``n``: the note (first part), a contiguous share of the figures, the table (last part)."""
    i, n = part
    t = timed(df)
    if t.empty:
        return []
    colors = colors_of(df)
    drawn = [gk for gk in groups_in_order(t) if _has_figure(t[t["group"] == gk])]
    out: list[Block] = []
    if drawn and i == 0:
        out.append(Text("One figure per model shape; one panel per batch size; shaded: 95% CI of the median.",
                        cls="note"))
    for gk in drawn[i * len(drawn) // n:(i + 1) * len(drawn) // n]:
        g = t[t["group"] == gk]
        f = _figure(g, group_title(g), colors)
        if f is not None:
            out.append(f)
    if i != n - 1:
        return out
    methods = sorted({str(m) for m in col(t, "timing.method").dropna().unique()})
    tf = num(t, "metrics.tflops")
    tb = num(t, "metrics.tbps")
    pct = num(t, "metrics.roofline.pct_of_ceiling")
    table = pd.DataFrame({
        "case": t["case_id"], "shape": t["shape"], "workload": t["kind"],
        "batch": t["n_req"].map(lambda x: f"{x:.0f}" if math.isfinite(x) else ""),
        "context mean": t["ctx_mean"].map(fmt_tokens), "context max": t["ctx_max"].map(fmt_tokens),
        "backend [variant]": t["short"],
        "median us": t["median"].map(lambda x: f"{x:.2f}"),
        "CI low": t["ci_lo"].map(lambda x: f"{x:.2f}" if math.isfinite(x) else ""),
        "CI high": t["ci_hi"].map(lambda x: f"{x:.2f}" if math.isfinite(x) else ""),
        "samples": num(t, "timing.samples").map(lambda x: f"{x:.0f}" if math.isfinite(x) else ""),
        "TFLOP/s": tf.map(lambda x: f"{x:.3g}" if math.isfinite(x) else ""),
        "TB/s": tb.map(lambda x: f"{x:.3g}" if math.isfinite(x) else ""),
        "% of ceiling": pct.map(lambda x: f"{x:.1f}" if math.isfinite(x) else ""),
        "run": (t["run"] + 1).astype(str),
    }).sort_values(["shape", "workload", "case", "median us"], key=lambda s: s if s.name != "median us" else s.astype(float))
    table = table.loc[:, [c for c in table.columns if (table[c].astype(str) != "").any()]].reset_index(drop=True)
    tips = pd.DataFrame("", index=table.index, columns=table.columns)
    full = dict(zip(t["case_id"], t["case"]))
    tips["case"] = table["case"].map(full)
    if "timing_skipped" in df.columns:
        refs = sorted(df.loc[df["timing_skipped"].notna() & (df["timing_skipped"] != ""), "label"].unique())
        if refs:
            # Checked, not timed (Capabilities.role "reference"): absent from every speed figure.
            out.append(Text(f"{', '.join(refs)}: reference, not timed (a correctness reference, slow by design; "
                            "its cells were checked; harness run --time-references times it).", cls="note"))
    untimed = sorted({str(x) for x in col(t, "call.untimed_work").dropna().unique() if str(x)})
    for note in untimed:  # the same for every backend of those rows: a step's share left out
        out.append(Text(f"Rows marked call.untimed_work: {note}.", cls="note"))
    out += [Text(f"All timed cells. Median of the timed samples in microseconds with its ~95% confidence interval; "
                 f"timer: {', '.join(methods) or 'unknown'}. Click a column header to sort.", cls="note"),
            Table(table, tips=tips)]
    return out
