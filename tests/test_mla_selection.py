"""Backends picked by the cases' attention family (a suite's ``backends_for:``, read from each
backend's declared ``attention_kinds``), and vLLM's MLA flags per form: the decode backend
(``--attention-backend``) apart from the MLA prefill (``mla_prefill_backend``)."""

from pathlib import Path

import pytest
import torch

from attn_contract import MLA_ABSORBED, MLA_EXPANDED
from harness import registry
from harness.plan.cells import RunOptions, plan_cells
from harness.plan.filters import backend_families, backend_names
from harness.spec import SpecError, load_suite
from harness.spec.registry_check import check_suite_backends

ROOT = Path(__file__).resolve().parent.parent
MLA_LIBRARIES = {"flashinfer-mla", "flash-attn-mla", "flashmla"}
TORCH_MLA = {"torch-math", "sdpa", "flex-attention"}


def test_class_attention_kinds_are_the_union_of_the_variants_capabilities():
    """The class data the parent picks by (no library import) says what capabilities() says."""
    for name in registry.known_backends():
        cls = registry.resolve(name)
        union = frozenset().union(*(cls.capabilities(v).attention_kinds for v in cls.variants()))
        assert union == cls.attention_kinds, name


def _plan(suite, backends, families):
    opts = RunOptions(device=torch.device("cpu"), time=False, backend_families=families)
    return {(c.case.attention, c.backend.name) for c in plan_cells(suite, backends, opts)}


def test_models_suite_picks_the_backends_of_each_models_attention_family():
    """`harness run suites/models.yaml --model deepseek-v3,llama-3.1-8b` without --backends: the
    MLA model on every backend declaring an MLA form, the dense one on the suite's dense list."""
    suite = load_suite(ROOT / "suites" / "models.yaml", override={"model": "deepseek-v3,llama-3.1-8b", "tp": "8"})
    names = backend_names(None, suite)
    assert MLA_LIBRARIES | TORCH_MLA | {"flash-attn", "flashinfer"} <= set(names)
    assert not {"flash-attn-cascade", "sdpa-loop", "torch-cascade"} & set(names)
    backends = registry.resolve_many(names)
    families = backend_families(suite, backends)
    planned = _plan(suite, backends, families)
    by_family = {f: {b for fam, b in planned if fam == f} for f in ("mha", "mla")}
    assert by_family["mla"] >= MLA_LIBRARIES | TORCH_MLA
    assert by_family["mha"] == {"flash-attn", "flashinfer", "sdpa"}
    # Named on the command line, a backend runs every case (an MLA library then says unsupported).
    assert ("mha", "flashinfer-mla") in _plan(suite, registry.resolve_many(["flashinfer-mla", "sdpa"]), {})


def test_mla_suite_covers_every_backend_declaring_an_mla_form():
    suite = load_suite(ROOT / "suites" / "mla.yaml")
    names = set(backend_names(None, suite))
    assert names >= MLA_LIBRARIES | TORCH_MLA
    assert all(registry.resolve(n).attention_kinds - {"mha"} for n in names)


def test_a_dense_model_alone_gets_no_mla_backend():
    suite = load_suite(ROOT / "suites" / "models.yaml", override={"model": "llama-3.1-8b", "tp": "1"})
    assert backend_names(None, suite) == ["flash-attn", "flashinfer", "sdpa"]


def test_an_unknown_name_under_backends_for_names_the_field(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("suite: s\nbackends_for:\n  mla: [flashinfer-mla, nosuch]\ncases:\n"
                 "  - {name: a, attention: mla, num_heads: 16, batch: [{kind: decode, context_len: 64}]}\n")
    with pytest.raises(SpecError, match=r"backends_for\.mla\[1\].*nosuch"):
        check_suite_backends(load_suite(p))
    p.write_text("suite: s\nbackends_for:\n  gqa: auto\ncases:\n  - {name: a, num_heads: 8, num_kv_heads: 8, head_size: 64,"
                 " batch: [{kind: decode, context_len: 64}]}\n")
    with pytest.raises(SpecError, match="backends_for"):
        load_suite(p)


def test_vllm_flags_of_an_mla_prefill_row_are_the_prefill_choice_not_the_decode_backend():
    from harness.analysis.recommend.rank import Candidate
    from harness.analysis.recommend.vllm import vllm_setting

    def setting(kind):
        return vllm_setting(Candidate("flash-attn-mla", {"fa_build": "fa3-fwd"}, "fa_build=fa3-fwd", {},
                                      attention_kind=kind))

    assert setting(MLA_ABSORBED)["cli"] == "--attention-backend FLASH_ATTN_MLA"
    pre = setting(MLA_EXPANDED)
    assert pre["cli"] == """--attention-config '{"mla_prefill_backend": "FLASH_ATTN"}'"""
    assert "--attention-backend" not in pre["cli"]
    # FlashInfer's MLA prefill is vLLM's FLASHINFER on Blackwell only: no Hopper setting from it.
    assert vllm_setting(Candidate("flashinfer-mla", {"mla_backend": "fa3"}, "", {}, attention_kind=MLA_EXPANDED)) is None


def test_vllm_default_mla_prefill_is_chosen_apart_per_gpu():
    from harness.analysis.selection_rules import vllm_default

    def pick(cap, kind):
        return vllm_default(cap, num_heads=16, num_kv_heads=16, head_size=192, attention_kind=kind)

    hopper, blackwell = pick("9.0", MLA_EXPANDED), pick("10.0", MLA_EXPANDED)
    assert hopper.mla_prefill and hopper.backend == "FLASH_ATTN" and hopper.priorities == ("FLASH_ATTN",)
    assert blackwell.priorities == ("FLASH_ATTN", "TRTLLM_RAGGED", "FLASHINFER")
    assert not pick("9.0", MLA_ABSORBED).mla_prefill
