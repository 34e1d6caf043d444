"""One self-contained HTML page from one or more results folders / .jsonl files.

The answer comes first (which backend wins for each model shape, by how much, and whether that
is beyond the noise), then the details, then the run headers (collapsed). Every section is a
function in ``harness/report/sections/`` registered with ``@section``; it takes the rows as a
pandas DataFrame and returns tables and matplotlib figures (``core.Block``); the Jinja template
``harness/templates/report.html.j2`` renders them. Plots are embedded SVGs and the page loads
nothing from the network. How to add a section: docs/reports.md.
"""

from __future__ import annotations

import math
import os
import sys
import threading
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import pandas as pd
from markupsafe import Markup, escape

from attn_contract.status import Status
from harness.records.fileio import atomic_write_text
from harness.report.core import (
    REGISTRY, Block, Figure, Heading, Loaded, SectionSpec, SharedDict, Table, Text, frame, load, registered, section,
)
from harness.report import plots
from harness.report.plots import palette, to_uri

STATUS_COLORS = {"pass": "#2e7d32", "unchecked": "#0277bd", "mismatch": "#c62828", "error": "#b71c1c", "timeout": "#6a1b9a",
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


MAX_JOBS = 8  # the H200 page has 16 sections, 4 of them with most of the figures


def default_jobs(n_sections: int) -> int:
    """Worker processes for the page: one per usable core, up to ``MAX_JOBS``; 1 (in-process)
    where fork is unsafe (not Linux) or other Python threads run (a thread holding a lock when
    the process forks would leave the child stuck)."""
    if sys.platform != "linux" or threading.active_count() > 1:
        return 1
    cores = len(os.sched_getaffinity(0))
    return max(1, min(cores, n_sections, MAX_JOBS))


Piece = tuple[list[dict[str, Any]], str | None]  # one part of a section: its blocks' views, its error


def _run_part(spec: SectionSpec, df: pd.DataFrame, part: int) -> Piece:
    try:
        blocks = spec.fn(df) if spec.parts == 1 else spec.fn(df, part=(part, spec.parts))
        return [_view(b) for b in blocks or []], None
    except Exception as e:  # a broken section must not hide the others
        error = f"{type(e).__name__}: {e}"
        return [{"kind": "text", "cls": "warn", "text": f"This section failed: {error}"},
                {"kind": "text", "cls": "error", "text": traceback.format_exc(limit=3)}], error


def _joined(spec: SectionSpec, pieces: list[Piece]) -> Rendered:
    """A section from its parts in order; a failed part shows its error instead of the section."""
    r = Rendered(spec.id, spec.title, spec.looked_for, spec.collapsed, answer=spec.order < 100)
    failed = next(((blocks, err) for blocks, err in pieces if err is not None), None)
    if failed is not None:
        r.blocks, r.error = failed
    else:
        r.blocks = [b for blocks, _ in pieces for b in blocks]
    return r


def _run(spec: SectionSpec, df: pd.DataFrame) -> Rendered:
    return _joined(spec, [_run_part(spec, df, i) for i in range(spec.parts)])


_FORKED: tuple[list[SectionSpec], pd.DataFrame] | None = None  # what the forked workers read (never pickled)


def _run_forked(task: tuple[int, int]) -> Piece:
    assert _FORKED is not None
    specs, df = _FORKED
    return _run_part(specs[task[0]], df, task[1])


def _run_parallel(specs: list[SectionSpec], df: pd.DataFrame, jobs: int) -> list[Rendered]:
    """The sections in ``jobs`` forked processes (each inherits the frame; only the rendered
    blocks, plain strings, come back), the costly ones started first. Sections a dead worker
    did not return are built here."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    global _FORKED
    plots.plt()  # pyplot imported once here, not once per worker
    tasks = sorted(((i, k) for i, s in enumerate(specs) for k in range(s.parts)),
                   key=lambda t: -specs[t[0]].cost / specs[t[0]].parts)
    done: dict[tuple[int, int], Piece] = {}
    _FORKED = (specs, df)
    try:
        with warnings.catch_warnings():
            # Python 3.12 warns on fork when numpy's BLAS threads exist; they hold no lock the workers use.
            warnings.filterwarnings("ignore", message=".*fork.*", category=DeprecationWarning)
            with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork")) as pool:
                futures = {t: pool.submit(_run_forked, t) for t in tasks}
                for t, f in futures.items():
                    try:
                        done[t] = f.result()
                    except BrokenProcessPool:
                        break
    finally:
        _FORKED = None
    return [_joined(s, [done[(i, k)] if (i, k) in done else _run_part(s, df, k) for k in range(s.parts)])
            for i, s in enumerate(specs)]


def build_sections(loaded: Loaded, only: Iterable[str] | None = None, jobs: int | None = None) -> list[Rendered]:
    """Run every registered section (or the ones whose id is in ``only``) on the rows. A section
    that raises shows its error on the page (and the other sections still render). ``jobs``:
    processes to build them in (None: ``default_jobs``; 1: in this process); the page is the
    same either way."""
    df = build_frame(loaded)
    wanted = None if only is None else set(only)
    if wanted is not None and (unknown := wanted - {s.id for s in registered()}):
        raise KeyError(f"no report section {sorted(unknown)}")
    specs = [s for s in registered() if wanted is None or s.id in wanted]
    pieces = sum(s.parts for s in specs)
    jobs = default_jobs(pieces) if jobs is None else max(1, min(jobs, pieces))
    if jobs > 1:
        return _run_parallel(specs, df, jobs)
    return [_run(s, df) for s in specs]


def breakable(text: str) -> Markup:
    """Escaped text with a line-break opportunity (<wbr>) after every comma: variant labels
    ("flashinfer [call_form=vllm,decode_tensor_cores=True]") have no space to wrap at."""
    return Markup(",<wbr>").join(escape(text).split(","))


def render_html(loaded: Loaded, title: str | None = None, built: list[Rendered] | None = None,
                jobs: int | None = None) -> str:
    """The page; ``built``: sections already built from ``loaded`` (else built here, in ``jobs``
    processes: ``build_sections``)."""
    from jinja2 import Environment, PackageLoader, select_autoescape

    env = Environment(loader=PackageLoader("harness", "templates"), autoescape=select_autoescape(["html", "j2"]))
    env.filters["breakable"] = breakable
    suites = sorted({r.suite for r in loaded.rows})
    statuses = [str(r.status) for r in loaded.rows]
    counts = {s.value: statuses.count(s.value) for s in Status}
    return env.get_template("report.html.j2").render(
        title=title or f"Attention harness report: {', '.join(suites) or 'no rows'}",
        sections=built if built is not None else build_sections(loaded, jobs=jobs), counts=counts, colors=STATUS_COLORS, total=len(loaded.rows),
        sources=loaded.sources, warnings=loaded.warnings,
    )


def write_report(paths: Iterable[str | Path], out: str | Path, title: str | None = None,
                 jobs: int | None = None, warn: Callable[[str], None] = lambda m: None) -> Path:
    """Render the report of ``paths`` into ``out`` (written atomically) and return its path;
    ``jobs``: processes to build the sections in (``build_sections``); ``warn`` gets each warning
    about the inputs (duplicate rows), which the page shows too."""
    loaded = load(paths)
    for w in loaded.warnings:
        warn(w)
    page = render_html(loaded, title, jobs=jobs)
    return atomic_write_text(out, page)


__all__ = ["REGISTRY", "SECTIONS", "Block", "Figure", "Heading", "Loaded", "SectionSpec", "Table", "Text",
           "build_frame", "build_sections", "frame", "load", "render_html", "registered", "section", "write_report"]
