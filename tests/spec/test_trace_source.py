"""The suite loader's ``trace:`` source: same cases as the generator, bad inputs name file,
case and field (the CLI exits 2 and writes nothing)."""
import subprocess
import sys
from pathlib import Path

import pytest

from harness.spec import SpecError, load_suite

ROOT = Path(__file__).resolve().parents[2]
MC = ROOT / "data" / "traces" / "mooncake-fast25-conversation.jsonl"
AZ = ROOT / "data" / "traces" / "azure-llm-2023-conv.csv"

HEAD = ("suite: t\nbackends: [sdpa]\ndefaults: {num_heads: 2, num_kv_heads: 1, head_size: 32, block_size: 256}\n"
        "cases:\n")


def _suite(tmp_path, case: str, name: str = "s.yaml") -> Path:
    p = tmp_path / name
    p.write_text(HEAD + case)
    return p


@pytest.mark.parametrize("trace,args,src", [
    (MC, ["--first", "20", "--sample", "4", "--max-num-batched-tokens", "2048"],
     "{trace: %s, first_n: 20, steps: 4, scheduler: {max_num_batched_tokens: 2048}}"),
    (AZ, ["--first", "200", "--rate-scale", "4", "--sample", "6", "--max-num-batched-tokens", "2048"],
     "{trace: %s, first_n: 200, rate_scale: 4, steps: 6, scheduler: {max_num_batched_tokens: 2048}}"),
    (AZ, ["--window", "0", "30", "--first", "40", "--sample", "3", "--max-num-batched-tokens", "512",
          "--max-num-seqs", "8"],
     "{trace: %s, window: [0, 30], first_n: 40, steps: 3, scheduler: {max_num_batched_tokens: 512, max_num_seqs: 8}}"),
])
def test_trace_source_gives_the_generator_cases(tmp_path, trace, args, src):
    from harness.spec.trace.make_suite import main
    gen = tmp_path / "gen.yaml"
    assert main([str(trace), *args, "--block-size", "256", "--heads", "2", "1", "32", "--backends", "sdpa",
                 "-o", str(gen)]) == 0
    want = load_suite(gen).cases
    got = load_suite(_suite(tmp_path, f"- name: tr\n  batch: {src % trace}\n")).cases
    assert len(got) == len(want) > 0
    for g, w in zip(got, want):
        assert g.name == f"tr.{w.name}" and g.group == "tr" and g.params == {"step": int(w.name[5:])}
        assert g.model_dump(exclude={"name", "group", "params"}) == w.model_dump(exclude={"name", "group", "params"})


def test_trace_path_next_to_suite_and_sweeps(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "mc.jsonl").write_text(MC.read_text())
    p = _suite(tmp_path / "sub", "- name: tr\n  block_size: [256, 512]\n"
                                 "  batch: {trace: mc.jsonl, first_n: 10, steps: 2}\n")
    cases = load_suite(p).cases
    assert len(cases) == 4 and {c.block_size for c in cases} == {256, 512}
    assert all(c.params["block_size"] in (256, 512) and "step" in c.params for c in cases)


@pytest.mark.parametrize("case,where", [
    ("batch: {trace: nope.csv}", "field batch.trace"),
    ("batch: {trace: %s, steps: 0}" % MC, "field batch.steps"),
    ("batch: {trace: %s, window: [5, 1]}" % AZ, "field batch.window"),
    ("batch: {trace: %s, rate_scale: -1}" % AZ, "field batch.rate_scale"),
    ("batch: {trace: %s, scheduler: {max_num_seq: 3}}" % AZ, "field batch.scheduler.max_num_seq"),
    ("batch: {trace: %s, first_n: 5, steps: 2}\n  block_size: 24" % AZ, "field block_size"),
    ("batch: {trace: %s, first_n: 10}\n  shared_prefix: {length: 256}" % MC, "field batch"),
    ("batch: {first_n: 3}", "field batch"),
    ("batch: {trace: %s, window: [100000, 200000]}" % AZ, "field batch"),
    ("batch: {trace: %s}" % AZ, "steps: K"),
])
def test_bad_trace_sources_name_file_case_field(tmp_path, case, where):
    p = _suite(tmp_path, f"- name: bad\n  {case}\n")
    with pytest.raises(SpecError) as e:
        load_suite(p)
    msg = str(e.value)
    assert msg.startswith(str(p)) and "case 'bad'" in msg and where in msg, msg


def test_bad_trace_file_cli_exit_2_nothing_written(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,x,4\n")
    p = _suite(tmp_path, f"- name: bad\n  batch: {{trace: {bad}}}\n")
    r = subprocess.run([sys.executable, "-m", "harness.cli", "run", str(p), "--device", "cpu",
                        "--out", str(tmp_path / "res")], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "case 'bad'" in r.stderr and "line 2" in r.stderr and "ContextTokens" in r.stderr
    assert not (tmp_path / "res").exists()


def test_committed_trace_suites_load():
    for name in ("trace-azure-conv", "trace-mooncake"):
        s = load_suite(ROOT / "suites" / f"{name}.yaml")
        assert s.cases and all("trace" in c.tags and any(t.startswith("weight=") for t in c.tags) for c in s.cases)
    mc = load_suite(ROOT / "suites" / "trace-mooncake.yaml")
    assert any(c.shared_prefix is not None for c in mc.cases)
