#!/usr/bin/env python
"""The CI regression gate of this repository: `harness gate` (harness/cli/commands/gate.py) with this
checkout's ci/smoke.yaml and ci/baselines/cpu-smoke as defaults, runnable from any folder.

    python ci/gate.py --correctness-only      # the same as `harness gate --correctness-only` at the root
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # runnable as a plain script from any folder

from harness.cli.commands.gate import build_parser as _build_parser  # noqa: E402
from harness.cli.commands.gate import main as _main  # noqa: E402
from harness.cli.commands.gate import run_args, run_suite  # noqa: E402,F401  (kept for scripts importing them)

DEFAULT_SUITE = ROOT / "ci" / "smoke.yaml"
DEFAULT_BASELINE = ROOT / "ci" / "baselines" / "cpu-smoke"


def build_parser():
    p = _build_parser(prog="ci/gate.py")
    p.set_defaults(suite=DEFAULT_SUITE, baseline=DEFAULT_BASELINE)
    return p


def main(argv: list[str] | None = None) -> int:
    return _main(argv, prog="ci/gate.py", suite=DEFAULT_SUITE, baseline=DEFAULT_BASELINE)


if __name__ == "__main__":
    sys.exit(main())
