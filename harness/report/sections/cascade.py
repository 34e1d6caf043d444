"""Cascade against plain: every timed row that names its plain counterpart in ``call.compare_with``
(the cascade backends record it) against the timed rows of that backend on the same case,
preferring the plain variant that agrees on shared axes (e.g. the same fa_version)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from harness.report.core import Block, Figure, Table, Text, col, fmt_tokens, group_title, section, timed
from harness.report.plots import colors_of, legend_right, plt


def _variant(r: pd.Series) -> dict[str, str]:
    return {k[len("variant."):]: str(v) for k, v in r.items()
            if k.startswith("variant.") and v is not None and not (isinstance(v, float) and math.isnan(v))}


def pairs(df: pd.DataFrame) -> pd.DataFrame:
    """One row per cascade cell (merged over runs) with its plain counterpart's timing."""
    t = timed(df)
    if t.empty or "call.compare_with" not in t.columns:
        return pd.DataFrame()
    casc = t[t["call.compare_with"].notna() & (t["call.compare_with"].astype(str) != "")]
    recs = []
    for (suite, case, _label), c in casc.groupby(["suite", "case", "label"], sort=False):
        first = c.iloc[0]
        plain = t[(t["suite"] == suite) & (t["case"] == case) & (t["backend"] == first["call.compare_with"])]
        if plain.empty:
            recs.append({"_cascade": first, "_c": c, "_plain": None})
            continue
        cv = _variant(first)
        agree = plain[plain.apply(lambda p: all(_variant(p).get(k, v) == v for k, v in cv.items()), axis=1)]  # noqa: B023  (called at once, in this iteration)
        pool = agree if not agree.empty else plain
        best_lab = pool.groupby("label")["median"].median().idxmin()
        recs.append({"_cascade": first, "_c": c, "_plain": pool[pool["label"] == best_lab]})
    out = []
    for r in recs:
        first, c, p = r["_cascade"], r["_c"], r["_plain"]
        prefix = first.get("call.prefix_lens")
        rule = first.get("call.rule_says_cascade")
        rec = {"group": first["group"], "case": first["case"], "case_id": first["case_id"], "n_req": first["n_req"],
               "ctx_mean": first["ctx_mean"], "cascade": first["label"], "cascade_short": first["short"],
               "cascade_us": c["median"].median(), "c_lo": c["ci_lo"].min(), "c_hi": c["ci_hi"].max(),
               "prefix": ",".join(str(x) for x in prefix) if isinstance(prefix, list) else "",
               "groups": first.get("batch.prefix_groups"),
               "rule": ("" if rule is None or (isinstance(rule, float) and math.isnan(rule))
                        else ("cascade" if bool(rule) else "plain")),
               "plain": None, "plain_short": f"{first['call.compare_with']} (no timed row)", "plain_us": np.nan,
               "p_lo": np.nan, "p_hi": np.nan}
        if p is not None:
            rec.update({"plain": p["label"].iloc[0], "plain_short": p["short"].iloc[0], "plain_us": p["median"].median(),
                        "p_lo": p["ci_lo"].min(), "p_hi": p["ci_hi"].max()})
        out.append(rec)
    return pd.DataFrame(out)


@section("cascade", "Cascade against plain", order=600,
         looked_for="timed rows that name their plain backend in call.compare_with (cascade backends), and timed "
                    "rows of that backend on the same case")
