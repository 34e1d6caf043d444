"""The measured backend per shape bucket: markdown, policy files, engine settings (harness/analysis/recommend)."""

from __future__ import annotations

import argparse
import sys
from typing import Any
from harness.cli.common import UsageError, err_console


def add_parser(sub: Any) -> None:
    rc = sub.add_parser("recommend", help="fastest passing backend+variant per shape bucket, vLLM export, policy JSON")
    rc.add_argument("results", nargs="+", help="results folders or results.jsonl files, all from one GPU")
    rc.add_argument("--tie", default="3%", help="margins under this are ties, e.g. 3%% (default)")
    rc.add_argument("--out", metavar="DIR", help="write recommend.md, policy.json and vllm.json into DIR")
    rc.add_argument("--suggest", metavar="SUITE.yaml", help="write a suite whose cases fill the unmeasured buckets")
    rc.add_argument("--engine", choices=["vllm", "sglang"], help="one serving setting per model shape for this engine")
    rc.add_argument("--call-form", choices=["vllm", "fastest", "any"], default="vllm",
                    help="which flash-attn/flashinfer call form the verdicts rank (default vllm: as vLLM calls them)")
    rc.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Measured backend per shape bucket: markdown to stdout, policy files into --out."""
    from harness.analysis.compare import parse_threshold
    from harness.analysis.recommend import recommend, to_markdown, write_outputs, write_suggest

    command = " ".join(["harness", *sys.argv[1:]]) if sys.argv[1:2] == ["recommend"] else ""
    try:
        tie = parse_threshold(args.tie.replace("--threshold", "--tie"))
        rec = recommend(args.results, tie=tie, call_form=args.call_form)
        md = to_markdown(rec, command, vllm_sections=args.engine != "sglang")
        from harness.analysis.callform_gap import gap_markdown
        from harness.analysis.recommend import load_inputs

        both_forms = load_inputs(args.results, "any")  # both call forms, whatever --call-form ranks
        gap = gap_markdown(both_forms.rows, tie)
        md += ("\n" + gap) if gap else ""
        from harness.analysis.spec_decode import spec_markdown  # graph-modes rows only (docs/spec_decode.md)

        spec = spec_markdown(both_forms.rows, both_forms.facts)
        md += ("\n" + spec) if spec else ""
        if args.engine:  # the per-model engine settings lead (harness/analysis/per_model.py)
            from harness.analysis.per_model import engine_markdown, write_engine_outputs

            md = engine_markdown(args.results, args.engine, tie, args.call_form) + "\n" + md
        if args.suggest:  # the suite is checked against this install's registry, as `harness validate` does
            from harness.spec.registry_check import check_suite_backends

            n = write_suggest(rec, args.suggest, check_suite_backends)
        paths = write_outputs(rec, args.out, command) if args.out else []
        if args.out and args.engine:
            paths += write_engine_outputs(args.results, args.engine, tie, args.out, args.call_form)
    except ValueError as e:  # RecommendError is a ValueError; so is a bad --tie
        raise UsageError(str(e).replace("--threshold", "--tie")) from None
    print(md, end="")
    for p in paths:
        err_console().print(f"wrote {p}")
    if args.suggest:
        err_console().print(f"--suggest: {n} case(s) -> {args.suggest}" if n else "--suggest: every bucket is measured; nothing written")
    return 0
