"""``main``: parse, dispatch, and turn bad input into one line (exit 2) and Ctrl-C / SIGTERM
into the command that resumes the run (exit 130 / 143)."""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
from pathlib import Path

from rich.markup import escape

from harness import interrupts
from harness.records import suite_copy
from harness.cli.common import EXIT_USAGE, RESULTS_FILE, UsageError, err_console, read_rows, spec_error
from harness.cli.parser import build_parser
from harness.cli.flags import configure_logging
from harness.interrupts import Terminated

__all__ = ["Terminated", "main", "resume_command"]  # Terminated: programs catch it from here


def resume_command(argv: list[str], out_dir: Path) -> str:
    """The command that continues an interrupted run: its own arguments, with --out (or an
    earlier --resume) replaced by ``--resume DIR``."""
    kept: list[str] = []
    it = iter(argv)
    for a in it:
        if a in ("--out", "--resume"):
            next(it, None)
        elif not a.startswith(("--out=", "--resume=")):
            kept.append(a)
    if kept[:1] == ["run"] and len(kept) > 1 and (Path(out_dir) / suite_copy.SUITE_COPY).is_file():
        # The folder's copy of the suite and absolute paths: the command works from any directory.
        kept[1] = str((Path(out_dir) / suite_copy.SUITE_COPY).resolve())
        out_dir = Path(out_dir).resolve()
    return shlex.join(["harness", *kept, "--resume", str(out_dir)])


def _interrupted(args: argparse.Namespace | None, argv: list[str], terminated: bool = False) -> int:
    out_dir = getattr(args, "started_out_dir", None)
    what = "terminated (SIGTERM)" if terminated else "interrupted"
    if out_dir is None:
        # At most the suite's copy is in the results folder: no run.json, nothing to resume.
        err_console().print(f"{what} before the run started: nothing to resume", highlight=False)
    else:
        n = len(read_rows(out_dir)) if (out_dir / RESULTS_FILE).exists() else 0
        err_console().print(f"{what}: {n} finished row(s) are saved in {escape(str(out_dir))}; continue with:",
                            highlight=False)
        err_console().print(f"  {escape(resume_command(argv, out_dir))}", highlight=False, soft_wrap=True)
    return 128 + signal.SIGTERM if terminated else 130


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = None
    restore_term = False
    try:
        # From here on Ctrl-C is a KeyboardInterrupt handled below (the startup guard exits bare);
        # an embedding program's own SIGTERM handler stays.
        take_term = signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
        interrupts.install(sigterm=take_term)
        restore_term = take_term
    except ValueError:  # not the main thread: leave signals alone
        pass
    try:
        args = build_parser().parse_args(argv)
        args.argv = argv
        configure_logging(args)
        return args.func(args)
    except Exception as e:  # a SpecError or UsageError; the suite models load only if something was raised
        if not isinstance(e, (spec_error(), UsageError)):
            raise
        err_console().print(f"[bold red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
        return EXIT_USAGE
    except KeyboardInterrupt as e:
        interrupts.handled()
        return _interrupted(args, argv, terminated=isinstance(e, Terminated))
    finally:
        if restore_term:  # main() called from a program: SIGTERM is its own again afterwards
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
