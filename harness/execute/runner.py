"""``Runner``: one run of a ``RunPlan`` as a Python object, the one under ``harness run``,
``harness gate`` and ``harness.api.run``. It plans the cells, makes the results folder (or
takes up the one ``--resume`` names), hands the cells to the executor
``harness.execute.api.make_executor`` picks, writes each row as it comes and ends the run
(run.json's wall time, the summary, report.html, the exit code: harness/execute/run_end.py).

What a person sees goes through a ``Reporter`` (the terminal's is
``harness.cli.reporter.ConsoleReporter``; ``QUIET`` says nothing), so the runner prints nothing
itself and a program can collect the events instead. A plan the run cannot carry out (an
``--out`` that is a file, a folder that cannot be resumed, nothing left to run) raises
``RunError`` with one line; the command line prints it and exits 2.

Light to import: everything heavy loads inside ``run``.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Protocol

from harness import interrupts

if TYPE_CHECKING:
    from harness.execute.api import Executor
    from harness.plan.cells import Cell
    from harness.plan.options import RunPlan
    from harness.records.header import RunHeader
    from harness.records.results import ResultRow


class RunError(ValueError):
    """A plan the run cannot carry out (bad results folder, nothing to run, a resume that does
    not match): one line, which the command line prints before exit 2."""


class Progress(Protocol):
    def cell_started(self, cell: Cell) -> None:
        """A cell is about to run (where the executor knows it)."""

    def row_done(self, row: ResultRow) -> None:
        """A cell's row came back and is written."""


class Reporter(Protocol):
    """Where a run's events go (the terminal, a notebook, nowhere)."""

    def notice(self, text: str) -> None:
        """A line about what the run does (``Report: ...``, an empty shard, nothing to resume)."""

    def started(self, suite: str, cells: int, placement: str, out_dir: Path) -> None:
        """The run is planned: ``cells`` cells of ``suite`` on ``placement``, rows into ``out_dir``."""

    def progress(self, total: int, label: str) -> ContextManager[Progress]:
        """Open while the cells run."""

    def summary(self, rows: list[ResultRow], out_dir: Path) -> None:
        """The run's closing tables and verdict (every row of the folder)."""

    def nothing_ran(self, hint: str) -> None:
        """No cell ran (each skipped or unsupported); ``hint`` says what to run instead."""

    def failed(self, count: int, strict: bool) -> None:
        """``count`` cells failed (mismatch, error, timeout); ``strict``: the exit code is 1."""


class _NoProgress:
    def cell_started(self, cell: Cell) -> None:
        pass

    def row_done(self, row: ResultRow) -> None:
        pass


class QuietReporter:
    """Says nothing (a program that reads the rows itself)."""

    def notice(self, text: str) -> None:
        pass

    def started(self, suite: str, cells: int, placement: str, out_dir: Path) -> None:
        pass

    def progress(self, total: int, label: str) -> ContextManager[Progress]:
        return contextlib.nullcontext(_NoProgress())

    def summary(self, rows: list[ResultRow], out_dir: Path) -> None:
        pass

    def nothing_ran(self, hint: str) -> None:
        pass

    def failed(self, count: int, strict: bool) -> None:
        pass


QUIET = QuietReporter()


@dataclass
class RunOutcome:
    """What a finished run left: its folder, every row in it (a resumed run's earlier ones
    included) and the exit code the command line returns."""

    out_dir: Path
    rows: list[ResultRow] = field(default_factory=list)
    exit_code: int = 0


