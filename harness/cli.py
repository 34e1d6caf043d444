"""The ``harness`` command line: run suites, list backends."""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from harness import registry
from harness.results import RESULTS_FILE, ResultRow, ResultWriter, write_header
from harness.spec import SpecError, load_suite

EXIT_USAGE = 2

console = Console(stderr=False)
err_console = Console(stderr=True)


class UsageError(Exception):
    """Bad command-line input: printed as one line, exit code 2."""


def _parse_variants(items: list[str]) -> dict[str, dict[str, list[str]]]:
    out: dict[str, dict[str, list[str]]] = {}
    for item in items:
        target, eq, values = item.partition("=")
        backend, dot, axis = target.rpartition(".")
        if not eq or not dot or not backend or not axis or not values:
            raise UsageError(f"--variant {item!r}: expected BACKEND.AXIS=VALUE[,VALUE...], e.g. flash-attn.fa_version=3")
        out.setdefault(backend, {}).setdefault(axis, []).extend(v for v in values.split(",") if v)
    return out


def _pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError(f"--device {name}: torch sees no CUDA device here (torch {torch.__version__})")
    try:
        return torch.device(name)
    except RuntimeError:
        raise UsageError(f"--device {name!r}: expected auto, cpu, cuda or cuda:N") from None


def _fmt(x: Any, spec: str) -> str:
    return "" if x is None else format(x, spec)


STATUS_STYLE = {"pass": "green", "mismatch": "bold red", "error": "red", "unsupported": "yellow",
                "skipped": "dim", "timeout": "magenta"}


def print_summary(rows: list[ResultRow], out_dir: Path, max_rows: int = 80) -> None:
    counts = Counter((r.backend, r.variant_label, r.status) for r in rows)
    keys = sorted({(b, v) for b, v, _ in counts})
    statuses = ["pass", "mismatch", "error", "timeout", "unsupported", "skipped"]
    t = Table(title="Summary: cells by status", show_lines=False)
    t.add_column("backend")
    t.add_column("variant")
    for s in statuses:
        t.add_column(s, justify="right", style=STATUS_STYLE[s])
    for b, v in keys:
        t.add_row(b, v or "-", *[str(counts.get((b, v, s), 0) or "") for s in statuses])
    console.print(t)

    ran = [r for r in rows if r.status in ("pass", "mismatch", "error", "timeout")]
    if ran:
        d = Table(title=f"Cells that ran ({len(ran)}; first {min(len(ran), max_rows)} shown)")
        for col in ("case", "backend", "variant", "status", "median us", "TFLOP/s", "TB/s", "max abs err"):
            d.add_column(col, justify="right" if col[0].isupper() or col.startswith(("median", "max")) else "left")
        for r in ran[:max_rows]:
            m, tm, ck = r.metrics or {}, r.timing or {}, r.check or {}
            d.add_row(r.case, r.backend, r.variant_label or "-", f"[{STATUS_STYLE[r.status]}]{r.status}",
                      _fmt(tm.get("median_us"), ".1f"), _fmt(m.get("tflops"), ".3g"), _fmt(m.get("tbps"), ".3g"),
                      _fmt(ck.get("max_abs_err"), ".2e"))
        console.print(d)

    not_run = Counter((r.status, r.backend, r.reason) for r in rows if r.status in ("unsupported", "skipped"))
    if not_run:
        s = Table(title="Not run, and why")
        for col in ("status", "backend", "cells", "reason"):
            s.add_column(col)
        for (st, b, reason), n in sorted(not_run.items()):
            s.add_row(f"[{STATUS_STYLE[st]}]{st}", b, str(n), reason)
        console.print(s)
    bad = [r for r in rows if r.status in ("mismatch", "error", "timeout")]
    for r in bad[:20]:
        err_console.print(f"[{STATUS_STYLE[r.status]}]{r.status}[/] {r.case} {r.backend} {r.variant_label}: {r.reason}")
        err_console.print(f"  reproduce: {r.reproducer}")
    console.print(f"Results: {out_dir / RESULTS_FILE}")


