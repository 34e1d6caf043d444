"""Finding backends: the ``attn_harness.backends`` entry-point group, and ``module:Class`` specs.

Built-ins are declared in that group (pyproject.toml) exactly as a third-party plugin is, so
the core holds no list of backend names. Entry points are named by import path, so listing
them never imports a GPU library until it is asked about; a backend whose module fails to
import is still listed, unavailable, with the import error as its reason.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from attn_contract import AttentionBackend

ENTRY_POINT_GROUP = "attn_harness.backends"


class BackendLookupError(Exception):
    """An unknown backend name or a ``module:Class`` spec that does not load."""


def load_spec(spec: str) -> type[AttentionBackend]:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise BackendLookupError(f"backend spec {spec!r} is not of the form module:Class")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # any import failure is the user's to see, as one line
        raise BackendLookupError(f"cannot import {module_name!r} for backend {spec!r}: {type(e).__name__}: {e}") from None
    cls = getattr(module, attr, None)
    if not (isinstance(cls, type) and issubclass(cls, AttentionBackend)):
        raise BackendLookupError(f"{spec!r} is not an AttentionBackend subclass")
    return cls


def known_backends() -> dict[str, str]:
    """name -> ``module:Class`` for every backend in the entry-point group (built-ins and plugins)."""
    found: dict[str, str] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(ep.name, ep.value)
    return found


def resolve(name: str) -> type[AttentionBackend]:
    """A backend class from a registered name or a ``module:Class`` spec."""
    known = known_backends()
    if name in known:
        return load_spec(known[name])
    if ":" in name:
        return load_spec(name)
    if not known:
        # The group is read from installed metadata: a bare source checkout has none.
        raise BackendLookupError(
            f"unknown backend {name!r}: no backend is registered in entry-point group {ENTRY_POINT_GROUP!r} "
            "(install the project with `pip install -e .`), or give module:Class"
        )
    raise BackendLookupError(f"unknown backend {name!r}; known: {', '.join(sorted(known))} (or give module:Class)")


def resolve_many(names: list[str]) -> list[type[AttentionBackend]]:
    out = []
    for n in names:
        cls = resolve(n)
        if cls not in out:
            out.append(cls)
    return out
