"""Per backend and call form, burst against sustained over a ``suites/callforms.yaml`` pair of runs:
median time and median SM clock in each regime, the settled continuous-loop clock of the
sustained rows (``timing.settled_sm_clock_mhz``), and how many sustained rows' median clock is
within 3% of their own settled clock. docs/measurement.md §13's table comes from it.

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
          "| settled-loop SM MHz | sustained rows within 3% of their settled clock | sustained / burst |")
    print("|---|---|---|---|---|---|---|---|---|")
    allin = [0, 0]

    def us(r: ResultRow) -> float:
        assert r.timing is not None  # rows() keeps timed rows only
        return r.timing.median_us

    def median_clock(r: ResultRow) -> float | None:
        # the median, as the columns say: sm_clock's default is the mean where a row has one
        return sm_clock(r, "median")

    def clocks(rs: list[ResultRow]) -> list[float]:
        return [c for c in map(median_clock, rs) if c is not None]

    for name in sorted(by):
        b, s = by[name]["burst"], by[name]["sustained"]
        pairs = [(c, r.timing.settled_sm_clock_mhz) for r in s
                 if r.timing is not None and r.timing.settled_sm_clock_mhz and (c := median_clock(r)) is not None]
        within = sum(abs(c / st - 1) <= TOL for c, st in pairs)
        allin[0] += within
        allin[1] += len(pairs)
        # sustained / burst per cell (same case), then the median
        bt = {r.case: us(r) for r in b}
        ratios = [us(r) / bt[r.case] for r in s if r.case in bt]
        span = f" ({min(ratios):.3f}-{max(ratios):.3f})" if ratios else ""
        print(f"| {name} | {len(b)} / {len(s)} | {med([us(r) for r in b])} | {med(clocks(b))} "
              f"| {med([us(r) for r in s])} | {med(clocks(s))} | {med([p[1] for p in pairs])} "
              f"| {within}/{len(pairs)} | {med(ratios)}{span} |")
    print(f"\nsustained rows within {TOL:.0%} of their settled clock: {allin[0]}/{allin[1]}")
    # Rows written from schema 6 also carry the means: the samples' (read once a sample) and the
    # settled stretch's (read at a fixed time step). At the power limit NVML's clock takes about ten
    # levels a second: a median can land on a neighbouring level, 75 MHz away; a mean does not.
    means = []
    for name in sorted(by):
        for r in by[name]["sustained"]:
            c = r.timing.clocks if r.timing is not None else None
            if c and c.sm_mhz and c.sm_mhz.mean and c.window_sm_mhz and c.window_sm_mhz.mean:
                means.append((name, r.case, c.sm_mhz, c.window_sm_mhz))
    if means:
        ok = sum(abs(s.mean / w.mean - 1) <= TOL for _, _, s, w in means)
        print(f"sustained rows whose samples' mean clock is within {TOL:.0%} of the settled stretch's mean: "
              f"{ok}/{len(means)}")
        for name, case, s, w in means:
            if abs(s.median / w.median - 1) > TOL or abs(s.mean / w.mean - 1) > TOL:
                print(f"  {name} {case}: samples median {s.median:.0f} mean {s.mean:.0f} "
                      f"[{s.min:.0f}, {s.max:.0f}]; settled stretch median {w.median:.0f} mean {w.mean:.0f} "
                      f"[{w.min:.0f}, {w.max:.0f}] MHz")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
