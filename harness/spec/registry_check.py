"""The checks of a suite that need the backend registry: names under ``backends:`` and
``variants:`` (and ``--variant`` filters) must be registered backends, and every axis and value
must exist. ``harness validate`` and ``harness run`` call the same function, so a suite that
validates never fails to start, and each error names the file and the field."""

from __future__ import annotations

from typing import Any

from attn_contract import AttentionBackend
from harness import registry
from harness.spec import SpecError, Suite


def variant_filter_problem(backend: type[AttentionBackend], filters: dict[str, list[Any]]) -> str | None:
    """Why ``filters`` (axis -> allowed values) selects no variant of ``backend``, or None."""
    axes = backend.variant_axes
    for axis, allowed in filters.items():
        if axis not in axes:
            have = ", ".join(axes) if axes else "none (it has one variant)"
            return f"{backend.name} has no variant axis {axis!r}; its axes: {have}"
        values = {str(v) for v in axes[axis]}
        unknown = [x for x in allowed if str(x) not in values]
        if unknown:
            return (f"{axis}={','.join(map(str, unknown))}: not a value of {backend.name}'s axis {axis!r}"
                    f" (values: {', '.join(map(str, axes[axis]))})")
    if not any(all(str(v.get(a)) in {str(x) for x in allowed} for a, allowed in filters.items())
               for v in backend.variants()):
        return f"no variant of {backend.name} has all of {filters}"
    return None


def _known() -> str:
    return ", ".join(sorted(registry.known_backends()))


def check_suite_backends(suite: Suite) -> None:
    """SpecError naming ``suite.source`` and the field for the first bad backend reference."""
    src = suite.source or "<suite>"
    for i, name in enumerate(suite.backends or []):
        try:
            registry.resolve(name)
        except registry.BackendLookupError as e:
            raise SpecError(f"{src}: field backends[{i}]: {e}") from None
    for family, names in suite.backends_for.items():
        for i, name in enumerate([] if names == "auto" else names):
            try:
                registry.resolve(name)
            except registry.BackendLookupError as e:
                raise SpecError(f"{src}: field backends_for.{family}[{i}]: {e}") from None
    for name, filters in suite.variants.items():
        if name not in registry.known_backends():
            raise SpecError(f"{src}: field variants.{name}: unknown backend {name!r}; known: {_known()}")
        try:
            cls = registry.resolve(name)
        except registry.BackendLookupError as e:
            raise SpecError(f"{src}: field variants.{name}: {e}") from None
        problem = variant_filter_problem(cls, filters)
        if problem:
            raise SpecError(f"{src}: field variants.{name}: {problem}")
