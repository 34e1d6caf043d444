"""run.json, typed: every key a run writes, each with what it means (``harness schema run``).

The header is written when a run starts (the environment and what is run), completed when its
rows are in (workers, wall time, where the time went) and appended to by ``--resume`` (one
``resumed`` entry per resume), ``harness matrix`` (``environment``) and ``harness report`` run
right after (``report_s``). Every field is optional: headers written before a field existed load.
Unknown top-level keys are refused (a new key is declared here, with a schema_version bump:
harness/records/migrate.py); only the device probe's keys stay open (one set per device type).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from harness.records.engine_facts import BackendFacts


class HeaderPart(BaseModel):
    """Base of run.json's parts: closed, documented by the docstring under each field."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class DeviceInfo(BaseModel):
    """The device the run's parent saw (harness/records/env.py ``device_info``); a device type's
    probe may add keys of its own."""

    model_config = ConfigDict(extra="allow", use_attribute_docstrings=True)
    type: str | None = None
    """``cuda`` or ``cpu``."""
    name: str | None = None
    """The GPU's name (``NVIDIA H200``), or the CPU's model."""
    capability: str | None = None
    """CUDA compute capability, ``major.minor`` (``9.0``)."""
    sm_count: int | None = None
    """Streaming multiprocessors on the GPU."""
    memory_gib: float | None = None
    """Total GPU memory, GiB."""
    l2_bytes: int | None = None
    """The GPU's L2 cache size in bytes (what cold-L2 timing flushes)."""
    cuda_runtime: str | None = None
    """The CUDA runtime torch was built with."""
    driver: str | None = None
    """The NVIDIA driver version (nvidia-smi); None where it could not be read."""
    threads: int | None = None
    """CPU runs: torch's intra-op threads."""


class WorkerRecord(HeaderPart):
    """One worker process of the run (harness/execute/local.py ``accounting``)."""

    device: str
    """The device the worker ran its cells on (``cuda:0``, ``cpu``)."""
    ready_s: float | None = None
    """Seconds from the worker's start until it was ready for cells; None: never ready."""
    import_s: float | None = None
    """Seconds spent importing the backends' libraries."""
    import_by_backend_s: dict[str, float] | None = None
    """Those seconds per backend."""
    busy_s: float | None = None
    """Seconds inside rows."""
    idle_s: float | None = None
    """Seconds from ready to the run's last row not inside a row (waiting, IPC, the tail)."""


class DevicePlanEntry(HeaderPart):
    """One worker's share of a multi-device run's case queue (harness/plan/balance.py)."""

    device: str
    """The worker's device."""
    cases: int | None = None
    """Cases it took from the queue."""
    cells: int | None = None
    """Cells it ran (older headers)."""
    est_cost_s: float | None = None
    """The estimated seconds of the cases it took."""
    static_plan_est_s: float | None = None
    """The estimated seconds a static split would have given it."""
    stolen: int | None = None
    """Cases it took from another worker's share (older headers)."""


class RunTiming(HeaderPart):
    """Where one invocation's wall time went (harness/execute/run_end.py ``record_wall_time``)."""

    wall_s: float | None = None
    """Seconds from the process's start to the last row: imports and worker start-up included."""
    run_s: float | None = None
    """Seconds from the command's start to the last row."""
    finished_utc: str | None = None
    """When the last row was in (ISO 8601, UTC)."""
    time_breakdown_s: dict[str, float] | None = None
    """Seconds per stage summed over the rows (case-level stages once per case), plus the
    parent's start-up, expansion, imports, workers' readiness and idle time."""
    rows_this_run: int | None = None
    """Rows this invocation wrote (a resumed run's earlier rows not counted)."""
    wall_breakdown_s: dict[str, float] | None = None
    """The wall time cut into startup, expand, wait_workers, cases and finish (seconds)."""
    report_s: float | None = None
    """Seconds ``--report`` took to write the report after the rows."""
    wall_with_report_s: float | None = None
    """Seconds from the process's start to the report written."""


class ResumeRecord(RunTiming):
    """One ``--resume`` of the run (harness/plan/resume.py), with its own wall time."""

    time_utc: str | None = None
    """When the resume started (ISO 8601, UTC)."""
    command: str | None = None
    """The command line of the resume."""
    git_sha: str | None = None
    """The harness checkout's commit at the resume (``-dirty`` when it had changes)."""
    rows_before: int | None = None
    """Rows the folder held before the resume."""
    cells_to_run: int | None = None
    """Cells the resume had left to run."""
    torn_bytes_removed: int | None = None
    """Bytes of a torn last line (a killed run) cut from results.jsonl before resuming."""


class MatrixEnvironment(HeaderPart):
    """The isolated environment a ``harness matrix`` / ``harness bisect`` run used."""

    name: str
    """The environment's name in the matrix."""
    requirements: list[str] | None = None
    """Its requirements as given."""
    versions: dict[str, str] | None = None
    """Requirement -> the exact version installed (torch included)."""
    packages: dict[str, str] | None = None
    """Every installed distribution -> its version."""
    path: str | None = None
    """Where the environment was made."""


