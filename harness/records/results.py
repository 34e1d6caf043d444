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
from typing import TYPE_CHECKING, Any, ClassVar, Iterable, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_serializer, model_validator

from attn_contract.status import FAILED, NOT_RUN, RAN, TIMED_OK, Status
from harness.records.engine_facts import BackendFacts
from harness.records.fileio import atomic_write_text
from harness.records.graph_modes import GraphModes
from harness.records.parts import (BatchSummary, ClockStats, Clocks, ColdCheck, CudaGraphInfo, Energy, InvariantResult,
                                   KindCheck, Launch, Recheck, RequestCheck, Roofline, RowConfig, RowEnvironment,
                                   RowLayout, Scalar, SmClock, TimeContents, TimingOptionsRecord, VariantAxes)
from harness.records.formats import ROW_SCHEMA_VERSION, RUN_SCHEMA_VERSION, check_version

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Status", "RAN", "FAILED", "NOT_RUN", "TIMED_OK", "UNCHECKED_REASON", "Check", "Timing", "Metrics", "Host", "Call",
           "Worker", "ResultRow", "Environment", "RunHeader", "rows_frame", "read_rows", "read_header",
           "read_run_header", "write_header", "ResultWriter", "variant_label",
           # the nested parts (harness/records/parts.py)
           "BatchSummary", "ClockStats", "Clocks", "ColdCheck", "CudaGraphInfo", "Energy", "InvariantResult",
           "KindCheck", "Launch", "Recheck",
           "RequestCheck", "Roofline", "RowConfig", "RowEnvironment", "RowLayout", "SmClock", "TimeContents",
           "TimingOptionsRecord", "VariantAxes"]

RESULTS_FILE = "results.jsonl"
HEADER_FILE = "run.json"
UNCHECKED_REASON = "not checked against the reference (--no-check)"


# ---------------------------------------------------------------- payloads
class Payload(BaseModel):
    """A typed part of a row. Strict: a bool is not an int, a string is not a number.

    ``_omit_if_none`` names optional fields that did not exist in older files; they are left out
    of the JSON while unset, so rows written now have the same keys as rows written before."""

    # extra="forbid": a new measurement field must be declared here (optional, so old rows load),
    # never slipped in unnoticed; tests/test_results_rows.py loads every committed file.
    model_config = ConfigDict(strict=True, extra="forbid")
    _omit_if_none: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _drop_unset_extensions(self, handler: Any) -> dict[str, Any]:
        d = handler(self)
        for k in self._omit_if_none:
            if d.get(k, 0) is None:
                del d[k]
        return d


class Check(Payload):
    """The output (and LSE) against the reference (what harness.cell.check.check_output returns). Error figures are
    None where they were not finite (a NaN/Inf output): JSON has no infinity."""

    passed: bool
    message: str
    max_abs_err: float | None
    max_rel_err: float | None
    rel_l2_err: float | None
    mismatch_fraction: float
    num_nan: int
    num_inf: int
    num_unwritten: int
    lse_checked: bool
    lse_max_abs_err: float | None
    atol: float
    rtol: float
    lse_atol: float
    max_mismatch_fraction: float
    # Per request (its index, errors, verdict), for localising a mismatch; newer rows only.
    num_requests: int | None = None
    num_failed_requests: int | None = None
    per_request: list[RequestCheck] | None = None
    worst_request: RequestCheck | None = None
    per_kind: dict[str, KindCheck] | None = None  # summary per segment kind (decode, prefill, ...)
    rechecks: list[Recheck] | None = None  # the output after timing / of a repeated call
    inputs_modified: str | None = None  # the inputs the backend wrote into (a mismatch)
    invariants: list[InvariantResult] | None = None  # --invariants: harness/cell/invariants.py, each with a status
    diagnosis: str | None = None  # a known library bug the backend says this mismatch matches

    _omit_if_none = frozenset({"num_requests", "num_failed_requests", "per_request", "worst_request", "per_kind",
                               "rechecks", "inputs_modified", "invariants", "diagnosis"})


