"""The MLA contract (attn_contract/mla.py): dimensions, scale, forms and how a backend declares them."""

import math

import pytest

from attn_contract import (
    MLA_ABSORBED,
    MLA_EXPANDED,
    AttentionConfig,
    Capabilities,
    HeadSizes,
    MLADims,
    yarn_get_mscale,
)
from attn_contract.engines import EngineName


def test_dims_and_scale_of_deepseek_v3():
    dims = MLADims(mscale=yarn_get_mscale(40, 1.0))
    assert (dims.latent_dim, dims.qk_head_dim) == (576, 192)
    assert dims.head_sizes(MLA_ABSORBED) == (576, 512)
    assert dims.head_sizes(MLA_EXPANDED) == (192, 128)
    assert yarn_get_mscale(40, 1.0) == pytest.approx(0.1 * math.log(40) + 1)
    assert yarn_get_mscale(1.0, 1.0) == 1.0
    cfg = AttentionConfig(128, 1, 576, v_head_size=512, attention_kind=MLA_ABSORBED, mla=dims)
    # From the 192-wide q/k head times mscale**2, never from the 576-wide absorbed head.
    assert cfg.softmax_scale == pytest.approx(192 ** -0.5 * (0.1 * math.log(40) + 1) ** 2)
    assert cfg.value_head_size == 512 and cfg.latent_cache and cfg.absorbed


def test_kind_and_dims_go_together():
    with pytest.raises(ValueError):
        AttentionConfig(16, 1, 576, attention_kind=MLA_ABSORBED)
    with pytest.raises(ValueError):
        AttentionConfig(16, 16, 128, mla=MLADims())
    plain = AttentionConfig(16, 4, 128)
    assert plain.value_head_size == 128 and not plain.is_mla and plain.softmax_scale == pytest.approx(128 ** -0.5)


def test_capabilities_refuse_undeclared_mla_and_value_heads():
    absorbed = AttentionConfig(16, 1, 576, v_head_size=512, attention_kind=MLA_ABSORBED, mla=MLADims())
    expanded = AttentionConfig(16, 16, 192, v_head_size=128, attention_kind=MLA_EXPANDED, mla=MLADims())
    wide = HeadSizes(min=8, max=1024, multiple_of=8)
    default = Capabilities(head_sizes=wide)
    assert "attention kind mla_absorbed not supported" in default.unsupported_reason(absorbed, "cuda")
    mla_no_v = Capabilities(head_sizes=wide, attention_kinds=frozenset({"mla_expanded"}))
    assert "value head size 128 != query/key head size 192" in mla_no_v.unsupported_reason(expanded, "cuda")
    ok = Capabilities(head_sizes=wide, attention_kinds=frozenset({"mla_absorbed", "mla_expanded"}),
                      v_head_sizes=HeadSizes(values=(128, 512)), mla_latent_dims=frozenset({(512, 64)}))
    assert ok.unsupported_reason(absorbed, "cuda") is None
    assert ok.unsupported_reason(expanded, "cuda") is None
    other = AttentionConfig(16, 1, 288, v_head_size=256, attention_kind=MLA_ABSORBED,
                            mla=MLADims(kv_lora_rank=256, qk_rope_head_dim=32))
    assert "MLA latent 256+32 not supported" in ok.unsupported_reason(other, "cuda")
    assert ok.describe()["attention_kinds"] == ["mla_absorbed", "mla_expanded"]


def test_engine_name_kinds():
    assert EngineName("X").runs_kind("mla_absorbed")
    only = EngineName("torch_native", attention_kinds=frozenset({"mha"}))
    assert only.runs_kind("mha") and not only.runs_kind("mla_expanded")


def test_the_harness_asks_the_declared_kinds_before_a_backends_own_check():
    """FlashAttention's and FlashInfer's check_support were written for MHA alone: an MLA cell is
    `unsupported` by their declared kinds before their own rules see it (even on a CUDA device)."""
    import torch

    from harness.plan.cells import RunOptions, plan_cells, precheck
    from harness.registry import resolve
    from harness.spec import CaseSpec, Suite

    case = CaseSpec(name="m", num_heads=16, attention="mla", batch=[{"kind": "decode", "context_len": 40}])
    opts = RunOptions(device=torch.device("cuda"))
    for name in ("flash-attn", "flashinfer"):
        (cell, *_) = plan_cells(Suite(suite="t", cases=[case]), [resolve(name)], opts)
        if not cell.backend.availability(cell.variant).available:
            assert cell.backend.capabilities(cell.variant).kind_reason(case.attention_config())
            continue
        reason, status = precheck(cell, opts)
        assert status == "unsupported" and "attention kind mla_absorbed not supported" in reason
