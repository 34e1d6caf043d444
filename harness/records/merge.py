"""``harness merge DIR... -o DIR``: shard folders (and --resume leftovers) -> one result set.

Refuses (MergeError, exit 2) folders that cannot belong to one run: different suite content
(run.json ``suite_hash``, else the suite name), different ``--seed``, different harness version
(package version and git commit). Reports cells no folder has (from the shards' ``shard``
records) and cells more than one folder has; a duplicated cell keeps the row of the folder
given first. The output is an ordinary results folder that report, compare and recommend read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.records.fileio import atomic_write_text
from harness.records.results import RESULTS_FILE, ResultRow, read_header, read_rows, results_file, row_json, write_header


class MergeError(ValueError):
    """Folders that cannot be merged (one-line reason naming the folders and the field)."""


@dataclass
class MergeResult:
    rows: list[ResultRow]
    header: dict[str, Any]
    missing: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)


def _key_str(key: tuple) -> str:
    return "|".join(key)


def _same(field_name: str, what: str, headers: list[tuple[Path, dict]]) -> None:
    seen: dict[Any, Path] = {}
    for d, h in headers:
        if field_name in h:
            seen.setdefault(repr(h[field_name]), d)
    if len(seen) > 1:
        (a, da), (b, db) = list(seen.items())[:2]
        raise MergeError(f"{da} and {db}: different {what} ({field_name} {a} vs {b}); "
                         "only shards of one suite run with the same flags and harness can be merged")


def merge_dirs(dirs: list[Path]) -> MergeResult:
    if not dirs:
        raise MergeError("no results folders given")
    headers = []
    for d in map(Path, dirs):
        if not results_file(d).exists():
            raise MergeError(f"{d}: no {RESULTS_FILE} there")
        headers.append((d, read_header(d)))
    _same("suite", "suites", headers)
    _same("suite_hash", "suite content", headers)
    _same("seed", "seeds", headers)
    _same("harness_version", "harness versions", headers)
    _same("git_sha", "harness versions", headers)
    counts = {repr(h["shard"]["count"]) for _, h in headers if "shard" in h}
    if len(counts) > 1:
        raise MergeError(f"{', '.join(str(d) for d, _ in headers)}: shards of different splits (N = {', '.join(sorted(counts))})")
    rows: list[ResultRow] = []
    first: dict[tuple, Path] = {}
    dup: list[str] = []
    for d, _ in headers:
        try:
            got = read_rows(d)
        except ValueError as e:
            raise MergeError(str(e)) from None
        for r in got:
            if r.key in first:
                dup.append(f"{_key_str(r.key)} ({first[r.key]} and {d})")
                continue
            first[r.key] = d
            rows.append(r)
    expected: set[str] = set()
    for _, h in headers:
        expected.update(h.get("shard", {}).get("cells", []))
    have = {_key_str(k) for k in first}
    missing = sorted(expected - have)
    shards = [h["shard"] for _, h in headers if "shard" in h]
    if shards:
        n = shards[0]["count"]
        absent = sorted(set(range(1, n + 1)) - {s["index"] for s in shards})
        total = shards[0].get("total_cells", 0)
        if absent:
            # Cells of a shard nobody gave are known only by count (each shard lists its own).
            missing.append(f"shard(s) {', '.join(f'{k}/{n}' for k in absent)}: no folder given "
                           f"({max(total - len(have), 0)} of {total} cells missing)")
    base = dict(headers[0][1])
    base.pop("shard", None)
    for k in ("wall_s", "run_s", "finished_utc", "time_breakdown_s", "rows_this_run", "resumed"):
        base.pop(k, None)
    base["cells"] = len(rows)
    base["merged"] = [{"dir": str(d), "shard": h.get("shard", {}).get("index"),
                       "shard_count": h.get("shard", {}).get("count"), "git_sha": h.get("git_sha"),
                       "time_utc": h.get("time_utc")} for d, h in headers]
    base["merge_missing"] = missing
    base["merge_duplicated"] = dup
    return MergeResult(rows, base, missing, dup)


def write_merged(result: MergeResult, out_dir: Path) -> Path:
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise MergeError(f"-o {out_dir}: is a file, not a folder; give the folder the merged results go into")
    if results_file(out_dir).exists():
        raise MergeError(f"-o {out_dir}: already holds {RESULTS_FILE}; choose another folder")
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = "".join(row_json(r) + "\n" for r in result.rows)  # serialised before anything is written
    write_header(out_dir, result.header)
    atomic_write_text(out_dir / RESULTS_FILE, rows)
    return out_dir
