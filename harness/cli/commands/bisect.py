"""`harness bisect SUITE --versions PKG==V1,V2,...`: the first release of a package where a suite
regresses (harness/tools/matrix/bisect.py), over `harness matrix`'s environments."""

from __future__ import annotations

import argparse
from typing import Any

from harness.cli.commands.matrix import add_common


def add_parser(sub: Any) -> None:
    p = sub.add_parser("bisect", help="find the first release of a package where a suite regresses (slower beyond "
                                      "the noise, or a correctness change); exit 1 when found")
    p.add_argument("--versions", metavar="PKG==V1,V2,...",
                   help="the package and its releases in order, oldest (good) first, e.g. flash-attn-4==4.0.0b30,...,4.0.0b36")
    add_common(p)
    p.set_defaults(func=run, parser=p)


def run(args: argparse.Namespace) -> int:
    from harness.tools.matrix.bisect import run_bisect

    return run_bisect(args)
