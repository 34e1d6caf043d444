"""`harness matrix SUITE --env NAME=REQS ...`: one suite in one isolated environment per --env,
compared side by side (harness/tools/matrix/); its flags are shared with `harness bisect`."""

from __future__ import annotations

import argparse
from typing import Any

from harness.tools.matrix.envs import DEFAULT_CACHE


def add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("suite", help="suite YAML file")
    p.add_argument("--wheelhouse", metavar="DIR",
                   help="install offline from the wheels in DIR (pip --no-index --find-links DIR); default: the index")
    p.add_argument("--out", metavar="DIR", help="output folder (default results/matrix-SUITE-TIME)")
    p.add_argument("--env-cache", metavar="DIR", default=str(DEFAULT_CACHE),
                   help=f"where environments are built and reused, by their requirements' hash (default {DEFAULT_CACHE})")
    p.add_argument("--allow-torch-mismatch", action="store_true",
                   help="run even when the environments' torch builds differ (a torch upgrade check)")
    p.add_argument("--threshold", default="5%", help="smallest median change that counts (as harness compare)")
    # REMAINDER keeps `harness run` flags away from this parser; the options given after SUITE
    # and before -- are parsed again by run_args_of.
    p.add_argument("run_args", nargs=argparse.REMAINDER, metavar="-- RUN_FLAGS",
                   help="flags after -- go to every `harness run` (e.g. -- --device cpu --backends X --case Y)")


def add_parser(sub: Any) -> None:
    p = sub.add_parser("matrix", help="run one suite in one isolated environment per --env (e.g. two releases of a "
                                      "library) and compare them side by side; exit 1 if an env regressed")
    p.add_argument("--env", action="append", metavar="NAME=REQS",
                   help="an environment: a name and pip requirements, e.g. new=\"flashinfer-python==0.7.4\" "
                        "(repeatable; the first is the baseline)")
    add_common(p)
    p.set_defaults(func=run, parser=p)


def run(args: argparse.Namespace) -> int:
    from harness.tools.matrix.matrix import run_matrix

    return run_matrix(args)
