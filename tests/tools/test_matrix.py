"""``harness matrix`` / ``harness bisect`` with real environments: the test writes wheels of a
small plugin backend package (``attn-matrix-probe``, registered in the ``attn_harness.backends``
entry-point group), versions of which are wrong (output scaled by 1.05) or slower (every forward
run 16 times, timed on the process clock), installs them offline from its own wheelhouse into
cached environments, and runs the real commands in subprocesses."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from harness.tools.matrix.envs import (EnvError, EnvSpec, build_env, installed_version, parse_env_arg, pip_failure,
                                torch_mismatch, torch_request_mismatch)

ROOT = Path(__file__).resolve().parents[2]
PKG = "attn-matrix-probe"
# version -> (output scale, forward repeats); 1.2 is where the wrong answer starts.
VERSIONS = {"1.0": (1.0, 1), "1.1": (1.0, 1), "1.2": (1.05, 1), "1.3": (1.05, 1), "1.4": (1.05, 1), "2.0": (1.0, 16)}

SUITE = """suite: matrix-probe
description: one small decode cell for the environment-matrix tests
defaults: {num_heads: 4, num_kv_heads: 2, head_size: 32, block_size: 16, seed: 3, dtype: float16}
cases:
  - name: decode
    batch:
      - kind: decode
        count: 2
        context_len: 64
