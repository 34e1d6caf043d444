"""Plugin backends, registered the two ways a user does it (a ``module:Class`` spec, and an
entry point in an installed package's metadata): one name everywhere, and every mistake a
clear one-line error instead of a traceback or rows filed under another backend's name."""

from __future__ import annotations

import json

import pytest

from harness import registry
from harness.cli import main

SUITE = """
suite: plug
cases:
  - name: c
    num_heads: 4
    num_kv_heads: 2
    head_size: 16
    batch:
      - kind: decode
        count: 2
        context_len: 20
"""

MODULE = '''
from backends.torch_math import TorchMathBackend
from attn_contract import Capabilities

class NoName(TorchMathBackend.__mro__[1]):  # AttentionBackend itself: no name, nothing implemented
    pass

class Unnamed(TorchMathBackend):
    name = None

class Impostor(TorchMathBackend):
    name = "torch-math"   # a built-in's name

class Mine(TorchMathBackend):
    name = "my-kernel"

class AlsoMine(TorchMathBackend):
    name = "my-kernel"

class CudaOnlyByDefault(TorchMathBackend):
    name = "cuda-default"

    @classmethod
    def capabilities(cls, variant=None):
        return Capabilities()   # the defaults: devices={"cuda"}
'''


@pytest.fixture()
def plugin_dir(tmp_path, monkeypatch):
    """A plugin module on sys.path, and a helper that registers entry points for it in a real
    installed-package record (a .dist-info folder), as `pip install` of a plugin leaves."""
    (tmp_path / "myplug.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))

    def register(dist: str, **eps: str) -> None:
        info = tmp_path / f"{dist}-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
        lines = "".join(f"{k.replace('_', '-')} = {v}\n" for k, v in eps.items())
        (info / "entry_points.txt").write_text(f"[{registry.ENTRY_POINT_GROUP}]\n{lines}")
        registry._plugin_entry_points.cache_clear()  # the registry scans installed packages once a process

    yield register
    registry._plugin_entry_points.cache_clear()


def _run(tmp_path, capsys, backends):
    suite = tmp_path / "s.yaml"
    suite.write_text(SUITE)
    out = tmp_path / "res"
    rc = main(["run", str(suite), "--backends", backends, "--device", "cpu", "--out", str(out), "--quiet",
               "--no-time", "--no-isolation"])
    err = " ".join(capsys.readouterr().err.split())
    return rc, err, out


@pytest.mark.parametrize("cls, what", [("NoName", "attribute `name` is missing"),
                                       ("Unnamed", "attribute `name` is missing")])
def test_a_class_without_name_is_one_error_naming_class_and_attribute(plugin_dir, tmp_path, capsys, cls, what):
    rc, err, out = _run(tmp_path, capsys, f"myplug:{cls}")
    assert rc == 2 and f"class {cls} {what}" in err and "Traceback" not in err and "AttributeError" not in err, err
    assert not out.exists()


def test_a_spec_with_a_builtin_name_is_rejected(plugin_dir, tmp_path, capsys):
    rc, err, out = _run(tmp_path, capsys, "myplug:Impostor")
    assert rc == 2 and "'myplug:Impostor' is named 'torch-math'" in err and "name` of its own" in err, err
    assert not out.exists()


def test_two_classes_with_one_name_in_one_run_are_rejected(plugin_dir, tmp_path, capsys):
    rc, err, _ = _run(tmp_path, capsys, "myplug:Mine,myplug:AlsoMine")
    assert rc == 2 and "'myplug:Mine' and 'myplug:AlsoMine' are both named 'my-kernel'" in err, err


def test_an_entry_point_reusing_a_builtin_name_is_rejected(plugin_dir, tmp_path, capsys):
    plugin_dir("evilplug", torch_math="myplug:Impostor")
    with pytest.raises(registry.BackendLookupError) as e:
        registry.resolve("torch-math")
    msg = str(e.value)
    assert "'torch-math' is registered 2 times" in msg
    assert "backends.torch_math:TorchMathBackend" in msg and "myplug:Impostor (package evilplug)" in msg
    rc, err, _ = _run(tmp_path, capsys, "torch-math")
    assert rc == 2 and "registered 2 times" in err


def test_entry_point_name_and_class_name_must_agree(plugin_dir, tmp_path, capsys):
    plugin_dir("oddplug", other_name="myplug:Mine")
    rc, err, _ = _run(tmp_path, capsys, "other-name")
    assert rc == 2 and "entry point 'other-name'" in err and "`name` is 'my-kernel'" in err, err


def test_a_registered_plugin_has_one_name_in_rows_and_reproducers(plugin_dir, tmp_path, capsys):
    plugin_dir("goodplug", my_kernel="myplug:Mine")
    rc, err, out = _run(tmp_path, capsys, "my-kernel")
    assert rc == 0, err
    rows = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert [r["backend"] for r in rows] == ["my-kernel"] and rows[0]["status"] == "pass"
    assert "--backends my-kernel " in rows[0]["reproducer"]


def test_list_shows_a_broken_registration_as_unavailable_with_the_reason(plugin_dir, capsys):
    plugin_dir("oddplug", other_name="myplug:Mine")
    assert main(["list", "--json"]) == 0
    entry = {b["name"]: b for b in json.loads(capsys.readouterr().out)}["other-name"]
    assert "entry point 'other-name'" in entry["error"] and not entry["variants"]


def test_a_cpu_plugin_with_default_capabilities_is_told_how_to_declare_cpu(plugin_dir, tmp_path, capsys):
    rc, err, out = _run(tmp_path, capsys, "myplug:CudaOnlyByDefault")
    rows = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert rc == 0 and rows[0]["status"] == "unsupported"
    assert "devices=frozenset({'cpu', 'cuda'})" in rows[0]["reason"], rows[0]["reason"]


def test_import_failure_says_the_module_must_be_importable(tmp_path, capsys):
    rc, err, _ = _run(tmp_path, capsys, "not_on_path_anywhere:Backend")
    assert rc == 2 and "PYTHONPATH" in err and "install" in err, err
