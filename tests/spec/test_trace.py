"""Trace readers and the scheduler model (CPU, pure Python)."""
from pathlib import Path

import pytest

from harness.spec import SpecError
from harness.spec.trace import SchedulerParams, TraceError, TraceRequest, read_trace, select, simulate

DATA = Path(__file__).resolve().parents[2] / "data" / "traces"


def test_shipped_subsets_read():
    conv = read_trace(DATA / "azure-llm-2023-conv.csv")
    assert len(conv) == 2000 and conv[0] == TraceRequest(0.0, 374, 44)
    mc = read_trace(DATA / "mooncake-fast25-conversation.jsonl")
    assert len(mc) == 400 and mc[0].hash_ids[:3] == (0, 1, 2) and mc[0].prompt_len == 6758


@pytest.mark.parametrize("name,text,where", [
    ("a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,374,44\n"
              "2023-11-16 18:15:47.00,x,44\n", "line 3: field 'ContextTokens'"),
    ("a.csv", "TIME,Ctx,Gen\n", "line 1: field 'header'"),
    ("a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\nnot-a-date,1,1\n", "line 2: field 'TIMESTAMP'"),
    ("b.jsonl", '{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [0, 1]}\n'
                '{"timestamp": 1, "input_length": 600, "output_length": 3}\n', "line 2: field 'hash_ids'"),
    ("b.jsonl", '{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [0]}\n',
     "line 1: field 'hash_ids'"),
    ("b.jsonl", "{oops\n", "line 1: field 'json'"),
    ("b.jsonl", "", "no requests"),
    ("c.txt", "x", "unknown format"),
])
def test_bad_files_name_file_line_field(tmp_path, name, text, where):
    p = tmp_path / name
    p.write_text(text)
    with pytest.raises(TraceError) as e:
        read_trace(p)
    assert str(p) in str(e.value) and where in str(e.value)
    assert isinstance(e.value, SpecError)   # the CLI's exit-2 path


def test_selection_window_first_and_rate():
    reqs = [TraceRequest(float(t), 10, 2) for t in range(10)]
    out = select(reqs, window_s=(2, 8), first=3, rate_scale=2.0)
    assert [r.arrival_s for r in out] == [0.0, 0.5, 1.0]


