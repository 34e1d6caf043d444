"""`harness compare` for CI: the markdown table appended to ``$GITHUB_STEP_SUMMARY``, one
``::error file=...,title=...::`` workflow command per regression (under GitHub Actions:
``GITHUB_ACTIONS=true``), ``--junit FILE`` (testsuites
``correctness`` and ``speed``, one testcase per row in each) and ``--benchmark-json FILE`` in
github-action-benchmark's ``customSmallerIsBetter`` format (docs/ci.md)."""

from __future__ import annotations

import argparse
import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.records.fileio import atomic_write_text

if TYPE_CHECKING:  # compare imports nothing from here; the names are for the hints only
    from harness.analysis.compare import Comparison, RowDiff


def add_flags(cp: argparse.ArgumentParser) -> None:
    cp.add_argument("--junit", metavar="FILE",
                    help="write a JUnit XML report: testsuites correctness and speed, one testcase per row")
    cp.add_argument("--benchmark-json", metavar="FILE",
                    help="write NEW's medians for github-action-benchmark (tool: customSmallerIsBetter)")


def _escape_data(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_prop(s: str) -> str:
    return _escape_data(s).replace(":", "%3A").replace(",", "%2C")


def github_annotations(comp: Comparison, new: str | Path) -> list[str]:
    """One GitHub ``::error`` line per regression, pointing at NEW's results file."""
    from harness.records.results import results_file

    try:
        where = str(results_file(new))
    except OSError:
        where = str(new)
    out = []
    for d in comp.regressions:
        kind = "speed" if d.speed == "slower" else "correctness"
        out.append(f"::error file={_escape_prop(where)},title={_escape_prop(f'{kind} regression: {d.name}')}::"
                   f"{_escape_data(d.problem)}")
    return out


def _case(parent: ET.Element, d: RowDiff) -> ET.Element:
    suite, case, backend, var = d.key
    return ET.SubElement(parent, "testcase", classname=f"{suite}.{backend}" + (f"[{var}]" if var else ""),
                         name=case, time="0")


def junit_xml(comp: Comparison) -> str:
    root = ET.Element("testsuites", name="harness compare")
    corr = ET.SubElement(root, "testsuite", name="correctness")
    speed = ET.SubElement(root, "testsuite", name="speed")
    counts = {"correctness": [0, 0, 0], "speed": [0, 0, 0]}  # tests, failures, skipped
    for d in comp.diffs:
        slow = d.speed == "slower" and bool(d.problem)
        tc = _case(corr, d)
        counts["correctness"][0] += 1
        if d.problem and not slow:
            ET.SubElement(tc, "failure", message=d.problem, type="correctness")
            counts["correctness"][1] += 1
        elif d.allowed or d.resource:  # accepted, or a resource error: not comparable
            ET.SubElement(tc, "skipped", message=d.allowed or d.resource)
            counts["correctness"][2] += 1
        tc = _case(speed, d)
        counts["speed"][0] += 1
        if slow:
            ET.SubElement(tc, "failure", message=d.problem, type="speed")
            counts["speed"][1] += 1
        elif d.speed in ("not timed", "noisy") or comp.correctness_only:
            why = "--correctness-only" if comp.correctness_only else (
                "not timed on both sides" if d.speed == "not timed" else "noise-dominated timing: reported, not gated")
            ET.SubElement(tc, "skipped", message=why)
            counts["speed"][2] += 1
        elif d.ratio is not None:
            ET.SubElement(tc, "system-out").text = f"{d.speed}: new/base median {d.ratio:.3f}"
    for el, (n, f, s) in ((corr, counts["correctness"]), (speed, counts["speed"])):
        el.set("tests", str(n))
        el.set("failures", str(f))
        el.set("skipped", str(s))
        el.set("errors", "0")
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def benchmark_entries(comp: Comparison) -> list[dict[str, Any]]:
    """NEW's timed rows as customSmallerIsBetter entries: name, unit, value (median us),
    range (the CI half-width), extra (status and timing method)."""
    out = []
    for d in comp.diffs:
        r = d.new
        if r is None or r.timing is None or not r.timing.median_us:
            continue
        t = r.timing
        half = (t.ci_high_us - t.ci_low_us) / 2 if t.ci_high_us is not None and t.ci_low_us is not None else None
        e = {"name": d.name, "unit": "us", "value": round(float(t.median_us), 4)}
        if half is not None:
            e["range"] = f"±{half:.4g}"
        e["extra"] = f"status {r.status}; {t.method}; {r.device}"
        out.append(e)
    return out


def _write(path: str | Path, text: str) -> None:
    atomic_write_text(path, text)


def emit(args: argparse.Namespace, comp: Comparison, md: str) -> None:
    """Everything CI reads after the table is printed: step summary, annotations, files."""
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as fh:
            fh.write(md)
    if os.environ.get("GITHUB_ACTIONS") == "true":  # elsewhere stdout stays the markdown alone
        for line in github_annotations(comp, args.new):
            print(line)
    if getattr(args, "junit", None):
        _write(args.junit, junit_xml(comp))
    if getattr(args, "benchmark_json", None):
        _write(args.benchmark_json, json.dumps(benchmark_entries(comp), indent=1) + "\n")
