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
    # torch 2.5.0-2.9.1 raise "index_cpu" not implemented for 'Float8_e4m3fn' in backends/_paged.py's
    # gather (every fp8-kv cell errors on the CPU); 2.10.0 is the lowest release the lowest-versions job
    # and tests/spec, case, cell and records ran green with.
    (req,) = [Requirement(d) for d in PROJECT["dependencies"] if Requirement(d).name == "torch"]
    assert not req.specifier.contains("2.9.1") and req.specifier.contains("2.10.0")
    import torch  # the torch under test (the floor itself in the lowest-versions job) does what the floor is for

    for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        cache = torch.arange(8, dtype=torch.float32).reshape(4, 2).to(dtype)
        assert cache[torch.tensor([3, 1])].float().tolist() == [[6.0, 7.0], [2.0, 3.0]]


def test_fa4_extra_is_capped_at_the_tested_release():
    (fa4,) = [Requirement(d) for d in PROJECT["optional-dependencies"]["fa4"]]
    assert fa4.specifier.contains("4.0.0b36", prereleases=True)
    assert not fa4.specifier.contains("4.0.0b37", prereleases=True) and not fa4.specifier.contains("4.0.0", prereleases=True)
    from backends.flash_attn.backend import FlashAttentionBackend  # the adapter's tested range: the same bound

    assert str(fa4.specifier) == FlashAttentionBackend.tested_versions["flash-attn-4"]
    assert Version("4.0.0b36") in [Version(s.version) for s in fa4.specifier]