class Timing(Payload):
    """Per-call time in microseconds and how it was measured (harness.timing.time_callable)."""

    median_us: float
    min_us: float
    max_us: float
    mean_us: float
    stdev_us: float
    q1_us: float
    q3_us: float
    iqr_us: float
    ci_low_us: float
    ci_high_us: float
    ci_coverage: float
    rel_ci_half_width: float
    samples: int
    stop_criterion: str | None = None  # the stopping rule's name (harness.timing.stopping); newer rows
    stop_reason: str
    stop: str
    target_rel_noise: float
    sampling_s: float
    method: str  # wall_clock (CPU) | cuda_event
    mode: str  # hot | cold
    l2: str
    cuda_graph: CudaGraphInfo
    calls_per_sample: int
    sm_clock_mhz: SmClock | None  # GPU clocks around the sampling; None on the CPU
    options: TimingOptionsRecord
    launch: Launch | None = None  # GPU: launch hiding
    raw_us: list[float] | None = None  # every sample, with TimingOptions.keep_raw
    cold_check: ColdCheck | None = None  # cold mode: how L2 flushing was verified
    cold_l2: str | None = None
    # Extensions: time per phase (e.g. {"plan": .., "kernel": ..}, microseconds) and energy.
    breakdown: dict[str, float] | None = None
    energy: Energy | None = None
    contains: TimeContents | None = None  # what the time holds beside the kernels (harness.timing.loop)
    # GPU: the clock regime the row was sampled in (burst | sustained; part of its identity:
    # compare refuses rows of two regimes), the clocks over its samples, and whether its
    # candidates were sampled in interleaved rounds or one after another. Absent on CPU rows
    # and on rows written before them (those were burst, unrecorded). Any other word is refused on load.
    clock_regime: Literal["burst", "sustained"] | None = None
    clocks: Clocks | None = None
    sampling: str | None = None  # interleaved | sequential
    # Untimed calls right before every timed sample (GPU hot: a copy of the sample's work; cold: one
    # call before the flush; CPU: 0) and, interleaved, the case's complete rounds (= samples).
    warm_calls: int | None = None
    rounds: int | None = None
    # Sustained: the median SM clock of the call's own continuous loop just before sampling.
    settled_sm_clock_mhz: float | None = None

    _omit_if_none = frozenset({"stop_criterion", "launch", "raw_us", "cold_check", "cold_l2", "breakdown", "energy",
                               "contains", "clock_regime", "clocks", "sampling", "warm_calls", "rounds",
                               "settled_sm_clock_mhz"})


class Metrics(Payload):
    """Work of the call (harness.case.metrics) and what the measured time achieves (harness.case.roofline).

    Further fields are allowed but must be numbers (or null): a new quantity added to
    ``harness.case.metrics.Work`` lands here without touching this model."""

    model_config = ConfigDict(strict=True, extra="allow")
    __pydantic_extra__: dict[str, int | float | None] = Field(init=False)

    flops: float
    bytes: float
    bytes_q: float
    bytes_kv: float
    bytes_o: float
    bytes_meta: float
    visible_pairs: int
    kv_tokens_read: int
    intensity: float | None
    tflops: float | None
    tbps: float | None
    roofline: Roofline


class Host(Payload):
    """Host-side costs, milliseconds unless named otherwise. The cell's own stages are in
    ``breakdown_ms``; ``case_ms`` holds the case-level stages (generate, reference) it shared
    with ``case_cells`` cells. build/first_call are None on an error row that stopped earlier."""

    build_ms: float | None = None
    first_call_ms: float | None = None  # includes JIT compilation
    enqueue_us: float | None = None  # GPU: launching one call
    breakdown_ms: dict[str, float] | None = None
    cell_ms: float | None = None
    case_ms: dict[str, float] | None = None
    case_cells: int | None = None

    _omit_if_none = frozenset({"build_ms", "first_call_ms", "enqueue_us", "breakdown_ms", "cell_ms", "case_ms",
                               "case_cells"})


