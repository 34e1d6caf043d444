"""One self-contained HTML page from one or more results folders / .jsonl files.

The answer comes first (which backend wins for each model shape, by how much, and whether that
is beyond the noise), then the details, then the run headers (collapsed). Every section is a
function in ``harness/report/sections/`` registered with ``@section``; it takes the rows as a
pandas DataFrame and returns tables and matplotlib figures (``core.Block``); the Jinja template
``harness/templates/report.html.j2`` renders them. Plots are embedded PNGs and the page loads
nothing from the network. How to add a section: docs/reports.md.
"""

from __future__ import annotations

import math
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from attn_contract.status import Status
from harness.records.fileio import atomic_write_text
from harness.report.core import (
    REGISTRY, Block, Figure, Heading, Loaded, SectionSpec, SharedDict, Table, Text, frame, load, registered, section,
)
from harness.report.plots import palette, to_uri

STATUS_COLORS = {"pass": "#2e7d32", "mismatch": "#c62828", "error": "#b71c1c", "timeout": "#6a1b9a",
                 "unsupported": "#f9a825", "skipped": "#9e9e9e"}


def __getattr__(name: str) -> Any:
    # SECTIONS on first use (PEP 562): building it imports every section module (matplotlib and
    # all), which `harness run`'s closing summary, reading only harness.report.core, never needs.
    if name == "SECTIONS":
        return section_titles()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def section_titles() -> tuple[tuple[str, str], ...]:
    """Section ids (stable: tests and links rely on them) and titles, in page order."""
    return tuple((s.id, s.title) for s in registered())


@dataclass
class Rendered:
    id: str
    title: str
    looked_for: str
    collapsed: bool
    answer: bool = False  # one of the answer-first sections (order < 100): marked on the page
    blocks: list[dict[str, Any]] = field(default_factory=list)
    error: str = ""

    @property
    def has_data(self) -> bool:
        return bool(self.blocks)


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return "" if not math.isfinite(v) else f"{v:g}"
    return str(v)


def _table_view(t: Table) -> dict[str, Any]:
    """A table as plain lists for the template (text, CSS class, hover text per cell)."""
    df = t.data
    cols = [str(c) for c in df.columns]
    rows = []
    for i in range(len(df)):
        cells = []
        for j, c in enumerate(df.columns):
            cls = "" if t.classes is None else _cell(t.classes.iat[i, j])
            tip = "" if t.tips is None else _cell(t.tips.iat[i, j])
            if str(c) in t.wrap:
                cls = (cls + " wrap").strip()
            cells.append((_cell(df.iat[i, j]), cls, tip))
        rows.append(cells)
    return {"kind": "table", "title": t.title, "note": t.note, "columns": cols, "rows": rows,
            "cls": t.cls, "sortable": t.sortable, "wrap": [c in t.wrap for c in cols]}


def _view(b: Block) -> dict[str, Any]:
    if isinstance(b, Table):
        return _table_view(b)
    if isinstance(b, Figure):
        return {"kind": "figure", "alt": b.alt, "caption": b.caption, "uri": b.uri or to_uri(b.fig)}
    if isinstance(b, Heading):
        return {"kind": "heading", "text": b.text, "anchor": b.anchor}
    return {"kind": "text", "text": b.text, "cls": b.cls}


def build_frame(loaded: Loaded) -> pd.DataFrame:
    df = frame(loaded)
    df.attrs["colors"] = SharedDict(palette(list(df["label"].unique())))
    return df


def build_sections(loaded: Loaded, only: Iterable[str] | None = None) -> list[Rendered]:
    """Run every registered section (or the ones whose id is in ``only``) on the rows. A section
    that raises shows its error on the page (and the other sections still render)."""
    df = build_frame(loaded)
    wanted = None if only is None else set(only)
    if wanted is not None and (unknown := wanted - {s.id for s in registered()}):
        raise KeyError(f"no report section {sorted(unknown)}")
    out = []
    for spec in registered():
        if wanted is not None and spec.id not in wanted:
            continue
        r = Rendered(spec.id, spec.title, spec.looked_for, spec.collapsed, answer=spec.order < 100)
        try:
            r.blocks = [_view(b) for b in spec.fn(df) or []]
        except Exception as e:
            r.error = f"{type(e).__name__}: {e}"
            r.blocks = [{"kind": "text", "cls": "warn", "text": f"This section failed: {r.error}"},
                        {"kind": "text", "cls": "error", "text": traceback.format_exc(limit=3)}]
        out.append(r)
    return out


def render_html(loaded: Loaded, title: str | None = None, built: list[Rendered] | None = None) -> str:
    """The page; ``built``: sections already built from ``loaded`` (else built here)."""
    from jinja2 import Environment, PackageLoader, select_autoescape

    env = Environment(loader=PackageLoader("harness", "templates"), autoescape=select_autoescape(["html", "j2"]))
    suites = sorted({str(getattr(r, "suite", "")) for r in loaded.rows})
    statuses = [str(getattr(r, "status", "")) for r in loaded.rows]
    counts = {s.value: statuses.count(s.value) for s in Status}
    return env.get_template("report.html.j2").render(
        title=title or f"Attention harness report: {', '.join(suites) or 'no rows'}",
        sections=built if built is not None else build_sections(loaded), counts=counts, colors=STATUS_COLORS, total=len(loaded.rows),
        sources=loaded.sources,
    )


def write_report(paths: Iterable[str | Path], out: str | Path, title: str | None = None) -> Path:
    """Render the report of ``paths`` into ``out`` (written atomically) and return its path."""
    loaded = load(paths)
    page = render_html(loaded, title)
    return atomic_write_text(out, page)


__all__ = ["REGISTRY", "SECTIONS", "Block", "Figure", "Heading", "Loaded", "SectionSpec", "Table", "Text",
           "build_frame", "build_sections", "frame", "load", "render_html", "registered", "section", "write_report"]
