"""CPU checks of the GPU diagnostics' pure parts (harness diag fidelity, direct, callform) and of ci/."""

from __future__ import annotations

import re

import csv
import json
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


from harness.tools.diag import callform, direct, fidelity  # noqa: E402  (GPU diagnostics: they import without a GPU)


def test_gate_applies_to_kernel_bound_rows_only():
    # today's H200 figures: eager torch rows are host-bound (n/a), the graph-timed libraries gated
    r = fidelity.gate_row(1653.63, 297.37, False, 54.0, 0.0)
    assert r["ok"] is None and not r["gated"] and r["gate"].startswith("n/a (host-bound")
    r = fidelity.gate_row(29313.97, 9269.85, False, 1600.0, 1.0)
    assert r["gate"] == fidelity.HOST_BOUND_LABEL
    r = fidelity.gate_row(207.62, 202.22, True, 3.0, 1.0)
    assert r["gated"] and r["ok"] and r["gate"] == "ok"
    r = fidelity.gate_row(300.0, 200.0, True, 3.0, 1.0)
    assert r["gated"] and r["ok"] is False and r["gate"] == "FAIL"
    r = fidelity.gate_row(14.19, 15.96, True, 3.0, 1.0)
    assert not r["gated"] and r["ok"] is None
    # an eager library call of a few kernels whose launch was hidden stays gated
    assert fidelity.gate_row(300.0, 295.0, False, 3.0, 1.0)["gated"]
    # eager with the launch not hidden: host-bound whatever the kernel count
    assert fidelity.gate_row(300.0, 200.0, False, 3.0, 0.1)["host_bound"]


def test_busy_time_counts_overlapping_kernels_once():
    """A synthetic call of three kernels whose last one starts before the attention kernel
    ends (what a PDL-launched dependent kernel does). The sum of durations counts the overlap
    twice (docs/measurement.md §12); the busy time does not."""
    calls = []
    for i in range(4):  # 4 back-to-back calls, 2 us apart: prepare 5 us, attention 200 us, combine
        t0 = i * 250.0
        calls += [(t0, t0 + 5, "prepare_varlen_num_blocks"), (t0 + 6, t0 + 206, "flash_fwd_kernel"),
                  (t0 + 186, t0 + 215, "flash_fwd_combine_kernel")]  # starts 20 us before the end
    st = fidelity.interval_stats(calls, 4)
    assert st["sum_us"] == pytest.approx(234.0) and st["busy_us"] == pytest.approx(214.0)
    assert st["overlap_us"] == pytest.approx(20.0) and st["kernels_per_call"] == 3
    assert st["span_us"] == pytest.approx((3 * 250 + 215) / 4)
    assert st["kernels"][0]["name"] == "flash_fwd_kernel" and st["kernels"][0]["per_call"] == 1
    harness = 219.0  # graph-timed: busy time plus a few us of gaps, as FlashInfer's rows showed
    assert fidelity.gate_row(harness, st["busy_us"], True, 3, 1.0)["ok"]
    assert not fidelity.gate_row(harness, st["sum_us"], True, 3, 1.0)["ok"]  # the old comparison fails
    # kernels that never overlap: busy == sum
    st = fidelity.interval_stats([(0, 10, "a"), (12, 20, "b")], 1)
    assert st["busy_us"] == st["sum_us"] == 18 and st["overlap_us"] == 0 and st["span_us"] == 20
    assert fidelity.interval_stats([], 3)["busy_us"] == 0


def test_builtin_cells_keep_eager_torch_off_large_cells():
    from harness.spec import parse_suite

    suite = parse_suite(fidelity.BUILTIN, "<built-in>")
    assert 8 <= len(suite.cases) <= 12
    small = [c.name for c in suite.cases if fidelity.torch_too_large(c, 1.0, 64.0) is None]
    assert small == ["decode-b1-4k"]
    big = next(c for c in suite.cases if c.name == "decode-b256-8k")
    assert "--include-large-torch" in fidelity.torch_too_large(big, 1.0, 64.0)
    assert any(c.block_size == 256 for c in suite.cases)  # FA2's paged path has a cell


