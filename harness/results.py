"""Result rows (one per case x backend x variant) and the run header, as JSON.

A results folder holds ``run.json`` (the header) and ``results.jsonl`` (rows, appended and
flushed as each cell finishes). Non-finite floats are written as null so every line is
strict JSON that any tool can read.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

Status = Literal["pass", "mismatch", "error", "unsupported", "skipped", "timeout"]
STATUSES: tuple[str, ...] = ("pass", "mismatch", "error", "unsupported", "skipped", "timeout")

RESULTS_FILE = "results.jsonl"
HEADER_FILE = "run.json"


class ResultRow(BaseModel):
    model_config = ConfigDict(extra="allow")

    suite: str
    case: str
    backend: str
    variant: dict[str, Any] = {}
    variant_label: str = ""
    status: Status
    reason: str = ""
    device: str = ""
    config: dict[str, Any] = {}
    case_group: str = ""  # the suite case this one was expanded from (rows before it: "")
    case_params: dict[str, Any] = {}  # its swept values, e.g. {"block_size": 16, "count": 1}
    layout: dict[str, Any] | None = None  # CaseLayout.as_dict(): block_size, blocks, KV bytes
    batch: dict[str, Any] = {}
    check: dict[str, Any] | None = None
    timing: dict[str, Any] | None = None
    metrics: dict[str, Any] | None = None
    host: dict[str, Any] | None = None
    call: dict[str, Any] | None = None
    reproducer: str = ""

    @property
    def key(self) -> tuple[str, str, str, str]:
        """Identity used to match rows across runs."""
        return (self.suite, self.case, self.backend, self.variant_label)


def variant_label(variant: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(variant.items()))


def _clean(x: Any) -> Any:
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


def dumps(obj: Any) -> str:
    return json.dumps(_clean(obj), allow_nan=False, sort_keys=False)


class ResultWriter:
    """Appends rows to ``results.jsonl``, one flushed and fsynced line at a time."""

    def __init__(self, out_dir: Path):
        self.path = Path(out_dir) / RESULTS_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, "a", encoding="utf-8")

    def write(self, row: ResultRow) -> None:
        self._fh.write(dumps(row.model_dump()) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> "ResultWriter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def write_header(out_dir: Path, header: dict[str, Any]) -> None:
    """Write ``run.json`` atomically (temp file + rename): never half-written."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / (HEADER_FILE + ".tmp")
    tmp.write_text(json.dumps(_clean(header), indent=2, allow_nan=False) + "\n", encoding="utf-8")
    os.replace(tmp, out_dir / HEADER_FILE)


def read_rows(path: str | Path) -> list[ResultRow]:
    """Rows from a results folder or a .jsonl file; a torn last line (a killed run) is ignored."""
    p = Path(path)
    if p.is_dir():
        p = p / RESULTS_FILE
    rows = []
    lines = p.read_text(encoding="utf-8").splitlines()
    for n, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rows.append(ResultRow.model_validate(json.loads(line)))
        except (json.JSONDecodeError, ValueError):
            if n == len(lines) - 1:
                break  # interrupted mid-write
            raise ValueError(f"{p}: line {n + 1} is not a result row") from None
    return rows


def repair_torn_tail(path: str | Path) -> int:
    """Cut a partial last line (a run killed mid-write) so appending starts on a fresh line.
    Returns the number of bytes removed."""
    p = Path(path)
    if p.is_dir():
        p = p / RESULTS_FILE
    if not p.exists():
        return 0
    with open(p, "rb+") as fh:
        size = fh.seek(0, os.SEEK_END)
        if size == 0:
            return 0
        fh.seek(size - 1)
        if fh.read(1) == b"\n":
            return 0
        # Scan back to the last newline in chunks; the torn line is one row, never huge.
        pos = size
        keep = 0
        while pos > 0:
            step = min(65536, pos)
            pos -= step
            fh.seek(pos)
            chunk = fh.read(step)
            nl = chunk.rfind(b"\n")
            if nl >= 0:
                keep = pos + nl + 1
                break
        fh.truncate(keep)
        fh.flush()
        os.fsync(fh.fileno())
        return size - keep


def read_header(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if p.is_file():
        p = p.parent
    f = p / HEADER_FILE
    return json.loads(f.read_text(encoding="utf-8")) if f.exists() else {}
