"""Installing and starting the tool: a light `harness --help`, `--version`, the tested-version
marks of `harness list`, the extras, -v logging."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from attn_contract import AttentionBackend
from harness import cli
from harness.records.results import RESULTS_FILE
from harness.records.versions import outside_tested, untested, untested_note
from conftest import subprocess_env

ROOT = Path(__file__).resolve().parents[2]
ENV = subprocess_env()


def _modules_after(code: str) -> set[str]:
    r = subprocess.run([sys.executable, "-c", code + "\nimport sys; print(' '.join(sorted(sys.modules)))"],
                       cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return set(r.stdout.split())


def test_help_imports_neither_torch_nor_pandas():
    mods = _modules_after("from harness import cli\ncli.build_parser().format_help()\n"
                          "import contextlib, io\n"
                          "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
                          "    cli.main(['--help'])\n"
                          "    cli.main(['run', '--help'])\n")
    heavy = {"torch", "pandas", "harness.registry", "harness.spec.suite_model"} & mods
    assert not heavy, heavy


def test_python_m_harness_help_lists_the_commands():
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "harness", "--help"], cwd=ROOT, env=ENV,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "report" in r.stdout and "--version" in r.stdout
    imported = {line.rsplit("|", 1)[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time")}
    assert "torch" not in imported and "pandas" not in imported


def test_the_light_results_file_name_is_the_real_one():
    assert cli.RESULTS_FILE == RESULTS_FILE


@pytest.mark.slow  # subprocess runs (~8-11 s): the slow job (CI) keeps the test command under 4 minutes
def test_version_names_harness_torch_and_every_backend_library():
    r = subprocess.run([sys.executable, "-m", "harness", "--version"], cwd=ROOT, env=ENV, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.startswith("attn-harness ") and "\ntorch " in out
    for dist in ("flashinfer-python", "flash-attn-4", "flash-attn", "tokenspeed_fa3"):
        assert f"\n{dist} " in out, out
    # Versions come from metadata: no backend library was imported to answer.
    mods = _modules_after("from harness.records.versions import version_lines\nversion_lines()")
    assert not {m for m in mods if m.split(".")[0] in ("flashinfer", "flash_attn", "flash_attn_interface")}


def test_tested_ranges():
    assert outside_tested("flashinfer-python", "0.7.4", ">=0.6.18,<0.7")
    assert not outside_tested("flashinfer-python", "0.6.18.post1", ">=0.6.18,<0.7")
    assert not outside_tested("flash-attn-4", "4.0.0b36", "==4.0.0b36")
    assert outside_tested("flash-attn-4", "4.0.0b37", "==4.0.0b36")
    assert not outside_tested("flash-attn", "2.8.3.post2", ">=2.8.3,<2.9")
    assert outside_tested("x", "not-a-version", ">=1")


class _OldPydanticBackend(AttentionBackend):
    """A backend declaring a range the installed pydantic (>= 2.6, a core dependency) is outside."""
    name = "needs-old-pydantic"
    tested_versions = {"pydantic": "<2", "pyyaml": ">=5"}

    @classmethod
    def availability(cls, variant=None):  # pragma: no cover - not called
        raise NotImplementedError

    @classmethod
    def capabilities(cls, variant=None):  # pragma: no cover - not called
        raise NotImplementedError


def test_list_marks_an_installed_library_outside_the_tested_range():
    (u,) = untested(_OldPydanticBackend)  # pyyaml is inside its range
    assert u["dist"] == "pydantic" and u["tested"] == "<2"
    assert untested_note([u]).startswith("UNTESTED pydantic 2.")
    # Every registered backend's entry carries the field `harness list --json` prints.
    assert all("untested" in b for b in cli.list_backends())


def test_extras():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for name, dist in (("flashinfer", "flashinfer-python"), ("fa4", "flash-attn-4"), ("gpu", "nvidia-ml-py"),
                       ("bench", "pytest-benchmark"), ("browser", "selenium"), ("ray", "ray"), ("test", "pytest")):
        assert any(d.startswith(dist) for d in extras[name]), name
    assert "-e '.[test,ray]'" in (ROOT / ".ci" / "run").read_text()


def test_dependency_bounds_follow_the_tested_ranges():
    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    reqs = {Requirement(d).name.lower(): Requirement(d) for ds in extras.values() for d in ds}
    # FlashInfer: the backend's tested range stops below 0.7 (0.7.x is out and untested).
    assert "0.7.4" not in reqs["flashinfer-python"].specifier and "0.6.18" in reqs["flashinfer-python"].specifier
    assert "2.40.0" in reqs["ray"].specifier and "3.0" not in reqs["ray"].specifier
    assert {"parquet", "hub"} <= set(extras) and any(d.startswith("pyarrow") for d in extras["parquet"])
    assert any(d.startswith("huggingface_hub") for d in extras["hub"])
    # Pillow is imported by the report (harness/report/plots.py): a declared dependency.
    assert any(Requirement(d).name.lower() == "pillow" for d in project["dependencies"])


def test_logging_is_quiet_by_default_and_v_turns_it_on(tmp_path):
    code = ("import logging, sys\nfrom harness import cli\nlog = logging.getLogger('harness.x')\n"
            "a = cli.build_parser().parse_args(sys.argv[1:] + ['validate', 'x'])\n"
            "cli.configure_logging(a)\nlog.info('info-line')\nlog.debug('debug-line')\n")
    def stderr(*flags: str) -> str:
        return subprocess.run([sys.executable, "-c", code, *flags], cwd=ROOT, env=ENV, capture_output=True,
                              text=True, timeout=60).stderr
    assert "info-line" not in stderr()
    assert "info-line" in stderr("-v") and "debug-line" not in stderr("-v")
    assert "debug-line" in stderr("-vv")


@pytest.mark.slow  # a whole run in a subprocess (~10-14 s): the slow job (CI) keeps the test command under 4 minutes
def test_vv_logs_the_workers_and_rows_of_a_run(tmp_path):
    args = [sys.executable, "-m", "harness", "run", "ci/smoke.yaml", "--device", "cpu", "--backends", "torch-math",
            "--case", "decode-gqa[block_size=16,count=1]", "--no-time", "--quiet"]
    # The quiet run in one process: the executor logs from the parent either way, and one worker
    # start (the loud run's) is enough.
    quiet = subprocess.run(args + ["--no-isolation", "--out", str(tmp_path / "a")], cwd=ROOT, env=ENV,
                           capture_output=True, text=True, timeout=300)
    loud = subprocess.run([args[0], *args[1:3], "-vv", *args[3:], "--out", str(tmp_path / "b")], cwd=ROOT, env=ENV,
                          capture_output=True, text=True, timeout=300)
    assert quiet.returncode == loud.returncode == 0, loud.stderr[-2000:]
    assert "harness.execute.local" not in quiet.stderr
    assert "INFO harness.execute.local: worker pid" in loud.stderr and "1 cell(s) in 1 case(s)" in loud.stderr
    assert "DEBUG harness.execute.local: row decode-gqa[block_size=16,count=1] / torch-math: pass" in loud.stderr
