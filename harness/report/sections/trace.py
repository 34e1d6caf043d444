"""Replayed serving traces: attention cost per served token, per backend.

Rows come from a trace when their case carries the tags ``trace``, ``step=I`` and ``weight=W``
(``harness.spec.trace`` writes them: W = how many scheduler steps of the trace this sampled step
stands for). One trace = one suite. Per backend+variant timed on every step of the suite:

- per-step attention time p50/p90/p99, each step counted W times (weighted quantile: the
  smallest step time whose cumulative weight reaches the fraction);
- whole-trace attention time T = sum(W * step median);
- us per generated token = T / sum(W * decode tokens of the step) and us per prompt token =
  T / sum(W * prefill/extend tokens of the step): the whole trace's attention divided by what
  it served (a mixed step's time is not split between the two);
- the winner: the smallest T; margin = runner-up T / winner T; beyond noise when the weighted
  sums of the CI bounds do not overlap.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from harness.report.core import Block, Figure, Table, Text, col, merged_cells, num, section, timed
from harness.report.plots import colors_of, legend_right, plt

QUANTILES = (0.5, 0.9, 0.99)


def _tag(tags: Any, key: str) -> float:
    if isinstance(tags, (list, tuple)):
        for t in tags:
            if isinstance(t, str) and t.startswith(key + "="):
                try:
                    return float(t[len(key) + 1:])
                except ValueError:
                    return math.nan
    return math.nan


def trace_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Rows of trace steps with ``step``, ``weight``, ``decode_tokens`` and ``prefill_tokens``
    columns (rows without both tags are dropped)."""
    if df.empty or "config.tags" not in df.columns:
        return df.iloc[0:0]
    tags = col(df, "config.tags")
    out = df.assign(step=[_tag(t, "step") for t in tags], weight=[_tag(t, "weight") for t in tags])
    out = out[out["step"].notna() & out["weight"].notna() & (out["weight"] > 0)]
    if out.empty:
        return out
    # A case's batch shape is the same for every backend; rows not run borrow it from one that did.
    dec = num(out, "batch.num_decode")
    tok = num(out, "batch.num_tokens")
    out = out.assign(decode_tokens=dec, prefill_tokens=tok - dec)
    known = out.dropna(subset=["decode_tokens"]).drop_duplicates(["suite", "case"]).set_index(["suite", "case"])
    for c in ("decode_tokens", "prefill_tokens"):
        fill = [known[c].get((s, k), math.nan) for s, k in zip(out["suite"], out["case"])]
        out[c] = out[c].fillna(pd.Series(fill, index=out.index))
    return out


def weighted_quantile(values: list[float] | np.ndarray, weights: list[float] | np.ndarray, q: float) -> float:
    """Smallest value whose cumulative weight (values sorted ascending) reaches ``q`` of the total."""
    v = np.asarray(values, dtype=float)
    w = np.asarray(weights, dtype=float)
    if v.size == 0:
        return math.nan
    order = np.argsort(v, kind="stable")
    cum = np.cumsum(w[order])
    i = int(np.searchsorted(cum, q * cum[-1] - 1e-12 * cum[-1], side="left"))
    return float(v[order][min(i, v.size - 1)])


