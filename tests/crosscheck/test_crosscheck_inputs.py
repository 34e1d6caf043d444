"""The cross-check's inputs: the names a ``standalone_call`` source reads, bound from the harness's
own batch (harness/crosscheck/inputs.py), against the repro script's inputs (harness/crosscheck/repro.py) and
the adapter's own forward on the same batch. CPU backends, small cases; no timing."""
import pytest
import torch

from harness.crosscheck import repro
from harness.crosscheck.run import build_call, build_call_in
from harness.crosscheck.explain import explain
from attn_contract.standalone import STANDALONE_CONSTANTS, STANDALONE_HOST, STANDALONE_NAMES, STANDALONE_TENSORS
from harness.crosscheck.inputs import backend_view, bind_from_batch, constants_part
from harness.registry import resolve
from harness.records.results import ResultRow, Status
from harness.cell.prepare import prepare_cell
from harness.spec import CaseSpec
from harness.case.workload import generate

CPU = torch.device("cpu")
# The names the contract lists (attn_contract/standalone.py); `visible` and the layer's optional
# tensors are compared by the tests that use them.
TENSORS = STANDALONE_TENSORS
HOST = tuple(k for k in STANDALONE_HOST if k != "visible")
CONSTANTS = tuple(k for k in STANDALONE_CONSTANTS if k not in ("ALIBI_SLOPES", "SINKS"))

CASES = {
    "plain": dict(num_heads=4, num_kv_heads=2, head_size=32,
                  batch=[{"kind": "decode", "count": 2, "context_len": 40}, {"kind": "prefill", "count": 1, "query_len": 9}]),
    # HND memory order, a window, softcap and sinks: every constant the binding has to carry.
    "hnd-window-sinks": dict(num_heads=4, num_kv_heads=1, head_size=16, block_size=8, kv_layout="HND",
                             sliding_window=12, softcap=30.0, sinks=True,
                             batch=[{"kind": "extend", "count": 2, "query_len": 5, "context_len": 21}]),
}


def _row(case: CaseSpec, backend: str) -> ResultRow:
    # Only the fields inputs_source reads (a full pass row needs host costs, timing, ...).
    return ResultRow.model_construct(case=case.name, backend=backend, variant={}, variant_label="", device="cpu",
                                     status=Status.PASS, reason="", config={"seed": case.seed})


def _case(name: str) -> CaseSpec:
    return CaseSpec.model_validate({"name": name, **CASES[name]})


def _namespaces(case: CaseSpec, name: str):
    backend = resolve(name)
    row = _row(case, name)
    full = repro.inputs_source(row, repro.script_case(case, backend, {}), backend)
    batch = generate(case, CPU)
    view = backend_view(batch, backend, {})
    ns_batch = bind_from_batch(constants_part(full), view)
    ns_repro: dict = {"__name__": "x"}
    exec(compile(full, "<repro inputs>", "exec"), ns_repro)
    return backend, row, batch, view, ns_batch, ns_repro


@pytest.mark.parametrize("case_name", sorted(CASES))
def test_batch_binding_has_every_name_the_repro_binds_with_the_same_shape_dtype_and_layout(case_name):
    case = _case(case_name)
    _b, _r, _batch, view, ns_b, ns_r = _namespaces(case, "torch-math")
    for k in CONSTANTS + HOST:
        assert ns_b[k] == ns_r[k], k  # constants come from the repro source itself; lengths agree
    for k in TENSORS:
        a, b = ns_b[k], ns_r[k]
        assert (a.shape, a.dtype, a.stride(), a.device) == (b.shape, b.dtype, b.stride(), b.device), k
    for k in ("ALIBI_SLOPES", "SINKS"):
        assert (ns_b[k] is None) == (ns_r[k] is None), k
    if case.sinks:
        assert torch.equal(ns_b["SINKS"], view.layer.sinks.float())  # the batch's sinks, not the repro's draw
    # the bound tensors are the batch's own values (the repro draws other bits by design)
    assert torch.equal(ns_b["q"], view.query) and torch.equal(ns_b["kv_cache"], view.kv_cache)
    assert not torch.equal(ns_r["q"].float(), ns_b["q"].float())
    for i in range(len(view.query_lens)):
        assert torch.equal(ns_b["visible"](i), ns_r["visible"](i))


