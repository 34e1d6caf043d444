"""nvfp4 KV cache: the spec accepts it, its element size counts the fp8 scales, and a CPU run
gives one `unsupported` row per backend with its reason, before any generation or call
(FlashInfer: its Blackwell-only reason from check_support wherever it is installed)."""

import json

import pytest

from attn_contract import AttentionConfig
from backends._flashinfer_nvfp4 import nvfp4_reason
from backends.flashinfer import FlashInferBackend
from harness.cli import main
from harness.case.layout import case_layout
from harness.spec.dtypes import kv_element_bytes
from harness.spec import parse_suite

SUITE = """
suite: nvfp4
cases:
  - name: decode-nvfp4
    num_heads: 8
    num_kv_heads: 1
    head_size: 128
    kv_cache_dtype: nvfp4
    batch:
      - kind: decode
        count: 4
        context_len: 256
"""


def _case():
    import yaml

    return parse_suite(yaml.safe_load(SUITE)).cases[0]


def test_spec_accepts_nvfp4_and_sizes_it_with_its_scales():
    case = _case()
    assert case.kv_cache_dtype == "nvfp4" and case.attention_config().kv_cache_dtype == "nvfp4"
    assert not case.attention_config().is_fp8_kv
    assert kv_element_bytes("bfloat16", "nvfp4") == 0.5 + 1 / 16
    # K and V of one token, 1 KV head of 128: 256 elements at 0.5625 byte.
    assert case_layout(case).kv_token_bytes == 144


def test_flashinfer_declares_nvfp4_with_the_blackwell_reason():
    caps = FlashInferBackend.capabilities({})
    assert "nvfp4" in caps.kv_cache_dtypes
    assert any("nvfp4" in n and "10.0" in n and "Blackwell" in n for n in caps.notes)
    cfg = AttentionConfig(8, 1, 128, kv_cache_dtype="nvfp4")
    reason = FlashInferBackend.check_support(cfg, {}, "cpu")
    assert "compute capability 10.0+ (Blackwell)" in reason and "no CUDA device" in reason
    assert "sm_90" in nvfp4_reason("cuda", (9, 0))
    # On Blackwell it is still not called: the harness makes no nvfp4 cache.
    assert "generates no nvfp4 KV cache" in nvfp4_reason("cuda", (10, 0))
    assert FlashInferBackend.check_support(AttentionConfig(8, 1, 128), {}, "cpu") is not None  # CPU: its device reason
    assert "nvfp4" not in FlashInferBackend.check_support(AttentionConfig(8, 1, 128), {}, "cpu")


def test_cpu_run_gives_unsupported_rows_before_any_call(tmp_path):
    suite = tmp_path / "nvfp4.yaml"
    suite.write_text(SUITE)
    out = tmp_path / "res"
    rc = main(["run", str(suite), "--backends", "torch-math,sdpa", "--device", "cpu",
               "--out", str(out), "--quiet", "--no-isolation"])
    assert rc == 0
    rows = {r["backend"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    assert set(rows) == {"torch-math", "sdpa"}  # FlashInfer on a GPU: test above (here: not installed, skipped)
    for name, r in rows.items():
        # Generation would fail on nvfp4 (no torch dtype: an `error` row), so `unsupported`
        # also shows the case's batch was never made; no check and no timing: no forward.
        assert r["status"] == "unsupported", (name, r["status"], r.get("reason"))
        assert r.get("check") is None and r.get("timing") is None, name
    for name in ("torch-math", "sdpa"):
        assert rows[name]["reason"].startswith("kv_cache_dtype nvfp4 not in "), rows[name]["reason"]


@pytest.mark.parametrize("backend", ["torch-math", "sdpa"])
def test_other_backends_refuse_nvfp4_through_their_declared_dtypes(backend):
    from harness.registry import resolve

    cls = resolve(backend)
    assert "nvfp4" not in cls.capabilities({}).kv_cache_dtypes
    assert "kv_cache_dtype nvfp4" in cls.check_support(AttentionConfig(8, 1, 128, kv_cache_dtype="nvfp4"), {}, "cpu")
