"""The parent of `harness run` plans a suite without importing a GPU library: the workers import
them while it expands (docs/measurement.md, "Where a run's wall time goes"). Checked in a fresh
interpreter with a meta-path recorder first in ``sys.meta_path``: it sees every import attempt,
``importlib.util.find_spec`` included, so the test means something on a machine where the
libraries are not installed too (an attempt is recorded even when it fails)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import subprocess_env

ROOT = Path(__file__).resolve().parents[2]
GPU_LIBS = ("flashinfer", "flash_attn", "flash_attn_interface", "flash_attn_config")

PARENT = r"""
import json, sys

class Recorder:
    seen = []
    def find_spec(self, name, path=None, target=None):
        Recorder.seen.append(name)
        return None  # record only: the normal finders do the import

sys.meta_path.insert(0, Recorder())
from harness.cli import main
rc = main(sys.argv[1:])
import torch
libs = sorted({n for n in Recorder.seen if n.split(".")[0] in %r})
print("RESULT " + json.dumps({"rc": rc, "libs": libs, "cuda_initialized": torch.cuda.is_initialized(),
                              "loaded": sorted(m for m in sys.modules if m.split(".")[0] in %r)}))
""" % (GPU_LIBS, GPU_LIBS)


def _parent_run(tmp_path: Path, *args: str) -> dict:
    env = subprocess_env()  # the caller's PYTHONPATH kept: on the GPU machine torch and pydantic come from it
    p = subprocess.run([sys.executable, "-c", PARENT, *args], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=300)
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert line, f"no result (rc {p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}"
    return json.loads(line[7:])


def test_run_parent_imports_no_gpu_library_to_expand_the_decode_suite(tmp_path):
    out = tmp_path / "run"
    # The whole decode suite is expanded and planned (every backend, FlashInfer's collapsed
    # variants included); only one small case runs, untimed, to keep the test short.
    res = _parent_run(tmp_path, "run", "suites/decode.yaml", "--device", "cpu", "--case", "mha[count=1]",
                      "--no-time", "--no-check", "--quiet", "--out", str(out))
    assert res["rc"] == 0
    assert res["libs"] == [], f"the parent tried to import {res['libs']}"
    assert res["loaded"] == []
    assert res["cuda_initialized"] is False
    header = json.loads((out / "run.json").read_text())
    # The workers reported what the parent used to probe itself.
    assert set(header["backends"]) == {"flash-attn", "flashinfer", "sdpa", "torch-math"}
    assert header["backends"]["sdpa"]["available"] is True
    import importlib.util

    if importlib.util.find_spec("flashinfer") is None:  # the CPU box: the workers say why not
        assert header["backends"]["flashinfer"]["available"] is False and header["backends"]["flashinfer"]["reason"]
    else:  # a GPU machine: the workers found it, the parent never imported it (asserted above)
        assert header["backends"]["flashinfer"]["available"] is True


def test_in_process_run_still_probes_versions_in_the_parent(tmp_path):
    """--no-isolation has no workers: the parent probes (and may import) as before."""
    out = tmp_path / "run"
    res = _parent_run(tmp_path, "run", "suites/decode.yaml", "--device", "cpu", "--case", "mha[count=1]",
                      "--backends", "sdpa,flashinfer", "--no-time", "--no-check", "--quiet", "--no-isolation",
                      "--out", str(out))
    assert res["rc"] == 0
    assert "flashinfer" in res["libs"]  # the recorder does see an attempt when one is made
    header = json.loads((out / "run.json").read_text())
    assert set(header["backends"]) == {"flashinfer", "sdpa"}
