"""``harness run SUITE``: plan the cells, hand them to an executor, write the rows as they come.

The flags are ``harness.cli.run_flags.RunFlags`` (declared once, validated there), resolved once at
the top into a ``harness.plan.options.RunPlan`` that the rest of the run reads; the executor is
whichever ``harness.execute.api.make_executor`` picks; the end (wall time, summary, exit code)
is harness/cli/summary.py.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from rich.markup import escape
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)

from harness import interrupts
from harness.records import suite_copy
from harness.cli import summary
from harness.cli.progress import PlainProgress
from harness.cli.common import (RESULTS_FILE, ResultWriter, UsageError, check_suite_backends, console, err_console,
                                read_rows, registry, write_header)
from harness.cli.run_flags import RunFlags, add_arguments

if TYPE_CHECKING:
    from harness.execute.api import Executor
    from harness.records.header import RunHeader
    from harness.records.results import ResultRow
    from harness.plan.options import RunPlan


def add_parser(sub: Any) -> None:
    r = sub.add_parser("run", help="run a suite: check every cell against the reference and time it")
    add_arguments(r)  # every flag is a RunFlags field (harness/cli/run_flags.py)
    r.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    t_start = time.perf_counter()
    # torch.cuda.is_available() asks NVML, not the CUDA driver, so choosing the device does not
    # initialise CUDA in this process (0.2 s, docs/measurement.md §12); a worker inherits the setting, harmless
    # there.
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    flags = RunFlags.from_args(args)
    # The workers start first: their torch import overlaps this process's (harness/execute/worker/boot.py).
    prestarted = prestart_workers(flags)
    try:
        return _run(args, flags, t_start, prestarted)
    finally:
        from harness.execute.worker.boot import discard

        discard(prestarted)  # those the run did not take (bad input, an empty plan)


def prestart_workers(flags: RunFlags) -> list:
    """One worker per ``--devices`` entry, started now, when the run will use local workers.
    ``HARNESS_PRESTART=0`` turns it off (the workers then start once the parent has planned)."""
    if flags.no_isolation or flags.ray is not None or os.environ.get("HARNESS_PRESTART", "1") == "0":
        return []
    from harness.execute.worker.boot import prestart

    return prestart(len([d for d in (flags.devices or "").split(",") if d.strip()]) or 1)


def _run(args: argparse.Namespace, flags: RunFlags, t_start: float, prestarted: list) -> int:
    plan = flags.resolve(_pick_backends)  # the one place the flags become the run's options
    if plan.ray is not None:
        from harness.execute.ray_cluster import RayUnavailable, import_ray

        try:
            import_ray()
        except RayUnavailable as e:
            raise UsageError(str(e)) from None
    if plan.out and not plan.resume:
        check_out_path(Path(plan.out))  # before any worker starts
    if plan.resume:
        from harness.plan.resume import ResumeError, check_resumable

        try:
            check_resumable(Path(plan.resume), plan.suite, seed=plan.seed)  # likewise
        except ResumeError as e:
            raise UsageError(str(e)) from None
    from harness.execute.api import make_executor
    from harness.plan.filters import empty_plan_reason

    executor = make_executor(plan.suite, plan.run, plan.execute, ray=plan.ray)
    if prestarted and hasattr(executor, "adopt"):
        executor.adopt(prestarted)
        prestarted.clear()
    try:
        # Workers start now, importing torch, making their CUDA context and importing the
        # backends' libraries, while this process plans the cells (docs/measurement.md, "Where
        # a run's wall time goes"). An empty plan ends them again. Workers prestarted at the
        # command's start (before this process imported torch: 3.1-3.4 s on the H200 machine)
        # get their Setup here instead of starting now.
        executor.start(plan.backends)
        if problem := empty_plan_reason(plan.suite, plan.backends, plan.run):
            raise UsageError(f"nothing to run: {problem}")
        return run_cells(args, plan, executor, t_start)
    finally:
        executor.close()


def _pick_backends(suite: Any, names: str | None, variant_filters: dict[str, dict[str, list[str]]]) -> list:
    """The suite's checks (`harness validate`'s, with file and field), then --backends looked up
    and --variant checked against them: what RunFlags.resolve asks of the command line."""
    for note in suite.notes:  # a vLLM study file: what it could not map, and why
        err_console().print(f"ignored: {escape(note)}", highlight=False, soft_wrap=True)
    check_suite_backends(suite)
    from harness.plan.filters import FilterError, backend_names, family_backends  # imports the registry

    if not names and suite.backends_for:
        for note in family_backends(suite)[1]:
            err_console().print(f"note: {escape(note)}", highlight=False, soft_wrap=True)
    try:
        backends = registry.resolve_many(backend_names(names, suite))
    except (registry.BackendLookupError, FilterError) as e:
        raise UsageError(str(e)) from None
    check_variant_flags(variant_filters, backends)
    return backends


def clock_regime_notes(argv: list[str], given: str | None, device_type: str) -> list[str]:
    """What the command line's ``--clock-regime`` does not do: a repeated flag keeps its last
    value; a CPU run has no GPU clock to hold in a state."""
    n = sum(a == "--clock-regime" or a.startswith("--clock-regime=") for a in argv)
    out = [f"--clock-regime given {n} times: the last one, {given}, is used"] if n > 1 else []
    if given and device_type != "cuda":
        out.append(f"--clock-regime {given}: a GPU clock state; this {device_type} run has no GPU clock, so it "
                   "changes nothing")
    return out


def run_cells(args: argparse.Namespace, plan: RunPlan, executor: Executor, t_start: float) -> int:
    from harness.cli.clock import PROCESS_T0
    from harness.plan.cells import plan_cells

    suite, backends, opts = plan.suite, plan.backends, plan.run
    cells = plan_cells(suite, backends, opts)
    if not cells:
        raise UsageError("nothing to run: no case/backend/variant matches the filters")
    cells, extra = apply_shard(plan.shard, suite, cells, opts)
    from harness.spec.models.cases import model_origins

    if origins := model_origins(suite.cases):  # where each model's config came from
        extra = {**extra, "models": origins}
    if opts.timing is not None and opts.device.type == "cuda" and opts.time:
        extra = {**extra, "clock_regime": opts.timing.clock_regime}  # the regime every GPU row was timed in
    for note in clock_regime_notes(getattr(args, "argv", sys.argv[1:]), getattr(args, "clock_regime", None),
                                   opts.device.type):
        err_console().print(f"note: {escape(note)}", highlight=False, soft_wrap=True)
    # Workers that report the versions spare the parent importing any GPU library to plan.
    argv = ["harness", *getattr(args, "argv", sys.argv[1:])]
    def started(out_dir: Path) -> None:  # from here (run.json written) an interrupt can be resumed
        args.started_out_dir = out_dir

    out_dir, cells, header = prepare_out_dir(plan, argv, cells, extra, probe_versions=not executor.reports_versions,
                                             started=started)
    interrupts.check()
    t_planned = time.perf_counter()
    rows: list[ResultRow] = []
    console().print(f"[bold]{escape(suite.suite)}[/]: {len(cells)} cells on {executor.placement()} -> {out_dir}")
    with ResultWriter(out_dir) as writer, Progress(
        TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), console=console(), transient=False,
        disable=plan.quiet,
    ) as progress:
        task = progress.add_task("starting", total=len(cells))
        # No terminal (a pipe, a CI log): a line per case group and every 10 s, with the ETA.
        plain = None if plan.quiet or console().is_terminal else PlainProgress(console(), len(cells), suite.suite)

        def on_start(cell: Any) -> None:
            progress.update(task, description=escape(f"{cell.case.name[:40]} {cell.backend.name}"))

        # closing(): on Ctrl-C the workers stop here, not whenever the generator is collected.
        with contextlib.closing(executor.run(cells, on_start=on_start)) as produced:
            for row in produced:
                writer.write(row)
                rows.append(row)
                progress.advance(task)
                if plain is not None:
                    plain.advance(row.group)
                interrupts.check()
        progress.update(task, description="done")
    t_rows = time.perf_counter()
    this_run = rows
    if executor.backend_versions and not header.backends and not header.resumed:
        header = header.updated(backends={b.name: executor.backend_versions.get(b.name, {}) for b in backends})
    header = header.with_fields(**executor.header_fields())
    marks = {"start": t_start, "planned": t_planned, "rows": t_rows,
             "all_ready": summary.to_perf(executor.t_all_ready)}
    if header.resumed:
        rows = read_rows(out_dir)  # the summary covers the whole run, earlier rows included
    return summary.finish(rows, this_run, out_dir, header, marks, t_start, PROCESS_T0, plan.report, plan.strict)


def prepare_out_dir(plan: RunPlan, argv: list[str], cells: list, extra: dict | None = None,
                    probe_versions: bool = True,
                    started: Callable[[Path], None] = lambda out_dir: None) -> tuple[Path, list, RunHeader]:
    """A fresh results folder with its header, or (--resume) the old one with only the
    missing cells left to run and this run added to the header's ``resumed`` list.
    ``probe_versions=False``: the workers report the backends' versions (they import the
    libraries anyway); the header's ``backends`` is filled in when they do."""
    from harness.records.env import run_header
    from harness.records.engine_facts import facts_of
    from harness.plan.resume import ResumeError, resume_plan
    from harness.plan.cells import default_out_dir

    suite, suite_path = plan.suite, plan.suite_path
    if plan.resume:
        out_dir = Path(plan.resume)
        try:
            todo, header = resume_plan(out_dir, suite, cells, argv, seed=plan.seed)
        except ResumeError as e:
            raise UsageError(str(e)) from None
        write_header(out_dir, header)
        started(out_dir)
        if not todo:
            console().print(f"{out_dir}: every cell already has a result; nothing to resume")
        return out_dir, todo, header
    out_dir = Path(plan.out) if plan.out else default_out_dir(suite)
    check_out_path(out_dir)
    # An empty results.jsonl (a start that failed or was stopped before its first row) holds
    # nothing to lose: the same --out may start again.
    if (out_dir / RESULTS_FILE).exists() and (out_dir / RESULTS_FILE).stat().st_size > 0:
        raise UsageError(f"--out {out_dir}: already holds {RESULTS_FILE}; choose another folder (or --resume it)")
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
        raise UsageError(f"--out {out_dir}: cannot make the folder ({e.strerror or e})") from None
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
                raise UsageError(f"--out {out_dir}: {where}; give a folder for the results")
            return


