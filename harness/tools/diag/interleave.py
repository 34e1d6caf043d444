"""Interleaved against sequential sampling, in hot and cold L2, each in fresh processes: does the
order a case's candidates are sampled in move any row? (issue 44; docs/measurement.md, "Hot
means hot".)

    harness diag interleave --out DIR [--procs 8] [--budget-s 230] [--suite suites/decode.yaml]
        [--case NAME ...] [--backends flashinfer,flash-attn] [--tolerance 0.01] [-- RUN_FLAGS...]
    harness diag interleave --out DIR --read EARLIER_OUT [--read ...] [--l2 hot]   # pool, run nothing

Runs `harness run SUITE --case ... --backends ... --sampling S --timing-mode M` in a fresh process
per run, for the four modes (interleaved, sequential) x (hot, cold), up to ``--procs`` runs per
mode: in rotations of the four (each rotation starting one mode later, so no mode always follows
the same one) for as long as another whole rotation fits in ``--budget-s`` (every mode ends with
the same number of runs; the summary says when the budget cut them below ``--procs``). Per timed
row (case, backend, variant): the median over the runs of its median per mode, the spread over
the runs ((max - min) / median), interleaved / sequential per L2 mode (and, to tell a moved
distribution from a slow tail, the same ratio of each run's fastest sample, not judged), a bootstrap
95% interval of interleaved / sequential over the runs (does the runs' spread cover 1?); and one
verdict line, "every row within 1%" or the rows outside, each saying whether its runs resolve it. Writes DIR/<mode>/run-<i> (results folders),
DIR/<mode>/run-<i>.log, DIR/interleave.md (the table) and DIR/summary.json.

Defaults: the two cases where interleaving moved small rows by 4-10% on an H100 (mha[count=1] and
llama3-70b-tp8[count=128, ctx 128-1024]) with FlashInfer and the flash-attn family.
Exit 0 when every run ran (verdict met or not: the line says which), 2 when one failed.
RUN_FLAGS go to every run (e.g. `-- --device cpu --suite ...` to check this script on a CPU).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from harness.records.results import ResultRow, read_rows, read_run_header
from harness.tools.diag.decode_minute import run_in_checkout, split_run_flags


CASES = ["mha[count=1]", "llama3-70b-tp8[count=128,context_len=low=128,high=1024]"]
BACKENDS = "flashinfer,flash-attn"
SAMPLINGS = ("interleaved", "sequential")
L2_MODES = ("hot", "cold")


def modes_of(l2: tuple[str, ...] | list[str]) -> list[tuple[str, str]]:
    """(sampling, L2 mode) for every L2 mode of ``l2``: interleaved-hot, sequential-hot, ..."""
    return [(s, m) for m in l2 for s in SAMPLINGS]


MODES = modes_of(L2_MODES)


def mode_name(sampling: str, l2: str) -> str:
    return f"{sampling}-{l2}"


def rotation(i: int, modes: list[tuple[str, str]] = MODES) -> list[tuple[str, str]]:
    """The modes of rotation ``i``: all of ``modes``, starting ``i`` places later."""
    k = i % len(modes)
    return modes[k:] + modes[:k]


def row_key(r: ResultRow) -> str:
    """A row's name in the table: 'case backend [variant]'."""
    return f"{r.case} {r.backend}" + (f" [{r.variant_label}]" if r.variant_label else "")


def row_times(folder: Path) -> dict[str, dict[str, Any]]:
    """Per timed row of one run, keyed by ``row_key``: its median and how it was sampled."""
    out: dict[str, dict[str, Any]] = {}
    for r in read_rows(folder):
        if r.timing is None or not r.timing.median_us:
            continue
        out[row_key(r)] = {"median_us": r.timing.median_us, "min_us": r.timing.min_us, "samples": r.timing.samples,
                    "rounds": r.timing.rounds,
                    "warm_calls": r.timing.warm_calls, "sampling": r.timing.sampling}
    return out


def ratio_ci(a: list[float], b: list[float], level: float = 0.95, draws: int = 2000,
             seed: int = 0) -> tuple[float, float] | None:
    """A bootstrap interval of median(a) / median(b), resampling the runs of each mode (seeded:
    the same runs give the same interval); None with fewer than 3 runs on a side. Why: each
    fresh process has its own level (the H100 of 2026-12-07: per-run medians 3-6% apart within a
    mode), so a ratio of medians over 6-9 runs can be 1% off by chance; the interval says whether
    the runs resolve a shift of that size."""
    if len(a) < 3 or len(b) < 3:
        return None
    import numpy as np

    rng = np.random.default_rng(seed)
    return interval(resampled_medians(a, draws, rng) / resampled_medians(b, draws, rng), level)


