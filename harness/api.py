"""The harness from Python (a notebook, a script): run a suite, load results as one flat
DataFrame, write a report, compare two runs. docs/api.md documents the columns.

    import harness
    df = harness.run("suites/decode.yaml", device="cpu", backends="torch-math,sdpa", no_time=True)
    df = harness.load(["results/a", "results/b"])       # df.attrs["case_legend"]: c1 -> case name
    harness.api.report(["results/a"], "report.html")
    cmp = harness.api.compare("results/base", "results/new")   # cmp.regressed, cmp.diffs

Errors are one exception each: ``HarnessError`` (bad input: suite file, option, results path)
with the message the command line prints.
"""

from __future__ import annotations

import argparse
import ast
import io
import logging
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

if TYPE_CHECKING:
    import pandas as pd

    from harness.analysis.compare import Comparison
    from harness.execute.runner import Reporter

log = logging.getLogger(__name__)

__all__ = ["HarnessError", "run", "load", "report", "compare"]


class HarnessError(ValueError):
    """Bad input to the API: the same one-line message `harness` prints before exit 2."""


def _paths(paths: str | Path | Iterable[str | Path]) -> list[Path]:
    return [Path(paths)] if isinstance(paths, (str, Path)) else [Path(p) for p in paths]


def load(paths: str | Path | Iterable[str | Path]) -> "pd.DataFrame":
    """Rows of results folders / .jsonl files as one flat frame, one row per cell: top-level
    fields as columns, payloads flattened with dots (``timing.median_us``, ``check.max_abs_err``,
    ``variant.fa_version``), plus ``case_id`` (c1, c2, ... over all the paths given; the legend
    is ``df.attrs["case_legend"]``), ``label`` (backend [variant]) and ``results`` (the path the
    row came from). Columns: docs/api.md."""
    from harness.records.export import flat_frame

    try:
        return flat_frame(_paths(paths))
    except (FileNotFoundError, ValueError) as e:
        raise HarnessError(str(e)) from None


def _main_guard_problem() -> str | None:
    """Why worker processes cannot start from this ``__main__``, or None. Workers are spawned,
    and a spawned process re-imports the main script: a script that calls ``run`` at top level
    without ``if __name__ == "__main__":`` would run again in every worker."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if not path or not Path(path).is_file() or getattr(main, "__spec__", None) is not None:
        return None  # a notebook, stdin, -c, python -m: nothing is re-imported from a path
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None
    for node in tree.body:
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test) and "__name__" in ast.unparse(node.test):
            return None
    return (f"{path} calls harness.run without `if __name__ == \"__main__\":`; its worker processes re-import "
            f"the script, so put the call under that guard, or pass isolation=False to run the cells in this process")


def _main_importable() -> bool:
    """Whether a spawned worker can start from this ``__main__`` (a script file or python -m);
    in a notebook, from stdin or ``python -c`` the cells run in this process instead."""
    main = sys.modules.get("__main__")
    if getattr(main, "__spec__", None) is not None:
        return True
    path = getattr(main, "__file__", None)
    return path is not None and bool(path) and Path(path).is_file()


def run(suite: str | Path, *, out: str | Path | None = None, isolation: bool | None = None,
        reporter: "Reporter | None" = None, **options: Any) -> "pd.DataFrame":
    """Run a suite as `harness run SUITE` would and return its rows (``load`` of the results
    folder). ``options`` are `harness run`'s flags by name: ``device="cpu"``,
    ``backends="torch-math,sdpa"``, ``case=["decode-*"]``, ``no_time=True``, ``max_time=0.5``, ...
    ``out``: the results folder (default: a new temporary folder, ``df.attrs["results"]``).
    ``isolation``: cells in worker processes (crash-safe, timeouts) or in this process; by
    default workers when they can start (a script with a main guard, python -m), this
    process otherwise (a notebook, stdin).
    ``reporter``: where the run's events go (``harness.execute.runner.Reporter``); default the
    terminal's without a progress bar, ``quiet=True``: no summary either (failures still go
    to stderr)."""
    from harness.cli.commands.run import start
    from harness.cli.common import UsageError, spec_error
    from harness.cli.flags import configure_logging
    from harness.cli.run_flags import RunFlags, option_argv

    quiet = bool(options.pop("quiet", False))
    if isolation is None:
        isolation = _main_importable()
        if not isolation:
            log.info("harness.run: __main__ is not importable by a worker (notebook/stdin): cells run in this process")
    if isolation:
        problem = _main_guard_problem()
        if problem:
            raise HarnessError(problem)
    out_dir = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="harness-run-")) / "results"
    # What run.json records as the command (and a resume repeats): the command line of this call.
    argv = ["harness", "run", str(suite), "--out", str(out_dir), "--quiet", *option_argv(options)]
    if not isolation:
        argv.append("--no-isolation")
    configure_logging(argparse.Namespace())  # warnings to stderr, as the command line's
    if reporter is None and quiet:
        from rich.console import Console

        from harness.cli.reporter import ConsoleReporter

        reporter = ConsoleReporter(console=Console(file=io.StringIO()), quiet=True)
    try:
        flags = RunFlags.from_options(suite=str(suite), out=str(out_dir), quiet=True, no_isolation=not isolation,
                                      **options)
        start(flags, argv, reporter)
    except Exception as e:
        if isinstance(e, (UsageError, spec_error())):
            raise HarnessError(str(e)) from None
        raise
    df = load(out_dir)
    df.attrs["results"] = str(out_dir)
    return df


def report(paths: str | Path | Iterable[str | Path], output: str | Path = "report.html",
           title: str | None = None) -> Path:
    """One self-contained HTML report of the results (`harness report`); returns its path."""
    from harness.report import write_report

    try:
        return write_report([str(p) for p in _paths(paths)], output, title=title)
    except (FileNotFoundError, ValueError) as e:
        raise HarnessError(str(e)) from None


def compare(baseline: str | Path, new: str | Path, *, threshold: str | float = "5%",
            correctness_only: bool = False, allow_missing: list[str] | None = None,
            allow_skip: list[str] | None = None) -> "Comparison":
    """`harness compare` as an object: ``.regressed``, ``.diffs`` (one per matched row, with
    ``.kind`` such as ``slower`` or ``status``), ``.of(kind)``; ``harness.analysis.compare.to_markdown``
    renders it."""
    from harness.analysis.compare import compare_paths, parse_threshold

    try:
        t = parse_threshold(threshold) if isinstance(threshold, str) else float(threshold)
        return compare_paths(baseline, new, threshold=t, correctness_only=correctness_only,
                             allow_missing=allow_missing or [], allow_skip=allow_skip or [])
    except (FileNotFoundError, ValueError) as e:
        raise HarnessError(str(e)) from None
