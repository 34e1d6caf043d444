"""Interleaved against sequential sampling with both orders in one process: the ratio of each
process's own pair, so a level a whole process shares cancels (issue 44; docs/measurement.md,
"Interleaved candidates").

    harness diag interleave-paired --out DIR [--procs 8] [--budget-s 230] [--suite ...] [--case NAME ...]
        [--backends ...] [--l2 hot] [--tolerance 0.01] [-- RUN_FLAGS...]
    harness diag interleave-paired --out DIR --read EARLIER_OUT [--read ...] [--l2 hot]   # pool, run nothing

Why: `harness diag interleave` gives every run a fresh process, and on an H100 a row's median
moves 3-6% from one process to the next while the samples inside a run lie within about 1% of
each other (reports/h100/2026-12-07, seventh and eighth sessions): a ratio of medians over 6-9
processes a mode cannot be read to 1%. Here each fresh process runs `harness run` (in process,
``--no-isolation``) once per mode, then once more per mode in the reverse order (A B B A: a
drift linear in time weighs both modes alike; the first mode rotates by process), and the
verdict reads, per row and L2 mode, the median over processes of the process's interleaved /
sequential (geometric means of its two runs each), with a bootstrap 95% interval over processes.
Beside it the table gives the spread of the sequential level between processes and the median
difference between a process's two runs of one mode (within a process): where the difference
within is far below the spread between, pairing is what resolves the ratio.

Writes DIR/proc-<i>/<k>-<mode> (results folders), DIR/proc-<i>.log, DIR/interleave.md and
DIR/summary.json (``paired: true``, ``per_proc``). Exit 0 when every process ran (verdict met or
not), 2 when one failed.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from harness.tools.diag.decode_minute import run_in_checkout
from harness.tools.diag.interleave import (SAMPLINGS, device_name, interval, judged, mode_name, modes_of, no_gpu,
                                           outside_entry, parse, resampled_medians, row_times, spread, write_outputs)

# A process's runs, per mode name: each run's rows (``interleave.row_times``).
Proc = dict[str, list[dict[str, dict[str, Any]]]]


def order(i: int, modes: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Process ``i``'s runs: every mode, starting ``i`` places later, then the same in reverse,
    so each mode runs twice and the two runs' mean position is the same for every mode."""
    k = i % len(modes)
    first = modes[k:] + modes[:k]
    return first + first[::-1]


def median_ci(xs: list[float], level: float = 0.95, draws: int = 2000, seed: int = 0) -> tuple[float, float] | None:
    """A bootstrap interval of the median of ``xs`` (seeded); None below 3 values."""
    if len(xs) < 3:
        return None
    import numpy as np

    return interval(resampled_medians(xs, draws, np.random.default_rng(seed)), level)


def paired_table(procs: list[Proc], tolerance: float, l2: list[str]) -> dict[str, Any]:
    """Per row and L2 mode: each process's interleaved / sequential (geometric mean of its runs of
    each), their median over processes (judged) with a bootstrap interval, the sequential level's
    spread between processes and the median relative difference between one process's two runs
    of one mode. Pure: tests feed it synthetic processes."""
    keys = sorted({k for p in procs for runs in p.values() for run in runs for k in run})
    rows: list[dict[str, Any]] = []
    outside: list[str] = []
    missing: list[str] = []
    for key in keys:
        row: dict[str, Any] = {"row": key}
        for m in l2:
            ratios: list[float] = []
            levels: dict[str, list[float]] = {s: [] for s in SAMPLINGS}
            within: list[float] = []
            for p in procs:
                got = {s: [run[key]["median_us"] for run in p.get(mode_name(s, m), []) if key in run] for s in SAMPLINGS}
                if not all(got.values()):
                    continue
                for s, xs in got.items():
                    levels[s].append(statistics.geometric_mean(xs))
                    if len(xs) > 1:
                        within.append((max(xs) - min(xs)) / statistics.median(xs))
                ratios.append(levels["interleaved"][-1] / levels["sequential"][-1])
            ratio = statistics.median(ratios) if ratios else None
            ci = median_ci(ratios)
            row[m] = {"ratio": ratio, "ci": list(ci) if ci else None, "procs": len(ratios),
                      "interleaved_us": statistics.median(levels["interleaved"]) if ratios else None,
                      "sequential_us": statistics.median(levels["sequential"]) if ratios else None,
                      "between": spread(levels["sequential"]),
                      "within": statistics.median(within) if within else None,
                      "pairs_spread": spread(ratios)}
            if ratio is None:
                missing.append(f"{key} ({m})")
            elif abs(ratio - 1) > tolerance:
                outside.append(outside_entry(key, m, ratio, ci, "processes"))
        rows.append(row)
    return judged(rows, outside, missing, tolerance,
                  f"interleaved / sequential paired in one process, in {' and '.join(l2)} L2", l2)


def paired_markdown(t: dict[str, Any], header: str) -> str:
    def f(x: float | None, spec: str) -> str:
        return "-" if x is None else format(x, spec)

    lines = [header, "", "| row | L2 | interleaved us | sequential us | between processes | within a process "
             "| I/S paired [95% CI] (processes) |", "|---|---|---|---|---|---|---|"]
    for r in t["rows"]:
        for m in t["l2"]:
            c = r[m]
            ci = f" [{c['ci'][0]:.3f}-{c['ci'][1]:.3f}]" if c["ci"] else ""
            lines.append(f"| {r['row']} | {m} | {f(c['interleaved_us'], '.2f')} | {f(c['sequential_us'], '.2f')} | "
                         f"{f(c['between'], '.1%')} | {f(c['within'], '.1%')} | {f(c['ratio'], '.3f')}{ci} ({c['procs']}) |")
    return "\n".join(lines + ["", f"Verdict: {t['verdict']}"]) + "\n"


