"""Per backend and call form, burst against sustained over a ``suites/callforms.yaml`` pair of runs:
median time and median SM clock in each regime, the settled continuous-loop clock of the
sustained rows (``timing.settled_sm_clock_mhz``), and how many sustained rows' median clock is
within 3% of their own settled clock. docs/measurement.md §13's table comes from it.

    python tools/callforms_clocks.py RESULTS/callforms   # holds burst/ and sustained/
"""

from __future__ import annotations

import gzip
import json
import statistics
import sys
from pathlib import Path
from typing import Any

TOL = 0.03


def rows(folder: Path) -> list[dict[str, Any]]:
    """The passed, timed rows of one results folder (results.jsonl or .jsonl.gz)."""
    path = next((p for p in (folder / "results.jsonl.gz", folder / "results.jsonl") if p.is_file()), None)
    if path is None:
        raise Bad(f"{folder}: no results.jsonl(.gz)")
    opener = gzip.open if path.suffix == ".gz" else open
    out = []
    with opener(path, "rt", encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                out.append(json.loads(line))
            except ValueError as e:
                raise Bad(f"{path}: line {n} is not JSON ({e})") from None
    return [r for r in out if r.get("status") == "pass" and r.get("timing")]


class Bad(Exception):
    """Bad input: one line on stderr, exit 2."""


def label(r: dict[str, Any]) -> str:
    v = r.get("variant") or {}
    name = {"3": "FA3", "4": "FA4"}.get(str(v.get("fa_version")), r["backend"]) if r["backend"] == "flash-attn" \
        else {"flashinfer": "FlashInfer"}.get(r["backend"], r["backend"])
    return f"{name}, {v.get('call_form', '-')}"


def med(xs: list[float]) -> str:
    return f"{statistics.median(xs):.4g}" if xs else "-"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        return table(Path(argv[0]))
    except Bad as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (KeyError, TypeError, ZeroDivisionError) as e:
        print(f"error: {argv[0]}: a row lacks a field this table reads ({type(e).__name__}: {e})", file=sys.stderr)
        return 2


def table(base: Path) -> int:
    by: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for regime in ("burst", "sustained"):
        for r in rows(base / regime):
            by.setdefault(label(r), {"burst": [], "sustained": []})[regime].append(r)
    print("| backend, call form | rows (burst / sustained) | burst us | burst SM MHz | sustained us | sustained SM MHz "
          "| settled-loop SM MHz | sustained rows within 3% of their settled clock | sustained / burst |")
    print("|---|---|---|---|---|---|---|---|---|")
    allin = [0, 0]
    for name in sorted(by):
        b, s = by[name]["burst"], by[name]["sustained"]
        clk = lambda r: r["timing"]["clocks"]["sm_mhz"]["median"]  # noqa: E731
        pairs = [(clk(r), r["timing"]["settled_sm_clock_mhz"]) for r in s if r["timing"].get("settled_sm_clock_mhz")]
        within = sum(abs(c / st - 1) <= TOL for c, st in pairs)
        allin[0] += within
        allin[1] += len(pairs)
        # sustained / burst per cell (same case), then the median
        bt = {r["case"]: r["timing"]["median_us"] for r in b}
        ratios = [r["timing"]["median_us"] / bt[r["case"]] for r in s if r["case"] in bt]
        print(f"| {name} | {len(b)} / {len(s)} | {med([r['timing']['median_us'] for r in b])} | {med([clk(r) for r in b])} "
              f"| {med([r['timing']['median_us'] for r in s])} | {med([clk(r) for r in s])} | {med([p[1] for p in pairs])} "
              f"| {within}/{len(pairs)} | {med(ratios)} ({min(ratios):.3f}-{max(ratios):.3f}) |")
    print(f"\nsustained rows within {TOL:.0%} of their settled clock: {allin[0]}/{allin[1]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
