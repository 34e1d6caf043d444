"""Speed of the instrument: where each row's time went, the run's wall time,
variant axes that cannot change a result, cost-balanced workers, torch baselines and the
memory estimate of the batched torch backends."""

import json
from pathlib import Path
import math

import pytest
import yaml

from harness.cli import main
from harness.records.results import read_rows
from harness.spec import parse_suite

SMALL = """
suite: speed
cases:
  - name: dec
    num_heads: 8
    num_kv_heads: 2
    head_size: 32
    batch:
      - kind: decode
        count: [2, 5]
        context_len: {dist: uniform, low: 10, high: 70}
"""


def test_rows_record_where_the_time_went_and_run_json_the_wall_time(tmp_path):
    suite = tmp_path / "s.yaml"
    suite.write_text(SMALL)
    out = tmp_path / "res"
    assert main(["run", str(suite), "--device", "cpu", "--backends", "torch-math,sdpa", "--out", str(out),
                 "--quiet", "--max-time", "0.05"]) == 0
    rows = read_rows(out)
    assert len(rows) == 4 and all(r.status == "pass" for r in rows)
    for r in rows:
        b = r.host.breakdown_ms
        assert {"prepare", "setup", "build", "first_call", "check", "timing", "metrics", "other", "precheck"} <= set(b)
        assert all(v >= 0 for v in b.values())
        # The stages (precheck excluded: it runs before the cell's clock starts) add up to the cell.
        assert math.isclose(sum(v for k, v in b.items() if k != "precheck"), r.host.cell_ms, rel_tol=1e-6)
        assert set(r.host.case_ms) == {"generate", "reference"} and r.host.case_cells == 2
    header = json.loads((out / "run.json").read_text())
    assert header["wall_s"] >= header["run_s"] > 0
    tb = header["time_breakdown_s"]
    # Case-level stages are counted once per case, not once per row.
    assert math.isclose(tb["generate"], sum({r.case: r.host.case_ms["generate"] for r in rows}.values()) / 1e3,
                        abs_tol=2e-3)
    assert tb["cells"] <= header["run_s"]
    # The whole wall time is accounted for, in order, and the worker's imports are "import".
    wb = header["wall_breakdown_s"]
    assert math.isclose(sum(wb.values()), header["wall_s"], abs_tol=0.05)
    assert wb["cases"] >= tb["cells"] * 0.9
    assert {"startup", "expand", "import", "idle", "workers_ready"} <= set(tb)
    (w,) = header["workers"]
    assert w["busy_s"] + w["idle_s"] <= wb["cases"] + wb["wait_workers"] + 0.5


# ---------------------------------------------------------------- memory of the torch backends
class _LiveBytes:
    """Peak bytes of tensors that ops create while active (a TorchDispatchMode counting each
    output's storage until it is freed): a real measurement of a forward's allocations on CPU."""

    def __enter__(self):
        import weakref

        from torch.utils._python_dispatch import TorchDispatchMode

        outer = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                res = func(*args, **(kwargs or {}))
                for t in (res if isinstance(res, (tuple, list)) else (res,)):
                    if isinstance(t, torch.Tensor):
                        st = t.untyped_storage()
                        key = st.data_ptr()
                        if key and key not in outer.live:
                            outer.live[key] = st.nbytes()
                            outer.now += st.nbytes()
                            outer.peak = max(outer.peak, outer.now)
                            weakref.finalize(t, outer._free, key)
                return res

        self.live, self.now, self.peak = {}, 0, 0
        self.mode = Mode()
        self.mode.__enter__()
        return self

    def _free(self, key):
        self.now -= self.live.pop(key, 0)

    def __exit__(self, *exc):
        self.mode.__exit__(*exc)


import torch  # noqa: E402

MIXED = """
suite: m
cases:
  - name: m
    num_heads: 8
    num_kv_heads: 2
    head_size: 32
    kv_cache_dtype: [auto, fp8_e4m3]
    batch:
      - kind: decode
        count: 40
        context_len: {dist: uniform, low: 100, high: 700}
      - kind: extend
        count: 2
        query_len: 300
        context_len: 400
"""