def harness_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("attn-harness")
    except PackageNotFoundError:
        return None


def apply_shard(shard: str | None, suite: Any, cells: list, opts: Any) -> tuple[list, dict]:
    """--shard K/N: this shard's cells (harness/plan/shard.py) and what run.json records about it."""
    from harness.plan.resume import cell_key
    from harness.plan.shard import parse_shard, partition, shard_costs, suite_hash

    extra: dict[str, Any] = {"suite_hash": suite_hash(suite), "harness_version": harness_version()}
    if not shard:
        return cells, extra
    try:
        spec = parse_shard(shard)
    except ValueError as e:
        raise UsageError(str(e)) from None
    max_time = opts.timing.max_time_s if opts.timing is not None else 2.0
    part = (cells, spec.count, opts.device.type, opts.time, max_time, opts.check)
    mine = partition(*part)[spec.index - 1]
    extra["shard"] = {"index": spec.index, "count": spec.count, "total_cells": len(cells),
                      "est_cost_s": shard_costs(*part),
                      "cells": ["|".join(cell_key(suite, c)) for c in mine]}
    if not mine:
        console().print(f"shard {spec}: no cells fall in this shard ({len(cells)} cells, fewer cases than shards)")
    return mine, extra


def check_variant_flags(filters: dict[str, dict[str, list[str]]], backends: list) -> None:
    """--variant names a backend of this run and axis values it has: a filter on a backend the
    run does not include would be ignored, and the user would think it applied."""
    from harness.spec.registry_check import variant_filter_problem

    in_run = {b.name: b for b in backends}
    for name, f in filters.items():
        if name not in in_run:
            try:
                registry.resolve(name)  # a misspelt name gets the registry's closest match
            except registry.BackendLookupError as e:
                raise UsageError(f"--variant {name}: {e}") from None
            raise UsageError(f"--variant {name}: {name} is not in this run (its backends: {', '.join(in_run)}); "
                             "add it to --backends or drop the --variant")
        problem = variant_filter_problem(in_run[name], f)
        if problem:
            raise UsageError(f"--variant {name}: {problem}")