class Call(Payload):
    """What the backend says it called (``describe_call``) plus what the harness adds beside it.

    The backend's facts are its own keys (kernel names, split counts, plan times, ...): the harness
    cannot know them and a backend must not need a harness change to record a new one, so they
    stay a mapping, ``facts`` (pydantic's extra fields, written at the top level of ``call`` as
    always). The keys the harness writes or reads itself are typed fields."""

    model_config = ConfigDict(strict=True, extra="allow")
    __pydantic_extra__: dict[str, Any] = Field(init=False)

    compare_with: str | None = None  # cascade backends: the plain backend to compare against
    # vLLM's cascade decision rule for the batch (harness/cell/cascade.py), on cascade backends' rows.
    rule_says_cascade: bool | None = None
    rule_reason: str | None = None
    rule_costs: dict[str, bool | int | float] | None = None
    # Context-parallel cells (harness/cell/context_parallel/): degree, combine, sharding, shard sizes.
    context_parallel: dict[str, Any] | None = None

    _omit_if_none = frozenset({"compare_with", "rule_says_cascade", "rule_reason", "rule_costs", "context_parallel"})

    @property
    def facts(self) -> dict[str, Any]:
        """The backend's own ``describe_call`` keys (everything but the typed fields above)."""
        return dict(self.__pydantic_extra__ or {})


class Worker(Payload):
    """The worker process that produced the row (isolated runs only)."""

    pid: int | None
    device: str


# What each status may carry (derived from harness.cell.case and harness.execute.local):
# - pass/mismatch: the kernel ran: host costs; a check unless the run was --no-check (a mismatch
#   always has one, failed); timing + metrics unless --no-time.
# - error: the stage it failed in as reason; check/call/host of the stages that finished may stay
#   as diagnostics, but never a timing (a number from a failed cell is not a result).
# - unsupported/skipped/timeout: a reason and nothing measured.
_NOTHING_MEASURED = ("check", "timing", "metrics", "host", "call")


class ResultRow(BaseModel):
    """One case x backend x variant cell.

    Validate with ``context={"checked": True}`` (the runner does) to also require a check on
    every row that ran; files do not record --no-check, so reading them cannot."""

    model_config = ConfigDict(strict=True, extra="forbid")

    # The format's version (harness/records/schema.py); rows read without the key are version 1.
    schema_version: int = ROW_SCHEMA_VERSION
    suite: str
    case: str
    backend: str
    variant: dict[str, Scalar] = {}  # the backend's variant axes and their values
    variant_label: str = ""
    status: Status = Field(strict=False)  # the JSON string ("pass") is the enum's value
    reason: str = ""
    device: str = ""
    config: RowConfig | None = None  # written as {} while unset (a row built without a case)
    case_group: str = ""  # the suite case this one was expanded from (rows before it: "")
    # Its swept values, e.g. {"block_size": 16, "count": 1}: keys are the suite's swept fields.
    case_params: dict[str, Scalar | None] = {}
    layout: RowLayout | None = None  # CaseLayout.as_dict(): block_size, blocks, KV bytes
    batch: BatchSummary = BatchSummary()  # {} on a row that did not get to generate its batch
    check: Check | None = None
    timing: Timing | None = None
    metrics: Metrics | None = None
    host: Host | None = None
    call: Call | None = None
    reproducer: str = ""
    worker: Worker | None = None
    traceback: str | None = None
    # Variant axes that applied to the batch, and the variants this row stands for where the
    # others could not change the result (runner.collapse_variants); absent: nothing collapsed.
    variant_axes: VariantAxes | None = None
    # Why a cell that ran carries no timing although the run timed (e.g. "reference, not timed
    # on cuda by default"); absent on rows that were timed and on older rows.
    timing_skipped: str | None = None
    # The isolated environment a `harness matrix` / `harness bisect` row ran in: its name and the
    # exact versions of its requirements and torch; absent on rows of a plain run.
    environment: RowEnvironment | None = None
    # Suites with ``graph_modes: true``: the CUDA-graph level, vLLM's mode for this batch, the call
    # timed under graph replay and eagerly, and the in-place replay check (harness/records/graph_modes.py).
    graph_modes: GraphModes | None = None

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
    def group(self) -> str:
        """The case group the verdicts are given per: ``case_group``, or for rows written before
        it the case name up to its swept values (``llama3-8b[count=8]`` -> ``llama3-8b``)."""
        return self.case_group or self.case.split("[", 1)[0]


