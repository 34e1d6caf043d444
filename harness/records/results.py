"""Result rows (one per case x backend x variant) and the run header, as JSON.

A results folder holds ``run.json`` (the header) and ``results.jsonl`` (rows, appended and
flushed as each cell finishes). Non-finite floats are written as null so every line is
strict JSON that any tool can read.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_serializer, model_validator

from attn_contract.status import FAILED, NOT_RUN, RAN, TIMED_OK, Status
from harness.records.fileio import atomic_write_text
from harness.records.graph_modes import GraphModes
from harness.records.header import RunHeader
from harness.records.parts import (BatchSummary, InvariantResult, KindCheck, Recheck, RequestCheck, Roofline, RowConfig, RowEnvironment, RowLayout, Scalar, VariantAxes)
from harness.records.timing_parts import (ClockStats, Clocks, ColdCheck, CudaGraphInfo, Energy, Launch, SmClock, TimeContents, TimingOptionsRecord)
from harness.records.formats import ROW_SCHEMA_VERSION
from harness.records.migrate import Migration, migrate_header, migrate_row
from harness.records.payloads import Call, Check, Host, Metrics, Timing, Worker

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Status", "RAN", "FAILED", "NOT_RUN", "TIMED_OK", "UNCHECKED_REASON", "Check", "Timing", "Metrics", "Host", "Call",
           "Worker", "ResultRow", "RunHeader", "rows_frame", "read_rows", "read_header",
           "read_run_header", "write_header", "ResultWriter", "variant_label", "finite_json",
           # the nested parts (harness/records/parts.py)
           "BatchSummary", "ClockStats", "Clocks", "ColdCheck", "CudaGraphInfo", "Energy", "InvariantResult",
           "KindCheck", "Launch", "Recheck",
           "RequestCheck", "Roofline", "RowConfig", "RowEnvironment", "RowLayout", "SmClock", "TimeContents",
           "TimingOptionsRecord", "VariantAxes"]

RESULTS_FILE = "results.jsonl"
HEADER_FILE = "run.json"
UNCHECKED_REASON = "not checked against the reference (--no-check)"


# What each status may carry (derived from harness.cell.case and harness.execute.local):
# - pass/mismatch: the kernel ran: host costs; a check unless the run was --no-check (a mismatch
#   always has one, failed); timing + metrics unless --no-time.
# - error: the stage it failed in as reason; check/call/host of the stages that finished may stay
#   as diagnostics, but never a timing (a number from a failed cell is not a result).
# - unsupported/skipped/timeout: a reason and nothing measured.
_NOTHING_MEASURED = ("check", "timing", "metrics", "host", "call")


def backend_label(backend: str, variant_label: str) -> str:
    """``backend [variant]`` (the backend alone without a variant): the one spelling of a
    candidate's name in every table, plot and ranking."""
    return f"{backend} [{variant_label}]" if variant_label else backend


