"""Reading every results file ever written: per ``schema_version``, the fields a build wrote and a
later build retired, and the readers that bring an old version's dict to the current models.

A CI owner's stored baseline must never become unreadable after an upgrade. The rule:

- any change to a row's (or run.json's) fields bumps ``ROW_SCHEMA_VERSION`` / ``RUN_SCHEMA_VERSION``
  (harness/records/formats.py) and records the new schema's fingerprint in
  tests/records/schema_fingerprints.json (tests/records/test_readable_forever.py fails
  otherwise); a version whose dicts do not validate as the current model gets an entry in
  ``ROW_UPGRADES`` / ``RUN_UPGRADES`` (version -> a function from that version's dict to the next's);
- a field that a build wrote under some version and a later build dropped *without* a bump (it
  happened once: ``timing.sm_clock_mhz.during_median``, reverted in the same version 2) is listed in
  ``ROW_RETIRED`` under that version: it is dropped on read, or moved where it now lives
  (``Retired.moved_to``), and the loaded run records what was dropped (``Migration.dropped``).

tests/records/test_readable_forever.py loads every results folder committed under reports/.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.records.formats import ROW_SCHEMA_VERSION, RUN_SCHEMA_VERSION


@dataclass(frozen=True)
class Retired:
    """A field some build wrote under a version and a later build dropped."""

    path: tuple[str, ...]  # keys from the top of the row (or run.json) down to the field
    why: str  # what it was and why it went (the commit that dropped it)
    moved_to: tuple[str, ...] | None = None  # where its value lives now; None: dropped


ROW_RETIRED: dict[int, tuple[Retired, ...]] = {
    2: (Retired(("timing", "sm_clock_mhz", "during_median"),
                "the SM clock a spin kernel measured before each sample; reverted (84a9201): on the H200 it "
                "read 820-1270 MHz where NVML read 1980 MHz and the times matched, so it was not a clock"),
        # The first hot-L2 fix (one eager warm call) wrote these on the H100's first loan of
        # 2026-12-06 (reports/h100/2026-12-06/loan1); the warm-up became a copy of the sample.
        Retired(("timing", "hot_warm_calls"), "untimed eager calls before each hot sample, renamed when "
                "the warm-up became a copy of the sample's work (cold: a call before the flush)",
                moved_to=("timing", "warm_calls")),
        Retired(("timing", "options", "hot_warm_calls"), "the option behind timing.hot_warm_calls, renamed "
                "with it", moved_to=("timing", "options", "warm_samples"))),
}
RUN_RETIRED: dict[int, tuple[Retired, ...]] = {}

# version v -> the reader that turns a version-v dict into a version-(v+1) dict. Versions 1 and 2
# differ only by the ``schema_version`` key itself (absent in 1), which the models accept as it is.
Upgrade = Callable[[dict[str, Any]], dict[str, Any]]
ROW_UPGRADES: dict[int, Upgrade] = {}
RUN_UPGRADES: dict[int, Upgrade] = {}


@dataclass
class Migration:
    """What reading a file changed to fit the current models: retired fields dropped (or moved),
    counted by dotted path, and the versions read."""

    dropped: Counter[str] = field(default_factory=Counter)
    moved: Counter[str] = field(default_factory=Counter)
    versions: Counter[int] = field(default_factory=Counter)

    def notes(self) -> list[str]:
        out = [f"{path}: retired field dropped on read ({n} row(s))" for path, n in sorted(self.dropped.items())]
        out += [f"{path}: retired field moved on read ({n} row(s))" for path, n in sorted(self.moved.items())]
        return out

    def absorb(self, other: "Migration") -> None:
        self.dropped.update(other.dropped)
        self.moved.update(other.moved)
        self.versions.update(other.versions)


def version_of(data: dict[str, Any], known: int, where: str, what: str) -> int:
    """The ``schema_version`` a dict was written with (absent: 1). Refuses what no build wrote
    (0, negative, not an integer) and what a newer harness wrote, each with one clear line."""
    found = data.get("schema_version", 1)
    if not isinstance(found, int) or isinstance(found, bool) or found < 1:
        raise ValueError(f"{where}: {what} schema_version {found!r} is not a version any attn-harness wrote "
                         f"(1 to {known}); the file was edited or is not a {what}")
    if found > known:
        raise ValueError(f"{where}: {what} schema_version {found} is newer than this harness reads (up to {known}); "
                         "upgrade attn-harness to read it")
    return found


def _pop(data: dict[str, Any], path: tuple[str, ...]) -> tuple[bool, Any]:
    node: Any = data
    for k in path[:-1]:
        node = node.get(k) if isinstance(node, dict) else None
    if isinstance(node, dict) and path[-1] in node:
        return True, node.pop(path[-1])
    return False, None


def _put(data: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node = data
    for k in path[:-1]:
        node = node.setdefault(k, {})
    node.setdefault(path[-1], value)


def _migrate(data: dict[str, Any], known: int, retired: dict[int, tuple[Retired, ...]],
             upgrades: dict[int, Upgrade], where: str, what: str, record: Migration) -> dict[str, Any]:
    v = version_of(data, known, where, what)
    record.versions[v] += 1
    for step in range(v, known + 1):
        for r in retired.get(step, ()):
            found, value = _pop(data, r.path)
            if not found:
                continue
            if r.moved_to is not None:
                _put(data, r.moved_to, value)
                record.moved[".".join(r.path)] += 1
            else:
                record.dropped[".".join(r.path)] += 1
        if step < known and step in upgrades:
            data = upgrades[step](data)
    return data


def migrate_row(data: dict[str, Any], where: str, record: Migration) -> dict[str, Any]:
    """A result row's dict as any version wrote it -> a dict the current ``ResultRow`` reads."""
    return _migrate(data, ROW_SCHEMA_VERSION, ROW_RETIRED, ROW_UPGRADES, where, "result row", record)


def migrate_header(data: dict[str, Any], where: str, record: Migration) -> dict[str, Any]:
    """run.json as any version wrote it -> a dict the current ``RunHeader`` reads."""
    return _migrate(data, RUN_SCHEMA_VERSION, RUN_RETIRED, RUN_UPGRADES, where, "run.json", record)


__all__ = ["Retired", "ROW_RETIRED", "RUN_RETIRED", "ROW_UPGRADES", "RUN_UPGRADES", "Migration", "version_of",
           "migrate_row", "migrate_header"]