def test_row_writer_flushes_each_row_and_marks_interrupted(tmp_path):
    w = fidelity.RowWriter(tmp_path, {"device": "test"})
    w.add({"case": "c", "backend": "torch-cascade", "variant": {}, "skipped": "unsupported: no shared prefix"})
    g = fidelity.gate_row(207.6, 202.2, True, 3.0, 1.0)
    w.add({"case": "c", "backend": "flash-attn", "variant": {"fa_version": 3}, "harness_us": 207.6,
           "profiler_us": 202.2, "kernels_per_call": 3.0, "graph": True, **g})
    rows = list(csv.DictReader(open(tmp_path / "fidelity.csv")))  # readable before close: flushed
    assert [r["backend"] for r in rows] == ["torch-cascade", "flash-attn"]
    mid = json.loads((tmp_path / "fidelity.json").read_text())
    assert mid["complete"] is False and len(mid["rows"]) == 2
    s = w.write_json(complete=False, interrupted=True)
    w.close()
    assert s["interrupted"] and s["compared"] == 1 and s["gated"] == 1 and s["skipped"] == 1 and s["failed"] == 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU exit")
def test_scripts_exit_2_without_a_gpu(tmp_path):
    assert fidelity.main(["--out", str(tmp_path / "f")]) == 2
    assert direct.main([]) == 2


def test_callform_diag_skips_cleanly_without_a_gpu_and_checks_its_arguments(tmp_path, capsys):
    diag = callform
    if not torch.cuda.is_available():
        assert diag.main(["--out", str(tmp_path / "d")]) == 0  # evidence, not a gate: skip, exit 0
        out = capsys.readouterr().out
        assert out.count("skipped: no CUDA device") == 3
        res = json.loads((tmp_path / "d" / "callform-diag.json").read_text())
        assert res["skipped"] == {"fa3": "no CUDA device", "fa4": "no CUDA device", "flashinfer": "no CUDA device"}
        assert res["results"] == [] and "skipped: no CUDA device" in (tmp_path / "d" / "callform-diag.md").read_text()
    for bad in (["--libs", "fa5"], ["--shapes", "nope"], ["--max-time", "0"], []):
        with pytest.raises(SystemExit) as e:
            diag.main(["--out", str(tmp_path / "e")] + bad if bad else bad)
        assert e.value.code == 2
    assert not (tmp_path / "e").exists()  # nothing half-written on bad input
    args = diag.parse_args(["--out", "x", "--libs", "fa4", "--shapes", "orient-gqa-b64-4k-p16"])
    assert args.libs == ["fa4"] and args.shapes == ["orient-gqa-b64-4k-p16"]


def test_callform_diag_shapes_are_the_orientation_cases():
    """The diagnostic's three shapes are suites/callforms.yaml's orientation cases, decode-only,
    every sequence the same length: the plain batched [B, 1, H, D] call is defined on them."""
    from harness.case.layout import case_layout
    from harness.spec import load_suite

    diag = callform
    cases = {c.name: c for c in load_suite(ROOT / "suites" / "callforms.yaml").cases}
    assert set(diag.SHAPES) <= set(cases)
    for name in diag.SHAPES:
        cfg = cases[name].attention_config()
        assert cases[name].batch[0].kind == "decode" and len(cases[name].batch) == 1
    # The lengths generate() will draw (tests/case/test_layout.py holds the two equal), without
    # making the 64 x 4k KV cache on the CPU.
    small = case_layout(cases["orient-gqa-b64-4k-p16"])
    assert set(small.query_lens) == {1} and len(set(small.seq_lens)) == 1 and cfg.block_size in (16, 64)


def test_direct_comparison_names_the_calls_and_flags_big_differences():
    res = ROOT / "tests/data/h200/session-a/orientation"
    if not (res / "run.json").exists():
        pytest.skip("no committed orientation results")
    hrows = direct.harness_rows(res, "dense-prefill", "flash-attn", "2")
    assert len(hrows) == 1 and abs(hrows[0]["median_us"] - 3451.9) < 1
    lines = [
        {"case": "dense-prefill", "library": "FA2", "median_us": 2789.8,
         "compare": direct.compare(2789.8, hrows, False)},
        {"case": "paged-prefill", "library": "FA2 paged varlen (block_table)", "median_us": 3000.0,
         "compare": direct.compare(3000.0, hrows, True)},
        {"case": "paged-prefill", "library": direct.OUTPUT_COPY, "median_us": 33.0},
    ]
    text = "\n".join(direct.comparison_lines(lines))
    assert "NOT the same call" in text and "+23.7%" in text
    assert "same call as the adapter" in text and "+15.1%" in text and "!! > 5%" in text
    assert text.count("!!") == 2  # the legend and the one flagged paged line; the dense line is not flagged
    assert "67 MB" in text and "without the adapter's output copy" in text


