"""vLLM's MLA study files (benchmarks/attention_benchmarks/configs/mla_*.yaml) read as MLA cases:
``kv_lora_rank`` and friends set the latent geometry, FLASH_ATTN_MLA / FLASHMLA map to the
harness's MLA backends, and the CPU-sized cells run."""

from pathlib import Path

import pytest
import torch

from harness.cell.case import iterate_case
from harness.plan.cells import RunOptions, group_by_case, plan_cells
from harness.registry import resolve
from harness.spec import SpecError, load_suite

STUDY = Path(__file__).resolve().parent / "data" / "vllm_mla_decode_study.yaml"


def test_mla_study_maps_to_mla_cases_and_mla_backends():
    suite = load_suite(STUDY)
    assert {c.attention for c in suite.cases} == {"mla"}
    forms = {c.name: (c.mla_form, c.num_kv_heads, c.head_size) for c in suite.cases}
    assert forms["4q1s512[num_heads=16]"] == ("absorbed", 1, 576)
    assert forms["q128[num_heads=16]"] == ("expanded", 16, 192)
    assert all(abs(c.mla_mscale - 1.3688879454113936) < 1e-12 for c in suite.cases)  # the built-in deepseek-v3's yarn
    assert suite.backends == ["flash-attn-mla", "flashmla"]
    assert not any("kv_lora_rank" in n for n in suite.notes)
    assert any("CUTLASS_MLA" in n and "no counterpart" in n for n in suite.notes)


def test_mla_studys_cpu_sized_cells_pass():
    suite = load_suite(STUDY)
    suite = suite.model_copy(update={"cases": [c for c in suite.cases if c.num_heads == 16 and "1k" not in c.name]})
    opts = RunOptions(device=torch.device("cpu"), time=False, suite_path=str(STUDY))
    rows = [r for g in group_by_case(plan_cells(suite, [resolve("sdpa")], opts)) for r in iterate_case(g, suite, opts)]
    assert len(rows) == 2 and all(r.status == "pass" for r in rows), [(r.case, r.status, r.reason) for r in rows]


def test_an_mla_study_with_a_head_dim_not_the_latent_is_refused(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(STUDY.read_text().replace("head_dim: 576", "head_dim: 512"))
    with pytest.raises(SpecError, match=r"model\.head_dim"):
        load_suite(p)
