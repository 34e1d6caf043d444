"""Where an interleaved / sequential gap sits inside the runs of `harness diag interleave` folders
run with `-- --keep-raw` (every sample kept): per row and mode, each sample over its run's fastest
(quartiles and 90th percentile) and the share of "disturbed" samples (more than ``--threshold``
over the run's fastest); per pair of rows of one case, how many rounds had both disturbed
against the count if the two were independent; where the rows kept each sample's hold clock
(schema 8), the median clock of the disturbed samples against the others'. Interleaved rounds
are complete (every candidate one sample a round), so sample i of two rows of a run is round i;
sequential rows are sampled one after another, so their pairs are printed but say nothing about
time.

    python tools/interleave_tail.py DIR [DIR ...] [--case-prefix mha] [--backend flashinfer] [--threshold 0.015]

reports/h100/2026-12-07/README.md ("Seventh session") quotes it on that session's three hot-L2
experiments.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path
from typing import Any

import numpy as np

from harness.records.load import load_run
from harness.tools.diag.interleave import row_key

Runs = list[dict[str, list[float]]]  # per run: row -> its samples (us), in the order taken
Clocks = list[dict[str, list["float | None"]]]  # per run: row -> each sample's hold clock (MHz), in step


def tail_stats(runs: Runs, threshold: float, clocks: Clocks | None = None) -> dict[str, Any]:
    """Per row: quantiles of sample / run's fastest, disturbed samples and, where ``clocks`` has
    the samples' hold clocks (rows of schema 8 under --keep-raw), the median clock of the
    disturbed and of the other samples (``mhz_disturbed``, ``mhz_other``: a disturbance the SM
    clock explains shows as a lower first figure); per pair of rows: rounds with both disturbed
    (``both``) and the count under independence (``expected``). Pure."""
    rel: dict[str, list[float]] = {}
    held: dict[str, dict[bool, list[float]]] = {}
    pairs: dict[tuple[str, str], dict[str, float]] = {}
    for i, run in enumerate(runs):
        flags = {}
        for row, xs in run.items():
            if not xs:
                continue
            a = np.asarray(xs, dtype=float) / min(xs)
            rel.setdefault(row, []).extend(a.tolist())
            flags[row] = a > 1 + threshold
            mhz = clocks[i].get(row) if clocks else None
            if mhz and len(mhz) == len(xs):
                by = held.setdefault(row, {True: [], False: []})
                for bad, m in zip(flags[row].tolist(), mhz):
                    if m is not None:
                        by[bad].append(m)
        for r1, r2 in itertools.combinations(sorted(flags), 2):
            k = min(len(flags[r1]), len(flags[r2]))
            f1, f2 = flags[r1][:k], flags[r2][:k]
            p = pairs.setdefault((r1, r2), {"rounds": 0, "both": 0, "a": 0, "b": 0})
            p["rounds"] += k
            p["both"] += int((f1 & f2).sum())
            p["a"] += int(f1.sum())
            p["b"] += int(f2.sum())
    rows = {row: {"samples": len(v), "q": [float(x) for x in np.quantile(v, [0.25, 0.5, 0.75, 0.9])],
                  "disturbed": int(sum(x > 1 + threshold for x in v))} for row, v in rel.items()}
    for row, by in held.items():
        rows[row]["mhz_disturbed"] = float(np.median(by[True])) if by[True] else None
        rows[row]["mhz_other"] = float(np.median(by[False])) if by[False] else None
    for p in pairs.values():
        p["expected"] = p["a"] * p["b"] / p["rounds"] if p["rounds"] else 0.0
    return {"rows": rows, "pairs": {f"{a} & {b}": p for (a, b), p in pairs.items()}}


def read_runs(folders: list[Path], mode: str, case_prefix: str, backend: str | None) -> tuple[Runs, Clocks]:
    """The kept samples of every run of ``mode`` under each folder (DIR/<mode>/run-<i>), and
    their hold clocks where the rows kept them."""
    runs: Runs = []
    clocks: Clocks = []
    for f in folders:
        for d in sorted((f / mode).glob("run-*")):
            if not d.is_dir():
                continue
            run, mhz = {}, {}
            for r in load_run(d).rows:
                if r.timing is None or not r.timing.raw_us or not r.case.startswith(case_prefix):
                    continue
                if backend and r.backend != backend:
                    continue
                run[row_key(r)] = list(r.timing.raw_us)
                if r.timing.launch is not None and r.timing.launch.raw_hold_mhz:
                    mhz[row_key(r)] = list(r.timing.launch.raw_hold_mhz)
            runs.append(run)
            clocks.append(mhz)
    return runs, clocks


def _mhz(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f}"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folders", nargs="+", type=Path)
    p.add_argument("--case-prefix", default="")
    p.add_argument("--backend")
    p.add_argument("--threshold", type=float, default=0.015)
    p.add_argument("--modes", default="interleaved-hot,sequential-hot")
    a = p.parse_args(argv)
    for mode in a.modes.split(","):
        runs, clocks = read_runs(a.folders, mode, a.case_prefix, a.backend)
        if not any(runs):
            print(f"{mode}: no kept samples (run `harness diag interleave` with `-- --keep-raw`)", file=sys.stderr)
            return 2
        t = tail_stats(runs, a.threshold, clocks)
        print(f"## {mode}: {len(runs)} runs; a sample over its run's fastest: quartiles, 90th percentile; "
              f"disturbed: more than {a.threshold:.1%} over")
        for row, s in sorted(t["rows"].items()):
            held = "" if "mhz_other" not in s else (
                f"; hold clock (MHz, median) disturbed {_mhz(s['mhz_disturbed'])}, others {_mhz(s['mhz_other'])}")
            print(f"{row}: {s['samples']} samples, " + " / ".join(f"{q:.3f}" for q in s["q"])
                  + f", disturbed {s['disturbed']}{held}")
        for pair, s in sorted(t["pairs"].items()):
            print(f"both disturbed in one round: {s['both']} of {s['rounds']} (independent: {s['expected']:.1f}): {pair}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
