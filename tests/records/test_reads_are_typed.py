"""Readers read records typed: no module outside harness/records/ reads a result row or run.json
as a dict (the dict reader ``read_header``, ``json.loads`` next to the results file names, a
dump of a row indexed by key) or through ``getattr``/``hasattr`` on a field name. An AST scan,
as tests/project/test_layering.py does for imports; the second test shows each pattern is caught."""

from __future__ import annotations

import ast
from pathlib import Path

from pydantic import BaseModel

import harness.records.header as header_models
import harness.records.parts as part_models
import harness.records.results as row_models

ROOT = Path(__file__).resolve().parents[2]
RECORDS = ROOT / "harness" / "records"
# Names a row, a payload or a header goes by in the readers (a loop's ``r``, ``t = row.timing``).
ROWISH = {"r", "row", "rows", "h", "header", "hdr", "t", "timing", "check", "call", "metrics", "host", "run"}
FILE_NAMES = {"run.json", "results.jsonl", "HEADER_FILE", "RESULTS_FILE"}


def _field_names() -> set[str]:
    names: set[str] = set()
    for mod in (row_models, part_models, header_models):
        for v in vars(mod).values():
            if isinstance(v, type) and issubclass(v, BaseModel) and v.__module__.startswith("harness.records"):
                names |= set(v.model_fields)
    return names


FIELDS = _field_names()


def _tail(node: ast.AST) -> str | None:
    """``r`` of ``r``, ``timing`` of ``row.timing``."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def problems(source: str) -> list[tuple[int, str]]:
    tree = ast.parse(source)
    out: list[tuple[int, str]] = []
    names_files = any(isinstance(n, ast.Constant) and n.value in FILE_NAMES for n in ast.walk(tree)) or any(
        isinstance(n, ast.Name) and n.id in FILE_NAMES for n in ast.walk(tree))
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and n.id == "read_header":
            out.append((n.lineno, "read_header: run.json as a dict (use harness.records.load / read_run_header)"))
        elif isinstance(n, ast.alias) and n.name == "read_header":
            out.append((0, "imports read_header"))
        elif isinstance(n, ast.Attribute) and n.attr == "__pydantic_extra__":
            out.append((n.lineno, "__pydantic_extra__: a payload's extras are read through its typed accessors"))
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("getattr", "hasattr"):
            if (len(n.args) >= 2 and isinstance(n.args[1], ast.Constant) and n.args[1].value in FIELDS
                    and _tail(n.args[0]) in ROWISH):
                out.append((n.lineno, f"{n.func.id}({ast.unparse(n.args[0])}, {n.args[1].value!r}): a typed field"))
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "loads" and names_files:
            if _tail(n.func.value) == "json":
                out.append((n.lineno, "json.loads in a module that names the results files: read them with harness.records"))
        elif isinstance(n, (ast.Subscript, ast.Call)):
            # row.model_dump()["timing"] / row.model_dump().get("timing"): a row read as a dict.
            inner = n.value if isinstance(n, ast.Subscript) else (
                n.func.value if isinstance(n.func, ast.Attribute) and n.func.attr == "get" else None)
            if (isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute)
                    and inner.func.attr == "model_dump" and _tail(inner.func.value) in ROWISH):
                out.append((n.lineno, f"{ast.unparse(n)[:60]}: a row's dump read by key"))
    return out


def test_no_reader_outside_records_reads_rows_or_run_json_as_dicts():
    # harness/ only: backends/ may not import harness (attn_contract/ is all they share), so a
    # backend's probe script reads the files it asked `harness run` to write like any outside tool.
    found = []
    for p in sorted((ROOT / "harness").rglob("*.py")):
        if p.is_relative_to(RECORDS):
            continue
        found += [f"{p.relative_to(ROOT)}:{line}: {what}" for line, what in problems(p.read_text(encoding="utf-8"))]
    assert found == [], "typed reads only (harness/records/load.py):\n" + "\n".join(found)


def test_the_scan_catches_each_pattern():
    bad = {
        "from harness.records.results import read_header\nh = read_header(d)\n": "read_header",
        "x = r.call.__pydantic_extra__\n": "__pydantic_extra__",
        "m = getattr(t, 'median_us', None)\n": "getattr(t, 'median_us')",
        "ok = hasattr(row, 'timing')\n": "hasattr(row, 'timing')",
        "import json\nF = 'results.jsonl'\nd = json.loads(line)\n": "json.loads",
        "v = row.model_dump()['timing']\n": "read by key",
        "v = r.model_dump().get('check')\n": "read by key",
    }
    for src, what in bad.items():
        got = problems(src)
        assert got and what in got[0][1], (src, got)
    fine = ("n = getattr(cls, 'name', None)\n"  # not a row
            "t = row.timing.median_us\n"
            "import json\nd = json.loads(text)\n")  # no results file named in the module
    assert problems(fine) == []
