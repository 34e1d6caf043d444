"""The answer first: per model shape and workload kind (a "group"), which backend+variant is
fastest at each batch/context, by how much, and whether that is beyond the noise; a heatmap per
group; and the fastest correct backend per group. Speed is judged on rows that passed the check
only; several runs of one cell merge (median of medians, envelope of the CIs)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from harness.report.core import Block, Figure, Heading, Table, Text, fmt_tokens, group_title, merged_cells, section, timed
from harness.report.plots import plt

HEAT_MIN = 0.5
MIN_HEAT_WORKLOADS = 3
WORKLOAD_COLS = ["suite", "case", "case_id", "n_req", "ctx_mean", "ctx_max", "q_tokens", "kind"]


def _us(m: float, lo: float, hi: float) -> str:
    if not math.isfinite(m):
        return ""
    s = f"{m:.4g}"
    if math.isfinite(lo) and math.isfinite(hi):
        s += f" [{lo:.4g}, {hi:.4g}]"
    return s


def groups_in_order(t: pd.DataFrame) -> list[str]:
    """Groups with timed rows, the one with the most workloads first (the main sweep)."""
    if t.empty:
        return []
    n = t.groupby("group", sort=False)["case"].nunique()
    first = {g: i for i, g in enumerate(dict.fromkeys(t["group"]))}
    return sorted(n.index, key=lambda g: (-n[g], first[g]))


def workloads(g: pd.DataFrame) -> pd.DataFrame:
    """The distinct workloads (cases) of a group, by batch size then context."""
    w = g.drop_duplicates(["suite", "case"])[WORKLOAD_COLS]
    return w.sort_values(["n_req", "ctx_mean", "case"], na_position="last").reset_index(drop=True)


def ranking(g: pd.DataFrame) -> pd.DataFrame:
    """Per workload: every timed label with its rank (0 = fastest) and speed relative to the
    fastest (1 = fastest)."""
    cells = merged_cells(g, ["suite", "case"])
    cells = cells.sort_values(["suite", "case", "median"])
    cells["rank"] = cells.groupby(["suite", "case"]).cumcount()
    best = cells.groupby(["suite", "case"])["median"].transform("min")
    cells["rel"] = best / cells["median"]
    return cells


def _beyond_noise(w: pd.Series, r: pd.Series) -> tuple[str, str]:
    if not all(math.isfinite(x) for x in (w["ci_hi"], r["ci_lo"])):
        return "unknown (no CI)", "warn"
    if w["ci_hi"] < r["ci_lo"]:
        return "yes", "good"
    return "no: overlap", "warn"


def verdict_table(g: pd.DataFrame) -> tuple[Table, str]:
    rk = ranking(g)
    wl = workloads(g)
    mixed = (wl["q_tokens"] != wl["n_req"]).any()
    rows, classes, tips = [], [], []
    wins: dict[str, int] = {}
    margins: list[float] = []
    real = 0
    for _, w in wl.iterrows():
        c = rk[(rk["suite"] == w["suite"]) & (rk["case"] == w["case"])]
        if c.empty:
            continue
        win = c.iloc[0]
        wins[win["short"]] = wins.get(win["short"], 0) + 1
        rec = {"case": w["case_id"], "batch": f"{w['n_req']:.0f}" if math.isfinite(w["n_req"]) else "",
               "context mean": fmt_tokens(w["ctx_mean"]), "context max": fmt_tokens(w["ctx_max"])}
        if mixed:
            rec["query tokens"] = f"{w['q_tokens']:.0f}" if math.isfinite(w["q_tokens"]) else ""
        rec["fastest"] = win["short"]
        rec["median us [95% CI]"] = _us(win["median"], win["ci_lo"], win["ci_hi"])
        cls = {"fastest": "winner"}
        if len(c) > 1:
            ru = c.iloc[1]
            ratio = ru["median"] / win["median"]
            margins.append(ratio)
            noise, ncls = _beyond_noise(win, ru)
            real += ncls == "good"
            rec.update({"margin": f"{ratio:.2f}x", "runner-up": ru["short"],
                        "runner-up us [95% CI]": _us(ru["median"], ru["ci_lo"], ru["ci_hi"]),
                        "beyond noise?": noise})
            cls["beyond noise?"] = ncls
        else:
            rec.update({"margin": "", "runner-up": "only one timed", "runner-up us [95% CI]": "",
                        "beyond noise?": ""})
        rec["backends timed"] = str(len(c))
        rows.append(rec)
        classes.append(cls)
        tips.append({"case": w["case"], "fastest": win["label"],
                     "runner-up": c.iloc[1]["label"] if len(c) > 1 else ""})
    df = pd.DataFrame(rows)
    cls_df = pd.DataFrame([{k: cl.get(k, "") for k in df.columns} for cl in classes], columns=df.columns)
    tip_df = pd.DataFrame([{k: tp.get(k, "") for k in df.columns} for tp in tips], columns=df.columns)
    top = sorted(wins.items(), key=lambda kv: -kv[1])
    n = len(rows)
    head = f"{top[0][0]} is fastest in {top[0][1]} of {n} workload{'s' if n != 1 else ''}" if top else ""
    if len(top) > 1:
        head += "; " + ", ".join(f"{k} in {v}" for k, v in top[1:])
    if margins:
        head += (f". Margin over the runner-up {min(margins):.2f}x to {max(margins):.2f}x; "
                 f"{real} of {len(margins)} beyond the noise (95% CIs disjoint).")
    return Table(df, classes=cls_df, tips=tip_df, cls="data verdict"), head


@section("verdict", "Verdict per workload: the fastest backend per model shape (details)", order=25, collapsed=True,
         looked_for="rows that passed the check with timing.median_us")
def verdict(df: pd.DataFrame) -> list[Block]:
    t = timed(df)
    out: list[Block] = []
    for i, gk in enumerate(groups_in_order(t)):
        g = t[t["group"] == gk]
        table, head = verdict_table(g)
        out += [Heading(group_title(g), anchor=f"verdict-{i}"), Text(head, cls="lead"), table]
    if out:
        ab = df.attrs.get("abbreviations") or {}
        legend = ("Variant axes abbreviated: " + ", ".join(f"{v} = {k}" for k, v in ab.items()) + ". ") if ab else ""
        out.insert(0, Text("One table per model shape (heads / KV heads / head size / dtype / page size) and workload "
                           "kind. Margin: runner-up median / fastest median. Beyond noise: the two 95% confidence "
                           "intervals of the medians do not overlap. Only cells that passed the correctness check "
                           "count. Hover a case id for the full case name. " + legend, cls="note"))
        from harness.records.clocks import clock_summary
        from harness.report.core import result_rows

        clocks = clock_summary(result_rows(df))  # which GPU state the numbers are from
        if clocks:
            out.insert(1, Text(clocks + " (docs/measurement.md, Clock regimes).", cls="note"))
    return out


def _heatmap(g: pd.DataFrame, all_rows: pd.DataFrame, title: str) -> Figure:
    rk = ranking(g)
    wl = workloads(g)
    labels = sorted(rk["label"].unique(), key=lambda lab: -rk[rk["label"] == lab]["rel"].mean())
    status: dict[tuple[str, str], set[str]] = {}
    for c, lab, st in zip(all_rows["case"], all_rows["label"], all_rows["status"]):
        status.setdefault((c, lab), set()).add(st)
    grid = np.full((len(labels), len(wl)), np.nan)
    text = [["" for _ in range(len(wl))] for _ in labels]
    for j, w in wl.iterrows():
        for i, lab in enumerate(labels):
            c = rk[(rk["suite"] == w["suite"]) & (rk["case"] == w["case"]) & (rk["label"] == lab)]
            if not c.empty:
                grid[i, j] = c["rel"].iloc[0]
                text[i][j] = "best" if c["rank"].iloc[0] == 0 else f"{c['rel'].iloc[0]:.2f}"
            else:
                st = status.get((w["case"], lab), set())
                text[i][j] = "fail" if st & {"mismatch", "error", "timeout"} else ("n/a" if st else "")
    short = {lab: rk[rk["label"] == lab]["short"].iloc[0] for lab in labels}
    pyplot = plt()
    fig_w = min(16.0, 2.6 + 0.62 * len(wl))
    fig, ax = pyplot.subplots(figsize=(fig_w, 0.9 + 0.42 * len(labels)), layout="constrained")
    cmap = pyplot.get_cmap("viridis").with_extremes(bad="#eeeeee")
    # One fixed scale on every heatmap so colours compare across shapes; <= 0.5 is the darkest.
    im = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=HEAT_MIN, vmax=1.0, aspect="auto")
    for i in range(len(labels)):
        for j in range(len(wl)):
            v = grid[i, j]
            r, gg, b, _ = cmap((min(max(v, HEAT_MIN), 1.0) - HEAT_MIN) / (1 - HEAT_MIN)) if math.isfinite(v) else (1, 1, 1, 1)
            color = "white" if 0.299 * r + 0.587 * gg + 0.114 * b < 0.5 else "black"
            ax.text(j, i, text[i][j], ha="center", va="center", fontsize=7.5, color=color)
    ax.set_yticks(range(len(labels)), [short[lab] for lab in labels], fontsize=8)
    xl = [f"b{w.n_req:.0f}\n{fmt_tokens(w.ctx_mean)}" for w in wl.itertuples()]
    ax.set_xticks(range(len(wl)), xl, fontsize=7.5)
    ax.set_xlabel("workload: batch size (requests) / mean context (tokens)", fontsize=8)
    ax.set_title(title, fontsize=9, loc="left")
    cb = fig.colorbar(im, ax=ax, fraction=0.04, pad=0.01)
    cb.set_label("speed vs fastest\n(1 = fastest)", fontsize=7.5)
    cb.ax.tick_params(labelsize=7)
    return Figure(fig, alt=f"heatmap {title}")


@section("heatmap", "Speed relative to the fastest, per model shape", order=20,
         looked_for="rows that passed the check with timing.median_us")
def heatmap(df: pd.DataFrame) -> list[Block]:
    t = timed(df)
    out: list[Block] = []
    for gk in groups_in_order(t):
        g = t[t["group"] == gk]
        if g["case"].nunique() < MIN_HEAT_WORKLOADS:
            continue  # one or two workloads (a page-size point): the verdict table says it all
        out.append(_heatmap(g, df, group_title(g)))
    if out:
        out.insert(0, Text("Colour and number: fastest median / this median in that workload (1 = fastest; the "
                           "colour scale stops at 0.5). 'fail': the check failed; 'n/a': not supported or skipped; "
                           f"grey blank: not run. Groups with fewer than {MIN_HEAT_WORKLOADS} workloads have their "
                           "verdict table only.",
                           cls="note"))
    return out


def _geomean(x: pd.Series) -> float:
    x = x[x > 0]
    return float(np.exp(np.log(x).mean())) if len(x) else float("nan")


@section("fastest-correct", "Fastest correct backend per model shape", order=30, collapsed=True,
         looked_for="rows that passed the check with timing.median_us")
def fastest_correct(df: pd.DataFrame) -> list[Block]:
    t = timed(df)
    recs = []
    for gk in groups_in_order(t):
        g = t[t["group"] == gk]
        rk = ranking(g)
        n = g["case"].nunique()
        same_shape = df[df["shape"] == g["shape"].iloc[0]]
        bad = same_shape[same_shape["failed"]].groupby("label")["case"].nunique()
        stats = []
        for lab, r in rk.groupby("label"):
            stats.append({"label": lab, "short": r["short"].iloc[0], "cover": len(r), "gm": _geomean(r["rel"]),
                          "wins": int((r["rank"] == 0).sum()), "bad": int(bad.get(lab, 0))})
        ok = [s for s in stats if s["bad"] == 0]
        full = [s for s in ok if s["cover"] == n] or ok
        full.sort(key=lambda s: -s["gm"])
        best = full[0] if full else None
        nxt = full[1] if len(full) > 1 else None
        excluded = ", ".join(f"{s['short']} ({s['bad']} failed)" for s in stats if s["bad"])
        recs.append({
            "model shape · workload": group_title(g), "workloads": str(n),
            "fastest correct": best["short"] if best else "none passed",
            "wins": f"{best['wins']}/{n}" if best else "",
            "geomean speed vs best": f"{best['gm']:.3f}" if best else "",
            "next": nxt["short"] if nxt else "",
            "next geomean": f"{nxt['gm']:.3f}" if nxt else "",
            "excluded (failed a check at this shape)": excluded,
        })
    if not recs:
        return []
    d = pd.DataFrame(recs)
    cls = pd.DataFrame([{c: ("winner" if c == "fastest correct" else "") for c in d.columns}] * len(d))
    return [Text("Per group: the backend+variant with the highest geometric-mean speed relative to the fastest "
                 "(1.000 = fastest everywhere) among those timed on every workload of the group and with no "
                 "failed check (mismatch, error, timeout) on any case of that model shape.", cls="note"),
            Table(d, classes=cls, wrap=("model shape · workload", "excluded (failed a check at this shape)"))]
