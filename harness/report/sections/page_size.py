"""Page-size sweep: one workload (same layer and batch) at several ``config.block_size`` values."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from harness.report.core import Block, Figure, Table, Text, col, fmt_tokens, section, text, timed
from harness.report.plots import colors_of, legend_right, log2_tokens_axis, markers, plt, us_axis

if TYPE_CHECKING:  # matplotlib is imported only when a figure is drawn
    from matplotlib.lines import Line2D

_SIG = ["batch.num_reqs", "batch.num_tokens", "batch.total_kv_tokens", "batch.max_seq_len", "config.kv_layout"]
_NOT_LAYER = ("config.block_size", "config.kv_layout", "config.tags", "config.name")


def _keys(t: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """(layer key without the page size and KV layout, workload key): rows of one sweep share
    both; the layouts of one layer become panels of one figure."""
    cfg = sorted(c for c in t.columns if c.startswith("config.") and c not in _NOT_LAYER)
    layer = pd.concat([text(t[c]) for c in cfg], axis=1).agg("|".join, axis=1) if cfg else pd.Series("", index=t.index)
    work = pd.concat([text(col(t, c)) for c in _SIG], axis=1).agg("|".join, axis=1)
    return layer, work


@section("page-size", "Page-size sweep", order=400, cost=4,
         looked_for="timed rows of one workload (same layer and batch) at two or more config.block_size values")
def page_size(df: pd.DataFrame) -> list[Block]:
    t = timed(df)
    t = t[t["block_size"].notna()] if not t.empty else t
    if t.empty:
        return []
    layer, work = _keys(t)
    t = t.assign(_layer=layer, _work=work)
    sweeps = t.groupby(["_layer", "_work"])["block_size"].transform("nunique") >= 2
    t = t[sweeps]
    if t.empty:
        return []
    colors = colors_of(df)
    marks = markers(list(colors))
    out: list[Block] = [Text("Every backend and variant on the same axes; one figure per layer shape, one panel per "
                             "workload. Missing points: the backend does not support that page size (see the "
                             "failures and skips section).", cls="note")]
    rows = []
    pyplot = plt()
    for _, lt in t.groupby("_layer", sort=False):
        works = list(dict.fromkeys(lt["_work"]))
        ncols = min(4, len(works))
        nrows = -(-len(works) // ncols)
        fig, axes = pyplot.subplots(nrows, ncols, figsize=(3.4 * ncols + 0.6, 2.8 * nrows + 0.6), squeeze=False,
                                    layout="constrained", sharey=True)
        flat = [a for r in axes for a in r]
        handles: dict[str, tuple[Line2D, str]] = {}  # label -> (its line, its short name)
        for ax, w in zip(flat, works):
            wt = lt[lt["_work"] == w]
            first = wt.iloc[0]
            layout = str(first.get("config.kv_layout", "") or "")
            name = f"b{first['n_req']:.0f} · ctx {fmt_tokens(first['ctx_mean'])}" + (f" · {layout}" if layout else "")
            cells = wt.groupby(["label", "block_size"]).agg(median=("median", "median"), lo=("ci_lo", "min"),
                                                            hi=("ci_hi", "max"), short=("short", "first")).reset_index()
            for lab, s in cells.groupby("label", sort=True):
                s = s.sort_values("block_size")
                (h,) = ax.plot(s["block_size"], s["median"], marker=marks[lab], color=colors[lab], linewidth=1.3,
                               markersize=4)
                handles.setdefault(lab, (h, s["short"].iloc[0]))
                rec = {"workload": name, "case": first["case_id"], "backend [variant]": s["short"].iloc[0]}
                for b, m in zip(s["block_size"], s["median"]):
                    rec[f"page {b:.0f} (us)"] = f"{m:.2f}"
                rec["best page"] = f"{s.loc[s['median'].idxmin(), 'block_size']:.0f}"
                rows.append(rec)
            log2_tokens_axis(ax)
            ax.set_xlabel("page size (tokens per block, log2)", fontsize=8)
            ax.set_title(name, fontsize=9)
            ax.grid(True, which="both", alpha=0.3)
            ax.tick_params(labelsize=7.5)
        for ax in flat[len(works):]:
            ax.set_visible(False)
        for r in axes:
            us_axis(r[0])
            r[0].yaxis.label.set_fontsize(8)
        shape = lt["shape"].iloc[0].split(" · page")[0]
        fig.suptitle(f"page-size sweep: {shape}", fontsize=10, x=0.0, ha="left")
        legend_right(fig, [h for h, _ in handles.values()], [s for _, s in handles.values()], "backend [variant]")
        out.append(Figure(fig, alt=f"page-size sweep {shape}"))
    table = pd.DataFrame(rows).fillna("")
    pages = sorted((c for c in table.columns if c.startswith("page ") and c != "best page"),
                   key=lambda c: int(c.split()[1]))
    table = table[["workload", "case", "backend [variant]", *pages, "best page"]]
    out.append(Table(table))
    return out
