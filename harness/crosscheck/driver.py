"""``harness crosscheck``'s pass over a results folder's rows (``harness.crosscheck.run`` re-times
one row): which rows, in what order, what an earlier stopped cross-check left (``--resume``), the
deadline and its ETA, the table after every row, and the profiler's kernel times last.

The profiler runs in a pass after every row's outside timers, flagged and noisy rows first (their
explanation reads it), the rest while the deadline allows: torch's profiler leaves CUPTI attached
when it stops, and a profile taken between two rows would sit under every later row's timers
(``harness.crosscheck.run.kernel_of``). Until 2026-12-08 each row was profiled right after its own
timers; on the H100 that day Triton's ``do_bench_cudagraph`` then read 4-7% above FlashInfer's
``bench_gpu_time`` on four ~60 us rows of the burst cross-check, where in a probe with no profiler
(three of the same calls, warm) the two agreed within 2.6% (reports/h100/2026-12-08; whether the profiler is the cause is
``tools/graph_loop_probe.py --profile-first``'s question).
"""

from __future__ import annotations

import json
import math
import statistics
import time
from typing import TYPE_CHECKING, Any, Callable

from harness.cli.lazy import LazyModule
from harness.crosscheck.run import (PROFILED_LATER, BatchCache, CrosscheckError, kernel_of, rejudge, retime_row,
                                    skip_reason)
from harness.crosscheck.table import cells_of

torch = LazyModule("torch")
results = LazyModule("harness.records.results")
if TYPE_CHECKING:
    from harness.records.results import ResultRow

DEADLINE_REASON = "not re-timed: deadline"
PENDING_REASON = "not re-timed yet: the command stopped before this row"


def _ident(i: int, row: ResultRow) -> dict[str, Any]:
    return {"row": i, "case": row.case, "backend": row.backend, "variant": row.variant_label}


def select_rows(rows: list[ResultRow], cases: list[str] | None, backends: list[str] | None) -> list[int]:
    """Indices of the rows whose case and backend match one of the globs (all when none given)."""
    from fnmatch import fnmatchcase

    return [i for i, r in enumerate(rows)
            if (not cases or any(fnmatchcase(r.case, c) for c in cases))
            and (not backends or any(fnmatchcase(r.backend, b) for b in backends))]


def reusable(previous: dict[str, Any] | None, rows: list[ResultRow]) -> dict[int, dict[str, Any]]:
    """Records of an earlier cross-check of these results that still describe the same row
    (index, case, backend, variant, harness median): ``--resume`` keeps them."""
    keep: dict[int, dict[str, Any]] = {}
    for rec in (previous or {}).get("rows") or []:
        i = rec.get("row")
        if not isinstance(i, int) or not 0 <= i < len(rows):
            continue
        r = rows[i]
        if r.timing is None:
            continue
        if (rec.get("case"), rec.get("backend"), rec.get("variant"), rec.get("harness_us")) == (
                r.case, r.backend, r.variant_label, r.timing.median_us):
            keep[i] = rec
    return keep


def eta_line(rows: list[ResultRow], todo: list[int], deadline_s: float | None) -> str:
    """"57 rows to re-time, about N s": what the rows cost by the measured per-row costs
    (regime.eta_s), and whether ``deadline_s`` lets them all be re-timed."""
    from harness.crosscheck import regime as cr

    plans = [cr.regime_plan(rows[i]) for i in todo]
    full, least = cr.eta_s(plans)
    regimes = ", ".join(f"{n} {r or 'no regime'}" for r, n in sorted(
        {p["regime"]: sum(q["regime"] == p["regime"] for q in plans) for p in plans}.items(), key=lambda x: str(x[0])))
    line = f"{len(plans)} rows to re-time ({regimes}), about {full:.0f} s"
    if deadline_s is None or not plans:
        return line
    if deadline_s >= full:
        return line + f"; the deadline {deadline_s:g} s allows them all"
    if deadline_s >= least:
        return line + f"; the deadline {deadline_s:g} s shortens the waits before the outside timers to fit"
    return (line + f"; the deadline {deadline_s:g} s is short of the {least:.0f} s they need with the waits shortened: "
                   f"rows will be left 'not re-timed: deadline' (give --deadline {math.ceil(least / 10) * 10:g} or more)")


