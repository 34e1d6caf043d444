"""Join shard folders (and --resume leftovers) into one results folder (harness/records/merge.py)."""

from __future__ import annotations

import argparse
from typing import Any
from pathlib import Path

from harness.records import suite_copy
from harness.cli.common import UsageError, console, err_console


def add_parser(sub: Any) -> None:
    mg = sub.add_parser("merge", help="join shard folders (and --resume leftovers) into one results folder")
    mg.add_argument("dirs", nargs="+", metavar="DIR", help="results folders of one suite run (e.g. the shards of --shard K/N)")
    mg.add_argument("-o", "--output", required=True, metavar="DIR", help="the merged results folder to write")
    mg.add_argument("--strict", action="store_true", help="exit 1 if a cell is missing or duplicated")
    mg.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Join shard folders (and --resume leftovers) into one results folder (harness/records/merge.py)."""
    from harness.records.merge import MergeError, merge_dirs, write_merged

    try:
        res = merge_dirs([Path(d) for d in args.dirs])
        out = write_merged(res, Path(args.output))
        copies = [Path(d) / suite_copy.SUITE_COPY for d in args.dirs if (Path(d) / suite_copy.SUITE_COPY).is_file()]
        if copies:  # shards of one suite: the merged folder keeps its copy too
            suite_copy.save(out, copies[0])
    except MergeError as e:
        raise UsageError(str(e)) from None
    console().print(f"{len(res.rows)} rows from {len(args.dirs)} folder(s) -> {out}")
    for what, items in (("missing", res.missing), ("duplicated (first folder's row kept)", res.duplicated)):
        if items:
            err_console().print(f"{len(items)} cell(s) {what}:", highlight=False)
            for k in items[:20]:
                err_console().print(f"  {k}", highlight=False, markup=False)
    return 1 if (res.missing or res.duplicated) and args.strict else 0
