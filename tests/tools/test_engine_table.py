"""The readers' backend facts: harness/analysis/engine_table.json equals what the built-in
backends declare now, run.json's ``backend_facts`` win over it, and a bad record is one error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.analysis import engines
from harness.records.engine_facts import BackendFacts, EngineNameRecord, backend_facts
from harness.records.header import RunHeader
from harness.records.load import Run, load_run
from harness.tools import engine_table


def test_the_committed_table_is_what_the_backends_declare():
    assert json.loads(engine_table.TABLE.read_text()) == engine_table.declared(), (
        "harness/analysis/engine_table.json differs from the backends' declarations: "
        "run `python -m harness.tools.engine_table` and commit it")
    assert engines.TABLE == engine_table.TABLE


def test_a_record_gives_back_the_declaration_it_was_made_from():
    from harness import registry

    for name in registry.known_backends():
        cls = registry.resolve(name)
        facts = BackendFacts.model_validate_json(backend_facts(cls).model_dump_json())  # through JSON, as run.json
        for engine, decl in cls.engine_names.items():
            assert facts.engine_names[engine].declaration() == decl, (name, engine)


def test_recorded_facts_are_read_and_win_over_the_table():
    plugin = "test-engine-table-plugin"
    table = engines.TABLE_ONLY
    assert table.engine_name(plugin, "vllm") is None and plugin not in table.known_backends()
    rec = EngineNameRecord(name="TEST_PLUGIN_ATTN", version_axis="ver", aliases=["tpa"], version_names={3: "tp3"})
    header = {"backend_facts": {plugin: {"engine_names": {"vllm": rec.model_dump(mode="json"),
                                                           "sglang": rec.model_dump(mode="json")},
                                         "plain_counterpart": "flash-attn"}}}
    run = Run(Path("r"), RunHeader.model_validate(header), [])
    assert run.backend_facts[plugin].plain_counterpart == "flash-attn"
    facts = engines.EngineFacts.of([run])
    assert facts.engine_name(plugin, "vllm").name == "TEST_PLUGIN_ATTN"
    assert facts.from_vllm_name("tpa") == plugin
    assert facts.plain_counterpart(plugin) == "flash-attn"
    assert plugin in facts.cascade_of("flash-attn", ["flash-attn", plugin])
    assert facts.sglang_setting(plugin, {"ver": "3"})["attention_backend"] == "tp3"  # JSON's "3" key is the version 3
    assert facts.known_backends()[-1] == plugin
    # The facts travel with the runs read: the table alone (another load) never sees them.
    assert table.engine_name(plugin, "vllm") is None
    assert facts.engine_name("flash-attn", "vllm").name == "FLASH_ATTN"  # the table's


def test_a_bad_record_is_one_error_naming_the_field(tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "results.jsonl").write_text("")
    (tmp_path / "x" / "run.json").write_text(json.dumps(
        {"backend_facts": {"bad-one": {"engine_names": {"vllm": {"nmae": "X"}}}}}))
    with pytest.raises(ValueError, match=r"x/run.json: field backend_facts.bad-one.engine_names.vllm.nmae: "):
        load_run(tmp_path / "x")


def test_recommend_reads_the_facts_its_results_recorded(tmp_path, capsys):
    """The same rows, a run.json recording another vLLM name for flash-attn: the flags follow the
    record, not this install's backend class."""
    import shutil
    from pathlib import Path

    from harness.cli import main

    src = Path(__file__).parents[1] / "data" / "h200" / "models"
    res = tmp_path / "models"
    shutil.copytree(src, res)
    header = json.loads((res / "run.json").read_text())
    assert "backend_facts" not in header  # written before the field: the table serves it
    facts = json.loads(engine_table.TABLE.read_text())["backend_facts"]
    facts["flash-attn"]["engine_names"]["vllm"]["name"] = "FLASH_ATTN_AS_RECORDED"
    (res / "run.json").write_text(json.dumps({**header, "backend_facts": facts}))
    assert main(["recommend", "--engine", "vllm", str(src)]) == 0
    before = capsys.readouterr().out
    assert main(["recommend", "--engine", "vllm", str(res)]) == 0
    after = capsys.readouterr().out
    assert "--attention-backend FLASH_ATTN " in before and "FLASH_ATTN_AS_RECORDED" not in before
    assert "--attention-backend FLASH_ATTN_AS_RECORDED" in after and "--attention-backend FLASH_ATTN " not in after


@pytest.mark.slow  # subprocess runs (~8-11 s): the slow job (CI) keeps the test command under 4 minutes
def test_report_and_recommend_load_no_backend_and_no_torch(tmp_path):
    """Reading records needs no backend class: a report and recommend --engine on H200 rows with
    cascade cells (the cascade fit, the engine section) never import the registry, a backend or
    torch (tests/project/test_layering.py checks the readers' own imports; this, what they reach)."""
    import subprocess
    import sys
    from pathlib import Path

    data = Path(__file__).parents[1] / "data" / "h200"
    code = (
        "import sys\n"
        "from harness.cli import main\n"
        f"assert main(['report', '--jobs', '1', '-o', {str(tmp_path / 'r.html')!r}, {str(data / 'session-a' / 'cascade-sweep')!r}]) == 0\n"
        f"assert main(['recommend', '--engine', 'sglang', {str(data / 'models')!r}]) == 0\n"
        "loaded = [m for m in sys.modules if m in ('torch', 'harness.registry') or m.startswith('backends')]\n"
        "print('LOADED', loaded)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "LOADED []" in out.stdout, out.stdout[-500:]
    # the fitted cascade rule is named through flash-attn-cascade's plain counterpart's version tag
    assert "flash-attn-cascade fa3" in (tmp_path / "r.html").read_text()
