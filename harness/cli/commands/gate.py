"""The regression gate (`harness gate`; ``ci/gate.py`` is a wrapper kept for old commands):
run a small suite (or take finished results), compare with a baseline, exit non-zero on a
regression.

    harness gate --correctness-only                    # CPU CI: ci/smoke.yaml vs ci/baselines/cpu-smoke
    harness gate --results results/decode-x --baseline ci/baselines/h200-decode   # speed + correctness
    harness gate --update-baseline                     # rewrite the baseline from a fresh run
    harness gate --device cuda --baseline B --remeasure 2   # GPU: rows found slower are re-run twice
    harness gate --results NEW --baseline ci/baselines/RUNS --confirm 2   # a folder of runs; fresh re-runs

The default suite and baseline are ``ci/smoke.yaml`` and ``ci/baselines/cpu-smoke`` under the
current directory (a project's root); ``--suite`` / ``--baseline`` name others.

What fails: a correctness regression, a missing row, a row that stopped running, and (only
where timings are not noise-dominated: see harness/analysis/compare.py and docs/reports.md) a row
slower beyond the threshold, the device class's run-to-run noise band and both CIs. When
the gate ran the suite itself it re-measures the rows it found slower (--remeasure times)
and keeps only the slowdowns every re-measurement confirms.

Exit codes: 0 no regression, 1 regression, 2 bad input (missing suite/baseline/results).
The markdown summary goes to stdout, to --markdown FILE, and to $GITHUB_STEP_SUMMARY if set;
each regression is also a ``::error`` line (docs/ci.md); --junit / --benchmark-json as
`harness compare`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

DEFAULT_SUITE = Path("ci") / "smoke.yaml"
DEFAULT_BASELINE = Path("ci") / "baselines" / "cpu-smoke"


def run_suite(suite: Path, out: Path, device: str, backends: str | None, no_time: bool,
              options: dict[str, Any] | None = None) -> int:
    """``harness run SUITE`` into ``out`` (``options``: more of its flags by name, ``run_options``'s),
    through the same ``Runner`` as the command; its exit code (2: bad input, printed)."""
    from harness.cli.commands.run import start
    from harness.cli.entry import is_bad_input, print_error
    from harness.cli.run_flags import RunFlags, option_argv

    try:
        suite = suite.resolve().relative_to(Path.cwd())  # a short path in the rows' reproducers
    except ValueError:
        pass
    opts = {"device": device, "out": str(out), "quiet": True, **(options or {}), "backends": backends,
            "no_time": no_time}
    argv = ["harness", "run", str(suite), *option_argv(opts)]  # the command run.json records
    try:
        return start(RunFlags.from_options(suite=str(suite), **opts), argv).exit_code
    except Exception as e:
        if not is_bad_input(e):
            raise
        return print_error(e)


def run_options(args: argparse.Namespace, cases: list[str] | None = None) -> dict[str, Any]:
    """The harness run flags the gate passes through, by name (``cases``: instead of --case)."""
    regime = getattr(args, "clock_regime", None) or baseline_regime(args.baseline)
    return {"case": list(args.case if cases is None else cases), "variant": list(args.variant),
            "max_time": args.max_time or None, "cpu_clock": args.cpu_clock, "no_isolation": args.no_isolation,
            "clock_regime": regime or None}


def run_args(args: argparse.Namespace, cases: list[str] | None = None) -> list[str]:
    """``run_options`` as harness run's command-line flags."""
    from harness.cli.run_flags import option_argv

    return option_argv(run_options(args, cases))


def baseline_regime(baseline: Path) -> str | None:
    """The clock regime the baseline's run.json records (GPU runs), so the gate's run is timed
    in the same one (compare refuses two regimes)."""
    from harness.analysis.compare_runs import run_folders
    from harness.records.results import read_run_header

    try:
        try:
            first = run_folders(baseline)[0]  # a folder of runs: the runs share one regime
        except FileNotFoundError:
            first = Path(baseline)
        regime = read_run_header(first).clock_regime if Path(first).is_dir() else None
    except (OSError, ValueError):
        return None
    return regime if regime in ("burst", "sustained") else None


def _several_runs(baseline: Path) -> bool:
    """Whether ``baseline`` is a folder of runs' results folders (docs/ci.md), not one run."""
    from harness.records.results import results_file

    return (baseline.is_dir() and not results_file(baseline).exists()
            and any(d.is_dir() and results_file(d).exists() for d in baseline.iterdir()))


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--suite", type=Path, default=DEFAULT_SUITE, help="suite to run (default ./ci/smoke.yaml)")
    p.add_argument("--baseline", type=Path, default=DEFAULT_BASELINE,
                   help="baseline results folder, or a folder of several runs' results folders (each row is then "
                        "judged against its spread over them; docs/ci.md) (default ./ci/baselines/cpu-smoke)")
    p.add_argument("--results", type=Path, help="compare these results instead of running the suite")
    p.add_argument("--out", type=Path, help="keep the new results here (default: a temporary folder)")
    p.add_argument("--device", default="cpu", help="device for the run (default cpu)")
    p.add_argument("--backends", help="override the suite's backends")
    p.add_argument("--case", action="append", default=[], metavar="PATTERN", help="run only these cases (repeatable)")
    p.add_argument("--variant", action="append", default=[], metavar="BACKEND.AXIS=VALUE",
                   help="narrow a backend's variants, as harness run --variant (repeatable)")
    p.add_argument("--max-time", metavar="SECONDS", help="sampling budget per cell, as harness run --max-time")
    p.add_argument("--cpu-clock", choices=["wall", "process"],
                   help="CPU timing clock for the run (process: CPU timings the gate can judge)")
    p.add_argument("--clock-regime", choices=["burst", "sustained"],
                   help="GPU clock regime of the run, as harness run --clock-regime (default: the baseline's, "
                        "from its run.json; compare refuses rows of two regimes)")
    p.add_argument("--no-isolation", action="store_true",
                   help="run the cells in this process, as harness run --no-isolation (no worker start-up; "
                        "a crashing backend then ends the gate)")
    p.add_argument("--remeasure", type=int, default=2, metavar="N",
                   help="re-run the cells of rows found slower N times; a slowdown stands only if every "
                        "re-measurement confirms it (default 2; 0: off; only when the gate ran the suite)")
    p.add_argument("--confirm", type=int, default=0, metavar="N",
                   help="as harness compare --confirm: re-run each row still failing on speed N times in fresh "
                        "processes; it fails only if slower again in a majority (default 0: off)")
    p.add_argument("--correctness-only", action="store_true", help="statuses and missing rows only (CPU CI)")
    p.add_argument("--threshold", default="5%",
                   help="speed threshold (default 5%%); also beyond the noise band and non-overlapping CIs")
    p.add_argument("--allow-missing", action="append", metavar="PATTERN", default=[])
    p.add_argument("--allow-skip", action="append", nargs="?", const="*", metavar="PATTERN", default=[])
    p.add_argument("--markdown", type=Path, help="also write the summary here")
    p.add_argument("--report", action="store_true", help="write report.html (baseline + new) next to the new results")
    p.add_argument("--update-baseline", action="store_true", help="run the suite and replace the baseline with it")
    from harness.analysis.ci_output import add_flags

    add_flags(p)  # --junit, --benchmark-json


def build_parser(prog: str = "harness gate") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    add_arguments(p)
    return p


def add_parser(sub: Any) -> None:
    g = sub.add_parser("gate", help="CI regression gate: run a small suite (default ./ci/smoke.yaml), compare with a "
                                    "baseline, exit 1 on a regression (docs/ci.md)")
    add_arguments(g)
    g.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return gate(args)


def main(argv: list[str] | None = None, prog: str = "harness gate", **defaults: Any) -> int:
    """The gate as a script (``ci/gate.py`` passes its repository's suite and baseline)."""
    p = build_parser(prog)
    p.set_defaults(**defaults)
    return gate(p.parse_args(argv))


def gate(args: argparse.Namespace) -> int:
    from harness.analysis.ci_output import benchmark_entries, github_annotations, junit_xml
    from harness.analysis.compare import compare_paths, parse_threshold, to_markdown
    from harness.analysis.compare_confirm import confirm_by_rerun, confirm_slowdowns
    from harness.records.results import read_rows

    if not args.results and not args.suite.is_file():
        print(f"gate: error: no such suite file {args.suite}", file=sys.stderr)
        return 2
    if not args.update_baseline and not args.baseline.exists():  # before a run of minutes, not after it
        print(f"gate: error: no baseline at {args.baseline} (create one with --update-baseline)", file=sys.stderr)
        return 2
    if args.update_baseline and _several_runs(args.baseline):
        # A baseline of several runs (docs/ci.md): rewriting it as one run would drop them.
        print(f"gate: error: {args.baseline} is a baseline of several runs; add or replace one of its run "
              f"folders (harness run ... --out {args.baseline}/run-N) instead of --update-baseline",
              file=sys.stderr)
        return 2
    tmp = None
    try:
        if args.results:
            new = args.results
        else:
            new = args.out or Path(tempfile.mkdtemp(prefix="gate-")) / "new"
            tmp = None if args.out else new.parent
            rc = run_suite(args.suite, new, args.device, args.backends,
                           no_time=args.correctness_only and not args.update_baseline, options=run_options(args))
            if rc == 2:
                return 2
        if args.update_baseline:
            if args.baseline.exists():
                shutil.rmtree(args.baseline)
            shutil.copytree(new, args.baseline, ignore=shutil.ignore_patterns("report.html"))
            print(f"gate: baseline {args.baseline} rewritten from {new}")
            return 0
        if not args.baseline.exists():
            print(f"gate: error: no baseline at {args.baseline} (create one with --update-baseline)", file=sys.stderr)
            return 2
        try:
            comp = compare_paths(args.baseline, new, threshold=parse_threshold(args.threshold),
                                 correctness_only=args.correctness_only, allow_missing=args.allow_missing,
                                 allow_skip=args.allow_skip)
        except (FileNotFoundError, ValueError) as e:
            print(f"gate: error: {e}", file=sys.stderr)
            return 2
        slow = comp.of("slower") + comp.of("clock-shifted")  # a clock shift is re-measured too
        if slow and not args.results and args.remeasure > 0:
            again = []
            for i in range(args.remeasure):
                # The suspect cases only (exact names), every backend of the run.
                again_opts = run_options(args, cases=sorted({d.key[1] for d in slow}))
                out = Path(tempfile.mkdtemp(prefix="gate-remeasure-")) / "r"
                try:
                    if run_suite(args.suite, out, args.device, args.backends, no_time=False, options=again_opts) == 2:
                        return 2
                    again.append(read_rows(out))
                finally:
                    shutil.rmtree(out.parent, ignore_errors=True)
                shifted = len(comp.of("clock-shifted"))
                print(f"gate: re-measured {len(slow)} slower row(s)" + (f", {shifted} of them clock-shifted" if shifted
                                                                         else "") + f" ({i + 1}/{args.remeasure})",
                      file=sys.stderr)
            confirm_slowdowns(comp, again)
        confirm_by_rerun(comp, new, args.confirm, log=lambda m: print(f"gate: {m}", file=sys.stderr))
        md = to_markdown(comp, str(args.baseline), str(new))
        print(md, end="")
        if args.markdown:
            args.markdown.write_text(md, encoding="utf-8")
        summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if summary:
            with open(summary, "a", encoding="utf-8") as fh:
                fh.write(md)
        if os.environ.get("GITHUB_ACTIONS") == "true":
            for line in github_annotations(comp, new):
                print(line)
        if args.junit:
            Path(args.junit).write_text(junit_xml(comp), encoding="utf-8")
        if args.benchmark_json:
            import json

            Path(args.benchmark_json).write_text(json.dumps(benchmark_entries(comp), indent=1) + "\n", encoding="utf-8")
        if args.report and not tmp:
            from harness.report import write_report

            print(f"gate: report {write_report([args.baseline, new], Path(new) / 'report.html')}")
        print("gate: REGRESSED" if comp.regressed else "gate: OK", file=sys.stderr)
        return 1 if comp.regressed else 0
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


