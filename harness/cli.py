"""The ``harness`` command line: the parser, ``run`` and the small commands; the others register from their own modules."""

from __future__ import annotations

import argparse
import json
import re
import shlex
import signal
import sys
import time

_PROCESS_T0 = time.perf_counter()  # before torch is imported: run.json's wall_s counts the imports

if __name__ == "__main__":  # python -m harness.cli: guard Ctrl-C before torch loads (the script: harness/__main__.py)
    from harness.startup import guard_startup

    guard_startup()
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from harness.cli_flags import add_global_flags, configure_logging
from harness.versions import untested, untested_note
from harness import export as export_command
from harness import gate as gate_command
from harness import schema as schema_command
from harness import ci_output, suite_copy
from harness.lazy import LazyModule, LazyText, lazy_function
from attn_contract.status import FAILED, NOT_RUN, Status  # no torch, no pydantic

# Imported on first use: building the parser (--help, --version) loads neither torch nor pandas.
torch = LazyModule("torch")
registry = LazyModule("harness.registry")
terminal = LazyModule("harness.terminal")  # imports the result models (pydantic)
check_suite_backends = lazy_function("harness.suite_check", "check_suite_backends")
load_suite = lazy_function("harness.spec", "load_suite")
ResultWriter = lazy_function("harness.results", "ResultWriter")
read_rows = lazy_function("harness.results", "read_rows")
variant_label = lazy_function("harness.results", "variant_label")
write_header = lazy_function("harness.results", "write_header")
RESULTS_FILE = "results.jsonl"  # harness.results.RESULTS_FILE without its pydantic import (a test keeps them equal)

if TYPE_CHECKING:
    from harness.results import ResultRow


def _spec_error() -> type[Exception]:
    from harness.spec import SpecError

    return SpecError

EXIT_USAGE = 2

console = Console(stderr=False)
err_console = Console(stderr=True)


class UsageError(Exception):
    """Bad command-line input: printed as one line, exit code 2."""


def _parse_variants(items: list[str]) -> dict[str, dict[str, list[str]]]:
    out: dict[str, dict[str, list[str]]] = {}
    for item in items:
        target, eq, values = item.partition("=")
        backend, dot, axis = target.rpartition(".")
        if not eq or not dot or not backend or not axis or not values:
            raise UsageError(f"--variant {item!r}: expected BACKEND.AXIS=VALUE[,VALUE...], e.g. flash-attn.fa_version=3")
        out.setdefault(backend, {}).setdefault(axis, []).extend(v for v in values.split(",") if v)
    return out


def _pick_device(name: str) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError(f"--device {name}: torch sees no CUDA device here (torch {torch.__version__})")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UsageError(f"--device {name!r}: expected auto, cpu, cuda or cuda:N") from None
    # Always carry an index: workers call torch.cuda.set_device, which rejects a bare "cuda".
    return torch.device("cuda", device.index or 0) if device.type == "cuda" else device


def print_summary(rows: list[ResultRow], out_dir: Path, max_rows: int = 80) -> None:
    """The run's tables and verdict (harness/terminal.py), on this module's consoles."""
    terminal.print_summary(rows, out_dir, console, err_console, max_rows)


def _fmt(*a: Any, **k: Any) -> Any:  # older names of the terminal's helpers
    return terminal.fmt(*a, **k)


def _reason_kind(*a: Any, **k: Any) -> Any:
    return terminal.reason_kind(*a, **k)


def _ids(*a: Any, **k: Any) -> Any:
    return terminal.letter_ids(*a, **k)


def _timing_options(args: argparse.Namespace, device: torch.device) -> Any:
    """The device's timing defaults with the --timing-mode/--target-noise/... flags applied."""
    from harness.timing import TimingOptions

    try:
        return TimingOptions.for_device(
            device, mode=args.timing_mode, cuda_graph=False if args.no_cuda_graph else None,
            target_rel_noise=args.target_noise, max_time_s=args.max_time,
            min_samples=args.min_samples, max_samples=args.max_samples, stop_criterion=args.stop,
            cpu_clock=args.cpu_clock, energy_window_s=args.energy_window)
    except ValueError as e:
        raise UsageError(f"timing options: {e}") from None


def _exec_options(args: argparse.Namespace, device: torch.device) -> Any:
    """Worker layout from --devices/--no-isolation/--cell-timeout/--memory-budget-mib."""
    from harness.executor import ExecOptions, default_cell_timeout, parse_devices

    if args.devices:
        if args.device is not None:
            raise UsageError("give either --device or --devices, not both")
        try:
            devices = parse_devices(args.devices)
        except ValueError as e:
            raise UsageError(str(e)) from None
    else:
        devices = [str(device)]
    if args.no_isolation and len(devices) > 1:
        raise UsageError("--no-isolation runs in this process: it takes one device, not --devices")
    if args.cell_timeout is not None and args.cell_timeout < 0:
        raise UsageError("--cell-timeout: seconds >= 0 (0 = no limit)")
    if args.memory_budget_mib is not None and args.memory_budget_mib <= 0:
        raise UsageError("--memory-budget-mib: a positive number of MiB")
    for flag, v in (("--cpu-max-gflop", args.cpu_max_gflop), ("--cpu-max-kv-mib", args.cpu_max_kv_mib)):
        if not v > 0:  # NaN too: a limit nothing passes would skip every cell
            raise UsageError(f"{flag} {v:g}: a positive number ({'GFLOP' if 'gflop' in flag else 'MiB'})")
    timeout = args.cell_timeout if args.cell_timeout is not None else default_cell_timeout(torch.device(devices[0]).type)
    return ExecOptions(devices=devices, isolation=not args.no_isolation, cell_timeout=timeout or None,
                       memory_budget_mib=args.memory_budget_mib)


