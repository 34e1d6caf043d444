"""Speed of a decode run from its results folder(s): run.json's wall time, where the time went,
the correctness-only overhead per cell, energy coverage; with two folders (1 GPU, then
``--devices 0,1``), the speed-up and whether every verdict agrees.

    harness diag speed RESULTS_1GPU [RESULTS_2GPU] [--json OUT.json]

Exit 0 when the verdicts agree (or one folder given), 1 when they differ, 2 on bad input.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
from pathlib import Path


from harness.records.results import read_rows, read_run_header


def summarize(folder: Path) -> dict:
    header, rows = read_run_header(folder), read_rows(folder)
    if header.wall_s is None:
        raise ValueError(f"{folder}: run.json has no wall_s (a run from before the wall time was recorded?)")
    other = [r.host.breakdown_ms for r in rows if r.host and r.host.breakdown_ms is not None]
    # Harness overhead of a cell: everything but the first call, the check and the timing.
    overhead_ms = [sum(v for k, v in b.items() if k not in ("first_call", "check", "timing")) for b in other]
    untimed = [r.host.cell_ms for r in rows if r.host and r.host.cell_ms is not None and not r.timing]
    energy = [r.timing.energy for r in rows if r.timing]
    return {
        "folder": str(folder), "wall_s": header.wall_s, "run_s": header.run_s,
        "rows": len(rows), "statuses": {s.value: sum(r.status == s for r in rows) for s in sorted({r.status for r in rows})},
        "time_breakdown_s": header.time_breakdown_s or {},
        "median_cell_overhead_ms": statistics.median(overhead_ms) if overhead_ms else None,
        "median_untimed_cell_ms": statistics.median(untimed) if untimed else None,
        "energy_rows": sum(bool(e and e.available) for e in energy), "timed_rows": len(energy),
        "energy_reasons": sorted({(e.reason or "") if e else "" for e in energy if not (e and e.available)})[:3],
        "devices_plan": None if header.devices_plan is None else [d.model_dump() for d in header.devices_plan],
        # Newer runs: the wall time in order (summing to wall_s) and each worker's start/import/busy/idle.
        "wall_breakdown_s": header.wall_breakdown_s,
        "workers": None if header.workers is None else [w.model_dump() for w in header.workers],
        "energy_methods": dict(sorted(collections.Counter(e.method or "window" for e in energy
                                                          if e and e.available).items())),
        "timing_skipped_rows": sum(bool(r.timing_skipped) for r in rows),
        "verdicts": {"|".join(r.key): r.status.value for r in rows},
    }


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    p.add_argument("results", nargs="+", type=Path)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    if len(args.results) > 2:
        print("harness diag speed: give one or two results folders", file=sys.stderr)
        return 2
    try:
        runs = [summarize(f) for f in args.results]
    except (OSError, ValueError) as e:
        print(f"harness diag speed: {e}", file=sys.stderr)
        return 2
    rc = 0
    for s in runs:
        print(f"{s['folder']}: wall {s['wall_s']:.1f} s ({s['rows']} rows {s['statuses']}); "
              f"median harness overhead per cell {s['median_cell_overhead_ms']} ms; "
              f"median correctness-only cell {s['median_untimed_cell_ms']} ms; "
              f"energy on {s['energy_rows']}/{s['timed_rows']} timed rows {s['energy_reasons']}")
        print(f"  time breakdown (s): {s['time_breakdown_s']}")
        if s["wall_breakdown_s"]:
            print(f"  wall breakdown (s): {s['wall_breakdown_s']}")
        for w in s["workers"] or []:
            print(f"  worker {w['device']}: ready {w['ready_s']} s, import {w['import_s']} s, "
                  f"busy {w['busy_s']} s, idle {w['idle_s']} s")
        if s["devices_plan"]:
            print(f"  devices plan: {s['devices_plan']}")
    out = {"runs": [{k: v for k, v in s.items() if k != "verdicts"} for s in runs]}
    if len(runs) == 2:
        a, b = runs
        differ = sorted(k for k in set(a["verdicts"]) | set(b["verdicts"]) if a["verdicts"].get(k) != b["verdicts"].get(k))
        out["speedup"] = a["wall_s"] / b["wall_s"]
        out["verdicts_differ"] = differ
        print(f"speed-up {out['speedup']:.2f}x ({a['wall_s']:.1f} s -> {b['wall_s']:.1f} s); "
              f"verdicts {'identical' if not differ else f'DIFFER in {len(differ)} rows: {differ[:5]}'}")
        rc = 1 if differ else 0
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return rc


if __name__ == "__main__":
    sys.exit(main())
