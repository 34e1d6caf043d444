"""Trace readers. Every bad line raises ``TraceError`` naming file, line and field (a
``SpecError``, so the CLI prints it and exits 2)."""
from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from harness.spec.errors import SpecError

HASH_BLOCK_TOKENS = 512  # Mooncake's hash_ids: one id per 512-token prompt block


class TraceError(SpecError):
    def __init__(self, path: Path | str, line: int, field: str, why: str) -> None:
        # Line 0: the file as a whole (missing, unknown format), not a field of a line.
        super().__init__(f"{path}: {why}" if line == 0 else f"{path}: line {line}: field {field!r}: {why}")


@dataclass(frozen=True)
class TraceRequest:
    arrival_s: float          # seconds since the trace's first request
    prompt_len: int
    output_len: int
    hash_ids: tuple[int, ...] = ()  # one per 512-token prompt block (Mooncake only)


def _int(path: Path, line: int, field: str, raw: object, minimum: int) -> int:
    if isinstance(raw, bool) or not isinstance(raw, (int, str)):
        raise TraceError(path, line, field, f"expected an integer, got {raw!r}")
    try:
        v = int(raw)
    except ValueError:
        raise TraceError(path, line, field, f"expected an integer, got {raw!r}") from None
    if v < minimum:
        raise TraceError(path, line, field, f"must be >= {minimum}, got {v}")
    return v


def read_azure_csv(path: Path) -> list[TraceRequest]:
    out: list[TraceRequest] = []
    t0: datetime | None = None
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        want = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]
        if header is None or [h.strip() for h in header] != want:
            raise TraceError(path, 1, "header", f"expected {','.join(want)}, got {header!r}")
        for i, row in enumerate(reader, start=2):
            if len(row) != 3:
                raise TraceError(path, i, "row", f"expected 3 fields, got {len(row)}")
            try:
                # Azure writes 7 fractional digits; fromisoformat (3.11) accepts at most 6.
                ts_raw = row[0].strip()
                if "." in ts_raw:
                    a, b = ts_raw.split(".", 1)
                    ts_raw = f"{a}.{b[:6]}"
                ts = datetime.fromisoformat(ts_raw)
            except ValueError:
                raise TraceError(path, i, "TIMESTAMP", f"not a timestamp: {row[0]!r}") from None
            t0 = ts if t0 is None else t0
            out.append(TraceRequest((ts - t0).total_seconds(),
                                    _int(path, i, "ContextTokens", row[1], 1),
                                    _int(path, i, "GeneratedTokens", row[2], 1)))
    return out


def read_mooncake_jsonl(path: Path) -> list[TraceRequest]:
    out: list[TraceRequest] = []
    with open(path, encoding="utf-8") as f:
        for i, text in enumerate(f, start=1):
            if not text.strip():
                continue
            try:
                rec = json.loads(text)
            except json.JSONDecodeError as e:
                raise TraceError(path, i, "json", f"not JSON: {e.msg}") from None
            if not isinstance(rec, dict):
                raise TraceError(path, i, "json", "expected an object")
            for k in ("timestamp", "input_length", "output_length", "hash_ids"):
                if k not in rec:
                    raise TraceError(path, i, k, "missing")
            ts = _int(path, i, "timestamp", rec["timestamp"], 0)
            p = _int(path, i, "input_length", rec["input_length"], 1)
            o = _int(path, i, "output_length", rec["output_length"], 1)
            h = rec["hash_ids"]
            if not isinstance(h, list):
                raise TraceError(path, i, "hash_ids", "expected a list")
            ids = tuple(_int(path, i, "hash_ids", x, 0) for x in h)
            need = -(-p // HASH_BLOCK_TOKENS)
            if len(ids) != need:
                raise TraceError(path, i, "hash_ids",
                                 f"{len(ids)} ids for {p} tokens, expected {need} (one per 512)")
            out.append(TraceRequest(ts / 1000.0, p, o, ids))
    return out


def read_trace(path: Path | str) -> list[TraceRequest]:
    """Read a trace by extension: ``.csv`` (Azure) or ``.jsonl`` (Mooncake)."""
    path = Path(path)
    if not path.is_file():
        raise TraceError(path, 0, "file", "no such file")
    try:
        if path.suffix == ".csv":
            reqs = read_azure_csv(path)
        elif path.suffix == ".jsonl":
            reqs = read_mooncake_jsonl(path)
        else:
            raise TraceError(path, 0, "file", "unknown format: expected .csv (Azure) or .jsonl (Mooncake)")
    except UnicodeDecodeError as e:
        raise TraceError(path, 0, "file", f"not UTF-8 ({e.reason})") from None
    if not reqs:
        raise TraceError(path, 0, "file", "no requests")
    return reqs


def select(reqs: list[TraceRequest], first: int | None = None,
           window_s: tuple[float, float] | None = None,
           rate_scale: float = 1.0) -> list[TraceRequest]:
    """Time window [start, end) in trace seconds, then the first N, then arrival times divided by
    ``rate_scale`` (2.0 = twice the request rate), re-based to 0."""
    if rate_scale <= 0:
        raise ValueError("rate_scale must be > 0")
    out = reqs
    if window_s is not None:
        lo, hi = window_s
        out = [r for r in out if lo <= r.arrival_s < hi]
    if first is not None:
        out = out[:first]
    if not out:
        return []
    t0 = out[0].arrival_s
    return [TraceRequest((r.arrival_s - t0) / rate_scale, r.prompt_len, r.output_len, r.hash_ids)
            for r in out]
