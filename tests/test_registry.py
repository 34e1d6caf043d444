"""The registry finds built-ins through the same entry-point group a plugin uses, lazily."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from attn_contract import AttentionBackend
from harness import registry

ROOT = Path(__file__).resolve().parent.parent


def declared_builtins() -> dict[str, str]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return data["project"]["entry-points"][registry.ENTRY_POINT_GROUP]


def test_builtins_come_from_the_entry_point_group():
    from importlib.metadata import entry_points

    declared = declared_builtins()
    assert len(declared) >= 7
    installed = {ep.name for ep in entry_points(group=registry.ENTRY_POINT_GROUP)}
    stale = sorted(set(declared) - installed)
    if stale:  # the environment's metadata predates pyproject.toml, not a registry bug
        pytest.skip(f"installed entry points lack {stale}: re-run `pip install -e .`")
    known = registry.known_backends()
    for name, spec in declared.items():
        assert known.get(name) == spec, f"{name} declared in pyproject.toml but not found through the group"
        cls = registry.resolve(name)
        assert issubclass(cls, AttentionBackend) and cls.name == name


# Literals in harness/ allowed to be backend names, each with why (keep this short).
NAME_SCAN_ALLOWED: dict[str, set[str]] = {
    # A measurement script's default: docs/conformance.md's calibration table is of these two.
    "harness/tools/calibrate.py": {"torch-math,sdpa"},
}
# Folders outside the core: harness/tools/diag/ holds measurement diagnostics that exist to time named
# libraries against the harness (`harness diag NAME`); nothing in the run path imports them.
NAME_SCAN_EXEMPT_DIRS = ("harness/tools/diag/",)


def _code_strings(tree: ast.AST) -> list[tuple[int, str]]:
    """String constants used as values: docstrings and argparse help= texts left out (prose)."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            skip.add(id(body[0].value))
        if isinstance(node, ast.keyword) and node.arg == "help":
            skip.update(id(n) for n in ast.walk(node.value))
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in skip]


def test_core_source_names_no_backend():
    # The core never names a backend: no string in harness/ points into backends/, and none is a
    # backend's name or a list of names (a branch, a default, a table key); prose may mention them.
    names = set(declared_builtins())
    found = []
    for path in sorted((ROOT / "harness").rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        if rel.startswith(NAME_SCAN_EXEMPT_DIRS):
            continue
        for line, s in _code_strings(ast.parse(path.read_text())):
            parts = [p.strip() for p in s.split(",")]
            is_names = bool(s.strip()) and all(p in names for p in parts)
            if (is_names or s.startswith("backends.")) and s not in NAME_SCAN_ALLOWED.get(rel, set()):
                found.append(f"{rel}:{line}: {s!r}")
    assert not found, "backend names in the core (read them from the registry or a backend's declaration):\n" + \
        "\n".join(found)


def test_the_name_scan_sees_a_name_in_code():
    tree = ast.parse('def f(b):\n    """flash-attn in a docstring is prose."""\n    return b == "flash-attn"\n')
    assert [s for _, s in _code_strings(tree)] == ["flash-attn"]


def test_listing_names_imports_no_backend_module():
    code = (
        "import sys; from harness import registry; names = registry.known_backends(); "
        "loaded = [m for m in sys.modules if m.startswith(('backends.', 'flash_attn', 'flashinfer'))]; "
        "print(len(names), loaded)"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    count, loaded = r.stdout.strip().split(" ", 1)
    assert int(count) >= 7 and loaded == "[]"


def test_module_class_specs_still_resolve_and_unknown_names_are_one_clear_error():
    assert registry.resolve("backends.torch_math:TorchMathBackend").name == "torch-math"
    with pytest.raises(registry.BackendLookupError, match="unknown backend 'nope'; known: .*torch-math"):
        registry.resolve("nope")


def test_the_run_path_does_not_import_the_diagnostics():
    # The name scan skips harness/tools/diag/ because nothing but its command (cli/commands/diag.py) reaches it.
    users = []
    for path in sorted((ROOT / "harness").rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        if rel.startswith(NAME_SCAN_EXEMPT_DIRS) or rel == "harness/cli/commands/diag.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            mods = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            users += [f"{rel}: {m}" for m in mods if m == "harness.tools.diag" or m.startswith("harness.tools.diag.")]
    assert not users, users
