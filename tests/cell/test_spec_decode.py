"""suites/spec_decode.yaml and the graph-mode axis: the suite's CPU cells pass on the torch backends
with their in-place replay checked, a backend whose plan is baked at the first call is caught
(CPU: the eager call stands for the replay; GPU: a real captured graph), the in-place metadata copy,
and vLLM's graph-mode rule against the levels vLLM's backends declare."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from harness.cell.case import iterate_case
from harness.cell.graph_replay import NotInPlace, refresh_in_place, replay_case
from harness.case.workload import generate
from harness.plan.cells import RunOptions, group_by_case, plan_cells
from harness.records.graph_modes import vllm_graph_mode
from harness.registry import resolve
from harness.spec import load_suite
from mutants.stale_graph import FlashAttn_StalePlan, SDPA_StalePlan

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "suites" / "spec_decode.yaml"
# CPU cells named by the tests below (the fixture runs every cpu-* cell): uniform verifies at
# q = 1 and 4, a mixed step, an MLA verify.
CPU_CASES = ("cpu-verify[count=3,query_len=1]", "cpu-verify[count=3,query_len=4]",
             "cpu-mixed[query_len=2]", "cpu-mla[query_len=3]")


def _rows(device: str, cases: tuple[str, ...] | None, backends: list) -> dict[str, list]:
    suite = load_suite(SUITE)
    keep = [c for c in suite.cases if (c.name in cases if cases else c.name.startswith("cpu-"))]
    suite = suite.model_copy(update={"cases": keep})
    opts = RunOptions(device=torch.device(device), time=device != "cpu", suite_path=str(SUITE))
    by: dict[str, list] = {}
    for group in group_by_case(plan_cells(suite, backends, opts)):
        for row in iterate_case(group, suite, opts):
            by.setdefault(row.backend, []).append(row)
    return by


@pytest.fixture(scope="module")
def cpu_rows():
    return _rows("cpu", None, [resolve("torch-math"), resolve("sdpa"), SDPA_StalePlan])


def test_suite_has_the_grid_and_the_switch():
    suite = load_suite(SUITE)
    assert suite.graph_modes
    qs = {g.query_dist.bounds()[0] for c in suite.cases for g in c.batch if g.kind == "decode"}
    assert {1, 2, 3, 4, 8} <= qs
    counts = {g.count for c in suite.cases if not c.name.startswith("cpu-") for g in c.batch if g.kind == "decode"}
    assert {1, 8, 64, 256} <= counts
    assert any(c.attention == "mla" for c in suite.cases if not c.name.startswith("cpu-"))
    assert any(len({g.kind for g in c.batch}) > 1 for c in suite.cases if not c.name.startswith("cpu-"))


@pytest.mark.parametrize("backend", ["torch-math", "sdpa"])
def test_torch_backends_pass_the_cpu_cells_with_their_replays(cpu_rows, backend):
    rows = cpu_rows[backend]
    assert len(rows) == 12 and set(CPU_CASES) <= {r.case for r in rows}  # every cpu-* cell of the suite
    bad = [(r.case, r.status, r.reason) for r in rows if r.status != "pass"]
    assert not bad
    for r in rows:
        gm = r.graph_modes
        assert gm is not None and gm.replay is not None
        assert gm.replay.stand_in == "eager" and gm.replay.passed is True and gm.replay.steps == 2
        assert gm.declared == ("ALWAYS" if backend == "sdpa" else "NEVER") and gm.declared_source
        assert gm.full_us is None and gm.eager_us is None  # nothing timed twice on a CPU


def test_engine_mode_recorded_per_batch(cpu_rows):
    by_case = {r.case: r.graph_modes for r in cpu_rows["sdpa"]}
    assert by_case["cpu-verify[count=3,query_len=4]"].engine == "full"
    assert by_case["cpu-mixed[query_len=2]"].engine == "piecewise"


def test_stale_plan_is_caught_on_cpu(cpu_rows):
    rows = cpu_rows[SDPA_StalePlan.name]
    assert rows and all(r.status == "mismatch" for r in rows)
    for r in rows:
        assert "graph replay step" in r.reason and "metadata updated in place" in r.reason
        assert r.check.passed  # the first call was right: only the replays were stale
        assert any(c.when.startswith("graph replay") and not c.passed for c in r.check.rechecks)


def test_replay_case_keeps_the_capture_shape():
    case = next(c for c in load_suite(SUITE).cases if c.name == "cpu-verify[count=3,query_len=4]")
    batch = generate(case)
    again = generate(replay_case(batch, 0))
    assert again.query_lens == batch.query_lens
    assert max(again.seq_lens) == max(batch.seq_lens) and again.seq_lens != batch.seq_lens
    assert again.block_table.shape == batch.block_table.shape
    assert not torch.equal(again.query, batch.query)


@dataclass
class _Md:
    lens: torch.Tensor
    table: torch.Tensor
    max_len: int
    parts: list


def test_refresh_in_place_copies_into_the_captured_tensors():
    dst = _Md(torch.tensor([5, 6]), torch.zeros(2, 3, dtype=torch.int32), 6, [torch.ones(2)])
    ptrs = (dst.lens.data_ptr(), dst.table.data_ptr(), dst.parts[0].data_ptr())
    src = _Md(torch.tensor([3, 4]), torch.ones(2, 3, dtype=torch.int32), 4, [torch.full((2,), 7.0)])
    refresh_in_place(dst, src)
    assert (dst.lens.data_ptr(), dst.table.data_ptr(), dst.parts[0].data_ptr()) == ptrs
    assert dst.lens.tolist() == [3, 4] and int(dst.table.sum()) == 6 and dst.max_len == 4
    assert dst.parts[0].tolist() == [7.0, 7.0]
    with pytest.raises(NotInPlace, match="table"):
        refresh_in_place(dst, _Md(torch.tensor([1, 2]), torch.ones(2, 4, dtype=torch.int32), 2, [torch.ones(2)]))


# vLLM v0.25.1's declarations (FlashAttentionMetadataBuilder: ALWAYS on FA3, else UNIFORM_BATCH;
# FlashInferMetadataBuilder.get_cudagraph_support: UNIFORM_SINGLE_TOKEN_DECODE on Hopper,
# UNIFORM_BATCH with trtllm-gen; FLASHMLA / FLASH_ATTN_MLA: UNIFORM_BATCH; FLEX_ATTENTION: NEVER)
# and the mode FULL_AND_PIECEWISE gives each batch.
VLLM_TABLE = [
    # level, query lens, expected mode
    ("ALWAYS", [1] * 8, "full"),  # FA3 decode
    ("ALWAYS", [4] * 8, "full"),  # FA3 verify
    ("ALWAYS", [4] * 8 + [64], "piecewise"),  # FA3 mixed step: FULL_AND_PIECEWISE runs it piecewise
    ("UNIFORM_BATCH", [3] * 64, "full"),  # FA2 / FA4 / FlashMLA verify
    ("UNIFORM_BATCH", [2] * 8 + [100], "piecewise"),
    ("UNIFORM_SINGLE_TOKEN_DECODE", [1] * 64, "full"),  # FlashInfer decode without drafts
    ("UNIFORM_SINGLE_TOKEN_DECODE", [2] * 64, "piecewise"),  # FlashInfer on Hopper with drafts
    ("UNIFORM_SINGLE_TOKEN_DECODE", [4] * 8, "piecewise"),
    ("NEVER", [1] * 8, "piecewise"),  # flex: piecewise, attention always eager
    ("ALWAYS", [4] * 256, "none"),  # 1024 tokens > max_cudagraph_capture_size 512: no graph
]


@pytest.mark.parametrize("level,qlens,mode", VLLM_TABLE)
def test_vllm_graph_mode_rule(level, qlens, mode):
    got = vllm_graph_mode(level, qlens)
    assert got.mode == mode, got.reason
    assert got.attention_eager == (mode != "full")


def test_flashinfer_with_drafts_drops_even_plain_decodes_to_piecewise():
    # vLLM resolves the mode once at start-up: with 2 drafts a UNIFORM_SINGLE_TOKEN_DECODE backend
    # cannot take FULL decode graphs, so the whole run is PIECEWISE.
    got = vllm_graph_mode("UNIFORM_SINGLE_TOKEN_DECODE", [1] * 8, num_spec_tokens=2)
    assert got.mode == "piecewise" and "UNIFORM_BATCH" in got.reason
    assert vllm_graph_mode("UNIFORM_BATCH", [3] * 8, num_spec_tokens=2).mode == "full"
    assert vllm_graph_mode("ALWAYS", [4, 4, 100], cudagraph_mode="FULL").mode == "full"
    with pytest.raises(ValueError, match="unknown CUDA-graph support level"):
        vllm_graph_mode("SOMETIMES", [1])


@pytest.mark.gpu
def test_stale_plan_is_caught_under_a_captured_graph():
    rows = _rows("cuda", CPU_CASES[:2],
                 [resolve("sdpa"), SDPA_StalePlan, resolve("flash-attn"), FlashAttn_StalePlan])
    for r in rows["sdpa"]:
        assert r.status == "pass" and r.graph_modes.replay.stand_in == "cuda_graph" and r.graph_modes.replay.passed
        assert r.graph_modes.full_us is not None and r.graph_modes.eager_us is not None
    ran = [r for r in rows["flash-attn"] if r.status not in ("unsupported", "skipped")]
    assert ran and all(r.status == "pass" for r in ran), [(r.variant_label, r.reason) for r in ran if r.status != "pass"]
    caught = [r for r in rows[SDPA_StalePlan.name] + rows[FlashAttn_StalePlan.name]
              if r.status not in ("unsupported", "skipped")]
    assert caught and all(r.status == "mismatch" and "graph replay step" in r.reason for r in caught)


@pytest.mark.gpu
def test_flashinfer_decode_graphs_replay_with_new_metadata():
    """FlashInfer's q = 1 decode and its MLA decode plan graph wrappers (index buffers filled in
    place): a graph captured on one plan serves the next (before: 256/256 and 64/64 requests wrong
    on the H100, reports/h100/2026-12-06)."""
    pytest.importorskip("flashinfer")
    rows = _rows("cuda", ("cpu-verify[count=3,query_len=1]", "cpu-mla[query_len=1]"),
                 [resolve("flashinfer"), resolve("flashinfer-mla")])
    ran = [r for b in ("flashinfer", "flashinfer-mla") for r in rows.get(b, [])
           if r.status not in ("unsupported", "skipped")]
    assert {r.backend for r in ran} == {"flashinfer", "flashinfer-mla"}, [(r.backend, r.status, r.reason) for b in rows
                                                                       for r in rows[b]]
    for r in ran:
        rep = r.graph_modes.replay
        assert r.status == "pass" and rep.stand_in == "cuda_graph" and rep.passed, (r.backend, r.variant_label,
                                                                                     r.reason, rep)
    assert any(r.call.facts.get("decode_cuda_graph_wrapper") for r in rows["flashinfer"] if r.call)


def test_answer_and_crossover_read_the_effective_times(cpu_rows):
    from harness.analysis.spec_decode import answer, crossovers, spec_markdown

    def timed(r, us):
        return r.model_copy(update={"graph_modes": r.graph_modes.model_copy(update={"effective_us": us})})

    rows = [timed(r, (10.0 if r.backend == "sdpa" else 13.0) * (r.batch.max_query_len == 1)
                  + (40.0 if r.backend == "sdpa" else 37.0) * (r.batch.max_query_len != 1))
            for b in ("sdpa", "torch-math") for r in cpu_rows[b] if r.case.startswith("cpu-verify")]
    recs = {r["q"]: r for r in answer(rows)}
    assert recs[1]["backend"] == "sdpa" and recs[4]["backend"] == "torch-math"
    assert abs(recs[4]["cost_vs_q1"] - 3.7) < 1e-9  # torch-math at q=4 against sdpa's q=1
    flips = crossovers(rows)
    assert len(flips) == 2  # one per batch (1 and 3 requests), both between q = 1 and q = 2
    assert all((f["from"], f["to"], f["faster_before"], f["faster_after"]) == (1, 2, "sdpa", "torch-math")
               for f in flips)
    md = spec_markdown(rows)
    assert "Speculative decoding" in md and "--speculative-config" not in md  # torch backends: no engine flags
    assert ", batch 1, context " in md and "('" not in md  # a flip names its point in words, not a tuple


def test_the_answer_is_a_call_an_engine_runs(cpu_rows):
    """A faster call no engine runs (FlashInfer's decode wrapper at q > 1, as on the H200 of
    2026-12-06) is named beside the answer, not given as the answer: its flags would be a
    sentence, not a setting."""
    from harness.analysis.spec_decode import answer, spec_markdown

    def as_(r, backend, variant, us):
        return r.model_copy(update={"backend": backend, "variant": variant,
                                    "variant_label": ",".join(f"{k}={v}" for k, v in sorted(variant.items())),
                                    "graph_modes": r.graph_modes.model_copy(update={"effective_us": us})})

    base = [r for r in cpu_rows["sdpa"] if r.case.startswith("cpu-verify")]
    rows = [as_(r, "flash-attn", {"fa_version": 3}, 10.0) for r in base]
    rows += [as_(r, "flashinfer", {"decode_backend": "wrapper", "verify_wrapper": "decode"}, 8.0)
             for r in base if r.batch.max_query_len != 1]
    recs = {r["q"]: r for r in answer(rows)}
    assert recs[4]["backend"] == "flash-attn" and recs[4]["runner_up"] is None
    assert "verify_wrapper=decode" in recs[4]["unrun_faster"]["label"]
    assert abs(recs[4]["unrun_faster"]["ahead"] - 0.2) < 1e-9
    assert recs[1]["unrun_faster"] is None
    md = spec_markdown(rows)
    assert "--attention-backend FLASH_ATTN" in md and "8.0 us (-20.0%)" in md


def test_report_plots_step_time_vs_q_with_the_mode_marked(cpu_rows):
    import pandas as pd

    from harness.report.core import Figure, Table
    from harness.report.sections.spec_decode import spec_decode

    rows = [r.model_copy(update={"graph_modes": r.graph_modes.model_copy(
        update={"effective_us": 5.0 * (r.batch.max_query_len or 1)})})
        for b in ("sdpa", "torch-math") for r in cpu_rows[b] if r.case.startswith("cpu-verify")]
    df = pd.DataFrame({"label": [r.backend for r in rows]})
    df.attrs["rows"] = tuple(rows)
    blocks = spec_decode(df)
    figs = [b for b in blocks if isinstance(b, Figure)]
    assert len(figs) == 1
    ax = figs[0].fig.axes[0]
    filled = {str(line.get_markerfacecolor()) != "none" for line in ax.lines if line.get_marker() not in ("None", "")}
    assert filled == {True, False}  # sdpa replays a full graph; torch-math (NEVER) runs eager
    table = next(b for b in blocks if isinstance(b, Table)).data
    assert set(table["q"]) == {1, 2, 4, 8}
    df.attrs["rows"] = ()
    assert spec_decode(df) == []


def test_flags_name_the_drafts_the_backend_and_the_graph_mode():
    from harness.analysis.spec_decode import flags

    f = flags({"q": 3, "backend": "flash-attn", "variant": {"fa_version": 3}, "attention_kind": "mha"})
    assert '"num_speculative_tokens": 2' in f["vllm"] and "--attention-backend FLASH_ATTN" in f["vllm"]
    assert "FULL_AND_PIECEWISE" in f["vllm"] and "v0.25.1" in f["vllm"]
    assert "--speculative-num-draft-tokens 3" in f["sglang"] and "--attention-backend fa3" in f["sglang"]
    one = flags({"q": 1, "backend": "flashinfer", "variant": {}, "attention_kind": "mha"})
    assert "speculative" not in one["vllm"] and "FLASHINFER" in one["vllm"]


def test_flashinfer_verify_wrapper_cells_are_the_uniform_verifies():
    from backends.flashinfer import verify_batch_reason
    from harness.case.layout import case_layout

    """verify_wrapper=decode gets a cell on every uniform q > 1 case of the suite (its batch
    reason passes there), an unsupported reason on the mixed steps, and no cell at q = 1, where
    the planner folds it into the prefill-wrapper row (the axis applies to q > 1 requests only)."""
    fi = resolve("flashinfer")
    suite = load_suite(SUITE)
    cells = [c for c in plan_cells(suite, [fi], RunOptions(device=torch.device("cpu"), suite_path=str(SUITE)))
             if c.case.attention != "mla"]
    ours = {c.case.name: c for c in cells if c.variant["verify_wrapper"] == "decode"}
    for c in cells:
        if c.variant["verify_wrapper"] != "prefill" or c.variant["decode_backend"] != "wrapper":
            continue
        lay = case_layout(c.case)  # the lengths generate() gives, without the tensors (256 x 1k tokens)
        qlens = set(lay.query_lens)
        uniform_verify = len(qlens) == 1 and qlens != {1}
        if qlens == {1}:
            assert c.case.name not in ours
            assert "verify_wrapper=decode" in " ".join((c.axes or {}).get("stands_for", [])), c.case.name
        else:
            assert c.case.name in ours, c.case.name
            got = verify_batch_reason(torch.tensor(lay.query_lens), torch.tensor(lay.seq_lens))
            assert (got is None) == uniform_verify, (c.case.name, got)
    # check_batch_support applies that rule to the batch generate() builds
    small = next(c for c in cells if c.case.name == "cpu-mixed[query_len=2]")
    assert "differ" in fi.check_batch_support(generate(small.case).common_metadata(), ours[small.case.name].variant)
    assert {n for n in ours if n.startswith("cpu-verify")} == {
        f"cpu-verify[count={n},query_len={q}]" for n in (1, 3) for q in (2, 4, 8)}
    assert any(n.startswith("llama3-8b-mixed") for n in ours)


def test_flags_say_no_engine_runs_the_decode_verify_wrapper():
    from harness.analysis.spec_decode import flags, no_engine_runs

    rec = {"q": 4, "backend": "flashinfer", "variant": {"decode_backend": "wrapper", "verify_wrapper": "decode"},
           "attention_kind": "mha"}
    f = flags(rec)
    assert set(f) == {"vllm", "sglang"} and not any("--attention-backend" in v for v in f.values())
    assert "verify_wrapper=prefill" in f["vllm"] and "verify_wrapper=prefill" in f["sglang"]
    assert no_engine_runs(rec)
    prefill = flags({**rec, "variant": {"decode_backend": "wrapper", "verify_wrapper": "prefill"}})
    assert "--attention-backend FLASHINFER" in prefill["vllm"]
    assert not no_engine_runs({**rec, "variant": {}})  # a row before the axis ran the prefill wrapper
    assert not no_engine_runs({**rec, "backend": "torch-math"})  # no engine names it at all