def cmd_run(args: argparse.Namespace) -> int:
    from harness.env import run_header
    from harness.runner import RunOptions, default_out_dir, iterate_suite, plan_cells

    suite = load_suite(args.suite)
    names = args.backends.split(",") if args.backends else (suite.backends or list(registry.known_backends()))
    try:
        backends = registry.resolve_many([n.strip() for n in names if n.strip()])
    except registry.BackendLookupError as e:
        raise UsageError(str(e)) from None
    device = _pick_device(args.device)
    opts = RunOptions(
        device=device,
        suite_path=args.suite,
        seed=args.seed,
        case_patterns=args.case or [],
        variant_filters=_parse_variants(args.variant or []),
        check=not args.no_check,
        time=not args.no_time,
        cpu_max_gflop=args.cpu_max_gflop,
        cpu_max_kv_mib=args.cpu_max_kv_mib,
    )
    cells = plan_cells(suite, backends, opts)
    if not cells:
        raise UsageError("nothing to run: no case/backend/variant matches the filters")
    out_dir = Path(args.out) if args.out else default_out_dir(suite)
    if (out_dir / RESULTS_FILE).exists():
        raise UsageError(f"--out {out_dir}: already holds {RESULTS_FILE}; choose another folder")

    versions = {}
    for b in backends:
        a = b.availability()
        versions[b.name] = {"available": a.available, "reason": a.reason, **a.versions}
    write_header(out_dir, run_header(device, versions, ["harness", *sys.argv[1:]],
                                     {"suite": suite.suite, "suite_file": args.suite, "cells": len(cells)}))
    rows: list[ResultRow] = []
    console.print(f"[bold]{suite.suite}[/]: {len(cells)} cells on {device} -> {out_dir}")
    with ResultWriter(out_dir) as writer, Progress(
        TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(), console=console, transient=False, disable=args.quiet,
    ) as progress:
        task = progress.add_task("starting", total=len(cells))

        def on_start(cell: Any) -> None:
            progress.update(task, description=f"{cell.case.name[:40]} {cell.backend.name}")

        for row in iterate_suite(suite, backends, opts, on_start=on_start):
            writer.write(row)
            rows.append(row)
            progress.advance(task)
        progress.update(task, description="done")
    print_summary(rows, out_dir)
    return 1 if any(r.status in ("mismatch", "error", "timeout") for r in rows) and args.strict else 0


def cmd_list(args: argparse.Namespace) -> int:
    t = Table(title="Backends")
    for col in ("backend", "variant", "available", "why not / versions", "capabilities"):
        t.add_column(col, overflow="fold")
    for name, spec in sorted(registry.known_backends().items()):
        try:
            cls = registry.load_spec(spec)
        except registry.BackendLookupError as e:
            t.add_row(name, "-", "[red]no", str(e), "")
            continue
        for v in cls.variants():
            a = cls.availability(v)
            caps = cls.capabilities(v).describe()
            info = a.reason if not a.available else ", ".join(f"{k} {val}" for k, val in a.versions.items())
            capstr = "; ".join(f"{k}={','.join(map(str, val)) if isinstance(val, list) else val}" for k, val in caps.items())
            label = ",".join(f"{k}={val}" for k, val in v.items()) or "-"
            t.add_row(name, label, "[green]yes" if a.available else "[red]no", info, capstr)
    console.print(t)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="harness", description="Benchmark and conformance harness for GPU attention backends.")
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="run a suite: check every cell against the reference and time it")
    r.add_argument("suite", help="suite YAML file, e.g. suites/decode.yaml")
    r.add_argument("--backends", help="comma-separated backend names or module:Class specs (default: the suite's, else all)")
    r.add_argument("--out", help="results folder (default: results/SUITE-TIMESTAMP)")
    r.add_argument("--seed", type=int, help="override every case's seed")
    r.add_argument("--case", action="append", help="only cases with this name or glob (repeatable)")
    r.add_argument("--variant", action="append", help="restrict a variant axis: BACKEND.AXIS=V[,V] (repeatable)")
    r.add_argument("--device", default="auto", help="auto (default: cuda if available), cpu, cuda, cuda:N")
    r.add_argument("--no-check", action="store_true", help="skip the reference check (timing only)")
    r.add_argument("--no-time", action="store_true", help="skip timing (conformance only)")
    r.add_argument("--cpu-max-gflop", type=float, default=0.5, help="on CPU, skip cases above this many GFLOP (default 0.5)")
    r.add_argument("--cpu-max-kv-mib", type=float, default=128.0, help="on CPU, skip cases whose KV cache exceeds this (default 128)")
    r.add_argument("--strict", action="store_true", help="exit 1 if any cell is mismatch/error/timeout")
    r.add_argument("--quiet", action="store_true", help="no progress bar")
    r.set_defaults(func=cmd_run)

    ls = sub.add_parser("list", help="every backend, whether it is available here and why, and its capabilities")
    ls.set_defaults(func=cmd_list)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (SpecError, UsageError) as e:
        err_console.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
        return EXIT_USAGE
    except KeyboardInterrupt:
        err_console.print("interrupted: rows finished so far are saved")
        return 130


if __name__ == "__main__":
    sys.exit(main())
