"""The default GPU run of suites/spec_decode.yaml fits its budget (issue 48: <= 5 min on one H100,
sized for ~4) by a cost model read from the H100 rows of reports/h100/2026-12-06/loan2, where the
previous grid (90 cases) was cut at 330 s after 21 cases.

The model, all of it from those rows (``host`` of each row, run.json of the decode runs):
  - a cell costs its backend+variant's mean ``cell_ms`` + precheck + import over the loan2 rows that
    ran (pass/mismatch), without each worker's first row of that backend (its library warm-up,
    flex-attention's first compile: charged once, in ``first_use_s``);
  - a case adds its mean ``case_ms`` (generate + reference), without each worker's first case
    (CUDA warm-up, charged once);
  - the run adds what no row holds: the parent's start and expand and the worker's start
    (the loan2 decode runs' wall minus their worker's busy seconds).
Left out, and why: FlashInfer's q = 1 full-graph replay check, 54 s on one loan2 cell (and an
illegal memory access on another) while the adapter plans without fixed graph buffers
(docs/spec_decode.md); a cell of a backend not installed on loan2 (flash-attn-mla, flashmla) is
charged as FA3's (the same kind of call: a varlen FA3 kernel, UNIFORM_BATCH, replayed and timed
both ways).

``python tests/spec/test_spec_decode_budget.py`` prints the estimate per case group.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.records.load import load
from harness.records.results import ResultRow
from harness.spec import load_suite

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "suites" / "spec_decode.yaml"
LOAN2 = ROOT / "tests" / "data" / "h100" / "loan2"  # a copy of reports/h100/2026-12-06/loan2
BUDGET_S = 240.0  # the target; the limit is 300 s
# Not installed on loan2: charged as this label's cell (see the docstring).
STAND_IN = {"flash-attn-mla [fa_build=fa3-fwd]": "flash-attn [call_form=vllm,fa_version=3]",
            "flashmla": "flash-attn [call_form=vllm,fa_version=3]"}


@dataclass
class CostModel:
    cell_s: dict[str, float]  # per backend+variant label
    labels_for: dict[str, list[str]]  # attention kind -> labels that run its cells
    first_use_s: float  # each label's first row in a worker, above its mean, summed
    case_s: float  # generate + reference per case
    first_case_s: float  # the first case's generate + reference above that
    run_s: float  # parent start + expand + worker start, from the decode runs
    cells_seen: int  # rows the means are over


def _row_s(r: ResultRow) -> float:
    h = r.host
    if h is None or h.cell_ms is None:
        return 0.0
    b = h.breakdown_ms or {}
    return (h.cell_ms + b.get("precheck", 0.0) + b.get("import", 0.0)) / 1e3


def loan2_model() -> CostModel:
    rows = load([LOAN2 / "spec_decode"])[0].rows
    ran = [r for r in rows if r.status in ("pass", "mismatch") and r.host is not None and r.host.cell_ms]
    firsts: dict[tuple[Any, str], ResultRow] = {}
    for r in ran:
        firsts.setdefault((r.worker.pid if r.worker else None, r.label), r)
    first_ids = {id(r) for r in firsts.values()}
    steady: dict[str, list[float]] = defaultdict(list)
    # FlashInfer's q = 1 replay stall (54 s on one cell) is left out by rule: the median's 5x.
    for r in ran:
        if id(r) not in first_ids:
            steady[r.label].append(_row_s(r))
    cell_s = {}
    for label, xs in steady.items():
        med = statistics.median(xs)
        cell_s[label] = statistics.mean([x for x in xs if x <= 5 * med])
    for label, like in STAND_IN.items():
        cell_s.setdefault(label, cell_s[like])
    first_use = sum(max(0.0, _row_s(r) - cell_s[r.label]) for r in firsts.values() if r.label in cell_s)
    first_use /= len({pid for pid, _ in firsts})  # per worker
    labels_for: dict[str, set[str]] = defaultdict(set)
    for r in ran:
        assert r.config is not None
        labels_for[r.config.attention_kind or "mha"].add(r.label)
    labels_for["mla_absorbed"] |= set(STAND_IN)
    per_case: dict[str, float] = {}
    first_cases: set[str] = set()
    seen_pids: set[Any] = set()
    for r in rows:
        pid = r.worker.pid if r.worker else None
        if r.host is None or not r.host.case_ms or r.case in per_case:
            continue
        per_case[r.case] = sum(r.host.case_ms.values()) / 1e3
        if pid not in seen_pids:
            seen_pids.add(pid)
            first_cases.add(r.case)
    rest = [v for k, v in per_case.items() if k not in first_cases]
    case_s = statistics.mean(rest)
    first_case_s = statistics.mean(per_case[k] for k in first_cases) - case_s
    outside = []
    for i in range(1, 6):
        head = json.loads((LOAN2 / f"decode-{i}" / "run.json").read_text())
        outside.append(head["wall_s"] - sum(w["busy_s"] for w in head["workers"]))
    return CostModel(cell_s, {k: sorted(v) for k, v in labels_for.items()}, first_use, case_s, first_case_s,
                     statistics.mean(outside), sum(len(v) for v in steady.values()))


def estimate(suite_path: Path, model: CostModel) -> tuple[float, dict[str, tuple[int, float]]]:
    """(seconds for the suite's default GPU run, {case group: (cases, seconds)}): every case, the
    ``cpu-*`` ones too (a GPU run without --case runs them, each with its flex-attention compile)."""
    suite = load_suite(suite_path)
    groups: dict[str, tuple[int, float]] = {}
    for c in suite.cases:
        kind = c.attention_config().attention_kind or "mha"
        s = model.case_s + sum(model.cell_s[lab] for lab in model.labels_for[kind])
        n, t = groups.get(c.group or c.name, (0, 0.0))
        groups[c.group or c.name] = (n + 1, t + s)
    total = sum(t for _, t in groups.values()) + model.first_use_s + model.first_case_s + model.run_s
    return total, groups


def test_cost_model_reads_the_loan2_rows():
    m = loan2_model()
    # The dominant cost the model found (issue 48): flex-attention's compile per shape, over 2x
    # any other cell (sdpa's is FA3's, ~0.5 s); a regression in how rows are read would move it.
    others = [s for lab, s in m.cell_s.items() if lab != "flex-attention"]
    assert m.cell_s["flex-attention"] > 2 * max(others)
    assert m.first_use_s > 10  # flex-attention's first compile and the libraries' first calls
    assert 5 < m.run_s < 15 and m.cells_seen > 100


def test_the_old_grid_did_not_fit_and_the_new_one_does():
    m = loan2_model()
    old, _ = estimate(LOAN2 / "spec_decode" / "suite.yaml", m)
    new, groups = estimate(SUITE, m)
    assert old > 300  # the model agrees with the cut: loan2's grid could not finish in its limit
    assert new <= BUDGET_S, f"estimated {new:.0f} s > {BUDGET_S:.0f} s: {groups}"


if __name__ == "__main__":
    m = loan2_model()
    print("per cell (s, loan2 means over", m.cells_seen, "rows):")
    for lab, s in sorted(m.cell_s.items(), key=lambda kv: -kv[1]):
        print(f"  {lab:75s} {s:5.2f}" + ("  (stand-in: FA3's)" if lab in STAND_IN else ""))
    print(f"per case generate+reference {m.case_s:.2f} s; once: first uses {m.first_use_s:.1f} s, "
          f"first case {m.first_case_s:.1f} s, run start/expand {m.run_s:.1f} s")
    for path in (LOAN2 / "spec_decode" / "suite.yaml", SUITE):
        total, groups = estimate(path, m)
        print(f"\n{path.relative_to(ROOT)}: {sum(n for n, _ in groups.values())} cases, {total:.0f} s")
        for g, (n, t) in groups.items():
            print(f"  {g:28s} {n:3d} cases {t:6.1f} s")
