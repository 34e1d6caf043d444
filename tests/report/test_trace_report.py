"""The report's trace section on a small trace replayed end to end on CPU (sdpa + torch-math):
the numbers it shows are recomputed here from the suite's weights and the rows' medians."""
import json
import math
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "data" / "traces"


@pytest.fixture(scope="module")
def trace_run(tmp_path_factory):
    from harness.spec.trace.make_suite import main
    tmp = tmp_path_factory.mktemp("trace")
    suite = tmp / "t.yaml"
    assert main([str(DATA / "azure-llm-2023-conv.csv"), "--first", "24", "--rate-scale", "4",
                 "--sample", "4", "--max-num-batched-tokens", "256", "--block-size", "16",
                 "--heads", "2", "1", "32", "--backends", "sdpa,torch-math", "-o", str(suite)]) == 0
    import contextlib
    import io

    from harness.cli import main as harness_main
    # In this process, without workers: the trace section is under test, not the subprocess.
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        rc = harness_main(["run", str(suite), "--device", "cpu", "--quiet", "--max-time", "0.2", "--report",
                           "--no-isolation", "--out", str(tmp / "res")])
    assert rc == 0, printed.getvalue()
    return suite, tmp / "res", printed.getvalue()


def _weighted_q(pairs, q):
    # independent of the section: walk the sorted (time, weight) pairs until the fraction is reached
    pairs = sorted(pairs)
    total = sum(w for _, w in pairs)
    acc = 0.0
    for t, w in pairs:
        acc += w
        if acc >= q * total * (1 - 1e-9):
            return t
    return pairs[-1][0]


def test_trace_section_numbers(trace_run):
    from harness.report import build_sections, load
    from harness.report.core import frame
    from harness.report.sections.trace import trace_costs, winners
    suite, res, stdout = trace_run
    spec = yaml.safe_load(suite.read_text())
    weight, dec, pre = {}, {}, {}
    for c in spec["cases"]:
        weight[c["name"]] = float(next(t for t in c["tags"] if t.startswith("weight="))[7:])
        dec[c["name"]] = sum(1 for g in c["batch"] if g["kind"] == "decode")
        pre[c["name"]] = sum(g["query_len"] for g in c["batch"] if g["kind"] != "decode")
    assert any(pre.values()) and any(dec.values())   # the sample has mixed and decode-only steps
    rows = [json.loads(l) for l in open(res / "results.jsonl")]
    assert {r["status"] for r in rows} == {"pass"} and len(rows) == 2 * len(weight)
    gen_tokens = sum(weight[c] * dec[c] for c in weight)
    prompt_tokens = sum(weight[c] * pre[c] for c in weight)
    costs = trace_costs(frame(load([res]))).set_index("label")
    totals = {}
    for b in ("sdpa", "torch-math"):
        med = {r["case"]: r["timing"]["median_us"] for r in rows if r["backend"] == b}
        total = sum(weight[c] * med[c] for c in weight)
        totals[b] = total
        got = costs.loc[b]
        assert got["complete"] and got["timed"] == len(weight)
        assert got["total_us"] == pytest.approx(total, rel=1e-9)
        assert got["us_per_gen"] == pytest.approx(total / gen_tokens, rel=1e-9)
        assert got["us_per_prompt"] == pytest.approx(total / prompt_tokens, rel=1e-9)
        for q in (0.5, 0.9, 0.99):
            assert got[f"p{round(q * 100)}"] == _weighted_q([(med[c], weight[c]) for c in weight], q)
    best = min(totals, key=totals.get)
    other = max(totals, key=totals.get)
    w = winners(trace_costs(frame(load([res])))).iloc[0]
    assert w["winner_label"] == best and w["margin"] == pytest.approx(totals[other] / totals[best])
    sec = build_sections(load([res]), only=["trace"])[0]
    assert sec.has_data and not sec.error
    texts = [b.get("text", "") for b in sec.blocks]
    assert any(t.startswith(f"{spec['suite']}: {best} wins the trace") for t in texts)
    table = next(b for b in sec.blocks if b["kind"] == "table")
    cell = {r[1][0]: dict(zip(table["columns"], (c[0] for c in r))) for r in table["rows"]}
    assert cell[best]["us / generated token"] == f"{totals[best] / gen_tokens:.4g}"
    assert sum(b["kind"] == "figure" for b in sec.blocks) == 2
    html = (res / "report.html").read_text()
    assert 'id="trace"' in html and "us / generated token" in html
    # The terminal's table shows the same cost per generated token, rounded its own way (4 digits,
    # or whole µs with separators at >= 10,000 µs): compare the value, not one spelling of it, so
    # the check does not depend on how fast this machine ran the trace.
    assert "attention cost over the whole trace" in stdout
    line = next(ln for ln in stdout.split("attention cost over the whole trace", 1)[1].splitlines()
                if ln.strip("│ ").startswith(best))
    shown = [float(x.replace(",", "")) for x in re.findall(r"(?<![\w.])\d[\d,]*(?:\.\d+)?(?:e[+-]\d+)?", line)]
    assert any(math.isclose(v, totals[best] / gen_tokens, rel_tol=1e-3) for v in shown), (line, totals[best] / gen_tokens)


def test_trace_section_absent_without_trace_rows(tmp_path):
    from harness.report.core import frame, load
    from harness.report.sections.trace import trace
    rows = ROOT / "tests" / "data" / "h200" / "session-b" / "decode-1"
    assert trace(frame(load([rows]))) == []


def test_committed_h200_trace_rows_render():
    from harness.report.core import frame, load
    from harness.report.sections.trace import trace_costs, winners
    for name in ("trace-azure-conv", "trace-mooncake"):
        costs = trace_costs(frame(load([ROOT / "tests" / "data" / "h200" / "session-b" / name])))
        ranked = costs[costs["complete"]]
        assert len(ranked) >= 5 and (ranked["total_us"] > 0).all()
        # the GPU kernels beat the torch reference paths on the whole trace
        w = winners(costs).iloc[0]
        assert not w["winner"].startswith(("sdpa", "torch-math")) and w["margin"] > 1
        # cascade backends were unsupported there: listed, not ranked
        assert not costs[costs["label"].str.contains("cascade")]["complete"].any()