def _prepare_out_dir(args: argparse.Namespace, suite: Any, cells: list, device: torch.device,
                     backends: list, devices: list[str], extra: dict | None = None,
                     probe_versions: bool = True) -> tuple[Path, list, dict]:
    """A fresh results folder with its header, or (--resume) the old one with only the
    missing cells left to run and this run added to the header's ``resumed`` list.
    ``probe_versions=False``: the workers report the backends' versions (they import the
    libraries anyway); the header's ``backends`` is filled in when they do."""
    from harness.env import run_header
    from harness.executor import ResumeError, resume_plan
    from harness.runner import default_out_dir

    argv = ["harness", *getattr(args, "argv", sys.argv[1:])]
    if args.resume:
        if args.out and Path(args.out) != Path(args.resume):
            raise UsageError("--resume DIR writes into DIR; drop --out or give the same folder")
        out_dir = Path(args.resume)
        try:
            todo, header = resume_plan(out_dir, suite, cells, argv, seed=args.seed)
        except ResumeError as e:
            raise UsageError(str(e)) from None
        write_header(out_dir, header)
        if not todo:
            console.print(f"{out_dir}: every cell already has a result; nothing to resume")
        return out_dir, todo, header
    out_dir = Path(args.out) if args.out else default_out_dir(suite)
    _check_out_path(out_dir)
    if (out_dir / RESULTS_FILE).exists():
        raise UsageError(f"--out {out_dir}: already holds {RESULTS_FILE}; choose another folder (or --resume it)")
    from harness.planning import backend_versions

    versions = {b.name: backend_versions(b) for b in backends} if probe_versions else {}
    header = run_header(device, versions, argv, {"suite": suite.suite, "suite_file": args.suite,
                                                 **suite_copy.header_fields(args.suite),
                                                 "cells": len(cells), "seed": args.seed,
                                                 "devices": devices, **(extra or {})})
    write_header(out_dir, header)
    suite_copy.save(out_dir, args.suite)  # repro and --resume find it from any directory
    return out_dir, cells, header


def _check_out_path(out_dir: Path) -> None:
    """--out must be a folder or a path a folder can be made at (not a file, not under one)."""
    for p in (out_dir, *out_dir.parents):
        if p.exists():
            if not p.is_dir():
                where = "is a file" if p == out_dir else f"lies under {p}, which is a file"
                raise UsageError(f"--out {out_dir}: {where}; give a folder for the results")
            return


def _harness_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("attn-harness")
    except PackageNotFoundError:
        return None


def cmd_merge(args: argparse.Namespace) -> int:
    """Join shard folders (and --resume leftovers) into one results folder (harness/merge.py)."""
    from harness.merge import MergeError, merge_dirs, write_merged

    try:
        res = merge_dirs([Path(d) for d in args.dirs])
        out = write_merged(res, Path(args.output))
        copies = [Path(d) / suite_copy.SUITE_COPY for d in args.dirs if (Path(d) / suite_copy.SUITE_COPY).is_file()]
        if copies:  # shards of one suite: the merged folder keeps its copy too
            suite_copy.save(out, copies[0])
    except MergeError as e:
        raise UsageError(str(e)) from None
    console.print(f"{len(res.rows)} rows from {len(args.dirs)} folder(s) -> {out}")
    for what, items in (("missing", res.missing), ("duplicated (first folder's row kept)", res.duplicated)):
        if items:
            err_console.print(f"{len(items)} cell(s) {what}:", highlight=False)
            for k in items[:20]:
                err_console.print(f"  {k}", highlight=False, markup=False)
    return 1 if (res.missing or res.duplicated) and args.strict else 0


def _apply_shard(args: argparse.Namespace, suite: Any, cells: list, opts: Any) -> tuple[list, dict]:
    """--shard K/N: this shard's cells (harness/shard.py) and what run.json records about it."""
    from harness.executor import cell_key
    from harness.shard import parse_shard, partition, shard_costs, suite_hash

    extra: dict[str, Any] = {"suite_hash": suite_hash(suite), "harness_version": _harness_version()}
    if not getattr(args, "shard", None):
        return cells, extra
    try:
        spec = parse_shard(args.shard)
    except ValueError as e:
        raise UsageError(str(e)) from None
    max_time = opts.timing.max_time_s if opts.timing is not None else 2.0
    part = (cells, spec.count, opts.device.type, opts.time, max_time, opts.check)
    mine = partition(*part)[spec.index - 1]
    extra["shard"] = {"index": spec.index, "count": spec.count, "total_cells": len(cells),
                      "est_cost_s": shard_costs(*part),
                      "cells": ["|".join(cell_key(suite, c)) for c in mine]}
    if not mine:
        console.print(f"shard {spec}: no cells fall in this shard ({len(cells)} cells, fewer cases than shards)")
    return mine, extra


