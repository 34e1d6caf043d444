"""An evidence session's named steps, each run with its own time limit (`harness plan PLAN.yaml`,
harness/cli/commands/plan.py).

A GPU evidence session (reports/<gpu>/<date>/plan.yaml) is data, not code: an ordered list of
shell steps. The runner gives each step its limit (SIGINT first, so a `harness run` keeps its
finished rows, then SIGKILL), logs each step to RESULTS/logs/NAME.log, records rc and seconds in
RESULTS/plan.json after every step, and re-packs RESULTS into one archive after every step, so
whatever finished survives when the machine's own command limit cuts the session short.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
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


def selected_steps(plan: Plan, only: list[str] | None) -> list[Step]:
    """The steps to run: all in the file's order, or those ``only`` names in the order it names
    them (a session fires a dependent step after the one it reads from; the file's order is
    the order the steps were written in)."""
    if not only:
        return list(plan.steps)
    by_name = {s.name: s for s in plan.steps}
    return [by_name[n] for n in dict.fromkeys(only) if n in by_name]


def run_plan(plan: Plan, results: Path, archive: Path | None, only: list[str] | None,
             deadline_s: float | None) -> dict[str, Any]:
    results.mkdir(parents=True, exist_ok=True)
    (results / "logs").mkdir(exist_ok=True)
    env = {**os.environ, **plan.env, "RESULTS": str(results)}
    t_start = time.monotonic()
    record: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "steps": []}
    for step in selected_steps(plan, only):
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
