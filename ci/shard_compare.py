"""Compare two runs of the same cells (ci/gpu/shard.sh: --ray vs --devices 0,1): same verdicts
per cell, and the speed-up of the second over the first from run.json's run_s. Exit 1 when a
verdict differs or a cell is in only one run."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout, installed or not

from harness.results import read_header, read_rows  # noqa: E402


def main(a: str, b: str) -> int:
    try:
        ra = {r.key: r.status for r in read_rows(a)}
        rb = {r.key: r.status for r in read_rows(b)}
    except (OSError, ValueError) as e:  # a run that wrote nothing (usage error, killed at start)
        print(f"error: {e}", file=sys.stderr)
        return 2
    only = set(ra) ^ set(rb)
    diff = {k: (ra[k], rb[k]) for k in set(ra) & set(rb) if ra[k] != rb[k]}
    ta, tb = read_header(a).get("run_s"), read_header(b).get("run_s")
    print(f"{a}: {len(ra)} rows, run {ta:.1f} s" if ta else f"{a}: {len(ra)} rows")
    print(f"{b}: {len(rb)} rows, run {tb:.1f} s" if tb else f"{b}: {len(rb)} rows")
    if ta and tb:
        print(f"speed-up of {b} over {a}: {ta / tb:.2f}x (cells/s: {len(ra) / ta:.2f} vs {len(rb) / tb:.2f})")
    short = [f"{p}: {len(r)} of {read_header(p).get('cells')} cells" for p, r in ((a, ra), (b, rb))
             if not r or len(r) < (read_header(p).get("cells") or 0)]
    for line in short:  # a run cut off by its limit: no comparison of the missing cells
        print(f"  incomplete: {line}")
    for k in sorted(only):
        print(f"  only in one run: {'|'.join(k)}")
    for k, (x, y) in sorted(diff.items()):
        print(f"  verdict differs: {'|'.join(k)}: {x} vs {y}")
    ok = not only and not diff and not short
    print("same verdicts" if ok else f"{len(only)} cell(s) in one run only, {len(diff)} verdict(s) differ, "
          f"{len(short)} run(s) incomplete")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
