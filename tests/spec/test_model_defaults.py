"""transformers' per-model_type defaults applied to config.json files as published (fields the
published file leaves out), and repo IDs resolved through a Hugging Face cache laid out as
huggingface_hub lays it out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from harness.cli import main
from harness.spec.models import ModelError, builtin, parse_config, resolve
from harness.spec.models.catalog import ALLOW_DOWNLOAD_ENV, CONFIG_DIR, builtin_for_repo

# google/gemma-3-12b-it's config.json as published (vision_config left out): its text_config
# has no head_dim, query_pre_attn_scalar or sliding_window_pattern; transformers fills them in.
GEMMA3_12B = {
    "architectures": ["Gemma3ForConditionalGeneration"], "boi_token_index": 255999, "eoi_token_index": 256000,
    "eos_token_id": [1, 106], "image_token_index": 262144, "initializer_range": 0.02, "mm_tokens_per_image": 256,
    "model_type": "gemma3",
    "text_config": {"hidden_size": 3840, "intermediate_size": 15360, "model_type": "gemma3_text",
                    "num_attention_heads": 16, "num_hidden_layers": 48, "num_key_value_heads": 8,
                    "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024},
    "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0",
}
# google/gemma-3-27b-it: head_dim 128 and query_pre_attn_scalar 168 are written out.
GEMMA3_27B = {**GEMMA3_12B, "text_config": {
    "head_dim": 128, "hidden_size": 5376, "intermediate_size": 21504, "model_type": "gemma3_text",
    "num_attention_heads": 32, "num_hidden_layers": 62, "num_key_value_heads": 16, "query_pre_attn_scalar": 168,
    "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024}}
GEMMA2_9B = {"architectures": ["Gemma2ForCausalLM"], "attn_logit_softcapping": 50.0, "head_dim": 256,
             "hidden_size": 3584, "model_type": "gemma2", "num_attention_heads": 16, "num_hidden_layers": 42,
             "num_key_value_heads": 8, "query_pre_attn_scalar": 256, "sliding_window": 4096,
             "torch_dtype": "bfloat16"}


def _kinds(m):
    return [(k.name, k.num_heads, k.num_kv_heads, k.head_size, k.sliding_window, k.layers) for k in m.kinds]


def _scale(k):
    return k.scale if k.scale is not None else k.head_size ** -0.5


def test_gemma3_12b_as_published_gets_transformers_defaults():
    m = parse_config(GEMMA3_12B, "gemma-3-12b-it", "t")
    assert _kinds(m) == [("local", 16, 8, 256, 1024, 40), ("global", 16, 8, 256, None, 8)]
    assert all(_scale(k) == pytest.approx(1 / 16) for k in m.kinds)
    assert any("head_dim absent" in n for n in m.notes)


def test_gemma3_27b_as_published():
    m = parse_config(GEMMA3_27B, "gemma-3-27b-it", "t")
    assert _kinds(m) == [("local", 32, 16, 128, 1024, 52), ("global", 32, 16, 128, None, 10)]
    assert all(_scale(k) == pytest.approx(168 ** -0.5) for k in m.kinds)


def test_newer_gemma3_layer_types_win_over_the_pattern():
    types = (["sliding_attention"] * 5 + ["full_attention"]) * 8
    types[0] = "full_attention"
    m = parse_config({**GEMMA3_12B, "text_config": {**GEMMA3_12B["text_config"], "layer_types": types}}, "x", "t")
    assert [(k.name, k.layers) for k in m.kinds] == [("local", 39), ("global", 9)]


def test_gemma2_alternates_and_softcap_default():
    m = parse_config(GEMMA2_9B, "gemma-2-9b-it", "t")
    assert [(k.name, k.layers, k.softcap) for k in m.kinds] == [("local", 21, 50.0), ("global", 21, 50.0)]
    bare = {k: v for k, v in GEMMA2_9B.items() if k not in ("attn_logit_softcapping", "head_dim", "sliding_window")}
    b = parse_config(bare, "x", "t")  # transformers' Gemma2Config defaults: 50.0, 256, 4096
    assert [(k.softcap, k.head_size, k.sliding_window) for k in b.kinds] == [(50.0, 256, 4096), (50.0, 256, None)]


@pytest.mark.parametrize("cfg, heads, kv, head, window", [
    # Llama / Mixtral / Phi-3: head_dim = hidden_size / heads when absent.
    ({"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "num_hidden_layers": 32}, 32, 32, 128, None),
    ({"model_type": "mixtral", "hidden_size": 4096, "num_attention_heads": 32, "num_hidden_layers": 32}, 32, 8, 128, None),
    ({"model_type": "phi3", "hidden_size": 3072, "num_attention_heads": 32, "num_hidden_layers": 32}, 32, 32, 96, None),
    # Mistral: 8 KV heads and a 4096 window when the file says nothing; an explicit null wins.
    ({"model_type": "mistral", "hidden_size": 4096, "num_attention_heads": 32, "num_hidden_layers": 32}, 32, 8, 128, 4096),
    ({"model_type": "mistral", "hidden_size": 4096, "num_attention_heads": 32, "num_hidden_layers": 32,
      "sliding_window": None}, 32, 8, 128, None),
    # Qwen2: 32 KV heads by default, the window off (use_sliding_window false).
    ({"model_type": "qwen2", "hidden_size": 3584, "num_attention_heads": 28, "num_hidden_layers": 28,
      "sliding_window": 131072}, 28, None, 128, None),
    # Qwen3: head_dim 128 by default, not hidden_size / heads (5120 / 64 = 80).
    ({"model_type": "qwen3", "hidden_size": 5120, "num_attention_heads": 64, "num_key_value_heads": 8,
      "num_hidden_layers": 64}, 64, 8, 128, None),
])
def test_per_model_type_defaults(cfg, heads, kv, head, window):
    if kv is None:  # Qwen2's default 32 KV heads do not divide 28 query heads: a clear error, as in vLLM
        with pytest.raises(ModelError, match="num_key_value_heads"):
            parse_config(cfg, "x", "t")
        return
    k = parse_config(cfg, "x", "t").kinds[0]
    assert (k.num_heads, k.num_kv_heads, k.head_size, k.sliding_window) == (heads, kv, head, window)


def test_builtins_hold_no_written_in_defaults():
    data = json.loads((CONFIG_DIR / "gemma-3-12b.json").read_text())
    assert not {"head_dim", "query_pre_attn_scalar", "sliding_window_pattern"} & set(data["text_config"])
    m = builtin("gemma-3-12b")
    assert _kinds(m) == [("local", 16, 8, 256, 1024, 40), ("global", 16, 8, 256, None, 8)]


# ---------------------------------------------------------------- repo IDs


def _lay_out_cache(root: Path, repo: str, config: dict, rev: str = "0123456789abcdef0123456789abcdef01234567") -> Path:
    """A cache as huggingface_hub writes it: models--org--name/{refs/main, snapshots/<rev>/config.json}."""
    d = root / ("models--" + repo.replace("/", "--"))
    (d / "refs").mkdir(parents=True)
    (d / "refs" / "main").write_text(rev)
    snap = d / "snapshots" / rev
    snap.mkdir(parents=True)
    (d / "blobs").mkdir()
    blob = d / "blobs" / "cfgblob"
    blob.write_text(json.dumps(config))
    (snap / "config.json").symlink_to(Path("..") / ".." / "blobs" / "cfgblob")
    return d


def test_repo_id_from_hf_cache(tmp_path, monkeypatch):
    pytest.importorskip("huggingface_hub")
    _lay_out_cache(tmp_path / "hub", "google/gemma-3-12b-it", GEMMA3_12B)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    m = resolve("google/gemma-3-12b-it")
    assert m.id == "google/gemma-3-12b-it" and "snapshots" in m.source
    assert _kinds(m) == [("local", 16, 8, 256, 1024, 40), ("global", 16, 8, 256, None, 8)]
    # HF_HOME/hub is the cache when HF_HUB_CACHE is not set.
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    assert resolve("google/gemma-3-12b-it").source == m.source


def test_repo_id_aliases_the_builtin_without_cache_or_download(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    monkeypatch.delenv(ALLOW_DOWNLOAD_ENV, raising=False)
    assert builtin_for_repo("meta-llama/Llama-3.1-8B") == "llama-3.1-8b"
    m = resolve("meta-llama/Llama-3.1-8B")
    assert m.id == "llama-3.1-8b" and _kinds(m) == [("all", 32, 8, 128, None, 32)]
    assert resolve("google/gemma-2-9b-it").id == "gemma-2-9b"


def test_unknown_repo_id_names_the_closest_builtins(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    monkeypatch.delenv(ALLOW_DOWNLOAD_ENV, raising=False)
    with pytest.raises(ModelError) as e:
        resolve("meta-llama/Llama-3.2-8B")
    msg = str(e.value)
    assert "closest built-in" in msg and "Llama-3.1-8B-Instruct" in msg and "config.json" in msg
    assert ALLOW_DOWNLOAD_ENV in msg


def test_validate_a_suite_naming_a_cached_repo(tmp_path, monkeypatch, capsys):
    pytest.importorskip("huggingface_hub")
    _lay_out_cache(tmp_path / "hub", "google/gemma-3-12b-it", GEMMA3_12B)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    suite = tmp_path / "s.yaml"
    suite.write_text(yaml.safe_dump({"suite": "g3", "cases": [
        {"model": "google/gemma-3-12b-it", "batch": "8q1s1k"}]}))
    assert main(["validate", str(suite)]) == 0
    out = capsys.readouterr().out
    # validate wraps the line at the console's width: read it whole again
    text = " ".join(x.strip() for x in out.splitlines())
    line = text[text.index("model google/gemma-3-12b-it tp1"):]
    assert "head 256," in line and "scale 1/16," in line and "window 1024" in line and "40 local + 8 global" in line


def test_the_defaults_table_agrees_with_transformers():
    """The table is ours (no transformers at run time); where transformers is installed, each
    value must be its config class's default (the version checked is noted in the module)."""
    transformers = pytest.importorskip("transformers")
    from harness.spec.models.defaults import MODEL_TYPE_DEFAULTS, alternates

    for model_type, table in MODEL_TYPE_DEFAULTS.items():
        cls = transformers.CONFIG_MAPPING[model_type]
        fields = getattr(cls, "__dataclass_fields__", {})
        for key, value in table.items():
            if key in ("alternate", "sliding_window_pattern"):
                continue
            default = fields[key].default if key in fields else getattr(cls(), key)
            assert default == value, (model_type, key, default, value)
        # The layer pattern transformers derives when the file has no layer_types.
        types = cls(num_hidden_layers=12).layer_types if hasattr(cls(), "layer_types") else None
        if alternates(model_type):
            assert types == ["sliding_attention", "full_attention"] * 6, model_type
        if "sliding_window_pattern" in table:
            p = table["sliding_window_pattern"]
            assert types == ["full_attention" if (i + 1) % p == 0 else "sliding_attention" for i in range(12)]


def test_gemma3_12b_as_transformers_reads_it():
    transformers = pytest.importorskip("transformers")
    text = transformers.Gemma3Config.from_dict(GEMMA3_12B).text_config
    m = parse_config(GEMMA3_12B, "g", "t")
    local, glob = m.kinds
    assert local.head_size == text.head_dim == 256 and local.num_heads == text.num_attention_heads
    assert (local.layers, glob.layers) == (text.layer_types.count("sliding_attention"),
                                           text.layer_types.count("full_attention"))
    assert text.query_pre_attn_scalar ** -0.5 == pytest.approx(1 / 16)
