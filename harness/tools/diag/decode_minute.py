"""The main job in one minute, measured: `harness run SUITE` twice back to back (defaults, checks
included), `harness compare` between them, and the figures the targets are about, per run and
between the two.

    harness diag decode-minute OUT_DIR [--suite suites/decode.yaml] [--timeout 280] [-- RUN_FLAGS...]

Writes OUT_DIR/run-a, OUT_DIR/run-b (results folders), OUT_DIR/compare.md, OUT_DIR/summary.json
and prints one line per target. Targets (decode on one GPU): wall_s <= 60; the first case starts
within 5 s (run.json wall_breakdown_s: startup + expand + wait_workers); no backend over a third
of the cell time; graph-timed rows' median per-row difference <= 0.5%; compare exit 0; same
fastest backend per case. Exit 0 when the runs and the compare ran (targets met or not: the
lines say which), 2 when a run failed. RUN_FLAGS go to both runs (e.g. `-- --device cpu --case
'mha*'` for a check of this script on a CPU machine).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from harness.records.results import ResultRow, Status, read_rows, read_run_header

ROOT = Path(__file__).resolve().parents[3]  # the checkout: suites/ and the results it reads

WALL_TARGET_S = 60.0
FIRST_CASE_TARGET_S = 5.0
SHARE_TARGET = 1 / 3
REPEAT_TARGET = 0.005


def run_in_checkout(cmd: list[str], timeout: float) -> tuple[int, float, str]:
    """``cmd`` in a fresh process from the checkout (its folder first on PYTHONPATH): exit status
    (124 when it ran past ``timeout`` seconds), wall seconds, stdout and stderr."""
    t0 = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    try:
        p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        rc, out = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        rc, out = 124, f"timed out after {timeout:g} s: {e}"
    return rc, time.perf_counter() - t0, out


def run_figures(folder: Path) -> dict[str, Any]:
    """One run: wall time, its breakdowns, per-backend cell time and timing, stop reasons."""
    header = read_run_header(folder)
    rows = read_rows(folder)
    wb = header.wall_breakdown_s or {}
    cell_s: dict[str, float] = collections.defaultdict(float)
    variant_s: dict[str, float] = collections.defaultdict(float)  # what the verdicts rank
    timing_s: dict[str, float] = collections.defaultdict(float)
    stops: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    graph: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for r in rows:
        if r.host is not None:
            cell_s[r.backend] += (r.host.cell_ms or 0.0) / 1e3
            variant_s[f"{r.backend} [{r.variant_label}]" if r.variant_label else r.backend] += (r.host.cell_ms or 0.0) / 1e3
            timing_s[r.backend] += (r.host.breakdown_ms or {}).get("timing", 0.0) / 1e3
        if r.timing is not None:
            stops[r.backend][r.timing.stop_reason] += 1
            graph[r.backend]["graph" if _graph_timed(r) else "eager"] += 1
    total = sum(cell_s.values()) or 1.0
    return {
        "folder": str(folder), "wall_s": header.wall_s, "rows": len(rows),
        "first_case_s": round(sum(wb.get(k, 0.0) for k in ("startup", "expand", "wait_workers")), 3) if wb else None,
        "wall_breakdown_s": wb, "time_breakdown_s": header.time_breakdown_s,
        "workers": None if header.workers is None else [w.model_dump() for w in header.workers],
        "cell_s_by_backend": {b: round(v, 3) for b, v in sorted(cell_s.items())},
        "cell_share_by_backend": {b: round(v / total, 4) for b, v in sorted(cell_s.items())},
        "cell_share_by_variant": {b: round(v / total, 4) for b, v in sorted(variant_s.items())},
        "timing_s_by_backend": {b: round(v, 3) for b, v in sorted(timing_s.items())},
        "stop_reasons_by_backend": {b: dict(c) for b, c in sorted(stops.items())},
        "graph_by_backend": {b: dict(c) for b, c in sorted(graph.items())},
    }


def _graph_timed(r: ResultRow) -> bool:
    return r.timing is not None and r.timing.cuda_graph.used


def _timed(folder: Path) -> dict[tuple, ResultRow]:
    return {tuple(r.key): r for r in read_rows(folder) if r.timing is not None and r.timing.median_us}


def _median_us(r: ResultRow) -> float:
    """The median of a row ``_timed`` kept (it keeps timed rows only)."""
    assert r.timing is not None
    return r.timing.median_us


def between(a: Path, b: Path) -> dict[str, Any]:
    """Graph-timed rows' per-row difference and the fastest backend per case, run a vs run b."""
    ra, rb = _timed(a), _timed(b)
    diffs = [abs(_median_us(rb[k]) / _median_us(ra[k]) - 1.0)
             for k in ra.keys() & rb.keys() if _graph_timed(ra[k]) and _graph_timed(rb[k])]

    def winners(rows: dict[tuple, ResultRow]) -> dict[str, str]:
        best: dict[str, tuple[float, str]] = {}
        for r in rows.values():
            if r.status != Status.PASS:
                continue
            cur = best.get(r.case)
            if cur is None or _median_us(r) < cur[0]:
                best[r.case] = (_median_us(r), f"{r.backend} {r.variant_label}".strip())
        return {c: w for c, (_, w) in best.items()}

    wa, wb = winners(ra), winners(rb)
    differ = sorted(c for c in wa.keys() & wb.keys() if wa[c] != wb[c])
    ga, gb = group_verdicts(read_rows(a)), group_verdicts(read_rows(b))
    return {"graph_rows_compared": len(diffs),
            "graph_median_abs_diff": statistics.median(diffs) if diffs else None,
            "cases_with_a_winner": len(wa.keys() & wb.keys()), "winners_differ": differ,
            "group_verdicts": {"run-a": {g: sorted(v) for g, v in ga.items()},
                               "run-b": {g: sorted(v) for g, v in gb.items()}},
            "groups_differ": sorted(g for g in ga.keys() | gb.keys() if ga.get(g) != gb.get(g))}