class ResultRow(BaseModel):
    """One case x backend x variant cell.

    Validate with ``context={"checked": True}`` (the runner does) to also require a check on
    every row that ran; files do not record --no-check, so reading them cannot."""

    model_config = ConfigDict(strict=True, extra="forbid", use_attribute_docstrings=True)

    # The format's version (harness/records/schema.py); rows read without the key are version 1.
    schema_version: int = ROW_SCHEMA_VERSION
    """The format's version (harness/records/formats.py); rows read without the key are version 1."""
    suite: str
    """The suite's name."""
    case: str
    """The case's name, with its swept values (llama3-8b[count=8])."""
    backend: str
    """The backend's registered name."""
    variant: dict[str, Scalar] = {}  # the backend's variant axes and their values
    """The backend's variant axes and their values."""
    variant_label: str = ""
    """The variant as axis=value pairs, sorted, comma-separated ('' for none)."""
    status: Status = Field(strict=False)  # the JSON string ("pass") is the enum's value
    """pass | mismatch | unchecked | error | timeout | unsupported | skipped."""
    reason: str = ""
    """Why the status (needed for every status but pass)."""
    device: str = ""
    """The device the cell ran on."""
    config: RowConfig | None = None
    """The layer the cell ran; written as {} while unset (a row built without a case)."""
    case_group: str = ""
    """The suite case this one was expanded from (rows before it: '')."""
    # Its swept values, e.g. {"block_size": 16, "count": 1}: keys are the suite's swept fields.
    case_params: dict[str, Scalar | None] = {}
    """Its swept values, e.g. {block_size: 16, count: 1}: keys are the suite's swept fields."""
    layout: RowLayout | None = None
    """The case's layout: block size, blocks, KV bytes."""
    batch: BatchSummary = BatchSummary()
    """The generated batch in numbers; {} on a row that did not get to generate it."""
    check: Check | None = None
    """The output against the reference."""
    timing: Timing | None = None
    """The time per call and how it was measured."""
    metrics: Metrics | None = None
    """The work of the call and what the time achieves."""
    host: Host | None = None
    """Host-side costs."""
    call: Call | None = None
    """What the backend says it called, and what the harness adds beside it."""
    reproducer: str = ""
    """A command that runs this cell alone."""
    worker: Worker | None = None
    """The worker process that produced the row (isolated runs only)."""
    traceback: str | None = None
    """An error row's traceback."""
    # Variant axes that applied to the batch, and the variants this row stands for where the
    # others could not change the result (runner.collapse_variants); absent: nothing collapsed.
    variant_axes: VariantAxes | None = None
    """Variant axes that applied to the batch, and the variants this row stands for where the others could not change the result; absent: nothing collapsed."""
    # Why a cell that ran carries no timing although the run timed (e.g. "reference, not timed
    # on cuda by default"); absent on rows that were timed and on older rows.
    timing_skipped: str | None = None
    """Why a cell that ran carries no timing although the run timed; absent on timed and older rows."""
    # The isolated environment a `harness matrix` / `harness bisect` row ran in: its name and the
    # exact versions of its requirements and torch; absent on rows of a plain run.
    environment: RowEnvironment | None = None
    """The isolated environment a `harness matrix` / `harness bisect` row ran in; absent on a plain run's rows."""
    graph_modes: GraphModes | None = None
    """Suites with ``graph_modes: true``: the CUDA-graph level, vLLM's mode for this batch, the call timed under graph replay and eagerly, and the in-place replay check (harness/records/graph_modes.py)."""

    @field_validator("config", mode="before")
    @classmethod
    def _empty_config(cls, v: Any) -> Any:
        return None if v == {} else v  # how a row without a case wrote it

    @model_validator(mode="after")
    def _payload_fits_status(self, info: ValidationInfo) -> "ResultRow":
        st = self.status
        where = f"row {self.case!r} / {self.backend!r}" + (f" [{self.variant_label}]" if self.variant_label else "")
        if st != Status.PASS and not self.reason:
            raise ValueError(f"{where}: status {st} needs a reason")
        if self.metrics is not None and self.timing is None:
            raise ValueError(f"{where}: metrics without timing")
        if self.traceback is not None and st != Status.ERROR:
            raise ValueError(f"{where}: only an error row carries a traceback")
        if st in RAN:
            if self.host is None or self.host.build_ms is None or self.host.first_call_ms is None:
                raise ValueError(f"{where}: status {st} (the kernel ran) needs host costs (build, first call)")
            if st == Status.MISMATCH:
                c = self.check
                later = c is not None and any(not r.passed for r in c.rechecks or [])
                # A broken invariant (--invariants) marks the row mismatch with a passing check.
                broken = c is not None and any(i.status in (Status.MISMATCH, Status.ERROR) for i in c.invariants or [])
                if c is None or (c.passed and not c.inputs_modified and not later and not broken):
                    raise ValueError(f"{where}: status mismatch needs a failed check (or a failed recheck, "
                                     "a broken invariant, or inputs the backend modified)")
            if st == Status.PASS and self.check is not None and not self.check.passed:
                raise ValueError(f"{where}: status pass with a failed check")
            if st == Status.UNCHECKED and self.check is not None:
                raise ValueError(f"{where}: status unchecked with a check")
            if self.check is None and (info.context or {}).get("checked"):
                raise ValueError(f"{where}: status {st} without a check in a checked run")
        elif st == Status.ERROR:
            if self.timing is not None:
                raise ValueError(f"{where}: an error row carries no timing")
        else:
            carried = [k for k in _NOTHING_MEASURED if getattr(self, k) is not None]
            if carried:
                raise ValueError(f"{where}: status {st} carries no measurement, got {', '.join(carried)}")
        return self

    @model_serializer(mode="wrap")
    def _same_keys_as_before(self, handler: Any) -> dict[str, Any]:
        d = handler(self)
        d["status"] = self.status.value
        if d.get("config", 0) is None:
            d["config"] = {}
        # Fields rows gained later are written only when set, so an old row writes back as it was.
        for k, empty in (("schema_version", 1), ("worker", None), ("traceback", None), ("layout", None), ("case_group", ""),
                         ("case_params", {}), ("variant_axes", None),
                         ("timing_skipped", None), ("environment", None), ("graph_modes", None)):
            if k in d and d[k] == empty and (empty is not None or d[k] is None):
                del d[k]
        return d

    @property
    def key(self) -> tuple[str, str, str, str]:
        """Identity used to match rows across runs."""
        return (self.suite, self.case, self.backend, self.variant_label)

    @property
    def label(self) -> str:
        """``backend [variant]``: the candidate's name in every table and plot."""
        return backend_label(self.backend, self.variant_label)

    @property
    def case_id(self) -> str:
        """``suite/case``: the case across backends (and across runs of one suite)."""
        return f"{self.suite}/{self.case}"

    @property
    def model(self) -> str | None:
        """The model shape a case came from (``model:`` / ``--model``), or None."""
        m = self.case_params.get("model")
        return str(m) if m else None

    @property
    def interval_us(self) -> tuple[float, float, float] | None:
        """(median, CI low, CI high) in microseconds, the CI clipped to contain the median; None
        when the row has no timing or no positive median."""
        t = self.timing
        if t is None or not t.median_us > 0:
            return None
        med = t.median_us
        lo = t.ci_low_us if t.ci_low_us > 0 else med
        return float(med), float(min(lo, med)), float(max(t.ci_high_us, med))

    @property
    def rule_costs(self) -> dict[str, bool | int | float]:
        """The inputs of vLLM's cascade rule on this row's batch ({} where not recorded)."""
        return dict(self.call.rule_costs or {}) if self.call is not None else {}

    @property
    def group(self) -> str:
        """The case group the verdicts are given per: ``case_group``, or for rows written before
        it the case name up to its swept values (``llama3-8b[count=8]`` -> ``llama3-8b``)."""
        return self.case_group or self.case.split("[", 1)[0]


