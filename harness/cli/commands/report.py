"""One self-contained HTML report from results folders (harness/report/)."""

from __future__ import annotations

import argparse
from typing import Any
from harness.cli.common import UsageError, console, err_console


def add_parser(sub: Any) -> None:
    rp = sub.add_parser("report", help="one self-contained HTML report from results folders / .jsonl files")
    rp.add_argument("results", nargs="+", help="results folders or results.jsonl files")
    rp.add_argument("-o", "--output", default="report.html", help="HTML file to write (default: report.html)")
    rp.add_argument("--title", help="page title")
    rp.add_argument("--jobs", type=_jobs, default=None, metavar="N",
                    help="processes to build the page's sections in (default: one per core, up to 8; 1: in this process)")
    rp.set_defaults(func=run)


def _jobs(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"--jobs {text!r}: give a whole number >= 1")
    return n


def run(args: argparse.Namespace) -> int:
    from harness.report import write_report

    try:
        out = write_report(args.results, args.output, title=args.title, jobs=args.jobs,
                           warn=lambda m: err_console().print(f"warning: {m}", highlight=False, markup=False,
                                                              soft_wrap=True))
    except (FileNotFoundError, ValueError) as e:
        raise UsageError(str(e)) from None
    console().print(f"Report: {out}")
    return 0