def _check_run(reqs, params, res):
    # token budget and max_num_seqs every step; pages cover exactly the tokens
    per_req_tokens: dict[int, int] = {}
    for s in res.steps:
        assert 0 < s.num_tokens <= params.max_num_batched_tokens
        assert len(s.requests) <= params.max_num_seqs
        for r in s.requests:
            assert len(r.block_table) == -(-(r.context_len + r.query_len) // params.block_size)
    # every request completes with exactly prompt + output tokens
    assert res.generated == {i: r.output_len for i, r in enumerate(reqs)}
    assert res.final_len == {i: r.prompt_len + r.output_len for i, r in enumerate(reqs)}
    return per_req_tokens


def test_budget_and_completion_azure():
    reqs = select(read_trace(DATA / "azure-llm-2023-conv.csv"), first=60, rate_scale=20.0)
    p = SchedulerParams(max_num_batched_tokens=2048, max_num_seqs=16)
    res = simulate(reqs, p)
    _check_run(reqs, p, res)
    kinds = {r.kind for s in res.steps for r in s.requests}
    assert kinds == {"prefill", "extend", "decode"}   # chunked prefills happened
    # decode-first: in every step the decodes come before any prefill/extend
    for s in res.steps:
        ks = [r.kind == "decode" for r in s.requests]
        assert ks == sorted(ks, reverse=True)
    # without preemption or prefix hits, tokens computed = prompt + output - 1 per request
    assert res.preemptions == 0
    tot = {}
    for s in res.steps:
        for r in s.requests:
            tot[r.req_id] = tot.get(r.req_id, 0) + r.query_len
    assert tot == {i: r.prompt_len + r.output_len - 1 for i, r in enumerate(reqs)}


def test_prefix_pages_shared_exactly_where_hash_ids_match():
    reqs = [TraceRequest(0.0, 1600, 4, (7, 8, 9, 10)),
            TraceRequest(1.0, 1600, 4, (7, 8, 11, 12)),   # shares 2 blocks
            TraceRequest(2.0, 1600, 4, (99, 8, 9, 10))]   # same later ids, different first: no share
    p = SchedulerParams(block_size=64)
    res = simulate(reqs, p)
    _check_run(reqs, p, res)
    first = {}
    for s in res.steps:
        for r in s.requests:
            first.setdefault(r.req_id, r)
    per = 512 // 64
    assert first[1].context_len == 1024
    full = {}
    for s in res.steps:
        for r in s.requests:
            full[r.req_id] = r.block_table
    assert full[1][: 2 * per] == full[0][: 2 * per]
    assert not set(full[1][2 * per:]) & set(full[0])
    assert first[2].context_len == 0 and not set(full[2]) & set(full[0])
    assert res.prefix_hit_tokens == 1024
    # caching off: nothing shared
    res2 = simulate(reqs, SchedulerParams(block_size=64, enable_prefix_caching=False))
    assert res2.prefix_hit_tokens == 0


def test_preemption_recomputes_newest_first():
    # 4 requests whose decodes outgrow a small cache: the newest is preempted and recomputed
    reqs = [TraceRequest(0.0, 100, 200, ()) for _ in range(4)]
    p = SchedulerParams(block_size=16, num_blocks=60, max_num_batched_tokens=512)
    res = simulate(reqs, p)
    _check_run(reqs, p, res)
    assert res.preemptions > 0
    first_pre = next(s for s in res.steps if s.preempted)
    running_before = {r.req_id for r in res.steps[first_pre.index - 1].requests}
    assert first_pre.preempted[0] == max(running_before)   # newest admitted goes first
    # a preempted request comes back as a prefill from 0 over prompt + generated tokens
    victim = first_pre.preempted[0]
    back = next(r for s in res.steps[first_pre.index:] for r in s.requests
                if r.req_id == victim and s.index > first_pre.index)
    assert back.context_len == 0 and back.query_len > 100
    # pages never used by two running requests at once (no prefix caching here)
    for s in res.steps:
        pages = [b for r in s.requests for b in r.block_table]
        assert len(pages) == len(set(pages))


def test_deterministic_and_block_size_rule():
    reqs = read_trace(DATA / "mooncake-fast25-conversation.jsonl")[:8]
    p = SchedulerParams(block_size=32)
    assert simulate(reqs, p).steps == simulate(reqs, p).steps
    with pytest.raises(ValueError, match="divide 512"):
        SchedulerParams(block_size=48)


def test_stratified_sample_weights_cover_trace():
    from harness.spec.suite_model import RequestGroup
    from harness.spec.trace.replay import sample_steps, step_request_groups
    reqs = select(read_trace(DATA / "azure-llm-2023-conv.csv"), first=60, rate_scale=20.0)
    steps = simulate(reqs, SchedulerParams(max_num_batched_tokens=2048)).steps
    sample = sample_steps(steps, 12)
    assert len(sample) == 12 and len({s.step.index for s in sample}) == 12
    assert abs(sum(s.weight for s in sample) - len(steps)) < 1e-6
    assert sample == sample_steps(steps, 12)
    for s in sample:
        groups = [RequestGroup.model_validate(g) for g in step_request_groups(s.step)]
        assert sum(g.query_dist.value for g in groups) == s.step.num_tokens


def test_make_suite_and_cpu_replay(tmp_path):
    import json
    from harness.spec.trace.make_suite import main
    out = tmp_path / "t.yaml"
    assert main([str(DATA / "azure-llm-2023-conv.csv"), "--first", "30", "--rate-scale", "4",
                 "--sample", "2", "--max-num-batched-tokens", "512", "--block-size", "16",
                 "--heads", "2", "1", "32", "--backends", "torch-math", "-o", str(out)]) == 0
    from harness.cli import main as harness_main
    # In this process: the replay is under test, not the worker or the subprocess.
    assert harness_main(["run", str(out), "--device", "cpu", "--no-time", "--quiet", "--no-isolation",
                         "--out", str(tmp_path / "res")]) == 0
    rows = [json.loads(l) for l in open(tmp_path / "res" / "results.jsonl")]
    assert len(rows) == 2 and all(row["status"] == "pass" for row in rows)
    bad = tmp_path / "bad.csv"
    bad.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,-3,4\n")
    assert main([str(bad), "-o", str(tmp_path / "x.yaml")]) == 2
    assert not (tmp_path / "x.yaml").exists()


def test_step_case_carries_shared_pages():
    from harness.spec.suite_model import CaseSpec
    from harness.case.layout import case_layout
    from harness.spec.trace.replay import step_case
    reqs = select(read_trace(DATA / "mooncake-fast25-conversation.jsonl"), first=20)
    steps = simulate(reqs, SchedulerParams(max_num_batched_tokens=2048, block_size=256)).steps
    shared_steps = 0
    for st in steps[::25]:
        sc = step_case(st, 256)
        if sc.shared_prefix is None:
            continue
        shared_steps += 1
        L, sizes = sc.shared_prefix["length"], sc.shared_prefix["sizes"]
        assert L > 0 and L % 256 == 0 and sum(sizes) == len(st.requests)
        # per request: the case's prefix + context + query is the step's context + query
        by_len = sorted((r.context_len + r.query_len, r.query_len) for r in st.requests)
        assert sorted((L + b["context_len"] + b["query_len"], b["query_len"]) for b in sc.batch) == by_len
        # members of a group of several share their first L tokens' pages in the scheduler's step
        groups: dict[int, list] = {}
        for r in st.requests:
            groups.setdefault(r.block_table[0], []).append(r)
        assert sorted(sizes) == sorted(len(g) for g in groups.values())
        for g in groups.values():
            assert all(r.block_table[:L // 256] == g[0].block_table[:L // 256] for r in g)
        assert sc.shared_tokens == sum((n - 1) * L for n in sizes) <= sc.trace_shared_tokens
        case = CaseSpec.model_validate({"name": "s", "num_heads": 2, "num_kv_heads": 1, "head_size": 32,
                                        "block_size": 256, "batch": sc.batch, "shared_prefix": sc.shared_prefix})
        lay = case_layout(case)
        assert [lay.group_of_req.count(g) for g in range(len(sizes))] == sizes
    assert shared_steps > 5


def test_mooncake_slice_cascade_rows_pass_with_shared_tokens(tmp_path):
    import json
    from harness.spec.trace.make_suite import main
    out = tmp_path / "mc.yaml"
    assert main([str(DATA / "mooncake-fast25-conversation.jsonl"), "--first", "20", "--sample", "3",
                 "--block-size", "256", "--max-num-batched-tokens", "2048", "--heads", "2", "1", "32",
                 "--backends", "torch-cascade,sdpa", "-o", str(out)]) == 0
    from harness.cli import main as harness_main
    assert harness_main(["run", str(out), "--device", "cpu", "--no-time", "--quiet", "--no-isolation",
                         "--out", str(tmp_path / "res")]) == 0
    rows = [json.loads(l) for l in open(tmp_path / "res" / "results.jsonl")]
    casc = [row for row in rows if row["backend"] == "torch-cascade" and row["status"] == "pass"]
    assert casc, [(row["case"], row["status"], row["reason"]) for row in rows]
    for row in casc:
        shared = int(next(t for t in row["config"]["tags"] if t.startswith("shared_tokens="))[14:])
        lay = row["layout"]
        assert lay["prefix_len"] > 0 and shared == lay["prefix_len"] * (lay["num_reqs"] - lay["prefix_groups"]) > 0
        plain = next(p for p in rows if p["case"] == row["case"] and p["backend"] == "sdpa")
        assert plain["status"] == "pass"


def test_shared_prefix_sizes_validated(tmp_path):
    from harness.spec import load_suite
    p = tmp_path / "s.yaml"
    p.write_text("suite: s\ncases:\n- name: c\n  num_heads: 2\n  num_kv_heads: 1\n  head_size: 32\n"
                 "  batch: [{kind: decode, count: 3, context_len: 40}]\n"
                 "  shared_prefix: {length: 16, groups: 2, sizes: [1, 1]}\n")
    with pytest.raises(SpecError) as e:
        load_suite(p)
    assert str(p) in str(e.value) and "'c'" in str(e.value) and "sizes" in str(e.value)
