"""NEW against BASELINE: correctness regressions, missing rows, slowdowns beyond the noise."""

from __future__ import annotations

import argparse
from typing import Any

from harness.analysis import ci_output
from harness.cli.common import UsageError
from harness.records.fileio import atomic_write_text


def add_parser(sub: Any) -> None:
    cp = sub.add_parser("compare", help="compare NEW against BASELINE; exit 1 on a correctness regression, a missing "
                                        "row, or a slowdown beyond the threshold and the run-to-run noise "
                                        "(noise-dominated timings, e.g. CPU wall clock, are reported, not gated)")
    cp.add_argument("baseline", nargs="+",
                    help="baseline results folder or .jsonl; a folder of results folders, or several paths, is a "
                         "baseline of several runs: each row is then judged against its spread over them (docs/ci.md)")
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
    cp.add_argument("--confirm", type=int, default=0, metavar="N",
                    help="re-run each row that would fail on speed N times, each in a fresh `harness run` process "
                         "(the new run's suite copy, the row's case/backend/variant, its recorded timing flags); it "
                         "fails only if slower again in a majority of them (default 0: off)")
    cp.add_argument("--match-backend", action="append", default=[], metavar="NEW=BASE",
                    help="match NEW's rows of backend NEW with the baseline's rows of BASE (a patched build "
                         "under its own name against the built-in's baseline; repeatable)")
    cp.add_argument("--markdown", metavar="FILE", help="also write the markdown summary to FILE")
    ci_output.add_flags(cp)  # --junit, --benchmark-json (harness/analysis/ci_output.py)
    cp.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import sys

    from harness.analysis.compare import compare_paths, parse_threshold, to_markdown
    from harness.analysis.compare_runs import parse_match_backend
    from harness.analysis.compare_confirm import confirm_by_rerun

    if args.confirm < 0:
        raise UsageError(f"--confirm {args.confirm}: expected a number of re-runs >= 0")
    try:
        comp = compare_paths(args.baseline, args.new, threshold=parse_threshold(args.threshold),
                             correctness_only=args.correctness_only, allow_missing=args.allow_missing or [],
                             allow_skip=args.allow_skip or [], match_backend=parse_match_backend(args.match_backend))
    except (FileNotFoundError, ValueError) as e:
        raise UsageError(str(e)) from None
    confirm_by_rerun(comp, args.new, args.confirm, log=lambda m: print(m, file=sys.stderr))
    md = to_markdown(comp, " + ".join(args.baseline), str(args.new))
    print(md, end="")
    if args.markdown:
        atomic_write_text(args.markdown, md)
    ci_output.emit(args, comp, md)  # $GITHUB_STEP_SUMMARY, ::error lines, --junit, --benchmark-json
    return 1 if comp.regressed else 0
