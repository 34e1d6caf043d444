"""The ``harness`` command line (``main``), as a package:

- ``parser``: the parser, built from a registry of command modules (``add_parser`` + ``run``);
- ``commands/``: one module a command, its parser and ``run`` (``harness run``: commands/run.py, its flags
  harness/cli/run_flags.py, the run itself harness/execute/runner.py's ``Runner``);
- ``reporter``: what ``harness run`` shows of a run (the ``Reporter`` on the consoles);
- ``summary``: the closing tables on the consoles;
- ``entry``: ``main``, bad input as one line (exit 2), Ctrl-C / SIGTERM as a resume command.

The names below are the package's public surface (programs and tests import them from here);
``console`` / ``err_console`` may be replaced: every command prints through them.
"""

from __future__ import annotations

from harness.cli.clock import PROCESS_T0  # noqa: F401  (first: run.json's wall_s counts the imports)
from harness.cli.common import CONSOLE as console, ERR_CONSOLE as err_console, EXIT_USAGE, RESULTS_FILE, UsageError
from harness.cli.commands.listing import list_backends
from harness.cli.entry import Terminated, main, resume_command
from harness.cli.parser import COMMANDS, build_parser
from harness.cli.summary import print_summary
from harness.execute.run_end import wall_breakdown
from harness.cli.flags import configure_logging
from harness.cli.run_flags import RunFlags

__all__ = ["COMMANDS", "EXIT_USAGE", "RESULTS_FILE", "RunFlags", "Terminated", "UsageError", "build_parser",
           "configure_logging", "console", "err_console", "list_backends", "main", "print_summary",
           "resume_command", "wall_breakdown"]