def _write(out: Path, t: dict[str, Any], header: str, summary: dict[str, Any]) -> int:
    return write_outputs(out, t, header, summary, paired_markdown(t, header))


def pooled(folders: list[Path], out: Path, l2: list[str], tolerance: float) -> int:
    """``--read``: the paired table over the processes of earlier ``interleave-paired`` folders;
    exit 2 with one line for a folder without a paired summary."""
    procs: list[Proc] = []
    devices: list[str] = []
    for folder in folders:
        try:
            summary = json.loads((folder / "summary.json").read_text())
            if not summary.get("paired"):
                raise KeyError("paired")
            procs.extend(summary["per_proc"])
        except (OSError, ValueError, KeyError) as e:
            print(f"interleave-paired: --read {folder}: no readable summary.json of a `harness diag interleave-paired` "
                  f"run ({e})", file=sys.stderr)
            return 2
        devices.append(str(summary.get("device", "?")))
    t = paired_table(procs, tolerance, l2)
    header = (f"# Interleaved vs sequential sampling, paired in one process, {' and '.join(l2)} L2, pooled\n\nThe "
              f"processes of " + ", ".join(f"`{f}` ({d})" for f, d in zip(folders, devices)) + f": {len(procs)}.")
    out.mkdir(parents=True, exist_ok=True)
    return _write(out, t, header, {"paired": True, "read": [str(f) for f in folders], "devices": devices,
                                   "tolerance": tolerance, **t, "per_proc": procs})


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    args, l2, extra = parse(list(sys.argv[1:] if argv is None else argv), prog,
                            "Interleaved vs sequential sampling with both orders in one process (A B B A), "
                            "per process paired: the table and the verdict 'every row within 1%'.",
                            "fresh processes at most (default 8), each running every mode twice",
                            "no new process once another would end past this many seconds (default 230)")
    if args.read:
        return pooled(args.read, args.out, l2, args.tolerance)
    modes = modes_of(l2)
    out = args.out.resolve()  # the processes start in the checkout
    if no_gpu(extra, prog):
        return 2
    out.mkdir(parents=True, exist_ok=True)
    procs: list[Proc] = []
    walls: list[float] = []
    t0 = time.perf_counter()
    cut = ""
    run_args = [args.suite, "--backends", args.backends, *[a for c in args.case for a in ("--case", c)], *extra]
    for i in range(args.procs):
        if i and time.perf_counter() - t0 + max(walls) > args.budget_s:
            cut = (f"{i} of {args.procs} processes: another ({max(walls):.0f} s) would end past the "
                   f"{args.budget_s:g} s budget")
            break
        runs = order(i, modes)
        cmd = [sys.executable, "-m", "harness.tools.diag.interleave_paired_child", str(out / f"proc-{i}"),
               ",".join(mode_name(s, m) for s, m in runs), *run_args]
        rc, wall, text = run_in_checkout(cmd, args.timeout * len(runs))
        (out / f"proc-{i}.log").write_text(text)
        walls.append(wall)
        left = min(args.procs - i - 1, int(max(0.0, args.budget_s - (time.perf_counter() - t0)) // max(walls)))
        print(f"process {i + 1} of at most {args.procs} ({', '.join(mode_name(s, m) for s, m in runs)}): rc {rc}, "
              f"{wall:.1f} s; about {left} more, {left * statistics.fmean(walls):.0f} s", flush=True)
        if rc != 0:
            print(text[-3000:], file=sys.stderr)
            return 2
        proc: Proc = {mode_name(s, m): [] for s, m in modes}
        for k, (s, m) in enumerate(runs):
            proc[mode_name(s, m)].append(row_times(out / f"proc-{i}" / f"{k}-{mode_name(s, m)}"))
        procs.append(proc)
    t = paired_table(procs, args.tolerance, l2)
    device = device_name(out / "proc-0" / f"0-{mode_name(*order(0, modes)[0])}")
    header = (f"# Interleaved vs sequential sampling, paired in one process, {' and '.join(l2)} L2\n\n`harness run "
              f"{args.suite} {' '.join(repr(c) for c in args.case)} --backends {args.backends}` {' '.join(extra)}; "
              f"device: {device}; {len(procs)} fresh processes, each every mode twice (A B B A)"
              + (f" ({cut})" if cut else "") + f"; {sum(walls):.0f} s of processes.\nPer row and L2 mode: the median "
              "over processes of each mode's level (geometric mean of its two runs' medians), the sequential level's "
              "spread between processes ((max - min) / median), the median difference between one process's two runs "
              "of one mode, and the median over processes of interleaved / sequential with a bootstrap 95% interval.")
    return _write(out, t, header, {
        "paired": True, "suite": args.suite, "cases": args.case, "backends": args.backends, "run_flags": extra,
        "device": device, "procs": len(procs), "procs_asked": args.procs, "budget_s": args.budget_s, "cut": cut,
        "proc_walls_s": [round(w, 2) for w in walls], "tolerance": args.tolerance, **t, "per_proc": procs})


if __name__ == "__main__":
    sys.exit(main())
