"""Dependency bounds that hold: the floors are what CI installs in its lowest-versions job
(ci/lowest_deps.sh, run by .ci/run), torch's included; pydantic's floor is one that imports the
records, torch's one that gathers an fp8 KV cache on the CPU; the FA4 extra is capped at the
release the adapter was tested with."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_every_core_dependency_has_a_floor_the_lowest_job_installs():
    for dep in PROJECT["dependencies"]:  # the only form ci/lowest_deps.sh turns into `name==floor`
        assert re.fullmatch(r"[A-Za-z0-9_.\-]+>=[^,;\s]+", dep.replace(" ", "")), dep
    assert "bash ci/lowest_deps.sh" in (ROOT / ".ci" / "run").read_text()
    script = (ROOT / "ci" / "lowest_deps.sh").read_text()
    assert '"$H" validate' in script and "--no-time" in script and "pip check" in script
    assert '"$H" gate --correctness-only --results' in script  # an erroring cell fails the job, not only a crash
    # torch's floor by default, from PyPI past the machine's pip config (its caps and local indexes);
    # LOWEST_TORCH=skip opts out.
    assert 'LOWEST_TORCH=${LOWEST_TORCH:-floor}' in script and 'PIP_CONFIG_FILE=/dev/null "$PY" -m pip install' in script


def test_pydantic_floor_imports_the_records():
    # pydantic 2.6.4 and 2.7.4 raise NameError on harness/records/results.py's __pydantic_extra__
    # at import; 2.8.0 is the lowest release the lowest-versions job ran green.
    (pyd,) = [Requirement(d) for d in PROJECT["dependencies"] if Requirement(d).name == "pydantic"]
    assert not pyd.specifier.contains("2.7.4") and pyd.specifier.contains("2.8.0")


def test_torch_floor_gathers_an_fp8_kv_cache_on_the_cpu():
    # torch 2.5-2.9 have no CPU index kernel for fp8 ("index_cpu" not implemented for 'Float8_e4m3fn'):
    # the torch backends and the harness read fp8 caches through their bytes (attn_contract.index_kv).
    # 2.5.0 is the lowest release the lowest-versions job and tests/spec, case, cell and records ran
    # green with; 2.4.1 raises "index_put" not implemented for 'Float8_e4m3fn' filling the cache
    # (harness/case/workload.py), so every fp8-KV cell errors.
    (req,) = [Requirement(d) for d in PROJECT["dependencies"] if Requirement(d).name == "torch"]
    assert not req.specifier.contains("2.4.1") and req.specifier.contains("2.5.0")
    import torch  # the torch under test (the floor itself in the lowest-versions job) does what the floor is for

    from attn_contract import index_kv
    from backends._paged import gather_request_kv

    for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        # (num_blocks, 2, block_size, Hk, D) in HND memory order (a strided view), 3 blocks of 2
        real = torch.linspace(-3, 3, 3 * 2 * 2 * 1 * 4).reshape(3, 2, 1, 2, 4)
        cache = real.to(dtype).transpose(2, 3)
        k, v = gather_request_kv(cache, torch.tensor([2, 0], dtype=torch.int32), 3, 2)  # blocks 2, 0; 3 tokens
        assert k.dtype == dtype and k.shape == (3, 1, 4)
        want_k = torch.stack([cache[2, 0, 0], cache[2, 0, 1], cache[0, 0, 0]])  # plain indexing: every torch
        want_v = torch.stack([cache[2, 1, 0], cache[2, 1, 1], cache[0, 1, 0]])
        assert k.view(torch.uint8).tolist() == want_k.view(torch.uint8).tolist()  # bit-exact
        assert v.float().tolist() == want_v.float().tolist()
        assert index_kv(cache, torch.tensor([1]), 0).float().tolist() == [cache[1, 0].float().tolist()]


def test_fa4_extra_is_capped_at_the_tested_release():
    (fa4,) = [Requirement(d) for d in PROJECT["optional-dependencies"]["fa4"]]
    assert fa4.specifier.contains("4.0.0b36", prereleases=True)
    assert not fa4.specifier.contains("4.0.0b37", prereleases=True) and not fa4.specifier.contains("4.0.0", prereleases=True)
    from backends.flash_attn.backend import FlashAttentionBackend  # the adapter's tested range: the same bound

    assert str(fa4.specifier) == FlashAttentionBackend.tested_versions["flash-attn-4"]
    assert Version("4.0.0b36") in [Version(s.version) for s in fa4.specifier]
