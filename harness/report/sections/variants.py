"""Variant axes: for every backend with a variant axis that takes more than one value among the
timed rows (flash-attn fa_version, flashinfer decode_tensor_cores, ...), each value against the
others on the same case with the backend's other axes held fixed."""

from __future__ import annotations

import math

import pandas as pd

from harness.report.core import Block, Figure, Heading, Table, Text, fmt_tokens, section, text, timed
from harness.report.plots import colors_of, legend_right, markers, plt


def axes_of(t: pd.DataFrame) -> list[tuple[str, str, list[str]]]:
    """(backend, axis column, other axis columns) for every axis with > 1 value in ``t``."""
    out = []
    for b, g in t.groupby("backend", sort=True):
        cols = [c for c in g.columns if c.startswith("variant.") and g[c].notna().any()]
        for c in cols:
            if text(g[c].dropna()).nunique() > 1:
                out.append((str(b), c, [o for o in cols if o != c]))
    return out


def _compare(g: pd.DataFrame, axis: str, others: list[str]) -> pd.DataFrame:
    """One row per (case, other-axis values) with >= 2 axis values: medians per value."""
    oth = (pd.concat([c[len("variant."):] + "=" + text(g[c]) for c in others], axis=1).agg(",".join, axis=1)
           if others else "")
    g = g.assign(_val=text(g[axis]), _others=oth)
    keys = ["suite", "case", "_others"]
    m = g.groupby([*keys, "_val"], sort=False).agg(median=("median", "median"), label=("label", "first")).reset_index()
    keep = m.groupby(keys)["_val"].transform("nunique") >= 2
    return m[keep]


@section("variant-axes", "Variant axes (FA2 / FA3 / FA4 and other per-backend options)", order=300,
         looked_for="timed rows of one backend whose variant axis (variant.*) takes two or more values on one case")
def variant_axes(df: pd.DataFrame) -> list[Block]:
    t = timed(df)
    if t.empty:
        return []
    colors = colors_of(df)
    marks = markers(list(colors))
    info = t.drop_duplicates("case").set_index("case")
    out: list[Block] = []
    for backend, axis, others in axes_of(t):
        g = t[t["backend"] == backend]
        m = _compare(g, axis, others)
        if m.empty:
            continue
        name = axis[len("variant."):]
        values = sorted(m["_val"].unique(), key=lambda v: (len(v), v))
        pv = m.pivot_table(index=["suite", "case", "_others"], columns="_val", values="median", aggfunc="first",
                           sort=False)
        pv = pv[[v for v in values if v in pv.columns]]
        best = pv.min(axis=1)
        rows = []
        for (_suite, case, oth), r in pv.iterrows():
            i = info.loc[case]
            rec = {"case": i["case_id"], "shape": i["shape"], "batch": f"{i['n_req']:.0f}" if math.isfinite(i["n_req"]) else "",
                   "context mean": fmt_tokens(i["ctx_mean"])}
            if others:
                rec["other axes"] = oth
            for v in pv.columns:
                rec[f"{name}={v} (us)"] = f"{r[v]:.2f}" if math.isfinite(r[v]) else ""
            rec["fastest"] = f"{name}={r.idxmin()}"
            slow = r.max() / r.min()
            rec["slowest / fastest"] = f"{slow:.2f}x"
            rows.append(rec)
        table = pd.DataFrame(rows)
        wins = table["fastest"].value_counts()
        head = (f"{backend}, axis {name}: " + ", ".join(f"{k} fastest on {v} of {len(table)}" for k, v in wins.items()))
        pyplot = plt()
        fig, ax = pyplot.subplots(figsize=(min(15.0, 3.0 + 0.42 * len(pv)), 3.4), layout="constrained")
        handles = {}
        x = list(range(len(pv)))
        for lab, s in m.groupby("label", sort=True):
            idx = [pv.index.get_loc((su, c, o)) for su, c, o in zip(s["suite"], s["case"], s["_others"])
                   if (su, c, o) in pv.index]
            ys = [s["median"].iloc[k] / best.iloc[j] for k, j in enumerate(idx)]
            short = df.loc[df["label"] == lab, "short"].iloc[0]
            h = ax.scatter(idx, ys, color=colors[lab], marker=marks[lab], s=26, zorder=3)
            handles[lab] = (h, short)
        ax.axhline(1.0, color="k", linewidth=0.8)
        ax.set_yscale("log", base=2)
        from matplotlib.ticker import FuncFormatter

        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
        ax.set_xticks(x, [f"{info.loc[c, 'case_id']}" for _, c, _ in pv.index], rotation=60, ha="right", fontsize=7)
        ax.set_ylabel(f"median / fastest {name}\n(1x = fastest, log2)", fontsize=8)
        ax.set_xlabel("case (parameters in the table below)", fontsize=8)
        ax.grid(True, axis="y", alpha=0.3)
        ax.set_title(f"{backend}: {name}", fontsize=9, loc="left")
        legend_right(fig, [h for h, _ in handles.values()], [s for _, s in handles.values()], "backend [variant]")
        tips = pd.DataFrame("", index=table.index, columns=table.columns)
        tips["case"] = [c for _, c, _ in pv.index]
        out += [Heading(f"{backend}: {name}"), Text(head, cls="lead"), Figure(fig, alt=f"variant axis {backend} {name}"),
                Table(table, tips=tips)]
    return out