def cmd_run(args: argparse.Namespace) -> int:
    t_start = time.perf_counter()
    from harness.executor import Executor
    from harness.runner import RunOptions, plan_cells

    if args.resume and not Path(args.suite).is_file():  # typed relative to where the run started
        args.suite = suite_copy.find_suite(args.resume, args.suite) or args.suite
    suite = load_suite(args.suite, _suite_override(args))
    for note in suite.notes:  # a vLLM study file: what it could not map, and why
        err_console.print(f"ignored: {escape(note)}", highlight=False, soft_wrap=True)
    check_suite_backends(suite)  # the checks `harness validate` makes, with file and field
    from harness.filters import FilterError, backend_names, empty_plan_reason  # imports the registry

    try:
        backends = registry.resolve_many(backend_names(args.backends, suite))
    except (registry.BackendLookupError, FilterError) as e:
        raise UsageError(str(e)) from None
    _check_variant_flags(_parse_variants(args.variant or []), backends)
    device = _pick_device(args.device or "auto")
    exec_opts = _exec_options(args, device)
    device = torch.device(exec_opts.devices[0])  # rows and the header name the first worker's device
    opts = RunOptions(
        device=device,
        suite_path=args.suite,
        seed=args.seed,
        adversarial=args.adversarial,
        invariants=args.invariants,
        case_patterns=args.case or [],
        variant_filters=_parse_variants(args.variant or []),
        check=not args.no_check,
        time=not args.no_time,
        time_references=args.time_references,
        collapse_variants=not args.all_variants,
        cpu_max_gflop=args.cpu_max_gflop,
        cpu_max_kv_mib=args.cpu_max_kv_mib,
        timing=_timing_options(args, device),
    )
    if problem := empty_plan_reason(suite, backends, opts):  # before any worker starts
        raise UsageError(f"nothing to run: {problem}")
    if args.ray is not None:
        from harness.ray_executor import RayUnavailable, import_ray

        if exec_opts.devices[1:] or not exec_opts.isolation:
            raise UsageError("--ray places cells on the cluster's workers: drop --devices/--no-isolation")
        try:
            import_ray()
        except RayUnavailable as e:
            raise UsageError(str(e)) from None
    if args.out and not args.resume:
        _check_out_path(Path(args.out))  # before any worker starts
    executor: Any = None
    if args.ray is None:
        # Workers start now, importing the backends' libraries, while this process expands
        # the suite (docs/measurement.md, "Where a run's wall time goes").
        executor = Executor(suite, opts, exec_opts)
        executor.start(backends)
    try:
        return _run_cells(args, suite, backends, opts, exec_opts, device, executor, t_start)
    finally:
        if executor is not None:
            executor.close()


def _suite_override(args: argparse.Namespace) -> dict[str, Any] | None:
    """``--model`` / ``--tp`` / ``--batch-spec``: fields set in every case of the suite."""
    out: dict[str, Any] = {}
    if getattr(args, "model", None):
        out["model"], out["tp"] = args.model, args.tp
    elif getattr(args, "tp", None):
        raise UsageError("--tp slices a model's heads: give --model too")
    if getattr(args, "batch_spec", None):
        out["batch"] = [s for s in args.batch_spec.split(",") if s.strip()]
    return out or None


def _run_cells(args: argparse.Namespace, suite: Any, backends: list, opts: Any, exec_opts: Any,
               device: torch.device, executor: Any, t_start: float) -> int:
    from harness.runner import plan_cells

    cells = plan_cells(suite, backends, opts)
    if not cells:
        raise UsageError("nothing to run: no case/backend/variant matches the filters")
    cells, extra = _apply_shard(args, suite, cells, opts)
    # Isolated workers report the versions: the parent imports no GPU library to plan.
    out_dir, cells, header = _prepare_out_dir(args, suite, cells, device, backends, exec_opts.devices, extra,
                                              probe_versions=executor is None or not exec_opts.isolation)
    args.started_out_dir = out_dir  # from here an interrupt can be resumed
    t_planned = time.perf_counter()
    rows: list[ResultRow] = []
    where = ",".join(exec_opts.devices) if len(exec_opts.devices) > 1 else str(device)
    mode = "in-process" if not exec_opts.isolation else f"{len(exec_opts.devices)} worker(s)"
    if args.ray is not None:
        where = f"a Ray cluster ({args.ray})"
        mode = f"one actor per {'GPU' if device.type == 'cuda' else 'CPU'}, each with one isolated worker"
    console.print(f"[bold]{escape(suite.suite)}[/]: {len(cells)} cells on {where} ({mode}) -> {out_dir}")
    with ResultWriter(out_dir) as writer, Progress(
        TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(), console=console, transient=False, disable=args.quiet,
    ) as progress:
        task = progress.add_task("starting", total=len(cells))

        def on_start(cell: Any) -> None:
            progress.update(task, description=escape(f"{cell.case.name[:40]} {cell.backend.name}"))

        if args.ray is not None:
            from harness.ray_executor import RayExecutor

            executor = RayExecutor(suite, opts, exec_opts, address=args.ray)
        for row in executor.run(cells, on_start=on_start):
            writer.write(row)
            rows.append(row)
            progress.advance(task)
        progress.update(task, description="done")
    t_rows = time.perf_counter()
    this_run = rows
    if getattr(executor, "backend_versions", None) and not header.get("backends") and not header.get("resumed"):
        header["backends"] = {b.name: executor.backend_versions.get(b.name, {}) for b in backends}
    if executor.queue is not None and len(exec_opts.devices) > 1:
        # The shared queue (harness/balance.py): cases and estimated seconds each worker took.
        header["devices_plan"] = executor.queue.summary()
    if hasattr(executor, "accounting"):
        header["workers"] = executor.accounting()
    header["_marks"] = {"start": t_start, "planned": t_planned, "rows": t_rows,
                        "all_ready": _to_perf(getattr(executor, "t_all_ready", None))}
    if header.get("resumed"):
        rows = read_rows(out_dir)  # the summary covers the whole run, earlier rows included
    _record_wall_time(out_dir, header, this_run, time.perf_counter() - t_start, _PROCESS_T0)
    print_summary(rows, out_dir)
    if getattr(args, "report", False):
        from harness.report import write_report

        t0 = time.perf_counter()
        console.print(f"Report: {write_report([out_dir], out_dir / 'report.html')}")
        _record_wall_time(out_dir, header, this_run, time.perf_counter() - t_start, _PROCESS_T0,
                          report_s=time.perf_counter() - t0)
    failed = sum(r.status in FAILED for r in rows)
    if failed:
        # Exit 0 by default: a benchmark run that found a broken cell still produced every
        # other figure. CI gates use --strict (or `harness compare`); say so, every time.
        note = "exit 1" if args.strict else "exit 0; --strict makes that exit 1"
        err_console.print(f"{failed} cell(s) failed (mismatch/error/timeout): {note}", highlight=False)
    return 1 if failed and args.strict else 0