@pytest.mark.parametrize("spec", ["backends.torch_math:TorchMathBackend", "backends.sdpa:SDPABackend"])
@pytest.mark.parametrize("index", [0, 1])
def test_torch_backend_workspace_bounds_what_its_forward_allocates(spec, index, monkeypatch):
    """A decode batch with two long extends: padding every request to the extend's rows made
    torch-math's scores far larger than its old chunk budget (on the H200: an OOM instead of a
    skip). The declared workspace must bound the forward's measured allocations, with small
    chunk budgets so the plan really splits."""
    from harness import registry
    from harness.plan import memory
    from harness.cell.prepare import CaseContext

    backend = registry.load_spec(spec)
    mod = __import__(backend.__module__, fromlist=["x"])
    for name in ("MAX_SCORE_ELEMS", "MAX_SCORE_ELEMS_CPU"):
        if hasattr(mod, name):
            monkeypatch.setattr(mod, name, 1 << 18)
    case = parse_suite(yaml.safe_load(MIXED)).cases[index]
    dev = torch.device("cpu")
    batch = CaseContext(case, dev, want_reference=False).batch
    cfg = batch.config
    kv = backend.materialize_kv_cache(batch.kv_cache, cfg.kv_layout)
    builder = backend.get_builder_cls()(cfg, {}, dev)
    impl = backend.get_impl_cls()(cfg, {}, dev, batch.layer)
    out = torch.empty_like(batch.query)
    with _LiveBytes() as live:
        md = builder.build(batch.common_metadata())
        impl.forward(batch.query, batch.key, batch.value, kv, md, out, None)
    declared = memory.backend_workspace(backend, case, {}, None, "cpu")
    assert live.peak > 0 and declared >= live.peak, (declared, live.peak)
    # ...and not by a mile: the estimate stays within 6x of the measured peak.
    assert declared < 6 * live.peak, (declared, live.peak)


def test_chunk_plan_bounds_the_padded_scores():
    from backends._paged import chunk_dims, plan_chunks

    qlens, slens = [1] * 64 + [900, 900], [4000] * 64 + [1000, 1000]
    budget = 1 << 22
    chunks = plan_chunks(qlens, slens, 8, budget, causal=True)
    assert sorted((r, lo) for c in chunks for r, lo, _, _ in c) == sorted(
        (r, lo) for c in chunks for r, lo, _, _ in c)  # no segment twice
    rows = {}
    for c in chunks:
        b, q, s = chunk_dims(c)
        assert b * q * s * 8 <= budget or (b == 1 and q == 1)
        for r, lo, hi, keys in c:
            rows.setdefault(r, []).append((lo, hi))
            assert keys == slens[r] - qlens[r] + hi  # causal: keys up to the last row's diagonal
    # every query row of every request is covered exactly once
    for r, q in enumerate(qlens):
        covered = sorted(rows[r])
        assert covered[0][0] == 0 and covered[-1][1] == q
        assert all(a[1] == b[0] for a, b in zip(covered, covered[1:]))


# ---------------------------------------------------------------- variant axes that cannot apply
def test_flashinfer_prefill_backend_collapses_on_decode_only_batches():
    """FlashInfer declares decode_tensor_cores for decodes and prefill_backend for prefill/extend:
    on a decode-only case its twelve variants (x call_form, which changes nothing on a one-kind
    batch) are two cells, on a mixed case all twelve run."""
    from backends.flashinfer import FlashInferBackend
    from harness.plan.cells import RunOptions, plan_cells, segment_kinds

    assert segment_kinds([1, 1], [5, 9]) == {"decode"}
    assert segment_kinds([1, 4, 6], [5, 9, 6]) == {"decode", "extend", "prefill"}
    assert FlashInferBackend.applicable_axes({"decode"}) == ("decode_tensor_cores", "decode_backend")
    assert FlashInferBackend.applicable_axes({"prefill"}) == ("prefill_backend",)
    decode = parse_suite(yaml.safe_load(SMALL))
    mixed_suite = parse_suite(yaml.safe_load(SMALL + "      - kind: prefill\n        count: 1\n        query_len: 8\n"))
    cpu = torch.device("cpu")
    cells = plan_cells(decode, [FlashInferBackend], RunOptions(device=cpu))
    assert len(cells) == 2 * 2  # two cases x decode_tensor_cores
    for c in cells:
        assert c.axes["applied"] == ["decode_tensor_cores", "decode_backend"] and c.axes["segment_kinds"] == ["decode"]
        assert c.axes["not_applied"] == {"prefill_backend": ["auto", "fa2", "fa3"], "call_form": ["fastest", "vllm"],
                                         "verify_wrapper": ["prefill"]}
        assert len(c.axes["stands_for"]) == 6 and c.variant["prefill_backend"] == "auto"
    assert len(plan_cells(decode, [FlashInferBackend], RunOptions(device=cpu, collapse_variants=False))) == 2 * 12
    mixed_cells = plan_cells(mixed_suite, [FlashInferBackend], RunOptions(device=cpu))
    # a mixed decode + prefill batch: every axis applies but verify_wrapper (extends only), at its default
    assert len(mixed_cells) == 2 * 12
    assert all(c.axes is None or c.axes["not_applied"] == {"verify_wrapper": ["prefill"]} for c in mixed_cells)