def crosscheck(rows: list[ResultRow], tol: float, suite: str | None = None, min_run_s: float = 0.2,
               log: Callable[[str], None] = lambda m: None, *, deadline_s: float | None = None,
               selected: list[int] | None = None, previous: dict[str, Any] | None = None,
               on_progress: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """The cross-check table of ``rows`` (those in ``selected``; all by default).

    ``deadline_s``: no row starts once that many seconds have passed since the call (at least
    one row is re-timed); the rest are listed as not re-timed for the deadline. ``on_progress``
    gets the table so far after every row, the rows not reached listed as pending."""
    start = time.perf_counter()
    order = list(range(len(rows))) if selected is None else list(selected)
    kept = reusable(previous, rows)
    batches = BatchCache()
    checked: list[dict[str, Any]] = []
    not_retimed: list[dict[str, Any]] = []
    attempted = 0
    # Rows still to re-time, and each re-timed row's cost beside its idle/warm waits: the waits
    # are shortened (harness/crosscheck/regime.py fit_scale) so every row fits the deadline.
    todo = {i for i in order if i not in kept and skip_reason(rows[i]) is None}
    fixed_costs: list[float] = []
    log(eta_line(rows, [i for i in order if i in todo], deadline_s))

    def table(done: int, complete: bool) -> dict[str, Any]:
        pending = [{**_ident(i, rows[i]), "reason": PENDING_REASON} for i in order[done:]] if not complete else []
        timers = sorted({k for r in checked for k in r["outside"]})
        return {"tolerance": tol, "timers": timers, "rows": list(checked), "not_retimed": not_retimed + pending,
                "flagged": sum(r["flagged"] for r in checked), "checked": len(checked), "complete": complete,
                "states_differ": sum(r.get("state") == "states differ" for r in checked),
                "host_bound": sum(r.get("state") == "host-bound" for r in checked),
                "selected": len(order), "of_rows": len(rows), "elapsed_s": time.perf_counter() - start,
                "deadline_s": deadline_s, "torch": torch.__version__,
                "clock_regimes": sorted({r["clock_regime"] for r in checked if r.get("clock_regime")}),
                "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}

    for n, i in enumerate(order):
        row = rows[i]
        tag = f"#{i} {row.case} / {row.backend} [{row.variant_label}]"
        why = skip_reason(row)
        if why is None and i in kept:
            rec = dict(kept[i])
            # the verdict and its explanation again from the recorded figures (what this version compares)
            rec.update(rejudge(rec, row, tol))
            checked.append(rec)
            log(f"{tag}: kept from the earlier cross-check (--resume)")
        elif why is None and deadline_s is not None and attempted and time.perf_counter() - start >= deadline_s:
            not_retimed.append({**_ident(i, row), "reason": DEADLINE_REASON})
            log(f"{tag}: {DEADLINE_REASON} ({deadline_s:g} s passed)")
        elif why is None:
            from harness.crosscheck import regime as cr

            attempted += 1
            t0 = time.perf_counter()
            left = None if deadline_s is None else deadline_s - (t0 - start)
            plan = cr.regime_plan(row)
            # a row's cost beside its waits: the rows so far, else the measured cost of its regime
            scale = cr.fit_scale(cr.waits_of(plan, cr.OUTSIDE_TIMERS),
                                 statistics.median(fixed_costs) if fixed_costs else cr.row_cost_s(plan), left,
                                 sum(1 for j in order[n:] if j in todo))
            try:
                rec = retime_row(row, tol, suite, min_run_s, batches, scale)
            except CrosscheckError as e:
                not_retimed.append({**_ident(i, row), "reason": str(e)})
                log(f"{tag}: not re-timed: {e}")
            else:
                rec["retime_s"] = time.perf_counter() - t0
                fixed_costs.append(rec["retime_s"] - rec["cost_s"]["waits"])
                checked.append({"row": i, **rec})
                shown = cells_of(rec)
                log(f"{tag}: harness {rec['harness_us']:.4g} us, adapter here {shown['adapter here us']}, standalone here "
                    f"{shown['harness here us']}, kernel {shown['kernel us (profiler)']}, outside {rec['ref_us']:.4g} us, "
                    f"ratio {rec['ratio']:.3g} (setup {rec['setup_s']:.1f} s of {rec['retime_s']:.1f} s)"
                    f"{'  FLAGGED' if rec['flagged'] else ''}{'  STATES DIFFER' if rec['state'] != 'matched' else ''}"
                    f"{f' (waits x{scale:.2f} for the deadline)' if scale < 1 else ''}")
        else:
            not_retimed.append({**_ident(i, row), "reason": why})
        if on_progress is not None:
            on_progress(table(n + 1, False))
    profile_pass(checked, rows, tol, suite, batches,
                 lambda: None if deadline_s is None else deadline_s - (time.perf_counter() - start), log)
    return table(len(order), True)


def result_json(res: dict[str, Any]) -> str:
    """The cross-check's record as strict JSON (NaN and infinities as null)."""
    return json.dumps(results.finite_json(res), indent=2, allow_nan=False, default=str) + "\n"


def profile_pass(checked: list[dict[str, Any]], rows: list["ResultRow"], tol: float, suite: str | None,
                 batches: BatchCache, time_left: Callable[[], float | None],
                 log: Callable[[str], None] = lambda m: None) -> None:
    """The profiler's kernel time of every re-timed GPU row whose record waits for it
    (PROFILED_LATER), flagged and noisy rows first and always, the rest while ``time_left()`` (None:
    no deadline) is positive; each record judged again with it (the explanation reads it)."""
    later = [r for r in checked if r.get("kernel") == PROFILED_LATER]
    later.sort(key=lambda r: not (r.get("flagged") or r.get("noisy")))
    for rec in later:
        left = time_left()
        if left is not None and left <= 0 and not (rec.get("flagged") or rec.get("noisy")):
            rec["kernel"] = "not profiled: the deadline had passed"
        else:
            t0 = time.perf_counter()
            rec["kernel"] = kernel_of(rows[rec["row"]], suite, batches)
            rec.setdefault("cost_s", {})["kernel"] = time.perf_counter() - t0
        rec.update(rejudge(rec, rows[rec["row"]], tol))
    if later:
        log(f"profiled {sum(isinstance(r['kernel'], dict) for r in later)} of {len(later)} rows after every row's timers")


__all__ = ["DEADLINE_REASON", "PENDING_REASON", "crosscheck", "eta_line", "profile_pass", "result_json", "reusable",
           "select_rows"]
