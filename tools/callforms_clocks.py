"""Per backend and call form, burst against sustained over a ``suites/callforms.yaml`` pair of runs:
median time and SM clock in each regime, the settled continuous-loop clock of the sustained
rows, and how many sustained rows' clock is within 3% of their own settled clock: judged by the
means (the samples' mean clock against the settled stretch's, ``timing.clocks.window_sm_mhz``),
with the medians' count beside (the row's median against ``timing.settled_sm_clock_mhz``). Why
the means: at the power limit NVML's clock takes about ten levels a second and a median lands on
one of them, so two read sets of the same second differ by a level where their means agree
(docs/measurement.md §13, "Which clock statistic"). Rows without means (schema < 6) are judged by
their medians. docs/measurement.md §13's table comes from it.

    python tools/callforms_clocks.py RESULTS/callforms   # holds burst/ and sustained/
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from harness.records.clocks import sm_clock
from harness.records.load import load_run
from harness.records.results import ResultRow

TOL = 0.03


def rows(folder: Path) -> list[ResultRow]:
    """The passed, timed rows of one results folder, read through the one reader (harness/records/load.py)."""
    return [r for r in load_run(folder).rows if r.status == "pass" and r.timing is not None]


def label(r: ResultRow) -> str:
    v = r.variant or {}
    name = {"3": "FA3", "4": "FA4"}.get(str(v.get("fa_version")), r.backend) if r.backend == "flash-attn" \
        else {"flashinfer": "FlashInfer"}.get(r.backend, r.backend)
    return f"{name}, {v.get('call_form', '-')}"


def med(xs: list[float]) -> str:
    return f"{statistics.median(xs):.4g}" if xs else "-"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        return table(Path(argv[0]))
    except (FileNotFoundError, ValueError) as e:  # the reader's one-line errors (folder, line, field)
        print(f"error: {e}", file=sys.stderr)
        return 2


def table(base: Path) -> int:
    by: dict[str, dict[str, list[ResultRow]]] = {}
    for regime in ("burst", "sustained"):
        for r in rows(base / regime):
            by.setdefault(label(r), {"burst": [], "sustained": []})[regime].append(r)
    print("| backend, call form | rows (burst / sustained) | burst us | burst SM MHz | sustained us | sustained SM MHz "
          "| settled-loop SM MHz | sustained rows within 3% of their settled clock (means; medians) | sustained / burst |")
    print("|---|---|---|---|---|---|---|---|---|")
    total = {"means": [0, 0], "medians": [0, 0]}

    def us(r: ResultRow) -> float:
        assert r.timing is not None  # rows() keeps timed rows only
        return r.timing.median_us

    def pair(r: ResultRow, stat: str) -> tuple[float, float] | None:
        """(the samples' clock, the settled stretch's) by ``stat``, or None where the row lacks one."""
        t = r.timing
        c = t.clocks if t is not None else None
        if t is None or c is None:
            return None
        if stat == "means":
            a = c.sm_mhz.mean if c.sm_mhz is not None else None
            b = c.window_sm_mhz.mean if c.window_sm_mhz is not None else None
            return (a, b) if a and b else None
        m = sm_clock(r, "median")
        return (m, t.settled_sm_clock_mhz) if m is not None and t.settled_sm_clock_mhz else None

    def count(rs: list[ResultRow], stat: str) -> str:
        pairs = [p for p in (pair(r, stat) for r in rs) if p is not None]
        within = sum(abs(a / b - 1) <= TOL for a, b in pairs)
        total[stat][0] += within
        total[stat][1] += len(pairs)
        return f"{within}/{len(pairs)}" if pairs else "-"

    for name in sorted(by):
        b, s = by[name]["burst"], by[name]["sustained"]
        settled = [p[1] for p in (pair(r, "means") or pair(r, "medians") for r in s) if p is not None]
        # sustained / burst per cell (same case), then the median
        bt = {r.case: us(r) for r in b}
        ratios = [us(r) / bt[r.case] for r in s if r.case in bt]
        span = f" ({min(ratios):.3f}-{max(ratios):.3f})" if ratios else ""
        print(f"| {name} | {len(b)} / {len(s)} | {med([us(r) for r in b])} "
              f"| {med([c for c in map(sm_clock, b) if c is not None])} | {med([us(r) for r in s])} "
              f"| {med([c for c in map(sm_clock, s) if c is not None])} | {med(settled)} "
              f"| {count(s, 'means')}; {count(s, 'medians')} | {med(ratios)}{span} |")
    for stat in ("means", "medians"):
        n = total[stat]
        if n[1]:
            print(f"sustained rows within {TOL:.0%} of their settled clock by the {stat}: {n[0]}/{n[1]}")
    for name in sorted(by):
        for r in by[name]["sustained"]:
            off = []
            for stat in ("means", "medians"):
                p = pair(r, stat)
                if p is not None and abs(p[0] / p[1] - 1) > TOL:
                    off.append(f"{stat} {p[0]:.0f} against {p[1]:.0f} MHz")
            if off:
                print(f"  {name} {r.case}: outside {TOL:.0%} by the " + "; ".join(off))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
