"""``harness bisect SUITE --versions PKG==v1,v2,...,vN``: the first release of PKG where a
regression appears.

1. The ends: v1 (good) and vN, each in its own environment (harness/tools/matrix/envs.py), compared
   with ``harness.analysis.compare``'s rules. A slowdown must be confirmed by re-measuring vN (a second
   run; ``compare.confirm_slowdowns``); a correctness change needs no second run. No regression
   between the ends: exit 0.
2. Binary search on the versions between: each step runs only the rows that regressed at the
   ends (``--case``), re-measured in that version's env, and compares them with v1's rows;
   a version where any of them regresses is bad.
3. Prints the first bad version, the rows that changed between the last good and the first bad
   version, and each row's reproducer with that env's site folder on PYTHONPATH; writes
   OUT/bisect.json and one results folder per version run. Exit 1 (a regression was found).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

from harness.tools.matrix.envs import EnvError, EnvSpec
from harness.tools.matrix.matrix import (MatrixError, build_all, checked_inputs, env_reproducer, guarded,
                                   out_root, run_in_env, say)
from harness.records.results import ResultRow

_PKG_RE = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(.+)")


def parse_versions(text: str) -> tuple[str, list[str]]:
    m = _PKG_RE.fullmatch(text.strip())
    vs = [v.strip() for v in m.group(2).split(",")] if m else []
    if not m or len(vs) < 2 or not all(vs):
        raise MatrixError(f"--versions {text!r}: expected PKG==V1,V2,... with at least two versions, oldest first")
    if len(set(vs)) != len(vs):
        raise MatrixError(f"--versions {text!r}: a version is listed twice")
    return m.group(1), vs


def _case_args(keys: set[tuple[str, str, str, str]], run_args: list[str]) -> list[str]:
    """Only the regressed rows' cases at each step (a suite's other cases would cost time only)."""
    if "--case" in run_args or any(a.startswith("--case=") for a in run_args):
        return run_args
    out = list(run_args)
    for case in sorted({k[1] for k in keys}):
        out += ["--case", case]
    return out


def run_bisect(args: argparse.Namespace) -> int:
    """`harness bisect`'s parsed arguments -> its exit code (bad input: one line, 2)."""
    return guarded(_run, args)


def _versions_of(args: argparse.Namespace) -> tuple[str, list[str]]:
    if not args.versions:
        raise MatrixError("give --versions PKG==V1,V2,... (oldest first)")
    return parse_versions(args.versions)


def _run(args: argparse.Namespace) -> int:
    from harness.analysis.compare import compare_rows
    from harness.analysis.compare_confirm import confirm_slowdowns

    extra, threshold, (pkg, versions) = checked_inputs(args, _versions_of)
    root = out_root(args, "bisect")
    if root.exists() and any(root.iterdir()):
        raise MatrixError(f"--out {root}: not empty; choose another folder")
    specs = {v: EnvSpec(f"{pkg}-{v}", (f"{pkg}=={v}",)) for v in versions}
    cache: dict[str, Any] = {}
    steps: list[dict[str, Any]] = []

    def env_of(v: str) -> Any:
        if v not in cache:
            cache[v] = build_all([specs[v]], args)[0]
            known = {n: e.versions for n, e in cache.items()}
            from harness.tools.matrix.envs import torch_mismatch

            msg = torch_mismatch(known)
            if msg and not args.allow_torch_mismatch:
                raise EnvError(msg)
        return cache[v]

    def measure(v: str, run_args: list[str], tag: str = "") -> list[ResultRow]:
        return run_in_env(env_of(v), args.suite, root / f"{v}{tag}", run_args)

    # Every env is built before anything runs: a missing version fails in seconds, not mid-bisect.
    for v in versions:
        env_of(v)
    def confirm(comp: Any, v: str, among: set | None = None) -> None:
        """Re-measure the rows ``comp`` calls slower (those in ``among``, if given) at ``v``: a
        slowdown counts only where the second run confirms it."""
        slow = {d.key for d in comp.regressions if d.speed == "slower" and (among is None or d.key in among)}
        if slow:
            confirm_slowdowns(comp, [measure(v, _case_args(slow, extra), "-remeasured")])

    good_rows = measure(versions[0], extra)
    bad_rows = measure(versions[-1], extra)
    comp = compare_rows(good_rows, bad_rows, threshold=threshold)
    confirm(comp, versions[-1])
    regressed = {d.key for d in comp.regressions}
    steps.append({"version": versions[-1], "bad": bool(regressed), "rows": [d.name for d in comp.regressions]})
    if not regressed:
        say(f"no regression between {pkg} {versions[0]} and {versions[-1]} (re-measured): nothing to bisect")
        _write(root, pkg, versions, None, steps, [])
        return 0
    say(f"{pkg} {versions[-1]} regressed against {versions[0]} in {len(regressed)} row(s); bisecting "
        f"{len(versions) - 2} version(s) between")
    lo, hi = 0, len(versions) - 1
    step_args = _case_args(regressed, extra)
    bad_at: dict[int, Any] = {hi: comp}
    # What each row's regression was at the far end: a step counts a row as bad only for the
    # same kind (a correctness change, or a slowdown confirmed by a re-measurement, as at the
    # ends), so timing noise at a good release cannot stand in for a wrong output.
    slow_rows = {d.key for d in comp.regressions if d.speed == "slower"}
    while hi - lo > 1:
        mid = (lo + hi) // 2
        rows = measure(versions[mid], step_args)
        c = compare_rows(good_rows, rows, threshold=threshold)
        confirm(c, versions[mid], slow_rows)
        hits = [d for d in c.regressions if d.key in regressed
                and ((d.speed == "slower") == (d.key in slow_rows))]
        steps.append({"version": versions[mid], "bad": bool(hits), "rows": [d.name for d in hits]})
        say(f"  {pkg} {versions[mid]}: {'bad' if hits else 'good'}" + (f" ({len(hits)} row(s))" if hits else ""))
        if hits:
            hi, bad_at[mid] = mid, c
        else:
            lo = mid
    first_bad, env = versions[hi], env_of(versions[hi])
    found = []
    for d in bad_at[hi].regressions:
        if d.key in regressed and d.new is not None:
            found.append({"row": d.name, "problem": d.problem, "reproducer": env_reproducer(env, d.new)})
    say(f"first bad version: {pkg}=={first_bad} (last good: {versions[lo]})")
    for f in found:
        say(f"  {f['row']}: {f['problem']}")
        say(f"    reproduce: {f['reproducer']}")
    _write(root, pkg, versions, first_bad, steps, found, versions[lo])
    return 1


def _write(root: Path, pkg: str, versions: list[str], first_bad: str | None, steps: list[dict[str, Any]],
           rows: list[dict[str, Any]], last_good: str | None = None) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "bisect.json").write_text(json.dumps({"package": pkg, "versions": versions, "first_bad": first_bad,
                                                  "last_good": last_good, "steps": steps, "rows": rows},
                                                 indent=2) + "\n", encoding="utf-8")