def group_verdicts(rows: list[ResultRow]) -> dict[str, frozenset[str]]:
    """Per case group, the verdict `harness run` prints (harness/report/terminal/tables.py ``rank_groups``):
    the winner, or every candidate of a tie (a tie's order is noise)."""
    from harness.report.terminal.tables import rank_groups

    out: dict[str, frozenset[str]] = {}
    for g, res in rank_groups(rows).items():
        if res.winner is None:
            out[g] = frozenset()
        elif res.tie:
            out[g] = frozenset({res.winner.name, *res.tied_with})
        else:
            out[g] = frozenset({res.winner.name})
    return out


def split_run_flags(argv: list[str] | None) -> tuple[list[str], list[str]]:
    """(the diagnostic's own arguments, the RUN_FLAGS after ``--`` that go to every `harness run`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" not in argv:
        return argv, []
    i = argv.index("--")
    return argv[:i], argv[i + 1:]


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    argv, extra = split_run_flags(argv)
    p = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--suite", default="suites/decode.yaml")
    p.add_argument("--timeout", type=float, default=280.0, help="seconds per run (two runs + compare < 10 min)")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {"suite": args.suite, "run_flags": extra, "runs": {}}
    for name in ("run-a", "run-b"):
        folder = args.out / name
        cmd = [sys.executable, "-m", "harness", "run", args.suite, "--quiet", "--out", str(folder), *extra]
        rc, wall, log = run_in_checkout(cmd, args.timeout)
        (args.out / f"{name}.log").write_text(log)
        print(f"{name}: rc {rc}, shell wall {wall:.1f} s ({' '.join(cmd[2:])})", flush=True)
        if rc != 0:
            print(log[-3000:], file=sys.stderr)
            return 2
        summary["runs"][name] = {**run_figures(folder), "shell_wall_s": round(wall, 3)}
    rc, _, md = run_in_checkout([sys.executable, "-m", "harness", "compare", str(args.out / "run-a"), str(args.out / "run-b")],
                     120.0)
    (args.out / "compare.md").write_text(md)
    summary["compare_rc"] = rc
    summary["between"] = between(args.out / "run-a", args.out / "run-b")
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))

    def line(ok: bool, what: str) -> None:
        print(f"{'MET   ' if ok else 'MISSED'} {what}")

    for name, f in summary["runs"].items():
        print(f"== {name}: wall_s {f['wall_s']:.1f}, wall_breakdown_s {f['wall_breakdown_s']}")
        print(f"   time_breakdown_s {f['time_breakdown_s']}")
        print(f"   cell time by backend (s) {f['cell_s_by_backend']}, share {f['cell_share_by_backend']}")
        print(f"   timing by backend (s) {f['timing_s_by_backend']}")
        print(f"   stop reasons {f['stop_reasons_by_backend']}; graph/eager {f['graph_by_backend']}")
        line(f["wall_s"] <= WALL_TARGET_S, f"{name}: wall {f['wall_s']:.1f} s <= {WALL_TARGET_S:g} s")
        if f["first_case_s"] is not None:
            line(f["first_case_s"] <= FIRST_CASE_TARGET_S,
                 f"{name}: first case at {f['first_case_s']:.1f} s <= {FIRST_CASE_TARGET_S:g} s")
        top = max(f["cell_share_by_backend"].items(), key=lambda kv: kv[1], default=("-", 0.0))
        line(top[1] <= SHARE_TARGET, f"{name}: largest backend share {top[0]} {top[1]:.1%} <= 33.3%")
        topv = max(f["cell_share_by_variant"].items(), key=lambda kv: kv[1], default=("-", 0.0))
        line(topv[1] <= SHARE_TARGET, f"{name}: largest backend-variant share {topv[0]} {topv[1]:.1%} <= 33.3%")
    bt = summary["between"]
    med = bt["graph_median_abs_diff"]
    line(med is not None and med <= REPEAT_TARGET,
         f"graph-timed rows ({bt['graph_rows_compared']}): median per-row difference "
         f"{'n/a' if med is None else f'{med:.2%}'} <= 0.5%")
    line(rc == 0, f"harness compare exit {rc} (compare.md)")
    line(not bt["groups_differ"], f"same verdict per case group ({len(bt['group_verdicts']['run-a'])} groups: "
         "winner, or the tied set)" + (f"; differ: {bt['groups_differ']}" if bt["groups_differ"] else ""))
    # Stricter than the target, for the record: per case, the fastest row (ties broken by noise).
    print(f"info   same fastest backend in {bt['cases_with_a_winner'] - len(bt['winners_differ'])} of "
          f"{bt['cases_with_a_winner']} cases" + (f"; differ: {bt['winners_differ'][:5]}" if bt["winners_differ"] else ""))
    print(f"summary: {args.out / 'summary.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
