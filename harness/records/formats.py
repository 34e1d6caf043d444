"""Versions of the file formats.

``schema_version`` in every result row and in run.json says which format wrote it:

- rows: 1 = rows written before the field existed (the key is absent; reports/ holds them),
  2 = rows that carry it. A version-1 row writes back without the key, as it was.
- run.json: 1 = absent, 2 = carries it.

Readers accept every version up to theirs and refuse a newer one with a message saying so
(``check_version``), instead of misreading fields they do not know. Their JSON Schemas:
harness/records/schema.py."""

from __future__ import annotations

from typing import Any

ROW_SCHEMA_VERSION = 2
RUN_SCHEMA_VERSION = 2


def check_version(found: Any, known: int, where: str, what: str) -> None:
    """Refuse a file written by a newer harness (``found`` > ``known``)."""
    if isinstance(found, int) and not isinstance(found, bool) and found > known:
        raise ValueError(f"{where}: {what} schema_version {found} is newer than this harness reads (up to {known}); "
                         "upgrade attn-harness to read it")
