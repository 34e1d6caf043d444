"""Model shapes: config.json parsing, TP slicing as vLLM shards heads, the built-in table (read by
the same parser), and suite cases made from ``model:`` / ``--model``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from harness.cli import main
from harness.spec.models import ModelError, builtin, known_models, parse_config, read_config, resolve, tp_slice
from harness.spec.models.catalog import CONFIG_DIR, hf_repo
from harness.spec import SpecError, parse_suite

DATA = Path(__file__).parents[1] / "data"
LLAMA = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
         "num_hidden_layers": 32, "torch_dtype": "bfloat16"}


def test_head_dim_from_hidden_size_and_explicit_head_dim_wins():
    assert parse_config(LLAMA, "x", "t").kinds[0].head_size == 128
    # Qwen3-32B: hidden 5120 / 64 heads would be 80; its head_dim says 128.
    q = parse_config({**LLAMA, "hidden_size": 5120, "num_attention_heads": 64, "head_dim": 128}, "x", "t")
    assert q.kinds[0].head_size == 128


def test_missing_kv_heads_means_multi_head_attention():
    cfg = {k: v for k, v in LLAMA.items() if k != "num_key_value_heads"}
    assert parse_config(cfg, "x", "t").kinds[0].num_kv_heads == 32


@pytest.mark.parametrize("cfg, field", [
    ({**LLAMA, "num_attention_heads": None}, "num_attention_heads"),
    ({**LLAMA, "num_key_value_heads": 5}, "num_key_value_heads"),
    ({**LLAMA, "hidden_size": 4097}, "head_dim"),
    ({**LLAMA, "sliding_window": -1}, "sliding_window"),
    ({**LLAMA, "torch_dtype": "int8"}, "torch_dtype"),
    ({**LLAMA, "sliding_window": 8, "layer_types": ["sliding_attention", "cross"]}, "layer_types"),
    ({**LLAMA, "num_attention_heads": True}, "num_attention_heads"),
])
def test_bad_config_names_the_field(cfg, field):
    with pytest.raises(ModelError, match=f"field {field}"):
        parse_config(cfg, "x", "cfg.json")


def test_layer_kinds_from_layer_types_pattern_and_qwen_rule():
    lt = parse_config({**LLAMA, "num_hidden_layers": 4, "sliding_window": 128,
                       "layer_types": ["sliding_attention", "full_attention"] * 2}, "x", "t")
    assert [(k.name, k.sliding_window, k.layers) for k in lt.kinds] == [("local", 128, 2), ("global", None, 2)]
    pat = parse_config({**LLAMA, "num_hidden_layers": 12, "sliding_window": 1024, "sliding_window_pattern": 6}, "x", "t")
    assert [(k.name, k.layers) for k in pat.kinds] == [("local", 10), ("global", 2)]
    # Qwen2: use_sliding_window false turns the window off on every layer.
    off = parse_config({**LLAMA, "sliding_window": 131072, "use_sliding_window": False}, "x", "t")
    assert [(k.name, k.sliding_window) for k in off.kinds] == [("all", None)]
    # ... and with it on, layers from max_window_layers up slide.
    on = parse_config({**LLAMA, "num_hidden_layers": 4, "sliding_window": 512, "use_sliding_window": True,
                       "max_window_layers": 1}, "x", "t")
    assert [(k.name, k.layers) for k in on.kinds] == [("local", 3), ("global", 1)]
    # Mistral v0.1: one window on every layer.
    assert parse_config({**LLAMA, "sliding_window": 4096}, "x", "t").kinds[0].sliding_window == 4096


def test_local_config_json_file_and_folder():
    by_folder = read_config(DATA / "tiny-model")
    by_file = read_config(DATA / "tiny-model" / "config.json")
    assert by_folder == by_file and by_folder.id == "tiny-model" and by_folder.dtype == "float16"
    local, glob = by_folder.kinds
    assert (local.sliding_window, local.softcap, glob.sliding_window, glob.softcap) == (64, 30.0, None, 30.0)


def test_unreadable_config(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ModelError, match="cannot read as JSON"):
        read_config(tmp_path)
    with pytest.raises(ModelError, match="no such config.json"):
        resolve(str(tmp_path / "nope" / "config.json"))


def test_tp_slices_heads_and_replicates_kv_heads():
    llama = builtin("llama-3.1-8b")
    assert [(s.num_heads, s.num_kv_heads) for tp in (1, 2, 4, 8) for s in tp_slice(llama, tp)] == [
        (32, 8), (16, 4), (8, 2), (4, 1)]
    # 8 KV heads over 16 ranks: one KV head per rank, replicated (vLLM's QKVParallelLinear).
    big = builtin("llama-3.1-70b")
    assert [(s.num_heads, s.num_kv_heads) for s in tp_slice(big, 16)] == [(4, 1)]
    assert tp_slice(big, 2)[0].name == "llama-3.1-70b/tp2"


def test_tp_errors():
    with pytest.raises(ModelError, match="3 does not divide its 32 query heads"):
        tp_slice(builtin("llama-3.1-8b"), 3)
    with pytest.raises(ModelError, match="8 does not divide its 12 KV heads"):
        tp_slice(parse_config({**LLAMA, "num_attention_heads": 48, "num_key_value_heads": 12, "hidden_size": 6144},
                              "x", "t"), 8)
    with pytest.raises(ModelError, match="not a multiple of its 4 KV heads"):
        tp_slice(parse_config({**LLAMA, "num_key_value_heads": 4, "num_attention_heads": 24, "hidden_size": 3072},
                              "x", "t"), 6)
    with pytest.raises(ModelError, match="positive integer"):
        tp_slice(builtin("llama-3.1-8b"), 0)


@pytest.mark.parametrize("model_id", known_models())
def test_every_builtin_entry_parses_and_names_its_source(model_id):
    data = json.loads((CONFIG_DIR / f"{model_id}.json").read_text())
    repo = hf_repo(model_id)
    assert "/" in repo and f"| {model_id} | {repo} |" in (CONFIG_DIR / "SOURCES.md").read_text() or (
        data.get("_source", {}).get("hf_repo") == repo)
    m = builtin(model_id)
    assert m.source.startswith(repo)
    assert m.kinds and not m.unsupported and tp_slice(m, 1)


def test_builtin_values_of_known_models():
    def shape(mid):
        return [(k.name, k.num_heads, k.num_kv_heads, k.head_size, k.sliding_window, k.softcap, k.sinks)
                for k in builtin(mid).kinds]

    assert shape("llama-3.1-8b") == [("all", 32, 8, 128, None, 0.0, False)]
    assert shape("gemma-2-9b") == [("local", 16, 8, 256, 4096, 50.0, False), ("global", 16, 8, 256, None, 50.0, False)]
    assert shape("gpt-oss-20b") == [("local", 64, 8, 64, 128, 0.0, True), ("global", 64, 8, 64, None, 0.0, True)]
    assert shape("phi-3-mini")[0][3] == 96
    assert shape("qwen3-32b") == [("all", 64, 8, 128, None, 0.0, False)]
    # Gemma-2-27B scales queries by query_pre_attn_scalar 144, not its head size 128.
    assert builtin("gemma-2-27b").kinds[0].scale == pytest.approx(144 ** -0.5)
    # Gemma-2-9B's published torch_dtype is bfloat16 (the table had float32).
    assert builtin("gemma-2-9b").dtype == "bfloat16" and not any("float32" in n for n in builtin("gemma-2-9b").notes)
    # A float32 checkpoint runs attention in bfloat16 and says so.
    f32 = parse_config({**LLAMA, "torch_dtype": "float32"}, "x", "t")
    assert f32.dtype == "bfloat16" and "float32" in f32.notes[0]
    # MLA (tests/cell/test_mla.py has the rest): one latent "KV head" of 576 values, replicated under TP.
    assert shape("deepseek-v3") == [("all", 128, 1, 576, None, 0.0, False)]


def test_unknown_id_lists_the_known_ones():
    with pytest.raises(ModelError) as e:
        builtin("llama-9")
    assert "llama-3.1-8b" in str(e.value) and "config.json" in str(e.value)


def _suite(cases, **top):
    return {"suite": "t", "cases": cases, **top}


def test_model_case_expands_per_tp_and_layer_kind():
    s = parse_suite(_suite([{"model": ["gemma-2-9b", "llama-3.1-8b"], "tp": [1, 2],
                             "batch": [{"kind": "decode", "count": 2, "context_len": 100}]}]))
    names = [c.name for c in s.cases]
    assert names == ["gemma-2-9b/tp1/local", "gemma-2-9b/tp1/global", "gemma-2-9b/tp2/local", "gemma-2-9b/tp2/global",
                     "llama-3.1-8b/tp1", "llama-3.1-8b/tp2"]
    g = s.cases[2]
    assert (g.num_heads, g.num_kv_heads, g.head_size, g.sliding_window, g.softcap) == (8, 4, 256, 4096, 50.0)
    assert g.params["model"] == "gemma-2-9b/tp2/local" and g.group == "gemma-2-9b/tp2/local"
    assert s.cases[3].sliding_window is None


def test_model_case_errors_name_file_case_and_field():
    with pytest.raises(SpecError, match=r"s.yaml: case 'x': .*field num_heads: the model sets it"):
        parse_suite(_suite([{"name": "x", "model": "llama-3.1-8b", "num_heads": 8,
                             "batch": [{"kind": "prefill", "query_len": 4}]}]), "s.yaml")
    with pytest.raises(SpecError, match=r"case 'cases\[0\]': field tp: needs model"):
        parse_suite(_suite([{"tp": 2, "num_heads": 8, "num_kv_heads": 8, "head_size": 64,
                             "batch": [{"kind": "prefill", "query_len": 4}]}]), "s.yaml")
    data = json.loads((CONFIG_DIR / "deepseek-v3.json").read_text())
    with pytest.raises(ModelError, match="config.json: field kv_lora_rank: must be a positive integer"):
        parse_config({**data, "kv_lora_rank": 0}, "x", "config.json")


def test_cli_model_override_and_unknown_model(tmp_path, capsys):
    suite = tmp_path / "s.yaml"
    suite.write_text(yaml.safe_dump(_suite([{"name": "d", "num_heads": 4, "num_kv_heads": 4, "head_size": 32,
                                              "batch": "2q1s64"}])))
    out = tmp_path / "out"
    rc = main(["run", str(suite), "--model", str(DATA / "tiny-model"), "--tp", "1,2", "--device", "cpu",
               "--backends", "torch-math", "--no-time", "--quiet", "--no-isolation", "--out", str(out)])
    assert rc == 0
    from harness.records.results import read_rows

    rows = read_rows(out)
    assert sorted({r.case for r in rows}) == sorted(f"d/tiny-model/tp{t}/{k}/2q1s64" for t in (1, 2)
                                                   for k in ("local", "global"))
    assert {(r.config.num_heads, r.config.num_kv_heads) for r in rows} == {(4, 2), (2, 1)}
    capsys.readouterr()
    assert main(["run", str(suite), "--model", "no-such-model", "--device", "cpu", "--out", str(tmp_path / "o2")]) == 2
    err = capsys.readouterr().err
    assert "unknown model 'no-such-model'" in err and "gemma-2-9b" in err and not (tmp_path / "o2").exists()
