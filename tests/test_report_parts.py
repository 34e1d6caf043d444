"""The page's longest section (latency) is built in pieces the workers build apart, and the page
is the same as built whole: on a 16-core machine the one section otherwise set the page's time
(docs/measurement.md, the report's own speed)."""

from __future__ import annotations

from pathlib import Path

from harness.report import build_frame, build_sections, load
from harness.report.core import registered
from harness.report.sections.latency import latency

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "tests" / "data" / "h200" / "session-a" / "cascade-4k"  # 65 H200 rows, 3 latency figures (one part gets none)


def test_latency_is_built_in_parts_that_join_into_the_whole():
    spec = next(s for s in registered() if s.id == "latency")
    assert spec.parts > 1
    df = build_frame(load([RUN]))
    whole = latency(df)  # one piece: every figure, then the table
    pieces = [latency(df, part=(i, spec.parts)) for i in range(spec.parts)]
    joined = [b for p in pieces for b in p]
    assert [type(b).__name__ for b in joined] == [type(b).__name__ for b in whole]
    assert sum(type(b).__name__ == "Figure" for b in whole) == 3
    assert [getattr(b, "alt", getattr(b, "text", None)) for b in joined] == \
        [getattr(b, "alt", getattr(b, "text", None)) for b in whole]


def test_the_page_is_the_same_for_any_number_of_workers():
    loaded = load([RUN])
    serial = [(r.id, r.blocks, r.error) for r in build_sections(loaded, only=["latency", "verdict"], jobs=1)]
    forked = [(r.id, r.blocks, r.error) for r in build_sections(loaded, only=["latency", "verdict"], jobs=4)]
    assert forked == serial and any(b["kind"] == "figure" for _, blocks, _ in serial for b in blocks)
