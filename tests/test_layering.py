"""The layout is the architecture: harness/ and backends/ share only attn_contract/.

Parses every import (module level or inside a function) with ast, so a crossing anywhere fails."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def imported_modules(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
            # "from harness import registry" imports harness.registry
            found += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return found


def crossings(package: str, forbidden: str) -> list[str]:
    bad = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for line, mod in imported_modules(path):
            if mod == forbidden or mod.startswith(forbidden + "."):
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {mod}")
    return bad


@pytest.mark.parametrize("package, forbidden", [
    ("harness", "backends"), ("backends", "harness"), ("attn_contract", "harness"), ("attn_contract", "backends"),
])
def test_no_imports_cross_between_harness_and_backends(package, forbidden):
    assert crossings(package, forbidden) == []


def test_the_check_sees_a_crossing(tmp_path):
    # The parser must catch both forms, at any depth, or the test above proves nothing.
    f = tmp_path / "m.py"
    f.write_text("import os\ndef f():\n    from harness.cell import cascade\n    import backends.flash_attn as fa\n")
    mods = [m for _, m in imported_modules(f)]
    assert "harness.cell.cascade" in mods and "backends.flash_attn" in mods
