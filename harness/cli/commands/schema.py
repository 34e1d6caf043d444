"""``harness schema row|suite|run``: the JSON Schemas of the file formats (harness/records/schema.py)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from harness.records.fileio import atomic_write_text
from harness.records.schema import SCHEMAS


def add_parser(sub: Any) -> None:
    sc = sub.add_parser("schema", help="print the JSON Schema of a result row, a suite file or run.json")
    sc.add_argument("what", choices=sorted(SCHEMAS), help="row (results.jsonl lines), suite (YAML files), run (run.json)")
    sc.add_argument("-o", "--output", metavar="FILE", help="write it to FILE instead of stdout")
    sc.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    text = json.dumps(SCHEMAS[args.what](), indent=1) + "\n"
    if args.output:
        atomic_write_text(args.output, text)  # a bad path: one line, exit 2 (harness/records/fileio.py)
    else:
        print(text, end="")
    return 0