class Runner:
    """One run of ``plan``. ``argv``: the command run.json records (and the resume command
    repeats; default ``harness run SUITE``); ``t_start`` / ``process_t0``: when the command and
    the process started (run.json's wall time; default: when ``run`` is called);
    ``prestarted``: workers started before the plan was resolved (the executor adopts them and
    the list is emptied); ``on_started(out_dir)``: run.json is written (from then on an
    interrupted run can be resumed)."""

    def __init__(self, plan: RunPlan, *, argv: list[str] | None = None, t_start: float | None = None,
                 process_t0: float | None = None, prestarted: list | None = None,
                 on_started: Callable[[Path], None] | None = None) -> None:
        self.plan = plan
        self.argv = list(argv) if argv is not None else ["harness", "run", plan.suite_path]
        self.t_start = t_start
        self.process_t0 = process_t0
        self.prestarted = prestarted if prestarted is not None else []
        self.on_started = on_started or (lambda out_dir: None)

    def run(self, reporter: Reporter = QUIET) -> RunOutcome:
        """Plan, execute and finish the run; rows are written as they come."""
        if self.t_start is None:
            self.t_start = time.perf_counter()
        if self.process_t0 is None:
            self.process_t0 = self.t_start
        plan = self.plan
        if plan.ray is not None:
            from harness.execute.ray_cluster import RayUnavailable, import_ray

            try:
                import_ray()
            except RayUnavailable as e:
                raise RunError(str(e)) from None
        if plan.out and not plan.resume:
            check_out_path(Path(plan.out))  # before any worker starts
        if plan.resume:
            from harness.plan.resume import ResumeError, check_resumable

            try:
                check_resumable(Path(plan.resume), plan.suite, seed=plan.seed)  # likewise
            except ResumeError as e:
                raise RunError(str(e)) from None
        from harness.execute.api import make_executor
        from harness.plan.filters import empty_plan_reason

        executor = make_executor(plan.suite, plan.run, plan.execute, ray=plan.ray)
        if self.prestarted and hasattr(executor, "adopt"):
            executor.adopt(self.prestarted)
            self.prestarted.clear()
        try:
            # Workers start now, importing torch, making their CUDA context and importing the
            # backends' libraries, while this process plans the cells (docs/measurement.md, "Where
            # a run's wall time goes"). An empty plan ends them again. Workers prestarted at the
            # command's start (before this process imported torch: 3.1-3.4 s on the H200 machine)
            # get their Setup here instead of starting now.
            executor.start(plan.backends)
            if problem := empty_plan_reason(plan.suite, plan.backends, plan.run):
                raise RunError(f"nothing to run: {problem}")
            return self._run_cells(executor, reporter)
        finally:
            executor.close()

    def _run_cells(self, executor: Executor, reporter: Reporter) -> RunOutcome:
        from harness.execute.run_end import finish, to_perf
        from harness.plan.cells import plan_cells
        from harness.records.results import ResultWriter, read_rows

        plan = self.plan
        suite, backends, opts = plan.suite, plan.backends, plan.run
        cells = plan_cells(suite, backends, opts)
        if not cells:
            raise RunError("nothing to run: no case/backend/variant matches the filters")
        cells, extra = apply_shard(plan.shard, suite, cells, opts, reporter)
        from harness.spec.models.cases import model_origins

        if origins := model_origins(suite.cases):  # where each model's config came from
            extra = {**extra, "models": origins}
        if opts.timing is not None and opts.device.type == "cuda" and opts.time:
            extra = {**extra, "clock_regime": opts.timing.clock_regime}  # the regime every GPU row was timed in
        # Workers that report the versions spare the parent importing any GPU library to plan.
        out_dir, cells, header = prepare_out_dir(plan, self.argv, cells, extra, reporter,
                                                 probe_versions=not executor.reports_versions,
                                                 started=self.on_started)
        interrupts.check()
        t_planned = time.perf_counter()
        rows: list[ResultRow] = []
        reporter.started(suite.suite, len(cells), executor.placement(), out_dir)
        with ResultWriter(out_dir) as writer, reporter.progress(len(cells), suite.suite) as progress:
            # closing(): on Ctrl-C the workers stop here, not whenever the generator is collected.
            with contextlib.closing(executor.run(cells, on_start=progress.cell_started)) as produced:
                for row in produced:
                    writer.write(row)
                    rows.append(row)
                    progress.row_done(row)
                    interrupts.check()
        t_rows = time.perf_counter()
        this_run = rows
        if executor.backend_versions and not header.backends and not header.resumed:
            header = header.updated(backends={b.name: executor.backend_versions.get(b.name, {}) for b in backends})
        header = header.with_fields(**executor.header_fields())
        marks = {"start": self.t_start, "planned": t_planned, "rows": t_rows,
                 "all_ready": to_perf(executor.t_all_ready)}
        if header.resumed:
            rows = read_rows(out_dir)  # the summary covers the whole run, earlier rows included
        assert self.t_start is not None and self.process_t0 is not None
        code = finish(rows, this_run, out_dir, header, marks, self.t_start, self.process_t0, plan.report, plan.strict,
                      reporter)
        return RunOutcome(out_dir, rows, code)


