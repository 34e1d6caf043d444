"""``main``: parse, dispatch, and turn bad input into one line (exit 2) and Ctrl-C / SIGTERM
into the command that resumes the run (exit 130 / 143)."""

from __future__ import annotations

import argparse
import os
import re
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
from harness.records.fileio import OutputPathError
from harness.interrupts import Terminated

__all__ = ["Terminated", "is_bad_input", "main", "print_error", "resume_command"]  # Terminated: programs catch it from here


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


def _resume_arg(argv: list[str]) -> str | None:
    """``--resume DIR`` read off the raw arguments (an interrupt before they were parsed)."""
    for i, a in enumerate(argv):
        if a == "--resume" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--resume="):
            return a.split("=", 1)[1]
    return None


def _interrupted(args: argparse.Namespace | None, argv: list[str], terminated: bool = False) -> int:
    out_dir = getattr(args, "started_out_dir", None)
    resumed = getattr(args, "resume", None) if args is not None else _resume_arg(argv)
    if out_dir is None and resumed and (Path(resumed) / RESULTS_FILE).is_file():
        out_dir = Path(resumed)  # stopped before the resume started: the folder's rows are still there
    what = "terminated (SIGTERM)" if terminated else "interrupted"
    if out_dir is None:
        # At most the suite's copy is in the results folder: no run.json, nothing to resume.
        err_console().print(f"{what} before the run started: nothing to resume", highlight=False)
    else:
        try:
            n = len(read_rows(out_dir)) if (out_dir / RESULTS_FILE).exists() else 0
        except ValueError:  # a corrupt file: the resume says what is wrong with it
            n = 0
        err_console().print(f"{what}: {n} finished row(s) are saved in {escape(str(out_dir))}; continue with:",
                            highlight=False)
        err_console().print(f"  {escape(resume_command(argv, out_dir))}", highlight=False, soft_wrap=True)
    return 128 + signal.SIGTERM if terminated else 130


def is_bad_input(e: Exception) -> bool:
    """Bad input, which the command line prints as one line (exit 2): a suite's SpecError, a
    UsageError, an output path that cannot be written."""
    return isinstance(e, (spec_error(), UsageError, OutputPathError))


def print_error(e: Exception) -> int:
    """``error: MESSAGE`` on stderr; the exit code of bad input."""
    err_console().print(f"[bold red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
    return EXIT_USAGE


def _drop_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's last flush does not fail again on the
    closed pipe (Python's documented recipe for SIGPIPE)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # a captured stdout (tests, an embedding program)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


_NEGATIVE = re.compile(r"-\d+(\.\d*)?%?|-\.\d+%?")


def join_negative_values(argv: list[str]) -> list[str]:
    """``--threshold -5%`` as ``--threshold=-5%``: argparse takes a value that starts with '-'
    (and is not a plain number) for an option and fails before the flag's own check can say
    what is wrong with it. No positional of any command is a negative number."""
    out: list[str] = []
    for a in argv:
        if out and _NEGATIVE.fullmatch(a) and out[-1].startswith("--") and "=" not in out[-1] and out[-1] != "--":
            out[-1] = f"{out[-1]}={a}"
        else:
            out.append(a)
    return out


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
        args = build_parser().parse_args(join_negative_values(argv))
        args.argv = argv
        configure_logging(args)
        rc = args.func(args)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
        return rc
    except BrokenPipeError:  # `harness ... | head`: the reader has all it wanted; not a failure
        _drop_stdout()
        return 0
    except SystemExit as e:  # rich's console on a closed pipe: stdout already on /dev/null, then exit 1
        if isinstance(e.__context__, BrokenPipeError):
            return 0
        raise
    except Exception as e:  # a SpecError, UsageError or unwritable output path; the suite models load only if something was raised
        signum = interrupts.pending()
        if signum is not None:  # an error the interrupt caused (an import it cut short): the interrupt's exit
            interrupts.handled()
            return _interrupted(args, argv, terminated=signum == signal.SIGTERM)
        if not is_bad_input(e):
            raise
        return print_error(e)
    except KeyboardInterrupt as e:
        interrupts.handled()
        return _interrupted(args, argv, terminated=isinstance(e, Terminated))
    finally:
        if restore_term:  # main() called from a program: SIGTERM is its own again afterwards
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