"""

MODULE = '''"""attn-matrix-probe {version}: torch-math, output scaled by {scale}, forward run {repeat} time(s)."""
from backends.torch_math import TorchMathBackend

SCALE, REPEAT = {scale!r}, {repeat!r}
_Base = TorchMathBackend.get_impl_cls()


class ProbeImpl(_Base):
    def forward(self, query, key, value, kv_cache, metadata, out, lse_out=None):
        for _ in range(REPEAT):
            super().forward(query, key, value, kv_cache, metadata, out, lse_out)
        if SCALE != 1.0:
            out.mul_(SCALE)
        return out


class ProbeBackend(TorchMathBackend):
    name = "matrix-probe"
    description = "torch-math as released in attn-matrix-probe {version}"

    @classmethod
    def get_impl_cls(cls):
        return ProbeImpl
'''


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def write_wheel(folder: Path, version: str, scale: float, repeat: int) -> Path:
    """A pure-python wheel written directly (zipfile): no build backend, no network."""
    dist = f"attn_matrix_probe-{version}.dist-info"
    files = {
        "attn_matrix_probe/__init__.py": MODULE.format(version=version, scale=scale, repeat=repeat).encode(),
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {PKG}\nVersion: {version}\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: attn-harness-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{dist}/entry_points.txt": b"[attn_harness.backends]\nmatrix-probe = attn_matrix_probe:ProbeBackend\n",
        f"{dist}/top_level.txt": b"attn_matrix_probe\n",
    }
    record = [_record_line(n, d) for n, d in files.items()] + [f"{dist}/RECORD,,"]
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    path = folder / f"attn_matrix_probe-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for n, d in files.items():
            z.writestr(n, d)
    return path


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    base = tmp_path_factory.mktemp("matrix")
    wheels = base / "wheels"
    wheels.mkdir()
    for v, (scale, repeat) in VERSIONS.items():
        write_wheel(wheels, v, scale, repeat)
    suite = base / "suite.yaml"
    suite.write_text(SUITE)
    return {"base": base, "wheels": wheels, "cache": base / "envs", "suite": suite}


def harness(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=600)


RUN = ["--", "--backends", "matrix-probe", "--device", "cpu", "--cpu-clock", "process", "--max-time", "0.3",
       "--no-isolation"]


@pytest.mark.slow
def test_bisect_finds_first_wrong_release(world):
    out = world["base"] / "bisect"
    p = harness("bisect", str(world["suite"]), "--versions", f"{PKG}==1.0,1.1,1.2,1.3,1.4",
                "--wheelhouse", str(world["wheels"]), "--env-cache", str(world["cache"]), "--out", str(out), *RUN,
                cwd=world["base"])
    assert p.returncode == 1, p.stdout + p.stderr
    assert f"first bad version: {PKG}==1.2 (last good: 1.1)" in p.stdout
    assert "correctness: pass -> mismatch" in p.stdout
    assert "reproduce: PYTHONPATH=" in p.stdout and "--backends matrix-probe" in p.stdout
    data = json.loads((out / "bisect.json").read_text())
    assert data["first_bad"] == "1.2" and data["last_good"] == "1.1"
    # ends + two steps, each measured: 1.4 (ends), then 1.2 (bad), then 1.1 (good)
    assert [s["version"] for s in data["steps"]] == ["1.4", "1.2", "1.1"]
    assert sorted(d.name for d in out.iterdir() if d.is_dir()) == ["1.0", "1.1", "1.2", "1.4"]
    row = json.loads((out / "1.2" / "results.jsonl").read_text().splitlines()[0])
    assert row["status"] == "mismatch" and row["environment"]["versions"][PKG] == "1.2"
    header = json.loads((out / "1.1" / "run.json").read_text())
    assert header["environment"]["versions"][PKG] == "1.1"
    assert header["environment"]["packages"] == {PKG: "1.1"}  # only the package: torch is the interpreter's


@pytest.mark.slow
def test_matrix_side_by_side_flags_the_wrong_release(world):
    """Two real environments side by side: the release whose output is 5% off is a correctness
    regression, listed first. (Speed verdicts are compare's, tested on synthesized samples: a real
    timing in a unit test would depend on this shared box's load.)"""
    out = world["base"] / "matrix"
    p = harness("matrix", str(world["suite"]), "--env", f"old={PKG}==1.0", "--env", f"wrong={PKG}==1.2",
                "--wheelhouse", str(world["wheels"]), "--env-cache", str(world["cache"]), "--out", str(out),
                *RUN, "--min-samples", "5", cwd=world["base"])
    md = (out / "comparison.md").read_text()
    assert p.returncode == 1, p.stdout + p.stderr + md
    if (world["base"] / "bisect").exists():  # built by the bisect test: cached by its requirements' hash
        assert "env old: reused" in p.stdout and "env wrong: reused" in p.stdout
    summary = json.loads((out / "matrix.json").read_text())
    (reg,) = summary["regressions"]["wrong"]
    assert "pass -> mismatch" in reg["problem"], reg
    rows = {n: json.loads((out / n / "results.jsonl").read_text()) for n in ("old", "wrong")}
    assert rows["old"]["status"] == "pass" and rows["wrong"]["status"] == "mismatch"
    assert rows["wrong"]["environment"] == {"name": "wrong", "versions": {PKG: "1.2", "torch": rows["old"]["environment"]["versions"]["torch"]}}
    assert "| old |" in md and "| wrong |" in md


def test_missing_version_is_one_clear_line(world):
    p = harness("matrix", str(world["suite"]), "--env", f"gone={PKG}==9.9", "--wheelhouse", str(world["wheels"]),
                "--env-cache", str(world["cache"]), "--out", str(world["base"] / "gone"), *RUN, cwd=world["base"])
    assert p.returncode == 2
    err = " ".join(p.stderr.split())
    assert f"{PKG}==9.9: no such version, or no wheel for this platform" in err
    assert "available there: 1.0, 1.1, 1.2, 1.3, 1.4, 2.0" in err and "Traceback" not in p.stderr
    left = list(world["cache"].iterdir()) if world["cache"].exists() else []
    assert not any(".tmp-" in d.name for d in left)  # a failed build leaves nothing half-made


def test_bad_env_arguments(world, tmp_path):
    with pytest.raises(EnvError, match="expected NAME=REQUIREMENTS"):
        parse_env_arg("no-equals-sign")
    assert parse_env_arg("new=a==1 b>=2,<3").requirements == ("a==1", "b>=2,<3")
    with pytest.raises(EnvError, match="no such folder"):
        build_env(EnvSpec("x", ("a==1",)), tmp_path, tmp_path / "nowhere")


def test_pip_failures_translated():
    offline = "WARNING: Retrying ... NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection>: " \
              "Failed to establish a new connection: [Errno 101] Network is unreachable')\nERROR: Could not find a " \
              "version that satisfies the requirement foo==1 (from versions: none)"
    # pip reports "no version" also when it could not reach the index: the network cause wins.
    assert "no network" in pip_failure(offline, ("foo==1",), None)
    assert "no such version" in pip_failure(offline.splitlines()[1], ("foo==1",), None)
    assert "no network" in pip_failure("ERROR: ... Failed to establish a new connection", ("foo==1",), None)
    assert "from source failed" in pip_failure("error: subprocess-exited-with-error\nERROR: Failed building wheel for foo",
                                               ("foo==1",), None)
    capped = ("ERROR: Cannot install torch==2.12.0 because these package versions have conflicting dependencies.\n"
              "The conflict is caused by:\n    The user requested torch==2.12.0\n"
              "    The user requested (constraint) torch<=2.14.1\nERROR: ResolutionImpossible: for help visit ...")
    full = "ERROR: Could not install packages due to an OSError: [Errno 28] No space left on device"
    msg = pip_failure(full, ("torch==2.14.1",), None, Path("/cache/envs/abc.tmp-1"))
    assert "no space left on the disk under /cache/envs" in msg and "--env-cache DIR" in msg
    # pip's words when a configured constraint file is in force and the release is not found.
    msg = pip_failure(capped, ("torch==2.12.0",), Path("/wh"))
    assert msg.startswith("torch==2.12.0: no such version") and "within pip's configured constraint torch<=2.14.1" in msg


def test_torch_mismatch_is_refused():
    same = {"a": {"torch": "2.13.0", "torch_path": "/x/torch/__init__.py"},
            "b": {"torch": "2.13.0", "torch_path": "/x/torch/__init__.py"}}
    assert torch_mismatch(same) is None
    other = {**same, "c": {"torch": "2.12.0", "torch_path": "/env/torch/__init__.py"}}
    msg = torch_mismatch(other)
    assert msg is not None and "c: torch 2.12.0" in msg and "--allow-torch-mismatch" in msg


def test_torch_request_checked_before_any_build():
    """On the requirements, against the torch this interpreter really has (its metadata): an env
    that names no torch, or pins exactly this release, runs this torch; any other torch request
    (another pin, a range, a wheel file) is refused before gigabytes are installed."""
    current = installed_version("torch")
    assert current is not None
    base = current.split("+")[0]  # torch==2.13.0 matches 2.13.0+cpu (PEP 440: no local label in the pin)
    assert torch_request_mismatch([EnvSpec("a", (f"torch=={base}",)), EnvSpec("b", (f"{PKG}==1.0",))]) is None
    for req in ("torch==2.12.0", "torch>=2.0", "/wheels/torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl"):
        msg = torch_request_mismatch([EnvSpec("a", (f"torch=={base}",)), EnvSpec("b", (f"{PKG}==1.0", req))])
        assert msg is not None and msg.startswith("env b asks for torch") and f"runs torch {current}" in msg, (req, msg)
        assert "--allow-torch-mismatch" in msg and "env a asks" not in msg


def test_torch_upgrade_refused_unless_allowed(world):
    """The CLI: refused before any env is built; with --allow-torch-mismatch the build goes on (the
    env pinned to this torch is made without installing anything; the other release is then looked
    for in the wheelhouse, which here lacks it: one clear line)."""
    current = installed_version("torch")
    empty, cache = world["base"] / "empty-wheelhouse", world["base"] / "torch-envs"
    empty.mkdir()
    envs = ["--env", f"cur=torch=={current.split('+')[0]}", "--env", "old=torch==2.12.0"]
    common = ["--wheelhouse", str(empty), "--env-cache", str(cache)]
    p = harness("matrix", str(world["suite"]), *envs, *common, "--out", str(world["base"] / "t1"), *RUN,
                cwd=world["base"])
    err = " ".join(p.stderr.split())
    assert p.returncode == 2 and "env old asks for torch==2.12.0" in err and "--allow-torch-mismatch" in err, p.stderr
    assert "Traceback" not in p.stderr and not cache.exists()  # nothing built
    p = harness("matrix", str(world["suite"]), *envs, *common, "--allow-torch-mismatch",
                "--out", str(world["base"] / "t2"), *RUN, cwd=world["base"])
    err = " ".join(p.stderr.split())
    assert p.returncode == 2 and "env cur: built" in p.stdout, p.stdout + p.stderr
    assert "torch==2.12.0: no such version, or no wheel for this platform" in err and "Traceback" not in p.stderr
    (made,) = [d for d in cache.iterdir() if (d / "env.json").exists()]
    versions = json.loads((made / "env.json").read_text())["versions"]
    assert versions["torch"] == current and versions["packages"] == {}  # this interpreter's torch, no copy
    assert not Path(versions["torch_path"]).is_relative_to(made)
