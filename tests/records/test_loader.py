"""records.load: one typed way to read a run. Backend facts travel with the loaded runs (two
loads never see each other's), run.json is typed to its last key (an unknown key is one error
naming the file and field), and ``harness merge`` keeps every shard's backend facts."""

import json
from pathlib import Path

import pytest

from harness.analysis.engines import TABLE_ONLY, EngineFacts
from harness.records.engine_facts import EngineNameRecord
from harness.records.header import RunHeader
from harness.records.load import all_rows, load, load_run
from harness.records.merge import merge_dirs, write_merged
from harness.records.results import ResultWriter
from helpers.typed_rows import ran_row


def _facts(vllm_name: str, plain: str | None = None) -> dict:
    rec = EngineNameRecord(name=vllm_name).model_dump(mode="json")
    return {"engine_names": {"vllm": rec}, "plain_counterpart": plain}


def _folder(path: Path, backend: str, header: dict) -> Path:
    with ResultWriter(path) as w:
        w.write(ran_row(10.0, backend=backend))
    # Raw JSON, as any build may have written it (write_header takes a typed RunHeader only).
    (path / "run.json").write_text(json.dumps({"schema_version": 3, "suite": "s", "seed": None, **header}))
    return path


def test_load_gives_typed_runs_with_their_own_facts(tmp_path):
    a = _folder(tmp_path / "a", "plugin-a", {"backend_facts": {"plugin-a": _facts("A_ATTN")}})
    b = _folder(tmp_path / "b", "plugin-b", {"backend_facts": {"plugin-b": _facts("B_ATTN", "plugin-a")}})
    (ra,), (rb,) = load([a]), load([b])
    assert isinstance(ra.header, RunHeader) and ra.header.suite == "s" and ra.has_header
    assert [r.backend for r in all_rows([ra, rb])] == ["plugin-a", "plugin-b"]
    fa, fb = EngineFacts.of([ra]), EngineFacts.of([rb])
    # Each load's facts are its own: reading b did not replace a's (no process-wide state).
    assert fa.engine_name("plugin-a", "vllm").name == "A_ATTN" and fa.engine_name("plugin-b", "vllm") is None
    assert fb.plain_counterpart("plugin-b") == "plugin-a" and fb.engine_name("plugin-a", "vllm") is None
    assert TABLE_ONLY.engine_name("plugin-a", "vllm") is None


def test_a_folder_without_run_json_loads_with_an_empty_header(tmp_path):
    d = tmp_path / "r"
    with ResultWriter(d) as w:
        w.write(ran_row(10.0))
    (run,) = load([d])
    assert not run.has_header and run.header.device_name is None and len(run.rows) == 1


def test_an_unknown_run_json_key_is_one_error_naming_file_and_field(tmp_path):
    d = _folder(tmp_path / "r", "b", {"wal_s": 3.0})
    with pytest.raises(ValueError, match=r"r/run.json: field wal_s: Extra inputs are not permitted"):
        load_run(d)


def test_merge_keeps_every_shards_backend_facts(tmp_path):
    a = _folder(tmp_path / "a", "plugin-a", {"backend_facts": {"plugin-a": _facts("A_ATTN")},
                                             "shard": {"index": 1, "count": 2, "total_cells": 2, "cells": []}})
    b = _folder(tmp_path / "b", "plugin-b", {"backend_facts": {"plugin-b": _facts("B_ATTN")},
                                             "shard": {"index": 2, "count": 2, "total_cells": 2, "cells": []}})
    res = merge_dirs([a, b])
    assert set(res.header.backend_facts or {}) == {"plugin-a", "plugin-b"}
    out = write_merged(res, tmp_path / "m")
    merged = load_run(out)
    assert set(merged.backend_facts) == {"plugin-a", "plugin-b"} and len(merged.rows) == 2
    assert [m.shard for m in merged.header.merged or []] == [1, 2] and merged.header.shard is None
    written = json.loads((out / "run.json").read_text())
    assert "wall_s" not in written and written["cells"] == 2 and written["suite"] == "s"


def test_records_import_no_torch_and_hold_no_command():
    """Reading records needs no torch; the commands live in harness/cli/commands/."""
    import subprocess
    import sys

    import harness.records

    root = Path(harness.records.__file__).parent
    mods = sorted(f"harness.records.{p.stem}" for p in root.glob("*.py") if p.stem != "__init__")
    code = (f"import sys, importlib\nfor m in {mods!r}: importlib.import_module(m)\n"
            "print('torch' in sys.modules, [m for m in " + repr(mods) + " if hasattr(sys.modules[m], 'add_parser')])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == "False" and " ".join(out[1:]) == "[]"