def test_collapsed_rows_say_which_axes_applied(tmp_path):
    suite = tmp_path / "s.yaml"
    suite.write_text(SMALL)
    out, out_all = tmp_path / "res", tmp_path / "all"
    base = ["run", str(suite), "--device", "cpu", "--backends", "flashinfer", "--no-time", "--quiet", "--no-isolation"]
    assert main([*base, "--out", str(out)]) == 0
    assert main([*base, "--out", str(out_all), "--all-variants"]) == 0
    rows, rows_all = read_rows(out), read_rows(out_all)
    assert len(rows) == 4 and len(rows_all) == 24
    for r in rows:
        assert r.variant_axes.applied == ["decode_tensor_cores", "decode_backend"]
        assert r.variant_label in r.variant_axes.stands_for
    assert all(r.variant_axes is None and "variant_axes" not in r.model_dump() for r in rows_all)


# ---------------------------------------------------------------- workers balanced by cost
def test_lpt_plan_balances_cost_not_count():
    from harness.plan.balance import plan_assignment

    costs = [10.0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]  # by count: 6/5 cases; by cost: 10 vs 10
    plan = plan_assignment(costs, 2)
    loads = sorted(sum(costs[i] for i in idx) for idx in plan)
    assert loads == [10.0, 10.0]
    assert sorted(i for idx in plan for i in idx) == list(range(len(costs)))


@pytest.mark.slow
def test_two_cpu_workers_take_every_case_exactly_once_from_the_shared_queue(tmp_path):
    """decode-like cases of very different sizes on --devices cpu,cpu: one queue, largest
    estimate first; each case runs exactly once, on one worker; run.json says which worker
    took what and where the wall time went."""
    from harness.plan.balance import CaseQueues, case_cost_s
    from harness.plan.cells import RunOptions, group_by_case, plan_cells

    text = SMALL.replace("count: [2, 5]", "count: [1, 2, 3, 8]").replace("high: 70", "high: 300")
    suite = tmp_path / "s.yaml"
    suite.write_text(text)
    out = tmp_path / "res"
    assert main(["run", str(suite), "--devices", "cpu,cpu", "--backends", "torch-math,sdpa", "--out", str(out),
                 "--quiet", "--no-time"]) == 0
    rows = read_rows(out)
    assert len(rows) == 8 and all(r.status == "pass" for r in rows)
    assert sorted(r.key for r in rows) == sorted({r.key for r in rows})  # no cell twice
    by_case = {}
    for r in rows:
        by_case.setdefault(r.case, set()).add(r.worker.pid)
    assert len(by_case) == 4 and all(len(p) == 1 for p in by_case.values())  # a case on one worker
    assert len(set().union(*by_case.values())) == 2, "both workers got cases"
    header = json.loads((out / "run.json").read_text())
    plan = header["devices_plan"]
    assert [p["device"] for p in plan] == ["cpu", "cpu"] and sum(p["cases"] for p in plan) == 4
    from backends.sdpa import SDPABackend
    from backends.torch_math import TorchMathBackend

    cells = plan_cells(parse_suite(yaml.safe_load(text)), [TorchMathBackend, SDPABackend], RunOptions(device=torch.device("cpu")))
    cases = group_by_case(cells)
    costs = [case_cost_s(c, "cpu", False, 0.5) for c in cases]
    assert math.isclose(sum(p["est_cost_s"] for p in plan), sum(costs), rel_tol=1e-3)
    assert len(set(costs)) == len(costs)  # the estimate tells the cases apart
    # The queue hands out the largest estimate first, and each case once, whoever asks.
    q = CaseQueues.plan(cases, ["cpu", "cpu"], False, 0.5)
    got = [q.popleft(i % 2) for i in range(len(cases))]
    assert not q and [costs[cases.index(c)] for c in got] == sorted(costs, reverse=True)
    # Both workers started at once and imported their backends before the first case.
    workers = header["workers"]
    assert len(workers) == 2 and all(w["ready_s"] > 0 and set(w["import_by_backend_s"]) == {"torch-math", "sdpa"}
                                     for w in workers)
    assert all(w["busy_s"] > 0 and w["idle_s"] >= 0 for w in workers)
    wb = header["wall_breakdown_s"]
    assert set(wb) == {"startup", "expand", "wait_workers", "cases", "finish"}
    assert math.isclose(sum(wb.values()), header["wall_s"], abs_tol=0.05)
    # harness diag speed: one worker vs two, same verdicts, a speed-up figure

    one = tmp_path / "one"
    assert main(["run", str(suite), "--device", "cpu", "--backends", "torch-math,sdpa", "--out", str(one),
                 "--quiet", "--no-time"]) == 0
    assert main(["diag", "speed", str(one), str(out), "--json", str(tmp_path / "s.json")]) == 0
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["verdicts_differ"] == [] and summary["speedup"] > 0


