"""Roofline: achieved TFLOP/s against arithmetic intensity under the device's measured ceilings.

Bytes: ``metrics.bytes`` counts the K/V of a shared prefix once per request that reads it
(harness/case/metrics.py), which is what a plain kernel asks for but not what DRAM must deliver: the
prefix is the same memory. Rows with a shared prefix are therefore plotted with ``bytes_eff``
(the prefix once per group, computed by the report frame) and drawn as a separate, labelled
series. A point still above a roof gets a number and a row in the table saying why."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from harness.records.header import RunHeader
from harness.report.core import Block, Figure, Table, Text, num, section, timed
from harness.report.plots import colors_of, legend_right, plt


def _f(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) and v > 0 else None


def ceilings(headers: list[RunHeader], rows: pd.DataFrame) -> tuple[float | None, float | None, str]:
    """(peak TFLOP/s, peak TB/s, where from): a device probe's ``device.ceilings``
    (``peak_tflops``/``peak_tbps`` or ``tflops``/``tbps``) or ``device.peak_tflops``/``peak_tbps``,
    else the ceilings harness.case.roofline measured into rows (``metrics.roofline.ceiling_*``)."""
    for h in headers:
        probe = h.device.model_extra or {}
        for where, d, generic in (("run header: device.ceilings", probe.get("ceilings"), True),
                                  ("run header: device", probe, False)):
            if not isinstance(d, dict):
                continue
            f = _f(d.get("peak_tflops", d.get("tflops") if generic else None))
            b = _f(d.get("peak_tbps", d.get("tbps") if generic else None))
            if f or b:
                return f, b, where
    f = num(rows, "metrics.roofline.ceiling_tflops").max() if len(rows) else float("nan")
    b = num(rows, "metrics.roofline.ceiling_tbps").max() if len(rows) else float("nan")
    f, b = _f(f), _f(b)
    return f, b, ("measured device ceilings (metrics.roofline)" if (f or b) else "")


def _l2_bytes(headers: list[RunHeader]) -> float | None:
    vals = [v for v in (_f(h.device.l2_bytes) for h in headers) if v]
    return min(vals) if vals else None


@section("roofline", "Roofline", order=500, cost=4,
         looked_for="timed rows with metrics.flops and metrics.bytes (achieved TFLOP/s against FLOP/byte)")
def roofline(df: pd.DataFrame) -> list[Block]:
    t = timed(df)
    if t.empty:
        return []
    flops = num(t, "metrics.flops")
    t = t.assign(_flops=flops, _bytes=num(t, "metrics.bytes"), _tflops=flops / (t["median"] * 1e-6) / 1e12)
    t = t[t["_flops"].notna() & t["_bytes"].notna() & (t["_flops"] > 0) & (t["_bytes"] > 0)]
    if t.empty:
        return []
    headers = [run.header for run in df.attrs.get("runs", [])]
    peak_f, peak_b, src = ceilings(headers, df)
    l2 = _l2_bytes(headers)
    shared = num(t, "batch.prefix_groups").fillna(0) > 0
    eff_ok = shared & t["bytes_eff"].notna() & (t["bytes_eff"] > 0)
    t = t.assign(_plot_bytes=t["_bytes"].where(~eff_ok, t["bytes_eff"]), _series=eff_ok)
    t["_I"] = t["_flops"] / t["_plot_bytes"]

    def roof(i: float) -> float | None:
        caps = [c for c in ((peak_b * i) if peak_b else None, peak_f) if c]
        return min(caps) if caps else None

    above_logical = 0
    if peak_b:
        logical_I = t["_flops"] / t["_bytes"]
        above_logical = int(((t["_tflops"] > 1.02 * logical_I.map(roof)) & shared).sum())
    colors = colors_of(df)
    pyplot = plt()
    fig, ax = pyplot.subplots(figsize=(8.5, 5.0), layout="constrained")
    handles: dict[str, tuple] = {}
    for (lab, eff), g in t.groupby(["label", "_series"], sort=True):
        h = ax.scatter(g["_I"], g["_tflops"], s=24, alpha=0.85, color=colors[lab],
                       marker="^" if eff else "o", facecolors="none" if eff else colors[lab], linewidths=1.2)
        name = g["short"].iloc[0] + (" · shared prefix read once (effective bytes)" if eff else "")
        handles[f"{lab}|{eff}"] = (h, name)
    ax.set_xscale("log")
    ax.set_yscale("log")
    lo, hi = t["_I"].min() / 2, t["_I"].max() * 2
    if peak_b or peak_f:
        if peak_b and peak_f:
            knee = peak_f / peak_b
            xs = [min(lo, knee / 4), knee, max(hi, knee * 4)]
        else:
            xs = [lo, hi]
        ys = [roof(x) for x in xs]
        (h,) = ax.plot(xs, ys, "k--", linewidth=1)
        handles["roof"] = (h, "measured ceilings" + (f" ({peak_b:.3g} TB/s, {peak_f:.3g} TFLOP/s)"
                                                     if peak_b and peak_f else ""))
    # Every point above a roof is ringed and lettered by its reason; the table below says why.
    above = []
    reasons: dict[str, str] = {}
    if peak_b or peak_f:
        cells = t.groupby(["suite", "case", "label", "_series"], sort=False).agg(
            I=("_I", "first"), tf=("_tflops", "max"), ws=("_plot_bytes", "first"), case_id=("case_id", "first"),
            short=("short", "first"), mode=("timing.l2", "first") if "timing.l2" in t.columns else ("case", "first"),
            runs=("median", "size")).reset_index()
        if "timing.l2" not in t.columns:
            cells["mode"] = ""
        for r in cells.itertuples():
            cap = roof(r.I)
            if not cap or r.tf <= 1.02 * cap:
                continue
            mode = str(r.mode or "")
            if l2 and r.ws < l2:
                why = (f"working set fits in the {l2 / 2**20:.0f} MiB L2" +
                       (" and timing was hot (L2 not flushed): served from L2, not DRAM" if "hot" in mode else ""))
            else:
                why = ("the memory roof is the measured device copy (read + write); a read-mostly kernel "
                       "streams a few percent faster than a copy")
            letter = reasons.setdefault(why, "ABCDEFGH"[len(reasons) % 8])
            ax.scatter([r.I], [r.tf], s=90, facecolors="none", edgecolors="k", linewidths=0.9, zorder=4)
            above.append({"reason": letter, "case": r.case_id, "backend [variant]": r.short, "FLOP/byte": f"{r.I:.3g}",
                          "TFLOP/s": f"{r.tf:.3g}", "roof TFLOP/s": f"{cap:.3g}",
                          "above by": f"{(r.tf / cap - 1) * 100:.1f}%", "why": why})
        for letter in reasons.values():
            first = next(a for a in above if a["reason"] == letter)
            ax.annotate(f"{letter}: above the roof (table below)", (float(first["FLOP/byte"]), float(first["TFLOP/s"])),
                        textcoords="offset points", xytext=(-150, 14 + 12 * "ABCDEFGH".index(letter)), fontsize=7,
                        arrowprops={"arrowstyle": "-", "linewidth": 0.6})
    ax.set_xlabel("arithmetic intensity (FLOP per byte of DRAM traffic, log)", fontsize=9)
    ax.set_ylabel("achieved TFLOP/s (log)", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    legend_right(fig, [h for h, _ in handles.values()], [n for _, n in handles.values()], "backend [variant]")
    notes = []
    if src:
        notes.append(f"Ceilings from {src}: " + ", ".join(x for x in (f"{peak_f:.3g} TFLOP/s" if peak_f else "",
                                                                      f"{peak_b:.3g} TB/s" if peak_b else "") if x) + ".")
    else:
        notes.append("No device ceilings in these results (looked for run header ceilings / device.peak_tflops, "
                     "device.peak_tbps and metrics.roofline.ceiling_tflops / ceiling_tbps): points only.")
    if eff_ok.any():
        notes.append(f"{int(eff_ok.sum())} points have a shared prefix (batch.prefix_groups > 0): they are drawn as "
                     "hollow triangles at the bytes DRAM must deliver, the prefix read once per group "
                     "(metrics.bytes counts it once per request"
                     + (f"; at those logical bytes {above_logical} of them would sit above the memory roof" if above_logical
                        else "") + ").")
    blocks: list[Block] = [Text(" ".join(notes), cls="note"), Figure(fig, alt="roofline")]
    if above:
        blocks += [Text(f"{len(above)} cells above a roof (ringed on the plot, several runs of a cell merged), "
                        "and why:", cls="note"), Table(pd.DataFrame(above), wrap=("why",))]
    return blocks