def trace_costs(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (suite, label): steps timed, weighted p50/p90/p99 step time, whole-trace
    attention time (with its CI envelope), us per generated / prompt token, rank and margin.
    ``complete`` is False for a label not timed on every step of its suite (not ranked)."""
    tr = trace_rows(df)
    if tr.empty:
        return pd.DataFrame()
    steps = tr.drop_duplicates(["suite", "case"])[["suite", "case", "step", "weight", "decode_tokens",
                                                   "prefill_tokens"]]
    cells = merged_cells(timed(tr), ["suite", "case"])
    recs = []
    for suite, st in steps.groupby("suite", sort=False):
        gen = float((st["weight"] * st["decode_tokens"]).sum())
        prompt = float((st["weight"] * st["prefill_tokens"]).sum())
        c = cells[cells["suite"] == suite].merge(st, on=["suite", "case"])
        labels = list(dict.fromkeys(tr.loc[tr["suite"] == suite, "label"]))
        for lab in labels:
            s = c[c["label"] == lab]
            rec: dict[str, Any] = {"suite": suite, "label": lab, "steps": len(st), "timed": len(s),
                                   "trace_steps": float(st["weight"].sum()), "gen_tokens": gen,
                                   "prompt_tokens": prompt, "complete": len(s) == len(st) and len(st) > 0}
            rec["short"] = s["short"].iloc[0] if len(s) else tr.loc[tr["label"] == lab, "short"].iloc[0]
            if len(s):
                for q in QUANTILES:
                    rec[f"p{round(q * 100)}"] = weighted_quantile(s["median"], s["weight"], q)
                rec["total_us"] = float((s["weight"] * s["median"]).sum())
                rec["total_lo"] = float((s["weight"] * s["ci_lo"]).sum(min_count=len(s)))
                rec["total_hi"] = float((s["weight"] * s["ci_hi"]).sum(min_count=len(s)))
            recs.append(rec)
    out = pd.DataFrame(recs)
    for c in ("p50", "p90", "p99", "total_us", "total_lo", "total_hi"):
        if c not in out.columns:
            out[c] = math.nan
    out.loc[~out["complete"], ["total_us", "total_lo", "total_hi"]] = math.nan
    out["us_per_gen"] = out["total_us"] / out["gen_tokens"].where(out["gen_tokens"] > 0)
    out["us_per_prompt"] = out["total_us"] / out["prompt_tokens"].where(out["prompt_tokens"] > 0)
    out["rank"] = out.groupby("suite")["total_us"].rank(method="first")
    best = out.groupby("suite")["total_us"].transform("min")
    out["vs_best"] = out["total_us"] / best
    return out.sort_values(["suite", "rank"], na_position="last").reset_index(drop=True)


def winners(costs: pd.DataFrame) -> pd.DataFrame:
    """Per suite: the winner, the runner-up, margin (runner-up / winner) and beyond-noise."""
    recs = []
    for suite, c in costs.groupby("suite", sort=False):
        r = c[c["complete"] & c["total_us"].notna()].sort_values("total_us")
        if r.empty:
            continue
        w = r.iloc[0]
        rec = {"suite": suite, "winner": w["short"], "winner_label": w["label"], "total_us": w["total_us"],
               "us_per_gen": w["us_per_gen"], "us_per_prompt": w["us_per_prompt"], "runner_up": "",
               "margin": math.nan, "beyond_noise": ""}
        if len(r) > 1:
            u = r.iloc[1]
            rec.update(runner_up=u["short"], margin=u["total_us"] / w["total_us"])
            if all(math.isfinite(x) for x in (w["total_hi"], u["total_lo"])):
                rec["beyond_noise"] = "yes" if w["total_hi"] < u["total_lo"] else "no: CIs overlap"
            else:
                rec["beyond_noise"] = "unknown (no CI)"
        recs.append(rec)
    return pd.DataFrame(recs)


def _g(x: Any, fmt: str = ".4g") -> str:
    return f"{x:{fmt}}" if isinstance(x, (int, float)) and math.isfinite(x) else ""


def _dist_figure(suite: str, tr: pd.DataFrame, costs: pd.DataFrame, colors: dict[str, str]) -> Figure | None:
    cells = merged_cells(timed(tr[tr["suite"] == suite]), ["suite", "case"])
    if cells.empty:
        return None
    w = tr.drop_duplicates(["suite", "case"]).set_index("case")["weight"]
    pyplot = plt()
    fig, ax = pyplot.subplots(figsize=(6.4, 3.3), layout="constrained")
    handles = []
    names = []
    for lab in costs.loc[costs["suite"] == suite, "label"]:
        s = cells[cells["label"] == lab].sort_values("median")
        if s.empty:
            continue
        cw = np.cumsum(s["case"].map(w).to_numpy(float))
        (h,) = ax.step(np.r_[s["median"].iloc[0], s["median"].to_numpy()], np.r_[0.0, cw / cw[-1]],
                       where="post", color=colors.get(lab), linewidth=1.4)
        handles.append(h)
        names.append(s["short"].iloc[0])
    ax.set_xscale("log")
    ax.set_xlabel("attention time per step (us, log)", fontsize=8)
    ax.set_ylabel("fraction of trace steps", fontsize=8)
    ax.set_ylim(0, 1.02)
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title(f"{suite}: step-time distribution (weighted by the steps each sample stands for)",
                 fontsize=9, loc="left")
    legend_right(fig, handles, names, "backend")
    return Figure(fig, alt=f"trace step-time distribution {suite}")


def _composition_figure(suite: str, tr: pd.DataFrame) -> Figure | None:
    st = tr[tr["suite"] == suite].drop_duplicates("case").sort_values("step")
    st = st[st["decode_tokens"].notna()]
    if st.empty:
        return None
    pyplot = plt()
    fig, ax = pyplot.subplots(figsize=(6.4, 3.0), layout="constrained")
    size = 12 + 60 * st["weight"] / st["weight"].max()
    h1 = ax.scatter(st["step"], st["decode_tokens"], s=size, color="#1f77b4", marker="o")
    h2 = ax.scatter(st["step"], st["prefill_tokens"], s=size, color="#ff7f0e", marker="s")
    ax.set_yscale("symlog", linthresh=1)
    ax.set_xlabel("scheduler step index in the trace", fontsize=8)
    ax.set_ylabel("tokens in the step", fontsize=8)
    ax.grid(True, alpha=0.3)
    ax.set_title(f"{suite}: batch composition of the sampled steps (marker area ~ weight)", fontsize=9, loc="left")
    legend_right(fig, [h1, h2], ["decode tokens", "prefill + extend tokens"], "per step")
    return Figure(fig, alt=f"trace batch composition {suite}")


@section("trace", "Serving trace: attention cost per served token", order=60,
         looked_for="rows whose config.tags carry trace, step=I and weight=W (suites made from a trace, "
                    "docs/traces.md), timed on every step")
def trace(df: pd.DataFrame) -> list[Block]:
    costs = trace_costs(df)
    if costs.empty:
        return []
    tr = trace_rows(df)
    colors = colors_of(df)
    out: list[Block] = [Text(
        "Each case is one sampled scheduler step of a replayed trace, weighted by the trace steps it stands for. "
        "Step-time quantiles count each step by its weight; trace attention = sum(weight x step median); "
        "us / generated token = trace attention / generated (decode) tokens of the trace, us / prompt token = "
        "trace attention / prompt (prefill + extend) tokens (both divide the whole trace's attention; a mixed "
        "step is not split). Only backends timed on every step are ranked.", cls="note")]
    win = winners(costs)
    for _, w in win.iterrows():
        prompt = (f"{_g(w['us_per_prompt'])} us per prompt token" if math.isfinite(w["us_per_prompt"])
                  else "no prefill step in the sample, so no per-prompt-token figure")
        line = (f"{w['suite']}: {w['winner']} wins the trace, {_g(w['total_us'] / 1e3)} ms of attention "
                f"({_g(w['us_per_gen'])} us per generated token, {prompt})")
        if w["runner_up"]:
            line += (f"; runner-up {w['runner_up']} takes {_g(w['margin'], '.3g')}x as long "
                     f"(beyond noise: {w['beyond_noise']})")
        out.append(Text(line + ".", cls="lead"))
    table = pd.DataFrame({
        "trace (suite)": costs["suite"], "backend": costs["short"],
        "steps timed": [f"{t}/{n}" for t, n in zip(costs["timed"], costs["steps"])],
        "step p50 us": costs["p50"].map(_g), "step p90 us": costs["p90"].map(_g), "step p99 us": costs["p99"].map(_g),
        "trace attention ms": (costs["total_us"] / 1e3).map(_g),
        "us / generated token": costs["us_per_gen"].map(_g), "us / prompt token": costs["us_per_prompt"].map(_g),
        "vs best": costs["vs_best"].map(lambda x: f"{x:.3g}x" if math.isfinite(x) else "not ranked"),
        "trace steps": costs["trace_steps"].map(lambda x: f"{x:.0f}"),
        "generated tokens": costs["gen_tokens"].map(lambda x: f"{x:.0f}"),
        "prompt tokens": costs["prompt_tokens"].map(lambda x: f"{x:.0f}"),
    })
    classes = pd.DataFrame("", index=table.index, columns=table.columns)
    classes["vs best"] = ["good" if v == 1 else ("warn" if not math.isfinite(v) else "") for v in costs["vs_best"]]
    out.append(Table(table, classes=classes, title="Per backend, over the whole trace"))
    for suite in dict.fromkeys(costs["suite"]):
        for f in (_dist_figure(suite, tr, costs, colors), _composition_figure(suite, tr)):
            if f is not None:
                out.append(f)
    return out


__all__ = ["trace", "trace_costs", "trace_rows", "weighted_quantile", "winners"]