def test_gpu_pytest_script_runs_exactly_the_test_suite():
    import subprocess

    script = ROOT / "ci" / "gpu_pytest.sh"
    assert script.is_file(), "ci/gpu_pytest.sh runs the test suite on a GPU machine"
    subprocess.run(["bash", "-n", str(script)], check=True)
    text = script.read_text()
    commands = [ln.strip() for ln in text.splitlines() if "python3" in ln and not ln.lstrip().startswith("#")]
    assert any("python3 -m pip install -q --no-deps --no-build-isolation -e ." in c for c in commands)
    # pytest-xdist from the carried wheels, never from an index
    assert any("pip install -q --no-index --no-deps --target .whl/site .whl/*.whl" in c for c in commands)
    assert any('python3 -m pytest "${common[@]}" "$@"' in c for c in commands)
    assert '-n "$workers" --dist "$dist"' in text and "DIST:-loadfile" in text
    # the GPU-timing files run alone, after the parallel part, which ignores them
    serial = re.search(r"^serial=\(([^)]*)\)", text, re.M)
    assert serial and '--ignore "$s"' in text
    files = serial.group(1).split()
    # the files that assert on GPU timings or clocks, each an existing file (a renamed one would run in parallel)
    for f in ("tests/timing/test_timing.py", "tests/analysis/test_gate_noise.py", "tests/timing/test_timing_clocks.py",
              "tests/timing/test_timing_sustained.py", "tests/timing/test_cold_l2.py"):
        assert f in files
    assert all((ROOT / f).is_file() for f in files), files
    assert '${1:-' in text, "the log goes where the caller says"
    assert not (ROOT / "ci" / "pytest_shards.py").exists()


def test_harness_subprocesses_keep_the_callers_pythonpath(tmp_path, monkeypatch):
    # On the H200 machine torch and the kernel libraries come from PYTHONPATH: a subprocess
    # test whose environment drops it cannot even import torch there.
    import subprocess

    from conftest import subprocess_env

    (tmp_path / "only_on_pythonpath.py").write_text("VALUE = 42\n")
    # Prepend, as a caller would: replacing it would drop the very entries the H200 imports
    # torch from, and the subprocess would fail there for that reason alone.
    import os

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    r = subprocess.run([sys.executable, "-c", "import only_on_pythonpath, harness.cli, plugins.crashy;"
                        " print(only_on_pythonpath.VALUE)"], cwd=tmp_path, env=subprocess_env(),
                       capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "42", r.stderr
    # and every subprocess test uses it (none builds its own environment)
    for test in ("cli/test_cli.py", "execute/test_resume.py"):
        text = (ROOT / "tests" / test).read_text()
        assert "subprocess_env(" in text and '"PYTHONPATH":' not in text and "env={" not in text


def test_ci_holds_product_ci_only_and_the_diagnostics_are_commands(tmp_path, capsys):
    # ci/: the gate, its baselines and suite, the browser and GPU test-suite installers, the lowest-versions job; an
    # evidence session is a plan file (harness plan), a diagnostic a `harness diag` module.
    # What the repository holds (git's list: a copied tree may keep files deleted since).
    import subprocess

    listed = subprocess.run(["git", "ls-files", "ci"], cwd=ROOT, capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout: ci/'s tracked content cannot be listed")
    top = sorted({Path(f).parts[1] for f in listed.stdout.split()})
    assert top == ["baselines", "gate.py", "gpu_pytest.sh", "install_browser.sh", "lowest_deps.sh", "smoke.yaml"]
    from harness.cli import main
    from harness.tools.diag import DIAGNOSTICS

    for name, (module, _) in DIAGNOSTICS.items():
        text = (ROOT / "harness" / "tools" / "diag" / f"{module}.py").read_text()
        assert "sys.path" not in text and "from test" not in text and "import test" not in text, name
        assert main(["diag", name, "--help"]) == 0, name  # every diagnostic answers --help through the CLI
        assert f"harness diag {name}" in capsys.readouterr().out
    assert main(["diag", "callform", "--out", str(tmp_path / "c"), "--libs", "fa5"]) == 2
    assert not (tmp_path / "c").exists()
    if not torch.cuda.is_available():  # a GPU diagnostic says plainly why it cannot run here
        for name in ("fidelity", "direct", "clocks"):
            assert main(["diag", name, "--out", str(tmp_path / name)]) == 2
            assert f"harness diag {name} needs a CUDA device" in capsys.readouterr().err
