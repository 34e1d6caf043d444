"""One process of `harness diag interleave-paired`: `harness run` in this process (``--no-isolation``)
once per mode of ORDER, each into OUT/<k>-<mode>.

    python -m harness.tools.diag.interleave_paired_child OUT ORDER SUITE [RUN_FLAGS...]

ORDER: comma-separated modes such as ``interleaved-hot,sequential-hot,sequential-hot,interleaved-hot``.
Exit: the first failing run's status, else 0.
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) < 3:
        print(__doc__.split("\n\n")[1].strip(), file=sys.stderr)
        return 2
    out, modes, run_args = Path(argv[0]), argv[1].split(","), argv[2:]
    from harness.cli.entry import main as harness_main

    for k, name in enumerate(modes):
        sampling, _, l2 = name.partition("-")
        rc = harness_main(["run", *run_args, "--sampling", sampling, "--timing-mode", l2, "--no-isolation", "--quiet",
                           "--out", str(out / f"{k}-{name}")])
        print(f"{k}-{name}: rc {rc}", flush=True)
        if rc:
            return rc
    return 0


if __name__ == "__main__":
    sys.exit(main())
