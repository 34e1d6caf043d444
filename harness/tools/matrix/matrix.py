"""``harness matrix SUITE --env NAME=REQS ...``: the same suite, same seeds, in one isolated
environment per entry (harness/tools/matrix/envs.py), then a side-by-side comparison of every env
against the first with ``harness.analysis.compare``'s noise-aware rules (correctness changes first).

Writes OUT/NAME/ (a results folder per env: run.json gains ``environment``, every row gains
``environment`` with the env's name and exact versions), OUT/comparison.md and OUT/matrix.json.
Exit 0: no env regressed against the first; 1: one did; 2: bad input or an env that cannot be built.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, TypeVar

from harness.records.fileio import atomic_write_text
from harness.tools.matrix.envs import (BuiltEnv, EnvError, EnvSpec, build_env, parse_env_arg, torch_mismatch,
                                 torch_request_mismatch)
from harness.records.header import MatrixEnvironment
from harness.records.results import (HEADER_FILE, RESULTS_FILE, ResultRow, RowEnvironment, read_rows, read_run_header, row_json,
                             write_header)

T = TypeVar("T")


class MatrixError(Exception):
    """Bad input: one line, exit 2."""


def error(msg: str) -> int:
    from rich.console import Console
    from rich.markup import escape

    Console(stderr=True).print(f"[bold red]error:[/] {escape(msg)}", highlight=False, soft_wrap=True)
    return 2


def say(msg: str) -> None:
    print(msg, flush=True)


def run_args_of(args: argparse.Namespace) -> list[str]:
    """The flags after ``--`` (for every `harness run`); this command's own options given between
    SUITE and ``--`` are parsed into ``args`` here."""
    rest = list(args.run_args or [])
    pre, extra = (rest[:rest.index("--")], rest[rest.index("--") + 1:]) if "--" in rest else (rest, [])
    args.run_args = []
    if pre:
        args.parser.parse_args([*pre, args.suite], namespace=args)
    for bad in ("--out", "--resume"):
        if any(a == bad or a.startswith(bad + "=") for a in extra):
            raise MatrixError(f"{bad} after --: the matrix names each env's results folder itself (use --out DIR)")
    return extra


def checked_inputs(args: argparse.Namespace, own: Callable[[argparse.Namespace], T]) -> tuple[list[str], Any, T]:
    """What matrix and bisect check before building anything, in this order: the run flags
    (which may set this command's options), the command's ``own`` inputs (its parsed value is
    returned), the suite file and the threshold. Raises MatrixError."""
    from harness.analysis.compare import parse_threshold

    extra = run_args_of(args)
    parsed = own(args)
    if not Path(args.suite).is_file():
        raise MatrixError(f"{args.suite}: no such suite file")
    try:
        threshold = parse_threshold(args.threshold)
    except ValueError as e:
        raise MatrixError(str(e)) from None
    return extra, threshold, parsed


def guarded(body: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """``body(args)``, with bad input and an env that cannot be built as one line and exit 2."""
    try:
        return body(args)
    except (MatrixError, EnvError) as e:
        return error(str(e))


def out_root(args: argparse.Namespace, prefix: str) -> Path:
    if args.out:
        return Path(args.out)
    return Path("results") / f"{prefix}-{Path(args.suite).stem}-{time.strftime('%Y%m%d-%H%M%S')}"


def build_all(specs: list[EnvSpec], args: argparse.Namespace) -> list[BuiltEnv]:
    wheelhouse = Path(args.wheelhouse) if args.wheelhouse else None
    # Refused before a build: a torch release is gigabytes to install.
    msg = torch_request_mismatch(specs)
    if msg and not args.allow_torch_mismatch:
        raise EnvError(msg)
    envs = []
    for spec in specs:
        t0 = time.perf_counter()
        env = build_env(spec, Path(args.env_cache), wheelhouse)
        got = ", ".join(f"{k} {v}" for k, v in env.record()["versions"].items())
        say(f"env {spec.name}: {'reused' if env.reused else 'built'} {env.path} ({got}) in {time.perf_counter() - t0:.1f} s")
        envs.append(env)
    msg = torch_mismatch({e.spec.name: e.versions for e in envs})
    if msg and not args.allow_torch_mismatch:
        raise EnvError(msg)
    return envs


def tag_results(out_dir: Path, env: BuiltEnv) -> None:
    """Record the env in run.json and in every row (rewritten atomically)."""
    record = env.record()
    header = read_run_header(out_dir).updated(environment=MatrixEnvironment.model_validate(record))
    write_header(out_dir, header)
    row_env = RowEnvironment(name=record["name"], versions=record["versions"])
    rows = read_rows(out_dir)
    atomic_write_text(out_dir / RESULTS_FILE,
                      "".join(row_json(r.model_copy(update={"environment": row_env})) + "\n" for r in rows))


def run_in_env(env: BuiltEnv, suite: str, out_dir: Path, run_args: list[str]) -> list[ResultRow]:
    """``harness run SUITE`` in the env, in a subprocess; its rows, tagged with the env."""
    if (out_dir / RESULTS_FILE).exists():
        raise MatrixError(f"{out_dir}: already holds {RESULTS_FILE}; choose another --out")
    cmd = [str(env.python), "-m", "harness", "run", suite, "--out", str(out_dir), *run_args]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env.run_environ(), capture_output=True, text=True)
    if proc.returncode not in (0, 1) or not (out_dir / HEADER_FILE).exists():
        tail = [ln for ln in (proc.stderr + proc.stdout).strip().splitlines() if ln.strip()] or ["no output"]
        raise MatrixError(f"env {env.spec.name}: `harness run` exited {proc.returncode}: {tail[-1].strip()}")
    if not (out_dir / RESULTS_FILE).exists():
        (out_dir / RESULTS_FILE).write_text("")
    tag_results(out_dir, env)
    rows = read_rows(out_dir) if (out_dir / RESULTS_FILE).stat().st_size else []
    say(f"env {env.spec.name}: {len(rows)} row(s) -> {out_dir} in {time.perf_counter() - t0:.1f} s")
    return rows


def env_reproducer(env: BuiltEnv, row: ResultRow) -> str:
    return f"PYTHONPATH={env.site}${{PYTHONPATH:+:$PYTHONPATH}} {row.reproducer}"


def _cell(row: ResultRow | None) -> str:
    if row is None:
        return "-"
    t = row.timing
    return str(row.status) + (f", {t.median_us:.2f} us" if t is not None else "")


def side_by_side(envs: list[BuiltEnv], rows: list[list[ResultRow]], comps: list[Any]) -> str:
    """The markdown: versions, one table of every row across the envs (regressions first), then
    each env's full comparison against the first."""
    from harness.analysis.compare import to_markdown
    from harness.report.markdown import escape as _md_escape

    names = [e.spec.name for e in envs]
    lines = ["# Matrix: " + " vs ".join(f"`{n}`" for n in names), "", "| env | requirements | versions |",
             "|---|---|---|"]
    for e in envs:
        v = ", ".join(f"{k} {x}" for k, x in e.record()["versions"].items())
        lines.append(f"| {e.spec.name} | {_md_escape(' '.join(e.spec.requirements))} | {_md_escape(v)} |")
    by_env = [{r.key: r for r in rs} for rs in rows]
    problems: dict[tuple, list[str]] = {}
    for name, comp in zip(names[1:], comps):
        for d in comp.diffs:
            if d.problem:
                problems.setdefault(d.key, []).append(f"{name}: {d.problem}")
    keys = list(dict.fromkeys(k for rs in rows for k in (r.key for r in rs)))
    # Correctness changes first, then slowdowns, then the rest in suite order.
    rank = {k: (0 if any("correctness" in p or "missing" in p or "stopped" in p for p in problems[k]) else 1)
            for k in problems}
    keys.sort(key=lambda k: rank.get(k, 2))
    lines += ["", "## Rows", "", "| row | " + " | ".join(names) + " | verdict |", "|" + "---|" * (len(names) + 2)]
    for k in keys:
        label = f"{k[1]} / {k[2]}" + (f" [{k[3]}]" if k[3] else "")
        cells = [_cell(e.get(k)) for e in by_env]
        lines.append("| " + " | ".join(_md_escape(c) for c in [label, *cells, "; ".join(problems.get(k, [])) or "ok"])
                     + " |")
    for name, comp in zip(names[1:], comps):
        lines += ["", to_markdown(comp, baseline=names[0], new=name)]
    return "\n".join(lines).rstrip() + "\n"


def run_matrix(args: argparse.Namespace) -> int:
    """`harness matrix`'s parsed arguments -> its exit code (bad input: one line, 2)."""
    return guarded(_run, args)


def _env_specs(args: argparse.Namespace) -> list[EnvSpec]:
    if not args.env:
        raise MatrixError("give at least one --env NAME=REQS (two or more to compare)")
    specs = [parse_env_arg(t) for t in args.env]
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise MatrixError(f"--env names must differ: {', '.join(names)}")
    return specs


def _run(args: argparse.Namespace) -> int:
    from harness.analysis.compare import compare_rows

    extra, threshold, specs = checked_inputs(args, _env_specs)
    names = [s.name for s in specs]
    root = out_root(args, "matrix")
    for n in names:
        if (root / n / RESULTS_FILE).exists():
            raise MatrixError(f"--out {root}: {n}/ already holds {RESULTS_FILE}; choose another folder")
    envs = build_all(specs, args)
    rows = [run_in_env(e, args.suite, root / e.spec.name, extra) for e in envs]
    comps = [compare_rows(rows[0], rs, threshold=threshold) for rs in rows[1:]]
    md = side_by_side(envs, rows, comps)
    (root / "comparison.md").write_text(md, encoding="utf-8")
    summary = {"suite": args.suite, "baseline": names[0],
               "environments": [e.record() for e in envs],
               "regressions": {e.spec.name: [{"row": d.name, "problem": d.problem,
                                              "reproducer": env_reproducer(e, d.new) if d.new else None}
                                             for d in c.regressions] for e, c in zip(envs[1:], comps)}}
    (root / "matrix.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    regressed = [e.spec.name for e, c in zip(envs[1:], comps) if c.regressed]
    say(f"comparison -> {root / 'comparison.md'}")
    for e, c in zip(envs[1:], comps):
        for d in c.regressions:
            say(f"  {e.spec.name}: {d.name}: {d.problem}")
            if d.new is not None and d.new.reproducer:
                say(f"    reproduce: {env_reproducer(e, d.new)}")
    say(f"regressed against {names[0]}: {', '.join(regressed)}" if regressed else f"no env regressed against {names[0]}")
    return 1 if regressed else 0

