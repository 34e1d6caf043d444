"""The layout is the architecture: harness/ and backends/ share only attn_contract/; no import
cycle; no module takes another module's ``_private`` name; harness/ keeps at most 12 modules at its
top (the rest live in the pipeline's packages, docs/architecture.md).

Parses every import (module level or inside a function) with ast, so a crossing anywhere fails.
Imports under ``if TYPE_CHECKING:`` never run and are left out of the cycle check."""

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


# ------------------------------------------------------------------------------ cycles, privates
PACKAGES = ("attn_contract", "backends", "harness")
TOP_LEVEL_LIMIT = 12


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def all_modules(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    return {module_name(root, p): p for top in packages for p in sorted((root / top).rglob("*.py"))}


def _type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def runtime_imports(path: Path, name: str) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement that can run (any depth), without ``if TYPE_CHECKING:`` blocks."""
    found: list[ast.Import | ast.ImportFrom] = []

    def walk(nodes: list[ast.AST]) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and _type_checking(node):
                walk(node.orelse)
                continue
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found.append(node)
            walk(list(ast.iter_child_nodes(node)))

    walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)).body)
    return found


def _absolute(node: ast.ImportFrom, name: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = name if is_package else name.rpartition(".")[0]
    for _ in range(node.level - 1):
        base = base.rpartition(".")[0]
    return f"{base}.{node.module}" if node.module else base


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the project modules it imports (``from pkg import name`` is pkg.name when that is
    a module, else pkg)."""
    def resolve(dotted: str) -> str | None:
        while dotted and dotted not in modules:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges: set[str] = set()
        for node in runtime_imports(path, name):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = _absolute(node, name, path.name == "__init__.py")
                targets = [f"{base}.{a.name}" for a in node.names]
            edges |= {m for m in map(resolve, targets) if m and m != name}
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return found


def private_imports(modules: dict[str, Path], root: Path = ROOT) -> list[str]:
    """``from other_module import _name`` (anywhere, TYPE_CHECKING included) where ``_name`` is not
    itself a module."""
    bad = []
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = _absolute(node, name, path.name == "__init__.py")
            if base.split(".")[0] not in PACKAGES:
                continue
            for a in node.names:
                if a.name.startswith("_") and not a.name.startswith("__") and f"{base}.{a.name}" not in modules:
                    bad.append(f"{path.relative_to(root)}:{node.lineno} imports {a.name} from {base}")
    return sorted(set(bad))


def test_no_import_cycles():
    found = cycles(import_graph(all_modules(ROOT)))
    assert not found, "import cycles (move what both need one layer down):\n" + "\n".join(map(" <-> ".join, found))


def test_no_module_imports_another_modules_private_name():
    assert private_imports(all_modules(ROOT)) == []


def test_at_most_twelve_modules_directly_under_harness():
    top = sorted(p.name for p in (ROOT / "harness").glob("*.py"))
    assert len(top) <= TOP_LEVEL_LIMIT, f"{len(top)} modules directly under harness/ (put new ones in a package): {top}"


def test_every_harness_package_says_its_job():
    # A package's __init__ starts with a docstring: its one line in docs/architecture.md.
    missing = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "harness").rglob("__init__.py"))
               if ast.get_docstring(ast.parse(p.read_text(encoding="utf-8"))) is None]
    assert missing == []


def test_the_checks_see_a_cycle_and_a_private_import(tmp_path):
    # Against a small tree made for the purpose: a lazy (function-level) import still closes a
    # cycle, a TYPE_CHECKING import does not, and a private name taken from a sibling is caught.
    pkg = tmp_path / "harness"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from harness.sub import b\n_x = 1\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from harness.a import _x\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from harness import a\n")
    (pkg / "d.py").write_text("from harness import c\n")
    mods = all_modules(tmp_path, ("harness",))
    assert cycles(import_graph(mods)) == [["harness.a", "harness.sub.b"]]
    assert private_imports(mods, tmp_path) == ["harness/sub/b.py:2 imports _x from harness.a"]


# ------------------------------------------------------------------------------ readers read records
READERS = ("harness/analysis", "harness/report")
LIVE_CODE = ("harness.registry", "backends", "torch")  # what resolves or runs a backend class


def reader_crossings(root: Path = ROOT) -> list[str]:
    """Imports (module level or in a function) of the registry, a backend or torch by a reader:
    recommend, compare and the report read rows and run.json (docs/architecture.md)."""
    bad = []
    for package in READERS:
        for path in sorted((root / package).rglob("*.py")):
            for line, mod in imported_modules(path):
                if any(mod == f or mod.startswith(f + ".") for f in LIVE_CODE):
                    bad.append(f"{path.relative_to(root)}:{line} imports {mod}")
    return bad


def test_readers_never_import_the_registry_a_backend_or_torch():
    assert reader_crossings() == []


def test_the_reader_check_sees_a_registry_import(tmp_path):
    (tmp_path / "harness" / "report").mkdir(parents=True)
    (tmp_path / "harness" / "analysis").mkdir()
    (tmp_path / "harness" / "report" / "x.py").write_text("def f():\n    from harness import registry\n")
    (tmp_path / "harness" / "analysis" / "y.py").write_text("import torch.nn\n")
    assert reader_crossings(tmp_path) == ["harness/analysis/y.py:1 imports torch.nn",
                                          "harness/report/x.py:2 imports harness.registry"]


# ------------------------------------------------------------------------------ run options
# `harness run`'s flags are read once, by the entry points, and resolved into one
# harness.plan.options.RunPlan that flows down (docs/architecture.md, "Data flow").
RUN_FLAGS = "harness.cli.run_flags"
RUN_FLAGS_READERS = {  # the entry points, and the package that re-exports RunFlags
    "harness/cli/__init__.py", "harness/cli/commands/run.py", "harness/pytest_plugin.py",
    "harness/api.py", "harness/cli/commands/gate.py",  # RunFlags.from_options: keywords, not an argv
    "harness/cli/commands/repro.py",  # pick_device only: `harness repro`'s own --device
}


def run_flags_importers(root: Path) -> list[str]:
    found = []
    for top in PACKAGES:
        for path in sorted((root / top).rglob("*.py")):
            rel = str(path.relative_to(root).as_posix())
            if rel == "harness/cli/run_flags.py":
                continue
            for line, mod in imported_modules(path):
                if mod == RUN_FLAGS or mod.startswith(RUN_FLAGS + "."):
                    found.append(f"{rel}:{line}")
                    break
    return found


def test_only_the_entry_points_import_run_flags():
    assert [f for f in run_flags_importers(ROOT) if f.split(":")[0] not in RUN_FLAGS_READERS] == []


@pytest.mark.parametrize("package", ["harness/plan", "harness/execute", "harness/cell"])
def test_the_pipeline_below_the_entry_points_never_imports_the_cli(package):
    # plan/, execute/ and cell/ take a RunPlan's parts (RunOptions, ExecOptions), not flags.
    assert crossings(package, "harness.cli") == []


def test_the_run_flags_check_sees_an_import(tmp_path):
    (tmp_path / "harness" / "plan").mkdir(parents=True)
    (tmp_path / "harness" / "plan" / "x.py").write_text(
        "def f():\n    from harness.cli.run_flags import RunFlags\n")
    (tmp_path / "harness" / "plan" / "y.py").write_text("from harness.cli import run_flags\n")
    assert run_flags_importers(tmp_path) == ["harness/plan/x.py:2", "harness/plan/y.py:1"]