class ShardRecord(HeaderPart):
    """``--shard K/N``: which part of the suite's cells this run holds (harness/plan/shard.py)."""

    index: int
    """K: this shard's number, from 1."""
    count: int
    """N: how many shards the cells were split into."""
    total_cells: int | None = None
    """The suite's cells over all shards."""
    est_cost_s: list[float] | None = None
    """The estimated seconds of each shard's cells."""
    cells: list[str] | None = None
    """This shard's cells, ``suite|case|backend|variant`` each (``harness merge`` reports those no folder has)."""


class MergedFrom(HeaderPart):
    """One folder ``harness merge`` read."""

    dir: str
    """The folder as given."""
    shard: int | None = None
    """Its shard number (``--shard K/N``), if it was one."""
    shard_count: int | None = None
    """N of its ``--shard K/N``."""
    git_sha: str | None = None
    """The harness commit that wrote it."""
    time_utc: str | None = None
    """When its run started."""


class RunHeader(RunTiming):
    """run.json: the environment a run happened in, what was run, and where its time went."""

    tool: str = "attn-harness"
    """The program that wrote the file."""
    schema_version: int = 1
    """run.json's format version (harness/records/formats.py); absent: 1, written before it."""
    time_utc: str = ""
    """When the run started (ISO 8601, UTC)."""
    command: str = ""
    """The command line that started it."""
    git_sha: str = ""
    """The harness checkout's commit (``-dirty`` when it had changes); empty outside a checkout."""
    harness_version: str | None = None
    """The installed attn-harness version."""
    python: str = ""
    """The Python version."""
    platform: str = ""
    """The operating system (``platform.platform()``)."""
    torch: str = ""
    """The torch version."""
    device: DeviceInfo = DeviceInfo()
    """The device the run's parent saw."""
    backends: dict[str, dict[str, Any]] = {}
    """Per backend: its libraries' versions, or ``available: false`` with the ``reason``."""
    suite: str | None = None
    """The suite's name."""
    suite_file: str | None = None
    """The suite file as typed on the command line."""
    suite_file_abs: str | None = None
    """The suite file's absolute path."""
    suite_copy: str | None = None
    """The suite's copy inside the results folder (what ``--resume`` and ``harness repro`` read)."""
    suite_hash: str | None = None
    """A hash of the expanded suite: ``harness merge`` refuses shards of different suites."""
    cwd: str | None = None
    """The folder the run started in (relative suite paths are relative to it)."""
    cells: int | None = None
    """Cells planned (case x backend x variant)."""
    seed: int | None = None
    """``--seed``, overriding every case's seed; None: each case's own."""
    devices: list[str] | None = None
    """The devices the workers ran on, one entry per worker."""
    devices_plan: list[DevicePlanEntry] | None = None
    """Multi-device runs: each worker's share of the case queue."""
    workers: list[WorkerRecord] | None = None
    """The worker processes and where their time went (empty: the run was in-process)."""
    resumed: list[ResumeRecord] | None = None
    """One entry per ``--resume`` of this folder (the original run's times stay at the top level)."""
    clock_regime: str | None = None
    """GPU runs: the clock regime its rows were timed in (burst | sustained; harness/timing/clocks.py)."""
    backend_facts: dict[str, BackendFacts] | None = None
    """What the readers need of each backend (serving-engine names, plain counterpart); absent
    in headers written before it: readers then use harness/analysis/engine_table.json."""
    models: dict[str, str] | None = None
    """Runs of cases made from ``model:``: model ID -> where its config came from (``file PATH
    sha256 H``, ``hf REPO revision R sha256 H``, ``built-in ID (REPO) sha256 H``)."""
    environment: MatrixEnvironment | None = None
    """``harness matrix`` / ``harness bisect``: the isolated environment the run used."""
    shard: ShardRecord | None = None
    """``--shard K/N`` runs: which part of the cells this folder holds."""
    merged: list[MergedFrom] | None = None
    """``harness merge`` output: the folders merged, first first (its duplicated cells kept from it)."""
    merge_missing: list[str] | None = None
    """``harness merge`` output: cells no merged folder has."""
    merge_duplicated: list[str] | None = None
    """``harness merge`` output: cells more than one folder had (the first folder's row kept)."""

    @property
    def device_name(self) -> str | None:
        """The GPU's (or CPU's) name, if the header has one."""
        return self.device.name

    def updated(self, **changes: Any) -> "RunHeader":
        """A copy with ``changes`` (typed values) set, and written by ``as_json``."""
        h = self.model_copy(update=changes)
        h.model_fields_set.update(changes)
        return h

    def with_fields(self, **raw: Any) -> "RunHeader":
        """A copy with ``raw`` (JSON-like values, e.g. an executor's ``header_fields``) validated in."""
        return RunHeader.model_validate({**self.as_json(), **raw})

    def as_json(self) -> dict[str, Any]:
        """run.json's content: the keys the file had or a writer set (none invented); what the
        run was first, where its time went last."""
        d = self.model_dump(mode="json", exclude_unset=True)
        timing = [k for k in RunTiming.model_fields if k in d]
        return {**{k: v for k, v in d.items() if k not in timing}, **{k: d[k] for k in timing}}


__all__ = ["HeaderPart", "DeviceInfo", "WorkerRecord", "DevicePlanEntry", "RunTiming", "ResumeRecord",
           "MatrixEnvironment", "ShardRecord", "MergedFrom", "RunHeader"]
