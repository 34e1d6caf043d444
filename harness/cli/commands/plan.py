"""`harness plan PLAN.yaml`: run an evidence session's named steps, each with its own time limit
(harness/tools/evidence_plan.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def add_parser(sub: Any) -> None:
    p = sub.add_parser("plan", help="run an evidence session's named steps (PLAN.yaml), each with its time limit")
    p.add_argument("plan", help="plan file: env, and steps of name / run / timeout_s / why")
    p.add_argument("--results", default="plan-results", help="folder for every step's output and log "
                                                             "(steps see it as $RESULTS)")
    p.add_argument("--archive", metavar="FILE.tgz", help="re-pack the results folder here after every step")
    p.add_argument("--only", help="comma-separated step names to run, in the order given (default: all, "
                                  "in the file's order)")
    p.add_argument("--deadline", type=float, metavar="SECONDS",
                   help="a bound on the whole plan: each step's limit is cut to what is left")
    p.add_argument("--dry-run", action="store_true", help="validate the plan and print its steps; run nothing")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from harness.tools.evidence_plan import PlanError, load_plan, run_plan, selected_steps

    try:
        plan = load_plan(Path(args.plan))
    except PlanError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    only = [s for s in (args.only or "").split(",") if s] or None
    unknown = sorted(set(only or []) - {s.name for s in plan.steps})
    if unknown:
        print(f"error: {args.plan}: --only names no step called {', '.join(unknown)}; "
              f"steps: {', '.join(s.name for s in plan.steps)}", file=sys.stderr)
        return 2
    if args.dry_run:
        for s in selected_steps(plan, only):
            print(f"{s.name} ({s.timeout_s} s): {s.run}")
        return 0
    record = run_plan(plan, Path(args.results), Path(args.archive) if args.archive else None, only, args.deadline)
    failed = [s["name"] for s in record["steps"] if s.get("rc") not in (0, None)]
    return 1 if failed else 0