def resampled_medians(xs: list[float], draws: int, rng: Any) -> Any:
    """``draws`` bootstrap medians of ``xs`` (resampled with replacement by the numpy generator ``rng``)."""
    import numpy as np

    x = np.asarray(xs, dtype=float)
    return np.median(rng.choice(x, size=(draws, len(x))), axis=1)


def interval(draws: Any, level: float) -> tuple[float, float]:
    """The central ``level`` interval of bootstrap draws."""
    import numpy as np

    q = np.quantile(draws, [(1 - level) / 2, (1 + level) / 2])
    return float(q[0]), float(q[1])


def spread(xs: list[float]) -> float | None:
    return (max(xs) - min(xs)) / statistics.median(xs) if len(xs) > 1 and statistics.median(xs) > 0 else None


def table(runs: dict[str, list[dict[str, dict[str, Any]]]], tolerance: float,
          l2: tuple[str, ...] | list[str] = L2_MODES) -> dict[str, Any]:
    """From each mode's runs (row -> figures), per row: the median over runs per mode, the
    spread, interleaved / sequential per L2 mode of ``l2``; the rows outside ``tolerance`` and the
    verdict. Pure: tests feed it synthetic runs."""
    keys = sorted({k for per_mode in runs.values() for run in per_mode for k in run})
    rows: list[dict[str, Any]] = []
    outside: list[str] = []
    missing: list[str] = []
    for key in keys:
        row: dict[str, Any] = {"row": key}
        for s, m in modes_of(l2):
            xs = [run[key]["median_us"] for run in runs.get(mode_name(s, m), []) if key in run]
            # each run's fastest sample: a whole distribution that moves shifts it too, a slow tail does not
            fast = [run[key]["min_us"] for run in runs.get(mode_name(s, m), []) if run.get(key, {}).get("min_us")]
            row[mode_name(s, m)] = {"median_us": statistics.median(xs) if xs else None, "runs": len(xs),
                                    "spread": spread(xs), "fastest_us": statistics.median(fast) if fast else None}
        for m in l2:
            a, b = row[mode_name("interleaved", m)]["median_us"], row[mode_name("sequential", m)]["median_us"]
            ratio = a / b if a and b else None
            row[f"ratio_{m}"] = ratio
            per_run = {s: [run[key]["median_us"] for run in runs.get(mode_name(s, m), []) if key in run]
                       for s in SAMPLINGS}
            ci = ratio_ci(per_run["interleaved"], per_run["sequential"])
            row[f"ci_{m}"] = list(ci) if ci else None  # explains a ratio: does the spread cover 1?
            fa, fb = row[mode_name("interleaved", m)]["fastest_us"], row[mode_name("sequential", m)]["fastest_us"]
            row[f"fastest_ratio_{m}"] = fa / fb if fa and fb else None  # explains a ratio; not judged
            if ratio is None:
                missing.append(f"{key} ({m})")
            elif abs(ratio - 1) > tolerance:
                outside.append(outside_entry(key, m, ratio, ci, "runs"))
        rows.append(row)
    return judged(rows, outside, missing, tolerance, f"interleaved / sequential in {' and '.join(l2)} L2", l2)


def outside_entry(key: str, l2: str, ratio: float, ci: tuple[float, float] | list[float] | None, over: str) -> str:
    """A row outside the tolerance, with its interval and whether the ``over`` (runs, processes)
    resolve it."""
    note = (f", 95% CI {ci[0]:.3f}-{ci[1]:.3f}" + (f": 1 inside, the {over} do not resolve it"
                                                   if ci[0] <= 1 <= ci[1] else "")) if ci else ""
    return f"{key} ({l2}: {ratio:.3f}{note})"


def judged(rows: list[dict[str, Any]], outside: list[str], missing: list[str], tolerance: float, what: str,
           l2: tuple[str, ...] | list[str]) -> dict[str, Any]:
    """The table's result: ok when there are rows and none is outside or missing, and the verdict line."""
    ok = bool(rows) and not outside and not missing
    verdict = (f"every row within {tolerance:.0%}: {what} ({len(rows)} rows)" if ok else
               f"NOT every row within {tolerance:.0%}: {len(outside)} outside" + (f": {'; '.join(outside)}" if outside else "")
               + (f"; {len(missing)} without both modes: {'; '.join(missing)}" if missing else "")
               + ("; no timed rows" if not rows else ""))
    return {"rows": rows, "outside": outside, "missing": missing, "ok": ok, "verdict": verdict, "l2": list(l2)}


