"""Check a suite file and print its expanded cases; runs nothing."""

from __future__ import annotations

import argparse
import textwrap
from typing import Any
from rich.markup import escape
from rich.table import Table
from harness.cli.common import check_suite_backends, console, err_console, load_suite


_SHORT_DTYPE = {"bfloat16": "bf16", "float16": "fp16", "fp8_e4m3": "e4m3", "fp8_e5m2": "e5m2", "nvfp4": "nvfp4"}


def add_parser(sub: Any) -> None:
    va = sub.add_parser("validate", help="check a suite file and print its expanded cases (runs nothing)")
    va.add_argument("suite", help="suite YAML file")
    va.add_argument("--model", default=None, help="as harness run's --model: the suite's cases for these models")
    va.add_argument("--tp", default=None, help="as harness run's --tp (with --model)")
    va.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Load a suite with every check a run applies and print its expanded cases; runs nothing."""
    override = None
    if getattr(args, "model", None):
        override = {"model": args.model, "tp": getattr(args, "tp", None)}
    suite = load_suite(args.suite, override)
    for note in suite.notes:
        err_console().print(f"ignored: {escape(note)}", highlight=False, soft_wrap=True)
    check_suite_backends(suite)
    t = Table(title=f"{escape(suite.suite)}: {len(suite.cases)} cases")
    # 80 columns: the case name wraps, every figure stays whole (short dtype names, legend below).
    t.add_column("case", overflow="fold", ratio=1)
    for col in ("heads", "head", "dtype", "block", "reqs", "max seq", "KV tokens"):
        t.add_column(col, no_wrap=True, justify="left" if col in ("dtype", "block") else "right")
    for c in suite.cases:
        kv_tokens = c.work_bound()[1] / c.kv_bytes_per_token()  # bytes -> tokens (MLA: one latent vector each)
        dtype = _SHORT_DTYPE[c.dtype] + ("" if c.kv_cache_dtype == "auto" else f"/{_SHORT_DTYPE[c.kv_cache_dtype]}")
        t.add_row(escape(c.name), f"{c.num_heads}/{c.num_kv_heads}", str(c.head_size), dtype,
                  f"{c.block_size} {c.kv_layout}", str(c.num_requests), f"{c.max_seq_len_bound():,}", f"{kv_tokens:,.0f}")
    console().print(t)
    console().print("  heads: query/KV heads; dtype: bf16 = bfloat16, fp16 = float16, /e4m3 /e5m2 = fp8 KV cache",
                  highlight=False)
    console().print("  reqs: requests; max seq, KV tokens: upper bounds over the length distributions", highlight=False)
    from harness.spec.models.cases import model_summary  # not at import: `harness --help` stays light

    width = max(40, console().width - 4)
    for line in model_summary(suite.cases):
        # wrapped at the console's width between words: a pipe or an 80-column CI log keeps every figure whole
        for part in textwrap.wrap(line, width=width, subsequent_indent="  ", break_long_words=False):
            console().print(f"  {escape(part)}", highlight=False, soft_wrap=True)
    console().print(f"{args.suite}: valid, {len(suite.cases)} cases")
    return 0
