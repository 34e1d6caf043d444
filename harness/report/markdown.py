"""Markdown tables for the text outputs (crosscheck, matrix, calibration)."""

from __future__ import annotations

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
