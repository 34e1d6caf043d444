"""NEW against BASELINE: correctness regressions, missing rows, slowdowns beyond the noise."""

from __future__ import annotations

import argparse
from typing import Any
from pathlib import Path

from harness.analysis import ci_output
from harness.cli.common import UsageError


def add_parser(sub: Any) -> None:
    cp = sub.add_parser("compare", help="compare NEW against BASELINE; exit 1 on a correctness regression, a missing "
                                        "row, or a slowdown beyond the threshold and the run-to-run noise "
                                        "(noise-dominated timings, e.g. CPU wall clock, are reported, not gated)")
    cp.add_argument("baseline", help="baseline results folder or .jsonl")
    cp.add_argument("new", help="new results folder or .jsonl")
    cp.add_argument("--threshold", default="5%",
                    help="smallest median change that counts, e.g. 5%% (default); a class of timings whose "
                         "run-to-run spread is wider is noise-dominated (docs/reports.md)")
    cp.add_argument("--correctness-only", action="store_true", help="ignore timing: statuses and missing rows only")
    cp.add_argument("--allow-missing", action="append", metavar="PATTERN",
                    help="accept rows missing from NEW: a case, backend or variant name, or a glob over "
                         "SUITE/CASE/BACKEND/VARIANT (repeatable)")
    cp.add_argument("--allow-skip", action="append", nargs="?", const="*", metavar="PATTERN",
                    help="accept rows that became skipped/unsupported (all, or those matching PATTERN; repeatable)")
    cp.add_argument("--markdown", metavar="FILE", help="also write the markdown summary to FILE")
    ci_output.add_flags(cp)  # --junit, --benchmark-json (harness/analysis/ci_output.py)
    cp.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from harness.analysis.compare import compare_paths, parse_threshold, to_markdown

    try:
        comp = compare_paths(args.baseline, args.new, threshold=parse_threshold(args.threshold),
                             correctness_only=args.correctness_only, allow_missing=args.allow_missing or [],
                             allow_skip=args.allow_skip or [])
    except (FileNotFoundError, ValueError) as e:
        raise UsageError(str(e)) from None
    md = to_markdown(comp, str(args.baseline), str(args.new))
    print(md, end="")
    if args.markdown:
        Path(args.markdown).write_text(md, encoding="utf-8")
    ci_output.emit(args, comp, md)  # $GITHUB_STEP_SUMMARY, ::error lines, --junit, --benchmark-json
    return 1 if comp.regressed else 0