def prepare_out_dir(plan: RunPlan, argv: list[str], cells: list, extra: dict | None = None,
                    reporter: Reporter = QUIET, probe_versions: bool = True,
                    started: Callable[[Path], None] = lambda out_dir: None) -> tuple[Path, list, RunHeader]:
    """A fresh results folder with its header, or (--resume) the old one with only the
    missing cells left to run and this run added to the header's ``resumed`` list.
    ``probe_versions=False``: the workers report the backends' versions (they import the
    libraries anyway); the header's ``backends`` is filled in when they do."""
    from harness.records import suite_copy
    from harness.records.env import run_header
    from harness.records.engine_facts import facts_of
    from harness.records.results import RESULTS_FILE, write_header
    from harness.plan.resume import ResumeError, resume_plan
    from harness.plan.cells import default_out_dir

    suite, suite_path = plan.suite, plan.suite_path
    if plan.resume:
        out_dir = Path(plan.resume)
        try:
            todo, header = resume_plan(out_dir, suite, cells, argv, seed=plan.seed)
        except ResumeError as e:
            raise RunError(str(e)) from None
        write_header(out_dir, header)
        started(out_dir)
        if not todo:
            reporter.notice(f"{out_dir}: every cell already has a result; nothing to resume")
        return out_dir, todo, header
    out_dir = Path(plan.out) if plan.out else default_out_dir(suite)
    check_out_path(out_dir)
    # An empty results.jsonl (a start that failed or was stopped before its first row) holds
    # nothing to lose: the same --out may start again.
    if (out_dir / RESULTS_FILE).exists() and (out_dir / RESULTS_FILE).stat().st_size > 0:
        raise RunError(f"--out {out_dir}: already holds {RESULTS_FILE}; choose another folder (or --resume it)")
    from harness.plan.cells import backend_versions

    device, devices, backends = plan.device, plan.execute.devices, plan.backends
    versions = {b.name: backend_versions(b) for b in backends} if probe_versions else {}
    header = run_header(device, versions, argv, {"suite": suite.suite, "suite_file": suite_path,
                                                 **suite_copy.header_fields(suite_path),
                                                 "cells": len(cells), "seed": plan.seed,
                                                 "devices": devices, "backend_facts": facts_of(backends),
                                                 **(extra or {})})
    # The suite's copy first: once run.json exists (an interrupt then prints the resume
    # command, which names the copy), the copy does too. repro and --resume read it.
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # /proc/x, a read-only disk: one line, nothing written
        raise RunError(f"--out {out_dir}: cannot make the folder ({e.strerror or e})") from None
    suite_copy.save(out_dir, suite_path)
    write_header(out_dir, header)
    started(out_dir)
    return out_dir, cells, header


def check_out_path(out_dir: Path) -> None:
    """--out must be a folder or a path a folder can be made at (not a file, not under one)."""
    for p in (out_dir, *out_dir.parents):
        if p.exists():
            if not p.is_dir():
                where = "is a file" if p == out_dir else f"lies under {p}, which is a file"
                raise RunError(f"--out {out_dir}: {where}; give a folder for the results")
            return


def harness_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("attn-harness")
    except PackageNotFoundError:
        return None


def apply_shard(shard: str | None, suite: Any, cells: list, opts: Any,
                reporter: Reporter = QUIET) -> tuple[list, dict]:
    """--shard K/N: this shard's cells (harness/plan/shard.py) and what run.json records about it."""
    from harness.plan.resume import cell_key
    from harness.plan.shard import parse_shard, partition, shard_costs, suite_hash

    extra: dict[str, Any] = {"suite_hash": suite_hash(suite), "harness_version": harness_version()}
    if not shard:
        return cells, extra
    try:
        spec = parse_shard(shard)
    except ValueError as e:
        raise RunError(str(e)) from None
    max_time = opts.timing.max_time_s if opts.timing is not None else 2.0
    part = (cells, spec.count, opts.device.type, opts.time, max_time, opts.check)
    mine = partition(*part)[spec.index - 1]
    extra["shard"] = {"index": spec.index, "count": spec.count, "total_cells": len(cells),
                      "est_cost_s": shard_costs(*part),
                      "cells": ["|".join(cell_key(suite, c)) for c in mine]}
    if not mine:
        reporter.notice(f"shard {spec}: no cells fall in this shard ({len(cells)} cells, fewer cases than shards)")
    return mine, extra


__all__ = ["QUIET", "Progress", "QuietReporter", "Reporter", "RunError", "RunOutcome", "Runner", "apply_shard",
           "check_out_path", "prepare_out_dir"]
