"""`harness diag NAME [ARGS...]`: measurement diagnostics, one module each.

Diagnostics answer "why is this figure what it is" on a GPU machine (or, for the run summaries,
from any results folder); they are evidence, not gates. Each module has ``main(argv, prog)`` with
its own flags (`harness diag NAME --help`) and is imported only when its name is given, so the
GPU ones cost nothing elsewhere and say so plainly when no CUDA device is visible.
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any

from harness.tools.diag import DIAGNOSTICS


def _epilog() -> str:
    return "diagnostics:\n" + "\n".join(f"  {name:14} {why}" for name, (_, why) in DIAGNOSTICS.items())


def add_parser(sub: Any) -> None:
    p = sub.add_parser("diag", help="measurement diagnostics (callform, clocks, direct, fidelity, decode-minute, interleave, interleave-paired, speed)",
                       description=__doc__.split("\n\n")[0], epilog=_epilog(),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", choices=sorted(DIAGNOSTICS), metavar="NAME", help="the diagnostic (listed below)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="its own flags: harness diag NAME --help")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    module, _ = DIAGNOSTICS[args.name]
    mod = importlib.import_module(f"harness.tools.diag.{module}")
    try:
        return int(mod.main(list(args.args), prog=f"harness diag {args.name}"))
    except SystemExit as e:  # argparse inside the diagnostic: --help (0) or a usage error (2)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)