def _to_perf(t_mono: float | None) -> float | None:
    """A time.monotonic() instant on the perf_counter clock (the executor uses monotonic)."""
    return None if t_mono is None else t_mono - time.monotonic() + time.perf_counter()


def wall_breakdown(marks: dict[str, Any], process_t0: float, now: float) -> dict[str, float]:
    """Where the wall time went, in order, summing to ``now - process_t0``: ``startup`` (Python,
    torch, the harness imported), ``expand`` (suite load, backends, cells, results folder; the
    workers start and import their libraries meanwhile), ``wait_workers`` (the workers were not
    ready when the cells were), ``cases`` (first case to last row), ``finish`` (summary)."""
    start, planned, rows = marks["start"], marks["planned"], marks["rows"]
    ready = marks.get("all_ready")
    begin = max(planned, ready) if ready is not None else planned
    begin = min(begin, rows)
    out = {"startup": start - process_t0, "expand": planned - start, "wait_workers": begin - planned,
           "cases": rows - begin, "finish": now - rows}
    return {k: round(max(0.0, v), 3) for k, v in out.items()}


def _record_wall_time(out_dir: Path, header: dict, rows: list[ResultRow], run_s: float, process_t0: float,
                      report_s: float | None = None) -> None:
    """run.json gets this invocation's wall time (``wall_s``: process start to the last row,
    imports and worker start-up included; ``run_s``: from the command's start) and where the
    rows' time went, summed over rows (``time_breakdown_s``; case-level stages once per case)."""
    from harness.runner import sum_breakdown

    marks = header.pop("_marks", None)
    if report_s is None:
        now = time.perf_counter()
        tb = sum_breakdown(rows)
        timing = {"wall_s": now - process_t0, "run_s": run_s,
                  "finished_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                  "time_breakdown_s": tb, "rows_this_run": len(rows)}
        if marks is not None:
            wb = wall_breakdown(marks, process_t0, now)
            timing["wall_breakdown_s"] = wb
            workers = header.get("workers") or []
            # Outside the rows (worker-seconds beside the rows' own stages): the parent's start,
            # the workers' library imports at start, their idle time (waiting, IPC, the tail).
            tb["startup"] = wb["startup"]
            tb["expand"] = wb["expand"]
            tb["import"] = round(tb.get("import", 0.0) + sum(w.get("import_s") or 0.0 for w in workers), 3)
            if workers:
                tb["workers_ready"] = max((w.get("ready_s") or 0.0) for w in workers)
                tb["idle"] = round(sum(w.get("idle_s") or 0.0 for w in workers), 3)
    else:
        timing = {"report_s": report_s, "wall_with_report_s": time.perf_counter() - process_t0}
    if header.get("resumed"):
        header["resumed"][-1].update(timing)  # the original run's wall time stays as it was
    else:
        header.update(timing)
    write_header(out_dir, header)


def cmd_report(args: argparse.Namespace) -> int:
    from harness.report import write_report

    try:
        out = write_report(args.results, args.output, title=args.title)
    except (FileNotFoundError, ValueError) as e:
        raise UsageError(str(e)) from None
    console.print(f"Report: {out}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from harness.compare import compare_paths, parse_threshold, to_markdown

    try:
        comp = compare_paths(args.baseline, args.new, threshold=parse_threshold(args.threshold),
                             correctness_only=args.correctness_only, allow_missing=args.allow_missing or [],
                             allow_skip=args.allow_skip or [])
    except (FileNotFoundError, ValueError) as e:
        raise UsageError(str(e)) from None
    md = to_markdown(comp, str(args.baseline), str(args.new))
    print(md, end="")
    if args.markdown:
        Path(args.markdown).write_text(md, encoding="utf-8")
    ci_output.emit(args, comp, md)  # $GITHUB_STEP_SUMMARY, ::error lines, --junit, --benchmark-json
    return 1 if comp.regressed else 0


def _row_suite(results: str, row: Any) -> str | None:
    """The suite a row's reproducer names, found from any directory (harness/suite_copy.py)."""
    try:
        parts = shlex.split(row.reproducer)
    except ValueError:
        parts = []
    return suite_copy.find_suite(results, parts[2] if parts[:2] == ["harness", "run"] and len(parts) > 2 else None)


def cmd_repro(args: argparse.Namespace) -> int:
    """A standalone script reproducing one row (harness/repro.py); --shrink first."""
    from harness import repro
    from harness.registry import resolve

    try:
        rows = read_rows(args.results)
        index, row = repro.select_row(rows, args.row, backend=args.backend, variant=args.variant)
        case, spec = repro.case_of_row(row, args.suite or _row_suite(args.results, row))
        try:
            backend = resolve(spec)
        except Exception as e:  # an unknown name or a plugin that does not import
            raise repro.ReproError(f"backend {spec!r} of row #{index}: {str(e).splitlines()[0] if str(e) else e}") from None
        variant = dict(row.variant)
        source = repro.call_source(backend, row, case, variant)  # before shrinking: fail fast
        note = ""
        if args.shrink:
            if row.status != Status.MISMATCH:
                raise repro.ReproError(f"row #{index} ({row.case} / {row.backend} [{row.variant_label}]) is "
                                       f"{row.status}, not a mismatch: --shrink shrinks failures")
            device = _pick_device(args.device or ("cuda" if row.device.startswith("cuda") else "cpu"))
            run = repro.cell_runner(backend, variant, device, row)
            case, _ = repro.shrink(case, run, lambda m: console.print(m, highlight=False, markup=False, soft_wrap=True),
                                   max_attempts=args.max_attempts)
            note = f"Shrunk by `harness repro --shrink` from {row.case!r} (batch {row.batch.num_reqs or '?'} requests)."
        sc = repro.script_case(case, backend, variant)
        text = repro.render_script(row, sc, backend, variant, source, note)
    except (FileNotFoundError, ValueError, repro.ReproError) as e:
        raise UsageError(str(e)) from None
    out = Path(args.output or f"repro_{index}.py")
    out.write_text(text, encoding="utf-8")
    console.print(f"wrote {out} (row #{index}: {row.case} / {row.backend} [{row.variant_label}], {row.status}); "
                  f"run: python3 {out}", highlight=False, markup=False, soft_wrap=True)
    return 0


def cmd_recommend(args: argparse.Namespace) -> int:
    """Measured backend per shape bucket: markdown to stdout, policy files into --out."""
    from harness.compare import parse_threshold
    from harness.recommend import recommend, to_markdown, write_outputs, write_suggest

    command = " ".join(["harness", *sys.argv[1:]]) if sys.argv[1:2] == ["recommend"] else ""
    try:
        tie = parse_threshold(args.tie.replace("--threshold", "--tie"))
        rec = recommend(args.results, tie=tie, call_form=args.call_form)
        md = to_markdown(rec, command)
        from harness.callform_gap import gap_markdown
        from harness.recommend import load_inputs

        gap = gap_markdown(load_inputs(args.results, "any").rows, tie)  # both forms, whatever --call-form ranks
        md += ("\n" + gap) if gap else ""
        if args.engine:  # the per-model engine settings lead (harness/engine_export.py)
            from harness.engine_export import engine_markdown, write_engine_outputs

            md = engine_markdown(args.results, args.engine, tie, args.call_form) + "\n" + md
        n = write_suggest(rec, args.suggest) if args.suggest else None
        paths = write_outputs(rec, args.out, command) if args.out else []
        if args.out and args.engine:
            paths += write_engine_outputs(args.results, args.engine, tie, args.out, args.call_form)
    except ValueError as e:  # RecommendError is a ValueError; so is a bad --tie
        raise UsageError(str(e).replace("--threshold", "--tie")) from None
    print(md, end="")
    for p in paths:
        err_console.print(f"wrote {p}")
    if args.suggest:
        err_console.print(f"--suggest: {n} case(s) -> {args.suggest}" if n else "--suggest: every bucket is measured; nothing written")
    return 0


def _check_variant_flags(filters: dict[str, dict[str, list[str]]], backends: list) -> None:
    """--variant names a backend of this run (or a registered one) and axis values it has."""
    from harness.suite_check import variant_filter_problem

    in_run = {b.name: b for b in backends}
    for name, f in filters.items():
        try:
            cls = in_run[name] if name in in_run else registry.resolve(name)
        except registry.BackendLookupError as e:
            raise UsageError(f"--variant {name}: {e}") from None
        problem = variant_filter_problem(cls, f)
        if problem:
            raise UsageError(f"--variant {name}: {problem}")


_SHORT_DTYPE = {"bfloat16": "bf16", "float16": "fp16", "fp8_e4m3": "e4m3", "fp8_e5m2": "e5m2", "nvfp4": "nvfp4"}


def cmd_validate(args: argparse.Namespace) -> int:
    """Load a suite with every check a run applies and print its expanded cases; runs nothing."""
    suite = load_suite(args.suite)
    for note in suite.notes:
        err_console.print(f"ignored: {escape(note)}", highlight=False, soft_wrap=True)
    check_suite_backends(suite)
    t = Table(title=f"{escape(suite.suite)}: {len(suite.cases)} cases")
    # 80 columns: the case name wraps, every figure stays whole (short dtype names, legend below).
    t.add_column("case", overflow="fold", ratio=1)
    for col in ("heads", "head", "dtype", "block", "reqs", "max seq", "KV tokens"):
        t.add_column(col, no_wrap=True, justify="left" if col in ("dtype", "block") else "right")
    for c in suite.cases:
        kv_tokens = c.work_bound()[1] / (2 * c.num_kv_heads * c.head_size * c.kv_element_bytes)  # bytes -> tokens
        dtype = _SHORT_DTYPE[c.dtype] + ("" if c.kv_cache_dtype == "auto" else f"/{_SHORT_DTYPE[c.kv_cache_dtype]}")
        t.add_row(escape(c.name), f"{c.num_heads}/{c.num_kv_heads}", str(c.head_size), dtype,
                  f"{c.block_size} {c.kv_layout}", str(c.num_requests), f"{c.max_seq_len_bound():,}", f"{kv_tokens:,.0f}")
    console.print(t)
    console.print("  heads: query/KV heads; dtype: bf16 = bfloat16, fp16 = float16, /e4m3 /e5m2 = fp8 KV cache",
                  highlight=False)
    console.print("  reqs: requests; max seq, KV tokens: upper bounds over the length distributions", highlight=False)
    console.print(f"{args.suite}: valid, {len(suite.cases)} cases")
    return 0


_NOT_INSTALLED = re.compile(r"cannot import ([\w.]+): ModuleNotFoundError: No module named '[\w.]+'")


def _axes_label(variants: list[dict[str, Any]]) -> str:
    """Variants as their axes' values ("fa_version=2,3"), or "-" for a backend without axes."""
    axes: dict[str, list[str]] = {}
    for v in variants:
        for k, val in v.items():
            if str(val) not in axes.setdefault(k, []):
                axes[k].append(str(val))
    return "\n".join(f"{k}: {', '.join(vals)}" for k, vals in axes.items()) or "-"


def list_backends() -> list[dict[str, Any]]:
    """Every registered backend with each variant's availability and capabilities (``list --json``)."""
    out = []
    for name, spec in sorted(registry.known_backends().items()):
        entry: dict[str, Any] = {"name": name, "spec": spec, "error": None, "variants": [], "untested": []}
        try:
            cls = registry.resolve(name)  # the checks a run applies (one name, no duplicates)
        except registry.BackendLookupError as e:
            entry["error"] = str(e)
            out.append(entry)
            continue
        entry["untested"] = untested(cls)  # installed libraries outside the backend's tested range
        for v in cls.variants():
            a = cls.availability(v)
            entry["variants"].append({"variant": v, "label": variant_label(v), "available": a.available,
                                      "reason": a.reason, "versions": dict(a.versions),
                                      "capabilities": cls.capabilities(v).describe()})
        out.append(entry)
    return out


def cmd_list(args: argparse.Namespace) -> int:
    backends = list_backends()
    if args.json:
        print(json.dumps(backends, indent=1, default=str))
        return 0
    if args.verbose:
        terminal.print_backends_verbose(backends, console)
        return 0
    t = Table(title="Backends (capabilities: harness list --verbose)", expand=True)
    # Names never wrap; the reasons take what is left (80 columns in a pipe or a CI log).
    t.add_column("backend", no_wrap=True)
    t.add_column("variants", overflow="fold", ratio=1)
    t.add_column("ok", no_wrap=True)
    t.add_column("why not / versions", ratio=1)
    for b in backends:
        if b["error"]:
            t.add_row(escape(b["name"]), "-", "[red]no", escape(b["error"]))
            continue
        # Compact: variants that share an answer share a row; the backend is named once.
        groups: dict[tuple[bool, str], list[dict[str, Any]]] = {}
        for v in b["variants"]:
            info = v["reason"] if not v["available"] else ", ".join(f"{k} {x}" for k, x in v["versions"].items())
            info = _NOT_INSTALLED.sub(r"\1 not installed", info)  # the full text: --verbose
            info = "; ".join(x for x in (info, untested_note(b["untested"])) if x)
            groups.setdefault((v["available"], info), []).append(v["variant"])
        for i, ((ok, info), vs) in enumerate(groups.items()):
            t.add_row(escape(b["name"]) if i == 0 else "", escape(_axes_label(vs)), "[green]yes" if ok else "[red]no",
                      escape(info))
    console.print(t)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="harness", description="Benchmark and conformance harness for GPU attention backends.")
    add_global_flags(p)  # --version, -v/-vv (harness/cli_flags.py)
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="run a suite: check every cell against the reference and time it")
    r.add_argument("suite", help="suite YAML file, e.g. suites/decode.yaml")
    r.add_argument("--backends", help="comma-separated backend names or module:Class specs (default: the suite's, else all)")
    r.add_argument("--out", help="results folder (default: results/SUITE-TIMESTAMP)")
    r.add_argument("--seed", type=int, help="override every case's seed")
    r.add_argument("--model", help="every case takes this model's attention shape: a built-in ID or a config.json path (comma-separated: several)")
    r.add_argument("--tp", help="with --model: tensor-parallel degree(s), e.g. 1,2 (heads sliced as vLLM does)")
    r.add_argument("--batch-spec", help="every case's batch in vLLM's grammar, e.g. 2q1k_32q1s1k (comma-separated: one case each)")
    r.add_argument("--case", action="append", help="only cases with this exact name, else this glob (repeatable)")
    r.add_argument("--variant", action="append", help="restrict a variant axis: BACKEND.AXIS=V[,V] (repeatable)")
    r.add_argument("--device", default=None, help="auto (default: cuda if available), cpu, cuda, cuda:N")
    r.add_argument("--no-check", action="store_true", help="skip the reference check (timing only)")
    r.add_argument("--invariants", action="store_true",
                   help="also check batch invariance, page permutation and decode-vs-prefill per cell"
                        " (check.invariants; docs/conformance.md)")
    r.add_argument("--adversarial", action="store_true",
                   help="fill every KV-cache slot no request owns (spare pages, last-page tails) with NaN;"
                        " a correct kernel never reads them (docs/conformance.md)")
    r.add_argument("--no-time", action="store_true", help="skip timing (conformance only)")
    r.add_argument("--time-references", action="store_true",
                   help="also time correctness references (backends whose capabilities declare role "
                        "'reference', e.g. torch-math on a GPU); by default their cells are checked, not timed")
    r.add_argument("--all-variants", action="store_true",
                   help="run every variant even where an axis cannot apply to the batch (default: one cell "
                        "stands for them, its row says which axes applied; docs/measurement.md)")
    r.add_argument("--cpu-max-gflop", type=float, default=0.5, help="on CPU, skip cases above this many GFLOP (default 0.5)")
    r.add_argument("--cpu-max-kv-mib", type=float, default=128.0, help="on CPU, skip cases whose KV cache exceeds this (default 128)")
    def stop_help() -> str:
        from harness.timing.stopping import STOPPING_CRITERIA  # the criteria registered by name (torch)

        return "when sampling stops: " + "; ".join(f"{name}: {cls.help}" for name, cls in
                                                   sorted(STOPPING_CRITERIA.items())) + " (default noise)"

    tg = r.add_argument_group("timing (docs/measurement.md)")
    tg.add_argument("--timing-mode", choices=["hot", "cold"], default="hot",
                    help="hot (default): L2 as the previous call left it; cold: L2 flushed before every sample")
    tg.add_argument("--no-cuda-graph", action="store_true",
                    help="time eagerly even where the backend allows CUDA-graph replay")
    tg.add_argument("--target-noise", type=float, metavar="FRACTION",
                    help="stop sampling when the median's CI half-width is under this fraction of it "
                         "(default 0.01 on GPU, 0.05 on CPU)")
    tg.add_argument("--max-time", type=float, metavar="SECONDS",
                    help="sampling time budget per cell (default 2 on GPU, 0.5 on CPU)")
    tg.add_argument("--energy-window", type=float, metavar="SECONDS",
                    help="GPU: NVML energy (J/call, mean W) is read around the timing loop; a loop shorter "
                         "than this (or cold mode) runs the call back to back this long after timing instead; "
                         "0 = off (default 0.1)")
    tg.add_argument("--min-samples", type=int, help="samples before the noise target may stop (default 10 GPU, 3 CPU)")
    tg.add_argument("--max-samples", type=int,
                    help="sample cap per cell, the exact count under --stop samples (default 500 GPU, 20 CPU)")
    tg.add_argument("--stop", metavar="CRITERION",
                    help=LazyText(stop_help))
    tg.add_argument("--cpu-clock", choices=["wall", "process"],
                    help="CPU timing clock: wall (default, elapsed time) or process (CPU time the call "
                         "used: far steadier on a shared machine; what `harness compare` can gate on)")
    rb = r.add_argument_group("robustness (docs/robustness.md)")
    rb.add_argument("--resume", metavar="DIR", help="continue an interrupted run in DIR: run only the cells it lacks")
    rb.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS",
                    help="spread cases over a Ray cluster (one actor per GPU keeping one isolated worker; a lost "
                         "actor's case is retried on another): a local cluster, or ADDRESS (e.g. ray://head:10001 or "
                         "auto); needs pip install 'attn-harness[ray]'")
    rb.add_argument("--shard", metavar="K/N",
                    help="run only shard K of N (1-based): whole cases, balanced by estimated cost, the same "
                         "split on every machine; `harness merge` joins the shard folders (docs/scale-out.md)")
    rb.add_argument("--devices", help="one worker per entry, cases spread over them: 0,1,... (GPUs) or cpu,cpu")
    rb.add_argument("--cell-timeout", type=float, metavar="SECONDS",
                    help="kill a cell's worker after this long and record timeout (default 600 GPU, 120 CPU; 0 = none)")
    rb.add_argument("--memory-budget-mib", type=float, metavar="MIB",
                    help="skip cells whose estimated peak exceeds this (CPU default: half the free RAM; caps GPU free memory)")
    rb.add_argument("--no-isolation", action="store_true",
                    help="run cells in this process: no worker, no crash protection, no timeout")
    r.add_argument("--strict", action="store_true", help="exit 1 if any cell is mismatch/error/timeout")
    r.add_argument("--report", action="store_true", help="write report.html into the results folder at the end")
    r.add_argument("--quiet", action="store_true", help="no progress bar")
    r.set_defaults(func=cmd_run)

    rp = sub.add_parser("report", help="one self-contained HTML report from results folders / .jsonl files")
    rp.add_argument("results", nargs="+", help="results folders or results.jsonl files")
    rp.add_argument("-o", "--output", default="report.html", help="HTML file to write (default: report.html)")
    rp.add_argument("--title", help="page title")
    rp.set_defaults(func=cmd_report)

    mg = sub.add_parser("merge", help="join shard folders (and --resume leftovers) into one results folder")
    mg.add_argument("dirs", nargs="+", metavar="DIR", help="results folders of one suite run (e.g. the shards of --shard K/N)")
    mg.add_argument("-o", "--output", required=True, metavar="DIR", help="the merged results folder to write")
    mg.add_argument("--strict", action="store_true", help="exit 1 if a cell is missing or duplicated")
    mg.set_defaults(func=cmd_merge)
    cp = sub.add_parser("compare", help="compare NEW against BASELINE; exit 1 on a correctness regression, a missing "
                                        "row, or a slowdown beyond the threshold and the run-to-run noise "
                                        "(noise-dominated timings, e.g. CPU wall clock, are reported, not gated)")
    cp.add_argument("baseline", help="baseline results folder or .jsonl")
    cp.add_argument("new", help="new results folder or .jsonl")
    cp.add_argument("--threshold", default="5%",
                    help="smallest median change that counts, e.g. 5%% (default); a class of timings whose "
                         "run-to-run spread is wider is noise-dominated (docs/reports.md)")
    cp.add_argument("--correctness-only", action="store_true", help="ignore timing: statuses and missing rows only")
    cp.add_argument("--allow-missing", action="append", metavar="PATTERN",
                    help="accept rows missing from NEW: a case, backend or variant name, or a glob over "
                         "SUITE/CASE/BACKEND/VARIANT (repeatable)")
    cp.add_argument("--allow-skip", action="append", nargs="?", const="*", metavar="PATTERN",
                    help="accept rows that became skipped/unsupported (all, or those matching PATTERN; repeatable)")
    cp.add_argument("--markdown", metavar="FILE", help="also write the markdown summary to FILE")
    ci_output.add_flags(cp)  # --junit, --benchmark-json (harness/ci_output.py)
    cp.set_defaults(func=cmd_compare)

    rc = sub.add_parser("recommend", help="fastest passing backend+variant per shape bucket, vLLM export, policy JSON")
    rc.add_argument("results", nargs="+", help="results folders or results.jsonl files, all from one GPU")
    rc.add_argument("--tie", default="3%", help="margins under this are ties, e.g. 3%% (default)")
    rc.add_argument("--out", metavar="DIR", help="write recommend.md, policy.json and vllm.json into DIR")
    rc.add_argument("--suggest", metavar="SUITE.yaml", help="write a suite whose cases fill the unmeasured buckets")
    rc.add_argument("--engine", choices=["vllm", "sglang"], help="one serving setting per model shape for this engine")
    rc.add_argument("--call-form", choices=["vllm", "fastest", "any"], default="vllm",
                    help="which flash-attn/flashinfer call form the verdicts rank (default vllm: as vLLM calls them)")
    rc.set_defaults(func=cmd_recommend)

    rpo = sub.add_parser("repro", help="write a standalone script (torch + the library only) reproducing one row; "
                                       "--shrink makes a failing case smaller first")
    rpo.add_argument("results", help="results folder or .jsonl file")
    rpo.add_argument("row", help="the row: its index in the results file (0-based), its reproducer string, "
                                 "or its case name (narrow with --backend / --variant)")
    rpo.add_argument("--backend", help="with a case name: the row's backend")
    rpo.add_argument("--variant", help="with a case name: the row's variant label")
    rpo.add_argument("--suite", metavar="FILE", help="the suite file (default: the one the row's reproducer names)")
    rpo.add_argument("--shrink", action="store_true",
                     help="re-run the failing cell here on fewer requests, shorter contexts, fewer heads while it "
                          "still fails the same way; write the script of the smallest")
    rpo.add_argument("--max-attempts", type=int, default=40, help="bound on --shrink's re-runs (default 40)")
    rpo.add_argument("--device", help="device for --shrink (default: the row's, cuda or cpu)")
    rpo.add_argument("-o", "--output", metavar="FILE", help="script to write (default: repro_<row index>.py)")
    rpo.set_defaults(func=cmd_repro)

    va = sub.add_parser("validate", help="check a suite file and print its expanded cases (runs nothing)")
    va.add_argument("suite", help="suite YAML file")
    va.set_defaults(func=cmd_validate)

    ls = sub.add_parser("list", help="every backend, whether it is available here and why (--verbose: capabilities)")
    ls.add_argument("--verbose", "-v", action="store_true", help="one row per variant, with its declared capabilities")
    ls.add_argument("--json", action="store_true", help="everything --verbose shows, as JSON")
    ls.set_defaults(func=cmd_list)
    from harness import crosscheck, plan  # commands that live in their own module register themselves
    from harness.matrix import bisect, matrix

    for command in (plan, crosscheck, matrix, bisect, export_command, schema_command, gate_command):
        command.add_parser(sub)
    __import__("harness.diag").diag.add_parser(sub)  # `harness diag NAME`: harness/diag/
    return p