# ---------------------------------------------------------------- energy beside the time
def test_energy_absent_on_cpu_rows_say_why(tmp_path):
    from harness.timing.energy import _meter, energy_meter, measure_energy

    read, why = energy_meter(torch.device("cpu"))
    assert read is None and "NVML reports GPUs only" in why
    from harness.timing import TimingOptions
    from harness.timing.energy import DISABLED

    # Off unless asked for (short windows did not repeat on the H200), and the row says how to ask.
    assert TimingOptions.for_device(torch.device("cuda")).energy_window_s == 0
    assert measure_energy(lambda: None, 1, 1e-3, torch.device("cpu"), 0) == {"available": False, "reason": DISABLED}
    assert "--energy-window SECONDS" in DISABLED
    if not torch.cuda.is_available():
        # No driver here: the NVML probe fails with a reason instead of raising.
        read, why = _meter("cuda:0")
        assert read is None and why.startswith("NVML energy counter unavailable")
    suite = tmp_path / "s.yaml"
    suite.write_text(SMALL)
    out = tmp_path / "res"
    assert main(["run", str(suite), "--device", "cpu", "--backends", "torch-math", "--out", str(out),
                 "--quiet", "--no-isolation", "--max-time", "0.02"]) == 0
    for r in read_rows(out):
        assert r.timing.energy.available is False and "cpu" in r.timing.energy.reason


# ---------------------------------------------------------------- correctness references are not timed
def test_reference_backend_is_checked_not_timed_unless_asked(tmp_path, monkeypatch):
    from backends.torch_math import TorchMathBackend

    caps = TorchMathBackend.capabilities()
    assert caps.role == "reference" and caps.untimed_on == frozenset({"cuda"})  # on CPU it stays timed
    assert caps.timing_skip_reason("cpu") is None and "not timed on cuda" in caps.timing_skip_reason("cuda")
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1]))
    # In this process: which rows are timed is decided by the runner, the same in a worker.
    suite = tmp_path / "s.yaml"
    suite.write_text(SMALL)
    backends = "plugins.cpu_reference:CpuReferenceMath,sdpa"
    out = tmp_path / "res"
    assert main(["run", str(suite), "--device", "cpu", "--backends", backends, "--out", str(out),
                 "--quiet", "--max-time", "0.05", "--report", "--no-isolation"]) == 0
    rows = read_rows(out)
    ref = [r for r in rows if r.backend == "cpu-reference-math"]
    other = [r for r in rows if r.backend == "sdpa"]
    assert len(ref) == 2 and all(r.status == "pass" and r.check is not None and r.check.passed for r in ref)
    assert all(r.timing is None and "reference, not timed" in r.timing_skipped for r in ref)
    assert all(r.timing is not None and r.timing_skipped is None for r in other)
    assert "reference, not timed" in (out / "report.html").read_text()
    out2 = tmp_path / "res2"
    assert main(["run", str(suite), "--device", "cpu", "--backends", backends, "--out", str(out2),
                 "--quiet", "--max-time", "0.05", "--time-references", "--no-isolation"]) == 0
    assert all(r.timing is not None and r.timing_skipped is None for r in read_rows(out2))


def test_energy_from_the_timed_loop_counts_every_call_and_the_busy_share():
    from harness.timing.energy import loop_energy

    # 1.5 J over 0.5 s of loop: 40 samples of 8 calls, GPU busy 0.4 s of it.
    e = loop_energy(1_000_000, 1_001_500, 0.5, 320, 0.4, "pynvml")
    assert e["method"] == "timed_loop" and e["available"] is True
    assert math.isclose(e["j_per_call"], 1.5 / 320) and math.isclose(e["mean_w"], 3.0)
    assert math.isclose(e["busy_frac"], 0.8)
    # A counter that did not move in the loop gives no figure, and says so.
    still = loop_energy(7, 7, 0.2, 10, 0.1, "pynvml")
    assert still["available"] is False and "did not advance in 200 ms" in still["reason"]


def test_first_library_import_in_process_is_import_not_precheck(tmp_path):
    """In one process (--no-isolation) the first availability probe of each backend is where
    its library loads: that row records it as "import"; later rows of the backend do not."""
    from harness.plan import cells

    cells.IMPORTED.clear()  # this test process may have probed these backends already
    suite = tmp_path / "s.yaml"
    suite.write_text(SMALL)
    out = tmp_path / "res"
    assert main(["run", str(suite), "--device", "cpu", "--backends", "torch-math,sdpa", "--out", str(out),
                 "--quiet", "--no-time", "--no-isolation"]) == 0
    rows = read_rows(out)
    with_import = [r for r in rows if "import" in r.host.breakdown_ms]
    assert sorted(r.backend for r in with_import) == ["sdpa", "torch-math"]
    assert all(r.case == rows[0].case for r in with_import)  # the first case's rows
    assert all("precheck" in r.host.breakdown_ms for r in rows)
