"""The end of a run (``Runner``): run.json's wall-time bookkeeping, the closing summary and
report.html, the exit code."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attn_contract.status import FAILED, NOT_RUN  # no torch, no pydantic

if TYPE_CHECKING:
    from harness.execute.runner import Reporter
    from harness.records.header import RunHeader
    from harness.records.results import ResultRow


def to_perf(t_mono: float | None) -> float | None:
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


def record_wall_time(out_dir: Path, header: RunHeader, rows: list[ResultRow], run_s: float, process_t0: float,
                     report_s: float | None = None, marks: dict[str, Any] | None = None) -> RunHeader:
    """run.json gets this invocation's wall time (``wall_s``: process start to the last row,
    imports and worker start-up included; ``run_s``: from the command's start) and where the
    rows' time went, summed over rows (``time_breakdown_s``; case-level stages once per case).
    ``marks``: the run's perf_counter marks (start, planned, rows, all_ready) for the wall
    time's breakdown. Returns the header as written."""
    from harness.cell.accounting import sum_breakdown
    from harness.records.header import ResumeRecord
    from harness.records.results import write_header

    timing: dict[str, Any]
    if report_s is None:
        now = time.perf_counter()
        tb = sum_breakdown(rows)
        timing = {"wall_s": now - process_t0, "run_s": run_s,
                  "finished_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                  "time_breakdown_s": tb, "rows_this_run": len(rows)}
        if marks is not None:
            wb = wall_breakdown(marks, process_t0, now)
            timing["wall_breakdown_s"] = wb
            workers = header.workers or []
            # Outside the rows (worker-seconds beside the rows' own stages): the parent's start,
            # the workers' library imports at start, their idle time (waiting, IPC, the tail).
            tb["startup"] = wb["startup"]
            tb["expand"] = wb["expand"]
            tb["import"] = round(tb.get("import", 0.0) + sum(w.import_s or 0.0 for w in workers), 3)
            if workers:
                tb["workers_ready"] = max((w.ready_s or 0.0) for w in workers)
                tb["idle"] = round(sum(w.idle_s or 0.0 for w in workers), 3)
    else:
        timing = {"report_s": report_s, "wall_with_report_s": time.perf_counter() - process_t0}
    if header.resumed:  # the original run's wall time stays as it was
        last = ResumeRecord.model_validate({**header.resumed[-1].model_dump(exclude_unset=True), **timing})
        header = header.updated(resumed=[*header.resumed[:-1], last])
    else:
        header = header.with_fields(**timing)
    write_header(out_dir, header)
    return header


def nothing_ran_hint(rows: list[ResultRow]) -> str:
    """What to run instead when no cell ran (every one skipped or unsupported): the backends
    available here that the run did not include (from the registry, as `harness list`)."""
    from harness import registry

    used = {r.backend for r in rows}
    here = []
    for name in sorted(registry.known_backends()):
        if name in used:
            continue
        try:
            cls = registry.resolve(name)
            if any(cls.availability(v).available for v in cls.variants()):
                here.append(name)
        except Exception:  # a plugin that does not import: `harness list` says why
            continue
    dev = rows[0].device
    more = (f" Backends available here that this run did not include: {', '.join(here)}; add them with "
            f"--backends {','.join(here[:2])} (`harness list` shows every backend and why).") if here else ""
    cpu = (" On a CPU, cells above --cpu-max-gflop / --cpu-max-kv-mib are skipped too: a smaller --batch-spec "
           "(e.g. 4q1s256) fits.") if dev.startswith("cpu") else ""
    return f"nothing ran: all {len(rows)} cell(s) were skipped or unsupported on {dev} (reasons above).{more}{cpu}"


def finish(rows: list[ResultRow], this_run: list[ResultRow], out_dir: Path, header: RunHeader, marks: dict[str, Any],
           t_start: float, process_t0: float, report: bool, strict: bool, reporter: Reporter) -> int:
    """Record the wall time, report the summary (and write report.html); the exit code."""
    header = record_wall_time(out_dir, header, this_run, time.perf_counter() - t_start, process_t0, marks=marks)
    reporter.summary(rows, out_dir)
    if rows and all(r.status in NOT_RUN for r in rows):
        reporter.nothing_ran(nothing_ran_hint(rows))
    if report:
        from harness.report import write_report

        t0 = time.perf_counter()
        reporter.notice(f"Report: {write_report([out_dir], out_dir / 'report.html')}")
        record_wall_time(out_dir, header, this_run, time.perf_counter() - t_start, process_t0,
                         report_s=time.perf_counter() - t0)
    failed = sum(r.status in FAILED for r in rows)
    if failed:
        # Exit 0 by default: a benchmark run that found a broken cell still produced every
        # other figure. CI gates use --strict (or `harness compare`); the reporter says so.
        reporter.failed(failed, strict)
    return 1 if failed and strict else 0
