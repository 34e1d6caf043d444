"""Outside-timer cross-check (``harness crosscheck``): the table it wrote next to the results,
with its flags, and the rows it could not re-time."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from harness.crosscheck.table import cells_of, verdict_text
from harness.report.core import Block, Table, Text, section

JSON_FILE = "crosscheck.json"  # harness crosscheck (harness/cli/commands/crosscheck.py) writes it (the report does not import commands)


def _found(src: str) -> tuple[Path, dict] | None:
    p = Path(src)
    f = (p if p.is_dir() else p.parent) / JSON_FILE
    if not f.is_file():
        return None
    try:
        data = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return f, {"error": "not readable JSON"}
    return f, data if isinstance(data, dict) else {"error": "not a JSON object"}


@section("crosscheck", "Outside timers: harness vs the libraries' own timers", order=150,
         looked_for=f"{JSON_FILE} next to the results (written by `harness crosscheck RESULTS`)")
def crosscheck(df: pd.DataFrame) -> list[Block]:
    out: list[Block] = []
    for run in df.attrs.get("runs", []):
        src = str(run.source)
        got = _found(src)
        if got is None:
            continue
        f, data = got
        if "error" in data or not isinstance(data.get("rows"), list):
            out.append(Text(f"{f}: {data.get('error', 'no rows list')}", cls="warn"))
            continue
        tol = float(data.get("tolerance", 0.03))
        rows = data["rows"]
        flagged = [r for r in rows if r.get("flagged")]
        out.append(Text(
            f"{src}: {len(rows)} row(s) re-timed by {', '.join(data.get('timers') or []) or 'no timer'}; "
            f"{len(flagged)} flagged (more than {tol:.0%} from the outside timers' median and outside their "
            f"spread); {sum(r.get('state') == 'states differ' for r in rows)} in states that differ (no outside timer "
            f"at the row's SM clock within 3%); {len(data.get('not_retimed') or [])} not re-timed.",
            cls="warn" if flagged else "ok"))
        timers = list(data.get("timers") or [])
        if data.get("complete") is False:
            out.append(Text(f"{f}: incomplete: the cross-check was stopped (or is running); rows it had not reached "
                            "are listed as not re-timed.", cls="warn"))
        # Older tables (no harness-here / kernel / clock columns) show "-" there.
        cells = [cells_of(r) for r in rows]  # the markdown's explaining columns and clock, one reading
        table = pd.DataFrame([{
            "row": r.get("row"), "case": r.get("case"), "backend": f"{r.get('backend')} [{r.get('variant')}]",
            "timed as": ("graph" if r.get("graph") else "eager") + f", {r.get('mode')}",
            "harness us": f"{r.get('harness_us', float('nan')):.4g}",
            **{k: v for k, v in c.items() if k != "SM MHz"},
            **{f"{t} us": (f"{r['outside'][t]['median_us']:.4g}" if t in (r.get("outside") or {}) else "-")
               for t in timers},
            "harness / outside": f"{r.get('ratio', float('nan')):.3f}",
            "SM MHz": c["SM MHz"],
            "verdict": verdict_text(r, flagged="FLAGGED: ", excluded=False),
        } for r, c in zip(rows, cells)])
        if not table.empty:
            classes = pd.DataFrame("", index=table.index, columns=table.columns)
            classes["verdict"] = ["warn" if r.get("flagged") else "" if r.get("state") in ("states differ", "host-bound") else "good"
                                  for r in rows]
            out.append(Table(table, classes=classes, wrap=("verdict",), title="Re-timed rows"))
        skipped = pd.DataFrame([{"row": r.get("row"), "case": r.get("case"),
                                 "backend": f"{r.get('backend')} [{r.get('variant')}]", "why not": r.get("reason")}
                                for r in data.get("not_retimed") or []])
        if not skipped.empty:
            out.append(Table(skipped, wrap=("why not",), title="Rows not re-timed, and why"))
    return out


__all__ = ["crosscheck"]