def markdown(t: dict[str, Any], header: str) -> str:
    def us(x: float | None) -> str:
        return "-" if x is None else f"{x:.2f}"

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{x:.1%}"

    def ratio(x: float | None) -> str:
        return "-" if x is None else f"{x:.3f}"

    def ci(x: list[float] | None) -> str:
        return "" if not x else f" [{x[0]:.3f}-{x[1]:.3f}]"

    l2 = t.get("l2", list(L2_MODES))
    modes = modes_of(l2)
    lines = [header, "", "| row | " + " | ".join(f"{mode_name(s, m)} us (spread, runs)" for s, m in modes)
             + "".join(f" | I/S {m} (fastest) [95% CI]" for m in l2) + " |", "|---|" + "---|" * (len(modes) + len(l2))]
    for r in t["rows"]:
        cells = [f"{us(r[mode_name(s, m)]['median_us'])} ({pct(r[mode_name(s, m)]['spread'])}, "
                 f"{r[mode_name(s, m)]['runs']})" for s, m in modes]
        lines.append(f"| {r['row']} | " + " | ".join(cells)
                     + "".join(f" | {ratio(r[f'ratio_{m}'])} ({ratio(r.get(f'fastest_ratio_{m}'))}){ci(r.get(f'ci_{m}'))}"
                               for m in l2) + " |")
    lines += ["", f"Verdict: {t['verdict']}"]
    return "\n".join(lines) + "\n"


def pooled(folders: list[Path], out: Path, l2: list[str], tolerance: float) -> int:
    """``--read``: the table over the runs of earlier experiments' folders (their summary.json),
    pooled per mode; exit 2 with one line where a folder has no summary or lacks a mode."""
    runs: dict[str, list[dict[str, dict[str, Any]]]] = {mode_name(s, m): [] for s, m in modes_of(l2)}
    devices: list[str] = []
    for f in folders:
        try:
            summary = json.loads((f / "summary.json").read_text())
            per_run = summary["per_run"]
        except (OSError, ValueError, KeyError) as e:
            print(f"interleave: --read {f}: no readable summary.json of a `harness diag interleave` run ({e})",
                  file=sys.stderr)
            return 2
        for name in runs:
            if not per_run.get(name):
                print(f"interleave: --read {f}: no {name} runs (its --l2 was {','.join(summary.get('l2', []))}); "
                      f"pass --l2 with the modes every folder has", file=sys.stderr)
                return 2
            runs[name].extend(per_run[name])
        try:
            devices.append(device_name(f / mode_name(*modes_of(l2)[0]) / "run-0"))
        except (OSError, ValueError):
            devices.append("?")
    t = table(runs, tolerance, l2)
    n = {k: len(v) for k, v in runs.items()}
    header = (f"# Interleaved vs sequential sampling, {' and '.join(l2)} L2, pooled\n\nThe runs of "
              + ", ".join(f"`{f}` ({d})" for f, d in zip(folders, devices))
              + f": {', '.join(f'{k} {v}' for k, v in n.items())} fresh-process runs.\nEach cell: the median over "
              "runs of the row's median, (max - min) / median over runs, runs. I/S: interleaved / sequential; in "
              "brackets the same of each run's fastest sample, then a bootstrap 95% interval of I/S over the runs.")
    out.mkdir(parents=True, exist_ok=True)
    return write_outputs(out, t, header, {"read": [str(f) for f in folders], "devices": devices,
                                          "tolerance": tolerance, **t, "per_run": runs})


def device_name(run_folder: Path) -> str:
    """The GPU (or device type) a run's run.json names."""
    dev = read_run_header(run_folder).device
    return dev.name or dev.type or "?"


def write_outputs(out: Path, t: dict[str, Any], header: str, summary: dict[str, Any], md: str | None = None) -> int:
    """DIR/interleave.md (``md``, default ``markdown``'s table under ``header``) and DIR/summary.json;
    the table and the verdict on stdout. Exit 0."""
    md = markdown(t, header) if md is None else md
    (out / "interleave.md").write_text(md)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(md, end="")
    print(f"verdict: {t['verdict']}")
    return 0


