"""`harness plan PLAN.yaml`: run an evidence session's named steps, each with its own time limit.

A GPU evidence session (reports/<gpu>/<date>/plan.yaml) is data, not code: an ordered list of
shell steps. The runner gives each step its limit (SIGINT first, so a `harness run` keeps its
finished rows, then SIGKILL), logs each step to RESULTS/logs/NAME.log, records rc and seconds in
RESULTS/plan.json after every step, and re-packs RESULTS into one archive after every step, so
whatever finished survives when the machine's own command limit cuts the session short.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from harness.records.fileio import atomic_path


class Step(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    run: str = Field(min_length=1)
    timeout_s: int = Field(gt=0)
    why: str = ""  # what the step measures, copied into plan.json for the README


class Plan(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    env: dict[str, str] = {}
    steps: list[Step] = Field(min_length=1)

    @field_validator("steps")
    @classmethod
    def _unique(cls, steps: list[Step]) -> list[Step]:
        names = [s.name for s in steps]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"step names must be unique: {', '.join(dup)}")
        return steps


class PlanError(Exception):
    pass


def load_plan(path: Path) -> Plan:
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise PlanError(f"{path}: {e}") from None
    try:
        return Plan.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(x) for x in first["loc"])
        raise PlanError(f"{path}: field {loc}: {first['msg']}") from None


def _run_step(step: Step, env: dict[str, str], log: Path, limit: float) -> tuple[int, float, bool]:
    t0 = time.monotonic()
    with log.open("w") as fh:
        proc = subprocess.Popen(["bash", "-c", step.run], stdout=fh, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=limit)
            return rc, time.monotonic() - t0, False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGINT)  # a harness run saves its rows and says how to resume
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            return 124, time.monotonic() - t0, True


def _pack(results: Path, archive: Path) -> None:
    with atomic_path(archive, mkdir=False) as tmp, tarfile.open(tmp, "w:gz") as tar:
        tar.add(results, arcname=results.name)


def run_plan(plan: Plan, results: Path, archive: Path | None, only: list[str] | None,
             deadline_s: float | None) -> dict[str, Any]:
    results.mkdir(parents=True, exist_ok=True)
    (results / "logs").mkdir(exist_ok=True)
    env = {**os.environ, **plan.env, "RESULTS": str(results)}
    t_start = time.monotonic()
    record: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "steps": []}
    for step in plan.steps:
        if only and step.name not in only:
            continue
        limit: float = step.timeout_s
        if deadline_s is not None:
            left = deadline_s - (time.monotonic() - t_start)
            if left < 15:
                record["steps"].append({"name": step.name, "rc": None, "skipped": "deadline reached"})
                print(f"=== skip {step.name}: the plan's deadline is reached", flush=True)
                continue
            limit = min(limit, left)
        print(f"=== {time.strftime('%H:%M:%S')} {step.name} (limit {limit:.0f} s): {step.run}", flush=True)
        rc, secs, timed_out = _run_step(step, env, results / "logs" / f"{step.name}.log", limit)
        print(f"=== {step.name} rc={rc} in {secs:.1f} s{' (time limit)' if timed_out else ''}", flush=True)
        tail = (results / "logs" / f"{step.name}.log").read_text(errors="replace").splitlines()[-15:]
        for line in tail:
            print(f"  [{step.name}] {line}", flush=True)
        record["steps"].append({"name": step.name, "run": step.run, "why": step.why, "rc": rc,
                                "seconds": round(secs, 1), "timed_out": timed_out})
        (results / "plan.json").write_text(json.dumps(record, indent=1))
        if archive is not None:
            _pack(results, archive)
    return record


def add_parser(sub: Any) -> None:
    p = sub.add_parser("plan", help="run an evidence session's named steps (PLAN.yaml), each with its time limit")
    p.add_argument("plan", help="plan file: env, and steps of name / run / timeout_s / why")
    p.add_argument("--results", default="plan-results", help="folder for every step's output and log "
                                                             "(steps see it as $RESULTS)")
    p.add_argument("--archive", metavar="FILE.tgz", help="re-pack the results folder here after every step")
    p.add_argument("--only", help="comma-separated step names to run (default: all, in order)")
    p.add_argument("--deadline", type=float, metavar="SECONDS",
                   help="a bound on the whole plan: each step's limit is cut to what is left")
    p.add_argument("--dry-run", action="store_true", help="validate the plan and print its steps; run nothing")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
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
        for s in plan.steps:
            if not only or s.name in only:
                print(f"{s.name} ({s.timeout_s} s): {s.run}")
        return 0
    record = run_plan(plan, Path(args.results), Path(args.archive) if args.archive else None, only, args.deadline)
    failed = [s["name"] for s in record["steps"] if s.get("rc") not in (0, None)]
    return 1 if failed else 0
