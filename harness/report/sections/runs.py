"""Run headers (run.json of every source): at the end of the page, collapsed."""

from __future__ import annotations

from typing import Any

import pandas as pd

from harness.records.load import Run
from harness.report.core import Block, Heading, Table, Text, section


def _items(run: Run) -> list[tuple[str, Any]]:
    h = run.header
    dev = h.device.model_dump(exclude_none=True)  # the probe's own keys included, in its order
    items: list[tuple[str, Any]] = [
        ("source", str(run.source)), ("suite", h.suite), ("time (UTC)", h.time_utc), ("command", h.command),
        ("git", h.git_sha), ("device", ", ".join(f"{k}={v}" for k, v in dev.items() if v is not None)),
        ("devices", ", ".join(map(str, h.devices)) if h.devices is not None else None),
        ("wall time (s)", h.wall_s), ("clock regime", h.clock_regime),
        ("torch", h.torch), ("python", h.python), ("platform", h.platform)]
    for name, info in sorted(h.backends.items()):
        vers = ", ".join(f"{k} {v}" for k, v in info.items() if k not in ("available", "reason"))
        avail = "available" if info.get("available") else f"unavailable: {info.get('reason', '')}"
        items.append((f"backend {name}", f"{avail}{'; ' + vers if vers else ''}"))
    items.append(("rows", str(len(run.rows))))
    return [(k, str(v)) for k, v in items if v not in (None, "")]


@section("run-header", "Runs", order=900, looked_for="run.json headers next to the results", collapsed=True)
def runs(df: pd.DataFrame) -> list[Block]:
    out: list[Block] = []
    for i, run in enumerate(df.attrs.get("runs", [])):
        out.append(Heading(f"Run {i + 1}: {run.header.suite or run.source}"))
        if not run.has_header:
            out.append(Text("no run.json next to these results: environment unknown", cls="warn"))
        items = _items(run)
        out.append(Table(pd.DataFrame(items, columns=["field", "value"]), cls="kv", sortable=False, wrap=("value",)))
    return out
