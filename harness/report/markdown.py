"""Markdown tables and plain-text values for the text outputs (crosscheck, matrix, calibration,
recommend, the terminal tables)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any


def escape(cell: Any) -> str:
    """One table cell: a ``|`` would end the cell and a newline the row, so neither stays raw."""
    return str(cell).replace("|", "\\|").replace("\n", " ")


def table(head: Sequence[Any], rows: Iterable[Sequence[Any]]) -> list[str]:
    """A GitHub markdown table as lines: the header, the rule, one line per row (cells escaped)."""
    head = [escape(h) for h in head]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [escape(c) for c in row]
        if len(cells) != len(head):
            raise ValueError(f"markdown table row has {len(cells)} cells for {len(head)} columns")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def fmt_time(us: float | None) -> str:
    """A duration in microseconds with 3-4 significant digits: 43.6 µs, 1475 ms, 1.475 s."""
    if us is None or not math.isfinite(us):
        return ""
    for scale, unit in ((1e6, "s"), (1e3, "ms")):
        if abs(us) >= scale:
            return f"{us / scale:.4g} {unit}"
    return f"{us:.3g} µs" if abs(us) < 1 else f"{us:.4g} µs"