@pytest.mark.parametrize("backend_name", ["torch-math", "sdpa"])
@pytest.mark.parametrize("case_name", sorted(CASES))
def test_standalone_output_on_the_bound_batch_matches_the_adapter_on_that_batch(backend_name, case_name):
    """The standalone call on the batch-bound names computes what the adapter computed for the
    row (same inputs, same call up to fp rounding); on the repro's inputs it computes a
    different output of the same shape (other bits)."""
    case = _case(case_name)
    backend, row, batch, view, ns_b, ns_r = _namespaces(case, backend_name)
    why = backend.capabilities({}).unsupported_reason(case.attention_config(), "cpu")
    if why:
        pytest.skip(f"{backend_name}: {why}")
    src = repro.call_source(backend, row, case, {})
    fn = build_call_in(ns_b, src)
    fn()
    prepared = prepare_cell(backend, {}, batch, CPU)
    prepared.forward()
    out_b, adapter = ns_b["out"].float(), prepared.out.float()
    assert out_b.shape == adapter.shape and torch.isfinite(out_b).all()
    torch.testing.assert_close(out_b, adapter, atol=2e-2, rtol=2e-2)
    # the repro's inputs through the same call: same shapes, other values
    fr = build_call(repro.inputs_source(row, repro.script_case(case, backend, {}), backend), src)
    fr()
    # build_call keeps its own namespace: read `out` back through the function's globals
    out_r = fr.__globals__["out"].float()
    assert out_r.shape == out_b.shape and torch.isfinite(out_r).all() and not torch.allclose(out_r, out_b)


def test_constants_part_stops_at_the_first_draw():
    src = '"""doc"""\nimport torch\nSEED = 3\nA, B = 1, 2\nSINKS = None\ng = torch.Generator()\nQSL = [0]\n'
    part = constants_part(src)
    assert "SEED = 3" in part and "A, B = (1, 2)" in part and "Generator" not in part and "QSL" not in part


def test_explain_names_the_failing_comparison():
    here = {"median_us": 600.0}
    why = explain(508.0, 595.0, here, {"per_call_us": 511.0}, 0.03)
    c = why["comparisons"]
    assert c["row_vs_here"]["off"] and not c["here_vs_outside"]["off"] and c["kernel_vs_outside"]["off"]
    assert why["because"][0].startswith("row vs here 0.847") and "kernel vs outside 0.859" in why["because"][1]
    same = explain(100.0, 101.0, {"median_us": 100.5}, "n/a on cpu", 0.03)
    assert same["because"] == [] and "kernel_vs_outside" not in same["comparisons"]
    # with the adapter's call timed here: conditions (row vs adapter) and call source (adapter vs standalone) apart
    cond = explain(508.0, 600.0, {"median_us": 600.0}, "n/a on cpu", 0.03, adapter={"median_us": 610.0})
    assert cond["comparisons"]["row_vs_adapter_here"]["off"] and not cond["comparisons"]["adapter_vs_standalone"]["off"]
    assert [b.split(":")[0] for b in cond["because"]] == ["row vs adapter here 0.833", "row vs here 0.847"]
    src = explain(100.0, 150.0, {"median_us": 150.0}, "n/a on cpu", 0.03, adapter={"median_us": 101.0})
    assert [b.split(" ")[0:3] for b in src["because"]] == [["adapter", "vs", "standalone"], ["row", "vs", "here"]]
    timer = explain(100.0, 120.0, {"median_us": 100.0}, "n/a on cpu", 0.03)
    assert [b.split(" ")[0:3] for b in timer["because"]] == [["here", "vs", "outside"]]


