"""The one way a reader gets results: ``load(paths) -> list[Run]``.

A ``Run`` is one results folder (or .jsonl file): its typed header (run.json, ``RunHeader``), its
typed rows (``ResultRow``) and what reading them migrated (harness/records/migrate.py). The
backend facts the engine rules read travel with the runs (``Run.backend_facts``,
``backend_facts(runs)``), never in process-wide state.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.records.engine_facts import BackendFacts
from harness.records.header import RunHeader
from harness.records.migrate import Migration
from harness.records.results import ResultRow, first_error, read_header, read_rows


@dataclass(frozen=True)
class Run:
    """One results folder, typed to the leaves."""

    source: Path
    """The folder or .jsonl file as given."""
    header: RunHeader
    """run.json (every field empty where the folder has none)."""
    rows: list[ResultRow]
    """Its rows, in file order."""
    migration: Migration = field(default_factory=Migration)
    """What reading migrated: retired fields dropped, the versions read."""
    has_header: bool = True
    """False: the folder holds no run.json (``header`` is then all defaults)."""

    @property
    def backend_facts(self) -> dict[str, BackendFacts]:
        """The facts run.json recorded per backend ({} for headers written before them)."""
        return dict(self.header.backend_facts or {})

    @property
    def device_name(self) -> str | None:
        return self.header.device_name


def load_run(path: str | Path) -> Run:
    """One results folder or .jsonl file. FileNotFoundError names a missing path or a folder
    without rows; ValueError names the file, line and field of anything unreadable."""
    p = Path(path)
    migration = Migration()
    rows = read_rows(p, migration)
    raw = read_header(p, migration)
    try:
        header = RunHeader.model_validate(raw)
    except ValueError as e:
        where = p if p.is_dir() else p.parent
        raise ValueError(f"{where / 'run.json'}: {first_error(e, 'field ')}") from None
    return Run(p, header, rows, migration, has_header=bool(raw))


def load(paths: Iterable[str | Path]) -> list[Run]:
    """Every results folder / .jsonl file, in the order given."""
    return [load_run(p) for p in paths]


def all_rows(runs: Sequence[Run]) -> list[ResultRow]:
    """The runs' rows, one list, in order."""
    return [r for run in runs for r in run.rows]


def backend_facts(runs: Sequence[Run]) -> dict[str, BackendFacts]:
    """Every backend's facts over the runs; the first run naming a backend wins."""
    out: dict[str, BackendFacts] = {}
    for run in runs:
        for name, facts in run.backend_facts.items():
            out.setdefault(name, facts)
    return out


__all__ = ["Run", "load", "load_run", "all_rows", "backend_facts"]
