"""A baseline of several runs: each row's run-to-run spread, so a row whose level moves between
processes is not failed for landing on a level the baseline has seen.

One device-class band (harness/analysis/compare.py's noise model) cannot cover a row whose median
sits on one of two levels from process to process (on the H100, FlashInfer decode of
``mha[count=1]`` at 16.3 us in some runs and 17.6 us in others, each level tight within its run).
Given k baseline runs of the same code, a row's band is the range of its k medians, widened by the
device class's noise band (the floor: with few runs the range alone is too narrow). A new median
inside the widened range is *same*; outside it, the row is judged by the ordinary rule against the
nearest edge: the slowest baseline run when slower, the fastest when faster (threshold, band,
non-overlapping CIs, consistent quartiles). So a level the baseline's runs cover passes, and a
slowdown beyond every baseline run still fails. One baseline run: today's behaviour, unchanged.

A baseline is a results folder, a folder of results folders (each sub-folder holding a
results.jsonl is one run), or several of either (``harness compare B1 B2 B3 NEW``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from harness.records.results import TIMED_OK, ResultRow, read_rows, results_file

Key = tuple[str, str, str, str]


@dataclass
class Baseline:
    """The runs of a baseline: one representative row per key (what rows are matched with, and
    the correctness side of the comparison), and every run's row of each key."""

    folders: list[Path]
    rows: list[ResultRow]
    runs: dict[Key, list[ResultRow]] = field(default_factory=dict)  # raw row key -> that row in each run

    @property
    def count(self) -> int:
        return len(self.folders)


def run_folders(path: str | Path) -> list[Path]:
    """The runs a baseline path holds: itself (a results folder or a .jsonl file), or each
    sub-folder with a results file (a folder of runs), in name order. FileNotFoundError names a
    path that is neither."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{path}: no such results folder or file")
    if p.is_file() or results_file(p).exists():
        return [p]
    subs = sorted(d for d in p.iterdir() if d.is_dir() and results_file(d).exists())
    if not subs:
        raise FileNotFoundError(f"{path}: holds no results.jsonl, and no sub-folder holds one (a baseline is a "
                                "results folder or a folder of them)")
    return subs


def _timed(r: ResultRow) -> bool:
    return r.status in TIMED_OK and r.timing is not None and r.timing.median_us > 0


def representative(rows: Sequence[ResultRow]) -> ResultRow:
    """The row a key is matched and judged on for correctness: the timed passing row with the
    median of the runs' medians (the lower middle for an even count); without one, the last run's."""
    timed = sorted((r for r in rows if _timed(r)), key=lambda r: r.timing.median_us)  # type: ignore[union-attr]
    return timed[(len(timed) - 1) // 2] if timed else rows[-1]


def baseline_of(runs: Sequence[Sequence[ResultRow]], folders: Sequence[Path] = ()) -> Baseline:
    """A ``Baseline`` from the rows of each run (the last row of a key within one run wins, as a
    re-run appended to a file supersedes)."""
    per_run = [{r.key: r for r in rows} for rows in runs]
    order: dict[Key, None] = {}
    for rows in runs:
        for r in rows:
            order.setdefault(r.key, None)
    by_key = {k: [run[k] for run in per_run if k in run] for k in order}
    rows_out = [representative(v) for v in by_key.values()]
    return Baseline(list(folders), rows_out, by_key if len(runs) > 1 else {})


def read_baseline(paths: str | Path | Sequence[str | Path]) -> Baseline:
    """Every run of one or several baseline paths (see ``run_folders``)."""
    items = [paths] if isinstance(paths, (str, Path)) else list(paths)
    folders = [f for p in items for f in run_folders(p)]
    return baseline_of([read_rows(f) for f in folders], folders)


@dataclass
class RowSpread:
    """One row's timed baseline runs, slowest to fastest by median."""

    lo: ResultRow  # the fastest run's row
    mid: ResultRow  # the median run's row (the lower middle)
    hi: ResultRow  # the slowest run's row
    count: int

    def covers(self, median_us: float, band: float) -> bool:
        """Whether ``median_us`` lies within the runs' range widened by ``band`` (a fraction)."""
        return _us(self.lo) * (1 - band) <= median_us <= _us(self.hi) * (1 + band)

    def edge(self, median_us: float) -> ResultRow:
        """The run a median outside the range is judged against: the nearest edge."""
        return self.hi if median_us > _us(self.hi) else self.lo

    def describe(self, band: float) -> str:
        return f"{self.count} baseline runs {_us(self.lo):.2f}-{_us(self.hi):.2f} us (±{band * 100:.1f}% band)"


def _us(r: ResultRow) -> float:
    assert r.timing is not None
    return r.timing.median_us


def row_spread(runs: Sequence[ResultRow]) -> RowSpread | None:
    """The spread of a row's timed passing baseline runs (None below two of them)."""
    timed = sorted((r for r in runs if _timed(r)), key=_us)
    if len(timed) < 2:
        return None
    return RowSpread(timed[0], timed[(len(timed) - 1) // 2], timed[-1], len(timed))


def as_backend(row: ResultRow, renames: dict[str, str]) -> ResultRow:
    """``row`` under the baseline's name of its backend (``--match-backend NEW=BASE``: a patched
    build under its own name compared with the built-in's rows)."""
    name = renames.get(row.backend)
    return row if name is None else row.model_copy(update={"backend": name})


def parse_match_backend(items: Sequence[str]) -> dict[str, str]:
    """``["NEW=BASE", ...]`` -> {NEW: BASE}; ValueError naming a malformed item."""
    out = {}
    for item in items:
        new, eq, base = item.partition("=")
        if not eq or not new.strip() or not base.strip():
            raise ValueError(f"--match-backend {item!r}: expected NEW_BACKEND=BASELINE_BACKEND")
        out[new.strip()] = base.strip()
    return out


__all__ = ["Baseline", "RowSpread", "as_backend", "baseline_of", "read_baseline", "representative", "row_spread", "parse_match_backend", "run_folders"]