def test_explain_names_the_timers_whose_clock_is_not_the_rows():
    # The H200 pattern (2026-12-02 crosscheck.json row 0): the row and the harness timer at
    # 1980 MHz, the outside timers ending at 1560 and 1455 MHz, 0.87x apart on the same call.
    here = {"median_us": 438.8, "sm_clock_mhz": {"before": 1980.0, "during": 1980.0, "after": 1980.0}}
    outside = {"flashinfer.bench_gpu_time": {"median_us": 503.4, "sm_clock_mhz": {"before": 1980.0, "after": 1560.0}},
               "triton.do_bench_cudagraph": {"median_us": 502.7, "sm_clock_mhz": {"before": 1560.0, "after": 1455.0}}}
    why = explain(438.4, 503.0, here, "n/a on cpu", 0.03, outside=outside, row_mhz=1980.0)
    c = why["comparisons"]["clock"]
    assert c["off"] and c["states_differ"] == ["flashinfer.bench_gpu_time", "triton.do_bench_cudagraph"]
    assert c["timers_mhz"]["harness here"] == [1980.0, 1980.0]
    clock = [b for b in why["because"] if b.startswith("clock: states differ")]
    assert len(clock) == 1 and "bench_gpu_time ran at 1560 MHz" in clock[0] and "the row at 1980 MHz" in clock[0]
    steady = {k: {**v, "sm_clock_mhz": {"before": 1980.0, "after": 1965.0}} for k, v in outside.items()}
    calm = explain(438.4, 503.0, here, "n/a on cpu", 0.03, outside=steady, row_mhz=1980.0)
    assert calm["comparisons"]["clock"]["off"] is False and not any(b.startswith("clock") for b in calm["because"])
    # without the row's clock (an older record) the harness timer here is the reference
    assert explain(438.4, 503.0, here, "n/a on cpu", 0.03, outside=outside)["comparisons"]["clock"]["off"]
    # on the CPU there is no clock: no clock comparison at all
    assert "clock" not in explain(100.0, 101.0, {"median_us": 100.5}, "n/a on cpu", 0.03)["comparisons"]


@pytest.mark.parametrize("case_name", sorted(CASES))
def test_repro_inputs_and_the_batch_binding_define_every_contract_name(case_name):
    _b, _r, _batch, _view, ns_b, ns_r = _namespaces(_case(case_name), "torch-math")
    assert [k for k in STANDALONE_NAMES if k not in ns_r] == []  # harness repro's script
    assert [k for k in STANDALONE_NAMES if k not in ns_b] == []  # harness crosscheck's binding


def test_explain_says_when_the_outside_timers_disagree_with_each_other():
    # H100 2026-12-07 fifth session, sustained row 48 (FA3 fastest decode-mqa-b256-1k-p64): the
    # row 61.65 us, bench_gpu_time 62.15, do_bench_cudagraph 65.08, all at 1980 MHz.
    at = {"sm_clock_mhz": {"before": 1980.0, "during": 1980.0, "after": 1980.0}}
    outside = {"flashinfer.bench_gpu_time": {"median_us": 62.15, **at},
               "triton.do_bench_cudagraph": {"median_us": 65.08, **at}}
    why = explain(61.65, 63.62, {"median_us": 62.72, **at}, {"per_call_us": 61.85}, 0.03, outside=outside,
                  row_mhz=1980.0)
    assert why["comparisons"]["outside_spread"]["off"]
    spread = [b for b in why["because"] if b.startswith("outside timers 1.047 apart")]
    assert len(spread) == 1 and spread[0].endswith("the row is within 3% of flashinfer.bench_gpu_time")
    # Timers that agree with each other add nothing; a timer in another state is not counted.
    agree = {k: {**v, "median_us": 62.3} for k, v in outside.items()}
    assert not explain(61.65, 62.3, None, "n/a on cpu", 0.03, outside=agree, row_mhz=1980.0)["comparisons"][
        "outside_spread"]["off"]
    hot = {**outside, "triton.do_bench_cudagraph": {"median_us": 65.08,
                                                    "sm_clock_mhz": {"before": 1700.0, "after": 1700.0}}}
    assert "outside_spread" not in explain(61.65, 62.15, None, "n/a on cpu", 0.03, outside=hot,
                                           row_mhz=1980.0)["comparisons"]
