"""`harness crosscheck RESULTS`: re-time every timed row's library call with outside timers
(harness/crosscheck/driver.py, each row: harness/crosscheck/run.py); the table as markdown and JSON, exit 1 if a row is flagged."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

JSON_FILE = "crosscheck.json"  # harness/report/sections/crosscheck.py reads it
MD_FILE = "crosscheck.md"
DEFAULT_TOLERANCE = "3%"


def add_parser(sub: Any) -> None:
    p = sub.add_parser("crosscheck", help="re-time every timed row's library call with outside timers (FlashInfer "
                                          "bench_gpu_time, Triton do_bench_cudagraph; CPU: torch.utils.benchmark); "
                                          "exit 1 if a row is flagged")
    p.add_argument("results", help="results folder or results.jsonl")
    p.add_argument("--out", metavar="FILE", help=f"markdown table to write (JSON beside it, .json); default "
                                                 f"RESULTS/{MD_FILE} and RESULTS/{JSON_FILE}")
    p.add_argument("--tolerance", default=DEFAULT_TOLERANCE,
                   help="flag a row further than this from the outside timers' median (and their spread), e.g. 3%% (default)")
    p.add_argument("--suite", metavar="FILE", help="the suite file (default: the one each row's reproducer names)")
    p.add_argument("--min-run-time", type=float, default=0.2, metavar="S",
                   help="CPU: blocked_autorange's min_run_time per row (default 0.2)")
    p.add_argument("--deadline", type=float, metavar="SECONDS",
                   help="start no new row after this many seconds (at least one row is re-timed); the rest are "
                        "listed as 'not re-timed: deadline'. The table is rewritten after every row either way; "
                        "the first line says how long the rows take by measured per-row costs and whether this fits")
    p.add_argument("--case", action="append", metavar="GLOB", help="only rows whose case matches (repeatable)")
    p.add_argument("--backend", action="append", metavar="GLOB", help="only rows whose backend matches (repeatable)")
    p.add_argument("--resume", action="store_true",
                   help="keep the rows an earlier (stopped) cross-check of the same results re-timed, judged again by "
                        "this version's rules; re-time the rest (nothing, for a complete one: no GPU needed)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Bad input (missing folder, no rows, bad flags): one line on stderr and exit 2."""
    try:
        return _run(args)
    except _Usage as e:
        from rich.console import Console
        from rich.markup import escape

        Console(stderr=True).print(f"[bold red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
        return 2


class _Usage(Exception):
    pass


def _run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from harness.analysis.compare import parse_threshold
    from harness.crosscheck.driver import crosscheck, result_json, select_rows
    from harness.crosscheck.table import to_markdown
    from harness.records.fileio import atomic_write_text
    from harness.records.results import read_rows

    console = Console()
    try:
        tol = parse_threshold(args.tolerance)
    except ValueError as e:
        raise _Usage(str(e).replace("--threshold", "--tolerance")) from None
    try:
        rows = read_rows(args.results)
    except (FileNotFoundError, ValueError) as e:
        raise _Usage(str(e)) from None
    if not rows:
        raise _Usage(f"{args.results}: holds no rows")
    src = Path(args.results)
    if args.out:
        md_path = Path(args.out)
        json_path = md_path.with_suffix(".json") if md_path.suffix != ".json" else md_path.with_suffix(".json.json")
    else:
        folder = src if src.is_dir() else src.parent
        md_path, json_path = folder / MD_FILE, folder / JSON_FILE
    if not md_path.parent.is_dir():
        raise _Usage(f"--out {md_path}: folder {md_path.parent} does not exist")
    if args.deadline is not None and not (args.deadline >= 0 and math.isfinite(args.deadline)):
        raise _Usage(f"--deadline {args.deadline}: give seconds >= 0")
    selected = select_rows(rows, args.case, args.backend)
    if not selected:
        raise _Usage(f"{args.results}: no row matches --case {args.case or ['*']} --backend {args.backend or ['*']}")
    previous = None
    if args.resume and json_path.is_file():
        try:
            previous = json.loads(json_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise _Usage(f"--resume: {json_path} is not readable JSON ({e})") from None

    def save(res: dict[str, Any]) -> None:
        res["results"] = str(src)
        res["filters"] = {"case": args.case, "backend": args.backend}
        atomic_write_text(json_path, result_json(res))  # nothing half-written
        atomic_write_text(md_path, to_markdown(res, str(src)) + "\n")

    err = Console(stderr=True)  # progress per row on stderr; the table on stdout at the end
    res = crosscheck(rows, tol, args.suite, args.min_run_time,
                     log=lambda m: err.print(m, highlight=False, markup=False, soft_wrap=True),
                     deadline_s=args.deadline, selected=selected, previous=previous, on_progress=save)
    save(res)
    console.print(to_markdown(res, str(src)), highlight=False, markup=False, soft_wrap=True)
    console.print(f"wrote {md_path} and {json_path}", highlight=False, markup=False, soft_wrap=True)
    return 1 if res["flagged"] else 0
