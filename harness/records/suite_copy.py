"""The suite file travels with its results: ``harness run`` copies the YAML into the results
folder (``suite.yaml``) and run.json records where the original was (``suite_file_abs``) and
the directory the run started in (``cwd``). ``harness repro`` and ``harness run --resume``
find the suite from any directory through them (``find_suite``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from harness.records.fileio import atomic_copy

SUITE_COPY = "suite.yaml"


def header_fields(suite_file: str | Path) -> dict[str, Any]:
    """What run.json records about the suite's location (beside ``suite_file`` as typed)."""
    return {"suite_file_abs": str(Path(suite_file).resolve()), "suite_copy": SUITE_COPY, "cwd": os.getcwd()}


def save(out_dir: Path, suite_file: str | Path) -> Path:
    """Copy the suite into the results folder (whole, then renamed: never half a file)."""
    dst = Path(out_dir) / SUITE_COPY
    if Path(suite_file).resolve() == dst.resolve():  # resumed from the copy itself
        return dst
    return atomic_copy(suite_file, dst)


def _same(a: Path, b: Path) -> bool:
    try:
        return a.read_bytes() == b.read_bytes()
    except OSError:
        return False


def find_suite(results: str | Path, typed: str | None) -> str | None:
    """The suite file of a results folder (or of its results.jsonl), from any directory:
    ``typed`` (a reproducer's path) as given, else relative to the run's ``cwd``, else the
    original's absolute path, each only while it still holds what ran (the copy's bytes);
    else the copy. None when nothing is found."""
    from harness.records.results import read_header

    folder = Path(results)
    folder = folder.parent if folder.is_file() else folder
    header = read_header(folder)
    copy = folder / str(header.get("suite_copy") or SUITE_COPY)
    candidates: list[Path] = []
    if typed:
        candidates.append(Path(typed))
        if header.get("cwd") and not Path(typed).is_absolute():
            candidates.append(Path(header["cwd"]) / typed)
    if header.get("suite_file_abs"):
        candidates.append(Path(header["suite_file_abs"]))
    for c in candidates:
        # The original keeps relative paths (trace files) working: use it while unchanged.
        if c.is_file() and (not copy.is_file() or _same(c, copy)):
            return str(c)
    return str(copy) if copy.is_file() else None