def resume_command(argv: list[str], out_dir: Path) -> str:
    """The command that continues an interrupted run: its own arguments, with --out (or an
    earlier --resume) replaced by ``--resume DIR``."""
    kept: list[str] = []
    it = iter(argv)
    for a in it:
        if a in ("--out", "--resume"):
            next(it, None)
        elif not a.startswith(("--out=", "--resume=")):
            kept.append(a)
    if kept[:1] == ["run"] and len(kept) > 1 and (Path(out_dir) / suite_copy.SUITE_COPY).is_file():
        # The folder's copy of the suite and absolute paths: the command works from any directory.
        kept[1] = str((Path(out_dir) / suite_copy.SUITE_COPY).resolve())
        out_dir = Path(out_dir).resolve()
    return shlex.join(["harness", *kept, "--resume", str(out_dir)])


class Terminated(KeyboardInterrupt):
    """SIGTERM (kill, a job scheduler): unwinds like Ctrl-C, so workers stop and the resume
    command is printed; exit 143."""


def _on_sigterm(signum: int, frame: Any) -> None:
    raise Terminated()


def _interrupted(args: argparse.Namespace | None, argv: list[str], terminated: bool = False) -> int:
    out_dir = getattr(args, "started_out_dir", None)
    what = "terminated (SIGTERM)" if terminated else "interrupted"
    if out_dir is None:
        err_console.print(f"{what} before anything was written", highlight=False)
    else:
        n = len(read_rows(out_dir)) if (out_dir / RESULTS_FILE).exists() else 0
        err_console.print(f"{what}: {n} finished row(s) are saved in {escape(str(out_dir))}; continue with:",
                          highlight=False)
        err_console.print(f"  {escape(resume_command(argv, out_dir))}", highlight=False, soft_wrap=True)
    return 128 + signal.SIGTERM if terminated else 130


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = None
    restore_term = False
    try:
        # From here on Ctrl-C is a KeyboardInterrupt handled below (the startup guard exits bare).
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:  # an embedding program's own handler stays
            signal.signal(signal.SIGTERM, _on_sigterm)
            restore_term = True
    except ValueError:  # not the main thread: leave signals alone
        pass
    try:
        args = build_parser().parse_args(argv)
        args.argv = argv
        configure_logging(args)
        return args.func(args)
    except Exception as e:  # a SpecError or UsageError; the suite models load only if something was raised
        if not isinstance(e, (_spec_error(), UsageError)):
            raise
        err_console.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
        return EXIT_USAGE
    except KeyboardInterrupt as e:
        return _interrupted(args, argv, terminated=isinstance(e, Terminated))
    finally:
        if restore_term:  # main() called from a program: SIGTERM is its own again afterwards
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


if __name__ == "__main__":
    sys.exit(main())
