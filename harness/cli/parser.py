"""The ``harness`` parser, built from a registry of command modules: each exposes
``add_parser(sub)`` (its subcommand, with ``set_defaults(func=run)``) and ``run(args) -> int``.
A new command is one module and one line in ``COMMANDS``; the order is ``--help``'s."""

from __future__ import annotations

import argparse
import importlib

from harness.cli.flags import add_global_flags

COMMANDS = (
    "harness.cli.commands.run",
    "harness.cli.commands.report",
    "harness.cli.commands.merge",
    "harness.cli.commands.compare",
    "harness.cli.commands.recommend",
    "harness.cli.commands.repro",
    "harness.cli.commands.validate",
    "harness.cli.commands.listing",
    "harness.cli.commands.plan",
    "harness.cli.commands.crosscheck",
    "harness.cli.commands.matrix",
    "harness.cli.commands.bisect",
    "harness.cli.commands.export",
    "harness.cli.commands.schema",
    "harness.cli.commands.gate",
    "harness.cli.commands.diag",
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="harness", description="Benchmark and conformance harness for GPU attention backends.")
    add_global_flags(p)  # --version, -v/-vv (harness/cli/flags.py)
    sub = p.add_subparsers(dest="command", required=True)
    for name in COMMANDS:  # light modules: each imports its heavy parts in run()
        importlib.import_module(name).add_parser(sub)
    return p