# ---------------------------------------------------------------- frames
def flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, dict) and value:
        for k, v in value.items():
            flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    else:
        out[prefix] = value


def rows_frame(rows: Iterable[ResultRow]) -> pd.DataFrame:
    """One flat record per row: top-level fields as they are (``status`` as its string),
    payloads flattened with dots (``check.rel_l2_err``, ``timing.median_us``,
    ``metrics.roofline.pct_of_bw``, ``variant.fa_version``, ``config.block_size``), plus
    ``case_id``: a short id per (suite, case), ``c1``, ``c2``, ... in first-seen order over the
    rows given (pass every run at once for ids shared across runs; ``df.attrs["case_legend"]``
    maps them back) and ``label`` (backend [variant])."""
    import pandas as pd  # here, not at import: readers and `harness --help` stay light

    recs = []
    ids: dict[tuple[str, str], str] = {}
    for r in rows:
        d = r.model_dump()
        rec: dict[str, Any] = {}
        for k, v in d.items():
            if k in ("variant", "config", "batch", "check", "timing", "metrics", "host", "call", "worker"):
                flatten(k, v, rec)
                if v is None or v == {}:
                    rec.pop(k, None)
            else:
                rec[k] = v
        cid = ids.setdefault((r.suite, r.case), f"c{len(ids) + 1}")
        rec["case_id"] = cid
        rec["label"] = r.label
        recs.append(rec)
    base = ["suite", "case", "case_id", "backend", "variant_label", "label", "status", "reason", "device"]
    df = pd.DataFrame.from_records(recs) if recs else pd.DataFrame(columns=base)
    df = df[[c for c in base if c in df.columns] + sorted(c for c in df.columns if c not in base)]
    df.attrs["case_legend"] = {cid: case for (_, case), cid in ids.items()}
    return df


def variant_label(variant: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(variant.items()))