def cascade(df: pd.DataFrame) -> list[Block]:
    p = pairs(df)
    if p.empty:
        return []
    p["speedup"] = p["plain_us"] / p["cascade_us"]
    colors = colors_of(df)
    out: list[Block] = [Text("Speedup = plain median / cascade median (> 1: the cascade pays). Plain: the backend "
                             "the cascade row names in call.compare_with, on the same case, the variant that agrees on "
                             "shared axes (fastest of those). Beyond noise: the 95% CIs do not overlap.", cls="note")]
    pyplot = plt()
    for gk, g in p.groupby("group", sort=False):
        g = g[g["speedup"].notna()].sort_values(["n_req", "ctx_mean", "case"])
        if g.empty:
            continue
        cases = list(dict.fromkeys(g["case"]))
        labs = sorted(g["cascade"].unique())
        fig, ax = pyplot.subplots(figsize=(min(14.0, 2.5 + 0.55 * len(cases) * max(1, len(labs)) ** 0.5), 3.2),
                                  layout="constrained")
        width = 0.8 / len(labs)
        handles = {}
        for k, lab in enumerate(labs):
            s = g[g["cascade"] == lab]
            xs = [cases.index(c) + (k - (len(labs) - 1) / 2) * width for c in s["case"]]
            h = ax.bar(xs, s["speedup"], width, color=colors[lab])
            handles[lab] = (h, f"{s['cascade_short'].iloc[0]} vs {s['plain_short'].iloc[0]}")
        ax.axhline(1.0, color="k", linewidth=0.8)
        ax.set_yscale("log", base=2)
        from matplotlib.ticker import FuncFormatter

        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
        info = g.drop_duplicates("case").set_index("case")
        ax.set_xticks(range(len(cases)), [f"b{info.loc[c, 'n_req']:.0f}\n{fmt_tokens(info.loc[c, 'ctx_mean'])}"
                                          for c in cases], fontsize=7.5)
        ax.set_xlabel("workload: batch size / mean context (tokens)", fontsize=8)
        ax.set_ylabel("plain / cascade (log2)", fontsize=8)
        ax.set_title(group_title(df[df["case"].isin(cases)]), fontsize=9, loc="left")
        ax.grid(True, axis="y", alpha=0.3)
        legend_right(fig, [h for h, _ in handles.values()], [n for _, n in handles.values()], "cascade vs plain")
        out.append(Figure(fig, alt=f"cascade {gk}"))

    def ci(m: float, lo: float, hi: float) -> str:
        return "" if not math.isfinite(m) else f"{m:.4g}" + (f" [{lo:.4g}, {hi:.4g}]" if math.isfinite(lo) and math.isfinite(hi) else "")

    def noise(r: pd.Series) -> str:
        if not all(math.isfinite(x) for x in (r["c_lo"], r["c_hi"], r["p_lo"], r["p_hi"])):
            return ""
        return "yes" if (r["c_hi"] < r["p_lo"] or r["p_hi"] < r["c_lo"]) else "no: CIs overlap"

    table = pd.DataFrame({
        "case": p["case_id"], "group": p["group"], "batch": p["n_req"].map(lambda x: f"{x:.0f}"),
        "context mean": p["ctx_mean"].map(fmt_tokens), "shared prefix": p["prefix"],
        "prefix groups": p["groups"].map(lambda x: f"{x:.0f}" if isinstance(x, (int, float)) and math.isfinite(x) else ""),
        "cascade": p["cascade_short"], "cascade us [CI]": [ci(*x) for x in zip(p["cascade_us"], p["c_lo"], p["c_hi"])],
        "plain": p["plain_short"], "plain us [CI]": [ci(*x) for x in zip(p["plain_us"], p["p_lo"], p["p_hi"])],
        "speedup": p["speedup"].map(lambda x: f"{x:.2f}x" if math.isfinite(x) else ""),
        "beyond noise?": [noise(r) for _, r in p.iterrows()],
        "rule said": p["rule"],
        "rule right?": [("" if not r["rule"] or not math.isfinite(r["speedup"]) else
                         ("yes" if (r["speedup"] > 1) == (r["rule"] == "cascade") else "no")) for _, r in p.iterrows()],
    })
    table = table.loc[:, [c for c in table.columns if (table[c].astype(str) != "").any()]]
    classes = pd.DataFrame("", index=table.index, columns=table.columns)
    classes["speedup"] = ["good" if x > 1 else "warn" for x in p["speedup"].fillna(0)]
    tips = pd.DataFrame("", index=table.index, columns=table.columns)
    tips["case"] = p["case"]
    out.append(Table(table, classes=classes, tips=tips))
    return out


__all__ = ["pairs", "cascade", "col"]
