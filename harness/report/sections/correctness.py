"""Correctness matrix (case x backend+variant, coloured by status) and the failures / skips with
their reasons."""

from __future__ import annotations

from typing import Any

import pandas as pd

from attn_contract.status import Status
from harness.report.core import Block, Heading, Table, Text, section

_RANK = {Status.MISMATCH.value: 0, Status.ERROR.value: 1, Status.TIMEOUT.value: 2, Status.UNSUPPORTED.value: 3,
         Status.SKIPPED.value: 4, Status.UNCHECKED.value: 5, Status.PASS.value: 6}
_RAN = {Status.PASS.value, Status.UNCHECKED.value, Status.MISMATCH.value, Status.ERROR.value, Status.TIMEOUT.value}


def _err(x: Any) -> str:  # a DataFrame cell: a number, NaN, None or text
    try:
        return f" (max abs err {float(x):.2e})" if x is not None and x == x else ""
    except (TypeError, ValueError):
        return ""


@section("correctness", "Correctness matrix", order=100, looked_for="result rows (any status)")
def correctness(df: pd.DataFrame) -> list[Block]:
    if df.empty:
        return []
    # Backends that ran a cell (checked it: pass or a failure) lead; the ones skipped or
    # unsupported everywhere (the GPU backends of a CPU run) follow, folded into one column.
    ran = set(df.loc[df["status"].isin(_RAN), "label"])
    labels = sorted(ran)
    idle = sorted(set(df["label"]) - ran)
    if len(idle) == 1:
        labels += idle
        idle = []
    short = df.drop_duplicates("label").set_index("label")["short"]
    idle_col = f"not run ({len(idle)} backends)"
    # A case's workload from a row that got a batch (rows not run have none).
    ran = df[df["workload"] != ""].drop_duplicates("case").set_index("case")["workload"]
    cases = df.drop_duplicates("case")[["case", "case_id", "shape"]].reset_index(drop=True)
    cases["workload"] = [ran.get(c, "") for c in cases["case"]]
    errs = df["check.max_abs_err"] if "check.max_abs_err" in df.columns else pd.Series([None] * len(df), index=df.index)
    by_cell: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for c, lab, st, reason, e in zip(df["case"], df["label"], df["status"], df["reason"], errs):
        by_cell.setdefault((c, lab), []).append((st, f"{st}" + (f": {reason}" if reason else "") + _err(e)))
    rows, classes, tips = [], [], []
    for c in cases.itertuples():
        rec = {"case": c.case_id, "shape": c.shape, "workload": c.workload}
        cl = {"case": "", "shape": "", "workload": ""}
        tp = {"case": c.case, "shape": "", "workload": ""}
        for lab in labels:
            got = by_cell.get((c.case, lab), [])
            if not got:
                rec[short[lab]], cl[short[lab]], tp[short[lab]] = "-", "st-none", ""
                continue
            worst = min((s for s, _ in got), key=lambda s: _RANK.get(s, 9))
            rec[short[lab]] = worst if len(got) == 1 else f"{worst} ({len(got)} runs)"
            cl[short[lab]] = f"st st-{worst}"
            tp[short[lab]] = "; ".join(t for _, t in got)
        if idle:
            got = [(s, f"{short[lab]}: {t}") for lab in idle for s, t in by_cell.get((c.case, lab), [])]
            worst = min((s for s, _ in got), key=lambda s: _RANK.get(s, 9)) if got else ""
            rec[idle_col] = worst or "-"
            cl[idle_col] = f"st st-{worst}" if worst else "st-none"
            tp[idle_col] = "; ".join(t for _, t in got)
        rows.append(rec)
        classes.append(cl)
        tips.append(tp)
    data = pd.DataFrame(rows)
    counts = df["status"].value_counts()
    legend = ", ".join(f"{s.value}: {int(counts.get(s.value, 0))}" for s in Status)
    folded = (f" Not run on any case, in the last column (hover a cell for each one's reason): "
              f"{', '.join(short[lab] for lab in idle)}." if idle else "")
    return [Text(f"{len(df)} rows: {legend}. Hover a cell for its reason or max abs error, a case id for the "
                 "full case name; type in the box to filter rows." + folded, cls="note"),
            Table(data, classes=pd.DataFrame(classes, columns=data.columns),
                  tips=pd.DataFrame(tips, columns=data.columns), cls="matrix", sortable=False)]


@section("problems", "Failures, skips and their reasons", order=110, looked_for="rows whose status is not pass")
def problems(df: pd.DataFrame) -> list[Block]:
    if df.empty:
        return []
    bad = df[df["status"] != Status.PASS.value]
    if bad.empty:
        return [Text("Every cell passed.", cls="ok")]
    out: list[Block] = []
    failing = bad[bad["failed"]]
    if not failing.empty:
        errs = failing["check.max_abs_err"] if "check.max_abs_err" in failing.columns else None
        t = pd.DataFrame({"case": failing["case_id"], "backend [variant]": failing["short"],
                          "status": failing["status"], "reason": failing["reason"],
                          "max abs err": errs.map(lambda x: f"{x:.3g}" if x == x and x is not None else "")
                          if errs is not None else "",
                          "reproducer": failing["reproducer"]}).reset_index(drop=True)
        tips = pd.DataFrame("", index=t.index, columns=t.columns)
        tips["case"] = failing["case"].values
        out += [Heading("Failures"), Table(t, tips=tips, wrap=("reason", "reproducer"))]
    notrun = bad[~bad["failed"]]
    if not notrun.empty:
        g = (notrun.groupby(["status", "short", "reason"], dropna=False).size().reset_index(name="cells")
             .sort_values(["status", "short"]).rename(columns={"short": "backend [variant]"}))
        out += [Heading("Not run"), Table(g[["status", "backend [variant]", "cells", "reason"]], wrap=("reason",))]
    return out
