"""A standalone script reproducing one row (harness/crosscheck/repro.py); --shrink makes a failing case smaller first."""

from __future__ import annotations

import argparse
import shlex
from typing import Any
from pathlib import Path

from attn_contract.status import Status
from harness.records import suite_copy
from harness.cli.run_flags import pick_device
from harness.cli.common import UsageError, console, read_rows


def add_parser(sub: Any) -> None:
    rpo = sub.add_parser("repro", help="write a standalone script (torch + the library only) reproducing one row; "
                                       "--shrink makes a failing case smaller first")
    rpo.add_argument("results", help="results folder or .jsonl file")
    rpo.add_argument("row", help="the row: its index in the results file (0-based), its reproducer string, "
                                 "or its case name (narrow with --backend / --variant)")
    rpo.add_argument("--backend", help="with a case name: the row's backend")
    rpo.add_argument("--variant", help="with a case name: the row's variant label")
    rpo.add_argument("--suite", metavar="FILE", help="the suite file (default: the one the row's reproducer names)")
    rpo.add_argument("--shrink", action="store_true",
                     help="re-run the failing cell here on fewer requests, shorter contexts, fewer heads while it "
                          "still fails the same way; write the script of the smallest")
    rpo.add_argument("--max-attempts", type=int, default=40, help="bound on --shrink's re-runs (default 40)")
    rpo.add_argument("--device", help="device for --shrink (default: the row's, cuda or cpu)")
    rpo.add_argument("-o", "--output", metavar="FILE", help="script to write (default: repro_<row index>.py)")
    rpo.set_defaults(func=run)


def _row_suite(results: str, row: Any) -> str | None:
    """The suite a row's reproducer names, found from any directory (harness/records/suite_copy.py)."""
    try:
        parts = shlex.split(row.reproducer)
    except ValueError:
        parts = []
    return suite_copy.find_suite(results, parts[2] if parts[:2] == ["harness", "run"] and len(parts) > 2 else None)


def run(args: argparse.Namespace) -> int:
    """A standalone script reproducing one row (harness/crosscheck/repro.py); --shrink first."""
    from harness.crosscheck import repro
    from harness.registry import resolve

    try:
        rows = read_rows(args.results)
        index, row = repro.select_row(rows, args.row, backend=args.backend, variant=args.variant)
        case, spec = repro.case_of_row(row, args.suite or _row_suite(args.results, row))
        try:
            backend = resolve(spec)
        except Exception as e:  # an unknown name or a plugin that does not import
            raise repro.ReproError(f"backend {spec!r} of row #{index}: {str(e).splitlines()[0] if str(e) else e}") from None
        variant = dict(row.variant)
        source = repro.call_source(backend, row, case, variant)  # before shrinking: fail fast
        note = ""
        if args.shrink:
            if row.status != Status.MISMATCH:
                raise repro.ReproError(f"row #{index} ({row.case} / {row.backend} [{row.variant_label}]) is "
                                       f"{row.status}, not a mismatch: --shrink shrinks failures")
            device = pick_device(args.device or ("cuda" if row.device.startswith("cuda") else "cpu"))
            run = repro.cell_runner(backend, variant, device, row)
            case, _ = repro.shrink(case, run, lambda m: console().print(m, highlight=False, markup=False, soft_wrap=True),
                                   max_attempts=args.max_attempts)
            note = f"Shrunk by `harness repro --shrink` from {row.case!r} (batch {row.batch.num_reqs or '?'} requests)."
        sc = repro.script_case(case, backend, variant)
        text = repro.render_script(row, sc, backend, variant, source, note)
    except (FileNotFoundError, ValueError, repro.ReproError) as e:
        raise UsageError(str(e)) from None
    out = Path(args.output or f"repro_{index}.py")
    out.write_text(text, encoding="utf-8")
    console().print(f"wrote {out} (row #{index}: {row.case} / {row.backend} [{row.variant_label}], {row.status}); "
                  f"run: python3 {out}", highlight=False, markup=False, soft_wrap=True)
    return 0
