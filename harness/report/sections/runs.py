"""Run headers (run.json of every source): at the end of the page, collapsed."""

from __future__ import annotations

import pandas as pd

from harness.report.core import Block, Heading, Table, Text, section


def _items(src: str, h: dict, n: int) -> list[tuple[str, str]]:
    dev = h.get("device") or {}
    items = [("source", src), ("suite", h.get("suite")), ("time (UTC)", h.get("time_utc")),
             ("command", h.get("command")), ("git", h.get("git_sha")),
             ("device", ", ".join(f"{k}={v}" for k, v in dev.items() if v is not None) if isinstance(dev, dict) else dev),
             ("devices", ", ".join(map(str, h["devices"])) if isinstance(h.get("devices"), list) else h.get("devices")),
             ("wall time (s)", h.get("wall_s") or h.get("wall_time_s")),
             ("clock regime", h.get("clock_regime")),
             ("torch", h.get("torch")), ("python", h.get("python")), ("platform", h.get("platform"))]
    bk = h.get("backends") or {}
    for name, info in sorted(bk.items()) if isinstance(bk, dict) else []:
        if isinstance(info, dict):
            vers = ", ".join(f"{k} {v}" for k, v in info.items() if k not in ("available", "reason"))
            avail = "available" if info.get("available") else f"unavailable: {info.get('reason', '')}"
            items.append((f"backend {name}", f"{avail}{'; ' + vers if vers else ''}"))
    items.append(("rows", str(n)))
    return [(k, str(v)) for k, v in items if v not in (None, "")]


@section("run-header", "Runs", order=900, looked_for="run.json headers next to the results", collapsed=True)
def runs(df: pd.DataFrame) -> list[Block]:
    out: list[Block] = []
    for i, (src, h, n) in enumerate(df.attrs.get("runs", [])):
        out.append(Heading(f"Run {i + 1}: {h.get('suite') or src}"))
        if not h:
            out.append(Text("no run.json next to these results: environment unknown", cls="warn"))
        items = _items(src, h, n)
        out.append(Table(pd.DataFrame(items, columns=["field", "value"]), cls="kv", sortable=False, wrap=("value",)))
    return out
