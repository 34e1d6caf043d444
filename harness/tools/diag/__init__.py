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

# name -> (module under harness.tools.diag, one line for `harness diag --help`)
DIAGNOSTICS: dict[str, tuple[str, str]] = {
    "callform": ("callform", "GPU: the adapter's call vs each library's plain call, one factor a line"),
    "direct": ("direct", "GPU: the orientation cells timed through the raw library calls, beside the harness's rows"),
    "fidelity": ("fidelity", "GPU: the harness's time vs torch.profiler's kernel time, per cell"),
    "decode-minute": ("decode_minute", "the main job twice back to back: wall time, breakdowns, repeatability"),
    "clocks": ("clocks", "GPU: one decode call burst (after idle) vs sustained (after load), with SM clock, power, read cost"),
    "speed": ("speed", "a run's wall time and where it went; with two folders the speed-up and verdict agreement"),
    "interleave": ("interleave", "GPU: interleaved vs sequential sampling, hot and cold L2, in fresh processes; "
                                 "every row within 1%?"),
}


def _epilog() -> str:
    return "diagnostics:\n" + "\n".join(f"  {name:14} {why}" for name, (_, why) in DIAGNOSTICS.items())


def add_parser(sub: Any) -> None:
    p = sub.add_parser("diag", help="measurement diagnostics (callform, clocks, direct, fidelity, decode-minute, interleave, speed)",
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

