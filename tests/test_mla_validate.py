"""`harness validate` on MLA models: the real softmax scale, the latent KV-token column, the
parser's assumptions and where each config came from (run.json's ``models``)."""

import json
from pathlib import Path

from harness.cli import main
from harness.spec import load_suite
from harness.spec.models import builtin, resolve

ROOT = Path(__file__).resolve().parent.parent


def _validate(capsys, *argv: str) -> str:
    assert main(["validate", *argv]) == 0
    return " ".join(capsys.readouterr().out.split())  # rich wraps lines


def test_validate_prints_each_mla_models_real_scale_and_config_source(capsys):
    out = _validate(capsys, str(ROOT / "suites" / "models.yaml"), "--model", "deepseek-v3,kimi-k2,kimi-k2-0905,deepseek-v2-lite",
                    "--tp", "8")
    assert "scale 1/24" not in out
    for model, scale in (("deepseek-v3", "0.1352"), ("kimi-k2", "0.1309"), ("kimi-k2-0905", "0.1447"),
                         ("deepseek-v2-lite", "0.1147")):
        assert f"model {model} tp8:" in out and f"scale {scale}" in out.split(f"model {model} tp8:")[1][:200], model
        assert f"config: built-in {model} (" in out


def test_kv_token_column_counts_latent_vectors_and_expanded_tokens(tmp_path, capsys):
    p = tmp_path / "s.yaml"
    p.write_text("suite: s\ndefaults: {attention: mla, num_heads: 16}\ncases:\n"
                 "  - {name: dec, batch: [{kind: decode, context_len: 2047}]}\n"
                 "  - {name: pre, batch: [{kind: prefill, query_len: 128}]}\n")
    suite = load_suite(p)
    assert [c.work_bound()[1] / c.kv_bytes_per_token() for c in suite.cases] == [2048, 128]
    out = _validate(capsys, str(p))
    assert "2,048" in out and " 128 " in out and "1,024" not in out and " 107" not in out


def test_parser_notes_the_defaults_it_took_and_the_file_origin(tmp_path):
    cfg = json.loads((ROOT / "harness/spec/models/configs/kimi-k2.json").read_text())
    del cfg["rope_scaling"]["mscale_all_dim"]
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    m = resolve(str(p))
    assert any("mscale_all_dim absent" in n for n in m.notes)
    assert m.origin.startswith(f"file {p.resolve()} sha256 ") and len(m.origin.rsplit(" ", 1)[1]) == 16
    assert builtin("deepseek-v3").origin.startswith("built-in deepseek-v3 (deepseek-ai/DeepSeek-V3) sha256 ")


def test_both_kimi_k2_revisions_are_built_in_with_their_yarn_factor():
    k2, k0905 = builtin("kimi-k2").kinds[0].mla, builtin("kimi-k2-0905").kinds[0].mla
    assert round(k0905.softmax_scale / k2.softmax_scale - 1, 3) == 0.106
