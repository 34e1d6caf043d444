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

from harness.records.engine_facts import BackendFacts
from harness.records.fileio import atomic_write_text
from harness.records.header import MergedFrom, RunHeader
from harness.records.load import Run, load_run
from harness.records.results import RESULTS_FILE, ResultRow, results_file, row_json, write_header


class MergeError(ValueError):
    """Folders that cannot be merged (one-line reason naming the folders and the field)."""


@dataclass
class MergeResult:
    rows: list[ResultRow]
    header: RunHeader
    missing: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)


def _key_str(key: tuple) -> str:
    return "|".join(key)


def _same(field_name: str, what: str, runs: list[Run]) -> None:
    seen: dict[Any, Path] = {}
    for run in runs:
        if field_name in run.header.model_fields_set:
            seen.setdefault(repr(getattr(run.header, field_name)), run.source)
    if len(seen) > 1:
        (a, da), (b, db) = list(seen.items())[:2]
        raise MergeError(f"{da} and {db}: different {what} ({field_name} {a} vs {b}); "
                         "only shards of one suite run with the same flags and harness can be merged")


def _facts(runs: list[Run]) -> dict[str, BackendFacts] | None:
    """Every shard's backend facts (a shard records only the backends it was given; the first
    folder naming a backend wins, as the readers do)."""
    out: dict[str, BackendFacts] = {}
    for run in runs:
        for name, facts in run.backend_facts.items():
            out.setdefault(name, facts)
    return out if any(run.header.backend_facts is not None for run in runs) else None


def merge_dirs(dirs: list[Path]) -> MergeResult:
    if not dirs:
        raise MergeError("no results folders given")
    runs: list[Run] = []
    for d in map(Path, dirs):
        if not results_file(d).exists():
            raise MergeError(f"{d}: no {RESULTS_FILE} there")
        try:
            runs.append(load_run(d))
        except ValueError as e:
            raise MergeError(str(e)) from None
    # The (name, what) pairs checked: the names are RunHeader fields (typed, not keys).
    for name, what in (("suite", "suites"), ("suite_hash", "suite content"), ("seed", "seeds"),
                       ("harness_version", "harness versions"), ("git_sha", "harness versions")):
        _same(name, what, runs)
    shards = [run.header.shard for run in runs if run.header.shard is not None]
    counts = {repr(s.count) for s in shards}
    if len(counts) > 1:
        raise MergeError(f"{', '.join(str(run.source) for run in runs)}: shards of different splits "
                         f"(N = {', '.join(sorted(counts))})")
    rows: list[ResultRow] = []
    first: dict[tuple, Path] = {}
    dup: list[str] = []
    for run in runs:
        for r in run.rows:
            if r.key in first:
                dup.append(f"{_key_str(r.key)} ({first[r.key]} and {run.source})")
                continue
            first[r.key] = run.source
            rows.append(r)
    expected: set[str] = set()
    for s in shards:
        expected.update(s.cells or [])
    have = {_key_str(k) for k in first}
    missing = sorted(expected - have)
    if shards:
        n = shards[0].count
        absent = sorted(set(range(1, n + 1)) - {s.index for s in shards})
        total = shards[0].total_cells or 0
        if absent:
            # Cells of a shard nobody gave are known only by count (each shard lists its own).
            missing.append(f"shard(s) {', '.join(f'{k}/{n}' for k in absent)}: no folder given "
                           f"({max(total - len(have), 0)} of {total} cells missing)")
    base = runs[0].header
    merged = [MergedFrom(dir=str(run.source), shard=run.header.shard.index if run.header.shard else None,
                         shard_count=run.header.shard.count if run.header.shard else None,
                         git_sha=run.header.git_sha if "git_sha" in run.header.model_fields_set else None,
                         time_utc=run.header.time_utc if "time_utc" in run.header.model_fields_set else None)
              for run in runs]
    # The first folder's header, less what was its own (its shard, its wall time, its resumes).
    kept = base.model_dump(exclude_unset=True, exclude={"shard", "wall_s", "run_s", "finished_utc",
                                                        "time_breakdown_s", "rows_this_run", "resumed"})
    header = RunHeader.model_validate({**kept, "cells": len(rows), "merged": [m.model_dump() for m in merged],
                                       "merge_missing": missing, "merge_duplicated": dup})
    if (facts := _facts(runs)) is not None:
        header = header.model_copy(update={"backend_facts": facts})
        header.model_fields_set.add("backend_facts")
    return MergeResult(rows, header, missing, dup)


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