def parse(argv: list[str], prog: str | None, description: str, procs_help: str,
          budget_help: str) -> tuple[argparse.Namespace, list[str], list[str]]:
    """The flags ``interleave`` and ``interleave-paired`` share: (args, the L2 modes, RUN_FLAGS);
    a usage error exits 2 with argparse's line."""
    argv, extra = split_run_flags(argv)
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--out", type=Path, required=True, help="folder for the runs, interleave.md and summary.json")
    p.add_argument("--procs", type=int, default=8, help=procs_help)
    p.add_argument("--budget-s", type=float, default=230.0, help=budget_help)
    p.add_argument("--suite", default="suites/decode.yaml")
    p.add_argument("--case", action="append", help=f"a case of the suite (repeatable; default {' and '.join(CASES)})")
    p.add_argument("--backends", default=BACKENDS)
    p.add_argument("--tolerance", type=float, default=0.01, help="interleaved / sequential allowed off 1 (default 0.01)")
    p.add_argument("--timeout", type=float, default=180.0, help="seconds per run")
    p.add_argument("--l2", default=",".join(L2_MODES), help="L2 modes to run, of hot,cold (default both)")
    p.add_argument("--read", type=Path, action="append", metavar="DIR",
                   help="run nothing: judge the runs of earlier --out folders (repeatable: their runs are pooled, "
                        "e.g. two experiments on one card) and write the table to --out")
    args = p.parse_args(argv)
    l2 = [m.strip() for m in args.l2.split(",")]
    if not l2 or any(m not in L2_MODES for m in l2) or len(set(l2)) != len(l2):
        p.error(f"--l2 {args.l2!r}: expected hot, cold or hot,cold")
    if args.procs < 1 or args.budget_s <= 0 or not 0 < args.tolerance < 1:
        p.error("--procs must be at least 1, --budget-s positive, --tolerance a fraction in (0, 1)")
    args.case = args.case or CASES
    return args, l2, extra


def no_gpu(extra: list[str], prog: str | None) -> bool:
    """True (after one line on stderr) when the runs would need a CUDA device this machine lacks."""
    if "--device" in extra:
        return False
    import torch

    if torch.cuda.is_available():
        return False
    print(f"{prog or 'interleave'}: no CUDA device visible (a GPU diagnostic; `-- --device cpu` checks "
          "the script itself on a CPU)", file=sys.stderr)
    return True


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    args, l2, extra = parse(list(sys.argv[1:] if argv is None else argv), prog,
                            "Interleaved vs sequential sampling, hot and cold L2, in fresh processes: the table "
                            "and the verdict 'every row within 1%'.",
                            "fresh-process runs per mode at most (default 8)",
                            "no new rotation of the four modes once another would end past this many seconds "
                            "(default 230)")
    modes = modes_of(l2)
    if args.read:
        return pooled(args.read, args.out, l2, args.tolerance)
    cases = args.case
    args.out = args.out.resolve()  # the runs start in the checkout
    if no_gpu(extra, prog):
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[dict[str, dict[str, Any]]]] = {mode_name(s, m): [] for s, m in modes}
    walls: list[float] = []
    t0 = time.perf_counter()
    rotations, cut = 0, ""
    for i in range(args.procs):
        longest = max((sum(walls[j:j + len(modes)]) for j in range(0, len(walls), len(modes))), default=0.0)
        if i and time.perf_counter() - t0 + longest > args.budget_s:
            cut = (f"{rotations} of {args.procs} runs per mode: another rotation ({longest:.0f} s) would end past "
                   f"the {args.budget_s:g} s budget")
            break
        for s, m in rotation(i, modes):
            name = mode_name(s, m)
            folder = args.out / name / f"run-{i}"
            cmd = [sys.executable, "-m", "harness", "run", args.suite, "--quiet", "--out", str(folder),
                   "--backends", args.backends, "--sampling", s, "--timing-mode", m,
                   *[a for c in cases for a in ("--case", c)], *extra]
            rc, wall, text = run_in_checkout(cmd, args.timeout)
            (args.out / name / f"run-{i}.log").write_text(text)
            walls.append(wall)
            print(f"{name} run {i}: rc {rc}, {wall:.1f} s", flush=True)
            if rc != 0:
                print((args.out / name / f"run-{i}.log").read_text()[-3000:], file=sys.stderr)
                return 2
            runs[name].append(row_times(folder))
        rotations += 1
    t = table(runs, args.tolerance, l2)
    device = device_name(args.out / mode_name(*modes[0]) / "run-0")
    header = (f"# Interleaved vs sequential sampling, {' and '.join(l2)} L2\n\n`harness run {args.suite} "
              f"{' '.join(repr(c) for c in cases)} --backends {args.backends}` {' '.join(extra)}; device: {device}; "
              f"{rotations} fresh-process run(s) per mode, modes in rotation"
              + (f" ({cut})" if cut else "") + f"; {sum(walls):.0f} s of runs.\nEach cell: the median over runs "
              "of the row's median, (max - min) / median over runs, runs. I/S: interleaved / sequential; in "
              "brackets the same of the median over runs of each run's fastest sample (explains, not judged).")
    return write_outputs(args.out, t, header, {
        "suite": args.suite, "cases": cases, "backends": args.backends, "run_flags": extra,
        "runs_per_mode": rotations, "procs_asked": args.procs, "budget_s": args.budget_s, "cut": cut,
        "run_walls_s": [round(w, 2) for w in walls], "tolerance": args.tolerance, **t, "per_run": runs})


if __name__ == "__main__":
    sys.exit(main())