def finite_json(x: Any) -> Any:
    """``x`` with every non-finite float as None, so it dumps as strict JSON (allow_nan=False)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: finite_json(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [finite_json(v) for v in x]
    return x


def dumps(obj: Any) -> str:
    return json.dumps(finite_json(obj), allow_nan=False, sort_keys=False)


def row_json(row: ResultRow) -> str:
    """One results.jsonl line (no newline)."""
    return dumps(row.model_dump())


class ResultWriter:
    """Appends rows to ``results.jsonl``, one flushed and fsynced line at a time."""

    def __init__(self, out_dir: Path):
        self.path = Path(out_dir) / RESULTS_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, "a", encoding="utf-8")

    def write(self, row: ResultRow) -> None:
        self._fh.write(row_json(row) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> "ResultWriter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def write_header(out_dir: Path, header: RunHeader) -> None:
    """Write ``run.json`` from its typed header, atomically (temp file + rename): never half-written."""
    atomic_write_text(Path(out_dir) / HEADER_FILE, json.dumps(finite_json(header.as_json()), indent=2, allow_nan=False) + "\n")


def results_file(path: str | Path) -> Path:
    """The rows file of a results folder: results.jsonl, or results.jsonl.gz for committed,
    compressed results (reports/ keeps them small). A file path is returned as it is."""
    p = Path(path)
    if p.is_dir():
        plain = p / RESULTS_FILE
        packed = p / (RESULTS_FILE + ".gz")
        if packed.exists() and plain.exists() and _gz_text(packed) != plain.read_bytes():
            # Reading one would silently drop the other's rows: the user says which is the run.
            raise ValueError(f"{p}: holds both {RESULTS_FILE} and {RESULTS_FILE}.gz and they differ; "
                             "keep the one that is the run (move the other away)")
        return packed if packed.exists() and not plain.exists() else plain
    return p


def _gz_text(p: Path) -> bytes:
    """The decompressed bytes of a .gz rows file; a truncated or corrupt one (a partial copy or
    download) is a ValueError naming the file, as a line that is not JSON is."""
    try:
        return gzip.decompress(p.read_bytes())
    except (OSError, EOFError, zlib.error) as e:  # BadGzipFile is an OSError
        raise ValueError(f"{p}: not a readable gzip file ({e}); copy or download it again") from None


def read_rows(path: str | Path, migration: Migration | None = None) -> list[ResultRow]:
    """Rows from a results folder or a .jsonl file; a torn last line (a killed run) is ignored.
    Rows of any version a build wrote are read (harness/records/migrate.py; what reading dropped
    is counted into ``migration``). A line that is JSON but not a valid row raises ValueError
    naming the file, line and field; a missing file or a folder without rows raises
    FileNotFoundError saying which."""
    record = migration if migration is not None else Migration()
    if not Path(path).exists():
        raise FileNotFoundError(f"{path}: no such results folder or file")
    p = results_file(path)
    if not p.exists():
        raise FileNotFoundError(f"{path}: folder holds no results.jsonl")
    rows = []
    if p.suffix == ".gz":
        raw = _gz_text(p)
    else:
        raw = p.read_bytes()
    try:
        lines = raw.decode("utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise ValueError(f"{p}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    for n, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            if n == len(lines) - 1:
                break  # interrupted mid-write
            raise ValueError(f"{p}: line {n + 1} is not JSON") from None
        if isinstance(data, dict):
            data = migrate_row(data, f"{p}: line {n + 1}", record)
            data.setdefault("schema_version", 1)  # written before rows carried it
        try:
            rows.append(ResultRow.model_validate(data))
        except ValueError as e:
            raise ValueError(f"{p}: line {n + 1} is not a valid result row: {first_error(e)}") from None
    return rows


def first_error(e: ValueError, field_word: str = "") -> str:
    """A validation error's first problem as ``[field_word ]dotted.path: message`` (one line)."""
    errors = getattr(e, "errors", None)
    if callable(errors):
        first = errors()[0]
        loc = ".".join(str(x) for x in first.get("loc", ()))
        return f"{field_word}{loc}: {first.get('msg', '')}" if loc else str(first.get("msg", ""))
    return str(e)


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


def read_header(path: str | Path, migration: Migration | None = None) -> dict[str, Any]:
    """run.json as a plain dict ({} when there is none), brought to the current version
    (harness/records/migrate.py)."""
    p = Path(path)
    if p.is_file():
        p = p.parent
    f = p / HEADER_FILE
    try:
        header = json.loads(f.read_text(encoding="utf-8")) if f.exists() else {}
    except (json.JSONDecodeError, UnicodeDecodeError) as e:  # a hand-edited or truncated run.json
        raise ValueError(f"{f}: not valid JSON ({e}); restore it or remove it") from None
    if isinstance(header, dict) and header:
        header = migrate_header(header, str(f), migration if migration is not None else Migration())
    return header


def read_run_header(path: str | Path) -> RunHeader:
    """run.json as a ``RunHeader`` (all fields empty when there is none)."""
    return RunHeader.model_validate(read_header(path))
