"""Finding backends: the ``attn_harness.backends`` entry-point group, and ``module:Class`` specs.

Built-ins are declared in that group (pyproject.toml) exactly as a third-party plugin is, so
the core holds no list of backend names. Entry points are named by import path, so listing
them never imports a GPU library until it is asked about; a backend whose module fails to
import is still listed, unavailable, with the import error as its reason.
"""

from __future__ import annotations

import functools
import importlib
import re
from importlib.metadata import entry_points
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the class itself imports torch: loaded when a backend is (readers of rows need neither)
    from attn_contract import AttentionBackend

ENTRY_POINT_GROUP = "attn_harness.backends"
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")  # as a suite's backends: entries


class BackendLookupError(Exception):
    """An unknown backend name or a ``module:Class`` spec that does not load."""


def load_spec(spec: str) -> type[AttentionBackend]:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise BackendLookupError(f"backend spec {spec!r} is not of the form module:Class")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # any import failure is the user's to see, as one line
        hint = " (the module must be importable: put its folder on PYTHONPATH or install its package)" \
            if isinstance(e, ModuleNotFoundError) and e.name and module_name.startswith(e.name) else ""
        raise BackendLookupError(
            f"cannot import {module_name!r} for backend {spec!r}: {type(e).__name__}: {e}{hint}") from None
    if not hasattr(module, attr):
        import difflib

        near = difflib.get_close_matches(attr, [n for n in dir(module) if not n.startswith("_")], n=3)
        raise BackendLookupError(f"backend {spec!r}: module {module_name!r} has no attribute {attr!r}"
                                 + (f"; closest: {', '.join(near)}" if near else ""))
    cls = getattr(module, attr)
    from attn_contract import AttentionBackend

    if not (isinstance(cls, type) and issubclass(cls, AttentionBackend)):
        what = f"class {cls.__qualname__}" if isinstance(cls, type) else f"a {type(cls).__name__}"
        raise BackendLookupError(f"{spec!r} is {what}, not an AttentionBackend subclass")
    _check_class(cls, spec)
    return cls


def _check_class(cls: type[AttentionBackend], spec: str) -> None:
    """What the harness needs of a backend class before it can name a row after it."""
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        got = "is missing" if name is None else f"is {name!r}"
        raise BackendLookupError(
            f"backend {spec!r}: class {cls.__qualname__} attribute `name` {got}; set a class attribute such as"
            " name = \"my-kernel\" (letters, digits, '.', '_', '-'): it names the backend in --backends,"
            " result rows and reproducers")
    missing = sorted(getattr(cls, "__abstractmethods__", ()))
    if missing:
        raise BackendLookupError(
            f"backend {spec!r}: class {cls.__qualname__} does not implement {', '.join(missing)}"
            " (required by attn_contract.AttentionBackend)")


@functools.lru_cache(maxsize=1)
def _plugin_entry_points() -> tuple[tuple[str, str, str], ...]:
    # Scanning every installed distribution costs ~7 ms; rows name their backend through this,
    # so it was paid once per row. Installed plugins do not change within a process.
    return tuple((ep.name, ep.value, getattr(getattr(ep, "dist", None), "name", None) or "?")
                 for ep in entry_points(group=ENTRY_POINT_GROUP))


def _registrations() -> dict[str, list[str]]:
    """name -> every distinct ``module:Class`` registered under it, with the package that did."""
    found: dict[str, dict[str, str]] = {}
    for name, value, dist in _plugin_entry_points():
        found.setdefault(name, {}).setdefault(value, dist)
    return {name: [f"{value} (package {dist})" for value, dist in values.items()] for name, values in found.items()}


def known_backends() -> dict[str, str]:
    """name -> ``module:Class`` for every backend in the entry-point group (built-ins and plugins).
    A name registered twice maps to its first registration here; ``resolve`` rejects it."""
    found: dict[str, str] = {}
    for name, value, _ in _plugin_entry_points():
        found.setdefault(name, value)
    return found


def resolve(name: str) -> type[AttentionBackend]:
    """A backend class from a registered name or a ``module:Class`` spec.

    One name everywhere: the entry-point name must equal the class's ``name`` (rows and
    reproducers use the latter), no two registrations may share a name, and a ``module:Class``
    spec may not take a registered backend's name (its rows would pass for that backend's)."""
    known = known_backends()
    if name in known:
        regs = _registrations()[name]
        if len(regs) > 1:
            raise BackendLookupError(
                f"backend name {name!r} is registered {len(regs)} times in entry-point group {ENTRY_POINT_GROUP!r}:"
                f" {'; '.join(regs)}. One name, one backend: give the plugin its own entry-point name and class `name`")
        cls = load_spec(known[name])
        if cls.name != name:
            raise BackendLookupError(
                f"entry point {name!r} = {known[name]!r} loads a class whose `name` is {cls.name!r}: make the"
                " entry-point name and the class's `name` the same (rows, --backends and reproducers use one name)")
        return cls
    if ":" in name:
        cls = load_spec(name)
        if cls.name in known and load_spec(known[cls.name]) is not cls:
            raise BackendLookupError(
                f"backend {name!r} is named {cls.name!r}, which is the registered backend {known[cls.name]!r}:"
                " give it a `name` of its own (its rows and reproducers would be taken for that backend's)")
        return cls
    if not known:
        # The group is read from installed metadata: a bare source checkout has none.
        raise BackendLookupError(
            f"unknown backend {name!r}: no backend is registered in entry-point group {ENTRY_POINT_GROUP!r} "
            "(install the project with `pip install -e .`), or give module:Class"
        )
    raise BackendLookupError(f"unknown backend {name!r}; known: {', '.join(sorted(known))} (or give module:Class)")


def resolve_many(names: list[str]) -> list[type[AttentionBackend]]:
    out: list[type[AttentionBackend]] = []
    given: dict[str, str] = {}
    for n in names:
        cls = resolve(n)
        if cls in out:
            continue
        if cls.name in given:  # two classes, one name: their rows would share keys
            raise BackendLookupError(f"backends {given[cls.name]!r} and {n!r} are both named {cls.name!r};"
                                     " every backend in a run needs its own name")
        given[cls.name] = n
        out.append(cls)
    return out