# ---------------------------------------------------------------- run header
class Environment(BaseModel):
    """Where a run happened: the fingerprint harness.records.env writes into run.json."""

    model_config = ConfigDict(extra="allow")  # device probes add keys per device type
    tool: str = "attn-harness"
    schema_version: int = 1  # absent: written before run.json carried it (harness/records/schema.py)
    time_utc: str = ""
    command: str = ""
    git_sha: str = ""
    python: str = ""
    platform: str = ""
    torch: str = ""
    device: dict[str, Any] = {}
    backends: dict[str, dict[str, Any]] = {}


class RunHeader(Environment):
    """run.json: the environment plus what was run. Every field optional: old headers load."""

    suite: str | None = None
    suite_file: str | None = None
    cells: int | None = None
    seed: int | None = None
    devices: list[str] | None = None
    resumed: list[dict[str, Any]] | None = None
    clock_regime: str | None = None  # GPU runs: the regime its rows were timed in (harness/timing/clocks.py)
    # What the readers need of each backend of the run (engine names, plain counterpart);
    # absent in headers written before it: readers then use harness/analysis/engine_table.json.
    backend_facts: dict[str, BackendFacts] | None = None

    @property
    def device_name(self) -> str | None:
        return self.device.get("name")


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
        rec["label"] = f"{r.backend} [{r.variant_label}]" if r.variant_label else r.backend
        recs.append(rec)
    base = ["suite", "case", "case_id", "backend", "variant_label", "label", "status", "reason", "device"]
    df = pd.DataFrame.from_records(recs) if recs else pd.DataFrame(columns=base)
    df = df[[c for c in base if c in df.columns] + sorted(c for c in df.columns if c not in base)]
    df.attrs["case_legend"] = {cid: case for (_, case), cid in ids.items()}
    return df


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


def write_header(out_dir: Path, header: dict[str, Any]) -> None:
    """Write ``run.json`` atomically (temp file + rename): never half-written."""
    atomic_write_text(Path(out_dir) / HEADER_FILE, json.dumps(_clean(header), indent=2, allow_nan=False) + "\n")


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


def read_rows(path: str | Path) -> list[ResultRow]:
    """Rows from a results folder or a .jsonl file; a torn last line (a killed run) is ignored.
    A line that is JSON but not a valid row raises ValueError naming the file, line and field; a
    missing file or a folder without rows raises FileNotFoundError saying which."""
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
            check_version(data.get("schema_version"), ROW_SCHEMA_VERSION, f"{p}: line {n + 1}", "result row")
            data.setdefault("schema_version", 1)  # written before rows carried it
        try:
            rows.append(ResultRow.model_validate(data))
        except ValueError as e:
            raise ValueError(f"{p}: line {n + 1} is not a valid result row: {_first_error(e)}") from None
    return rows


def _first_error(e: ValueError) -> str:
    errors = getattr(e, "errors", None)
    if callable(errors):
        first = errors()[0]
        loc = ".".join(str(x) for x in first.get("loc", ()))
        return f"{loc}: {first.get('msg', '')}" if loc else str(first.get("msg", ""))
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


def read_header(path: str | Path) -> dict[str, Any]:
    """run.json as a plain dict ({} when there is none)."""
    p = Path(path)
    if p.is_file():
        p = p.parent
    f = p / HEADER_FILE
    try:
        header = json.loads(f.read_text(encoding="utf-8")) if f.exists() else {}
    except (json.JSONDecodeError, UnicodeDecodeError) as e:  # a hand-edited or truncated run.json
        raise ValueError(f"{f}: not valid JSON ({e}); restore it or remove it") from None
    if isinstance(header, dict):
        check_version(header.get("schema_version"), RUN_SCHEMA_VERSION, str(f), "run.json")
    return header


def read_run_header(path: str | Path) -> RunHeader:
    """run.json as a ``RunHeader`` (all fields empty when there is none)."""
    return RunHeader.model_validate(read_header(path))
