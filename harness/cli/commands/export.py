"""``harness export``: results as one flat table (harness/records/export.py)."""

from __future__ import annotations

import argparse
from typing import Any

from harness.cli.common import UsageError


def add_parser(sub: Any) -> None:
    ex = sub.add_parser("export", help="results as one flat table, one row per cell: CSV or parquet")
    ex.add_argument("results", nargs="+", help="results folders or results.jsonl files")
    g = ex.add_mutually_exclusive_group(required=True)
    g.add_argument("--csv", metavar="FILE", help="write CSV")
    g.add_argument("--parquet", metavar="FILE", help="write parquet (needs pyarrow)")
    ex.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from harness.records.export import ExportError, export

    try:
        out = export(args.results, csv=args.csv, parquet=args.parquet)
    except ExportError as e:
        raise UsageError(str(e)) from None
    print(f"wrote {out}")
    return 0
