"""Engine advice as vLLM's and SGLang's sources have it (each fact with its release or PR):
cascade off by default since vLLM PR #36318, VLLM_FLASH_ATTN_VERSION takes 2 or 3 only, the
flex-attention engine names; and verdicts that keep "this build lacks it" (not measured here)
apart from "the kernel does not support it"."""

from __future__ import annotations

from pathlib import Path

import pytest

from attn_contract import BUILD_LIMIT, KERNEL_LIMIT, Capabilities, reason_kind
from harness.analysis.engines import engine_name, from_vllm_name, sglang_setting, vllm_flags
from harness.analysis.recommend.rank import Candidate
from harness.cli import main
from harness.analysis.recommend.vllm import VLLM_NOT_EXPRESSIBLE, excluded_status, vllm_setting

MODELS_RUN = Path(__file__).parent / "data" / "h200" / "models"  # copy of reports/h200/2026-12-01/models


def _fa(v: int) -> Candidate:
    return Candidate("flash-attn", {"fa_version": v, "call_form": "vllm"}, f"fa_version={v}", {})


def test_fa4_has_no_environment_form_and_fa3_has():
    fa4 = vllm_flags(vllm_setting(_fa(4)))
    assert "VLLM_FLASH_ATTN_VERSION" not in fa4 and '"flash_attn_version": 4' in fa4
    fa3 = vllm_flags(vllm_setting(_fa(3)))
    assert "VLLM_FLASH_ATTN_VERSION=3" in fa3 and "vLLM before PR #26315" in fa3


def test_cascade_advice_says_off_by_default_and_how_to_opt_in():
    text = " ".join(VLLM_NOT_EXPRESSIBLE)
    assert "--no-disable-cascade-attn" in text and "#36318" in text and "0.33" not in text  # no source says vLLM removed cascade
    assert "on by default)" not in text
    casc = vllm_setting(Candidate("flash-attn-cascade", {"fa_version": 3}, "fa_version=3", {}))
    assert casc is not None and "--no-disable-cascade-attn" in casc["caveat"] and not casc["exact"]


def test_flex_attention_engine_names():
    assert engine_name("flex-attention", "vllm").name == "FLEX_ATTENTION"
    assert from_vllm_name("FLEX_ATTENTION") == "flex-attention"
    assert sglang_setting("flex-attention", {})["attention_backend"] == "flex_attention"
    s = vllm_setting(Candidate("flex-attention", {}, "", {}))
    assert s["cli"] == "--attention-backend FLEX_ATTENTION"


def test_build_limit_and_kernel_limit_are_told_apart():
    from attn_contract import AttentionConfig

    cfg = AttentionConfig(num_heads=8, num_kv_heads=8, head_size=128, softcap=50.0)
    built_without = Capabilities(softcap=False, build_lacks=frozenset({"softcap"})).unsupported_reason(cfg, "cuda")
    kernel = Capabilities(softcap=False).unsupported_reason(cfg, "cuda")
    assert reason_kind(built_without) == "build" and BUILD_LIMIT in built_without
    assert reason_kind(kernel) == "kernel" and KERNEL_LIMIT in kernel
    assert reason_kind("FA3: logits softcap not supported") == ""  # rows written before the kinds


def test_fa3_build_without_softcap_is_a_build_limit():
    from attn_contract import AttentionConfig
    from backends.flash_attn.fa3 import FA3

    caps = FA3.capabilities((9, 0), FA3.documented(installed=True))
    why = caps.unsupported_reason(AttentionConfig(num_heads=16, num_kv_heads=8, head_size=256, softcap=50.0), "cuda")
    assert reason_kind(why) == "build" and "softcap" in why


@pytest.mark.parametrize("excluded, start", [
    (f"unsupported on 1 case(s): FA3: logits softcap {BUILD_LIMIT}", "not measured here: this machine's build lacks"),
    (f"unsupported on 1 case(s): FA2: attention sinks {KERNEL_LIMIT}", "not supported by the kernel"),
    ("unsupported on 1 case(s): FA3: logits softcap not supported", "not measured here: "),
    ("failed the check (mismatch) on 1 case(s)", "excluded: "),
])
def test_verdict_on_vllms_default_keeps_the_kinds_apart(excluded, start):
    assert excluded_status(excluded).startswith(start)


def test_recommend_engine_on_committed_model_rows_has_neither_wrong_line(capsys):
    if not (MODELS_RUN / "results.jsonl.gz").exists():
        pytest.skip("committed H200 model rows absent")
    assert main(["recommend", "--engine", "vllm", str(MODELS_RUN)]) == 0
    out = capsys.readouterr().out
    assert "VLLM_FLASH_ATTN_VERSION=4" not in out and "(on by default" not in out
    assert "excluded: unsupported" not in out and "not measured here" in out


def test_vllm_release_claims_carry_their_source():
    """No unsourced "vLLM 0.33.0 removed cascade"; the flag/variable boundary names its PRs
    (vLLM PR #26315 added the flags and deprecated the variables, #30564 the docs, #32812 removal)."""
    from pathlib import Path

    from harness.analysis.recommend.vllm import BACKEND_FLAG_FACT, VLLM_FACTS

    root = Path(__file__).resolve().parents[1]
    texts = {p: p.read_text(encoding="utf-8") for p in [*root.glob("docs/*.md"), root / "README.md",
                                                         *root.glob("harness/analysis/**/*.py")]}
    assert not [str(p) for p, t in texts.items() if "vLLM 0.33" in t or "0.33.0" in t]
    assert not [str(p) for p, t in texts.items() if ">= 0.14" in t or "< 0.14" in t]
    assert all(pr in BACKEND_FLAG_FACT for pr in ("#26315", "#30564", "#32812")) and "0.14.x" in BACKEND_FLAG_FACT
    assert not any("0.33" in f for f in VLLM_FACTS)
