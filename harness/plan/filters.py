"""What a run's filters (--backends, --case, --variant) select, and, when they select nothing,
which one matched nothing and the closest names it could have meant."""

from __future__ import annotations

import difflib
from typing import Any

from harness import registry


class FilterError(ValueError):
    """A filter that selects nothing: one line naming the flag and the nearest names."""


def _closest(word: str, names: list[str], n: int = 3) -> str:
    near = difflib.get_close_matches(word, names, n=n, cutoff=0.4)
    return f"; closest: {', '.join(near)}" if near else ""


def family_backends(suite: Any) -> tuple[dict[str, list[str]], list[str]]:
    """A suite's ``backends_for:`` for the attention families its cases have: family -> backend
    names ("auto": every registered backend whose class declares a kind of the family, in
    registration order), and a note for each registered backend "auto" could not load."""
    from attn_contract.mla import declares_family

    out: dict[str, list[str]] = {}
    notes: list[str] = []
    loaded: dict[str, Any] = {}
    for family in suite.families():
        names = suite.backends_for.get(family)
        if names is None:
            continue
        if names != "auto":
            out[family] = list(names)
            continue
        out[family] = []
        for name in registry.known_backends():
            if name not in loaded:
                try:
                    loaded[name] = registry.resolve(name)
                except registry.BackendLookupError as e:
                    loaded[name] = None
                    notes.append(f"backends_for {family}: auto: {name} left out ({e})")
            cls = loaded[name]
            if cls is not None and declares_family(frozenset(cls.attention_kinds), family):
                out[family].append(name)
    return out, notes


def backend_families(suite: Any, backends: list[Any]) -> dict[str, frozenset[str]]:
    """backend name -> the attention families whose cases it runs, for the backends a suite's
    ``backends_for:`` picked (a backend also under ``backends:``, or named on the command line,
    runs every case and is absent)."""
    if not suite.backends_for:
        return {}
    per_family, _ = family_backends(suite)
    every = set(suite.backends or [])
    out: dict[str, frozenset[str]] = {}
    for b in backends:
        if b.name in every:
            continue
        fams = frozenset(f for f, names in per_family.items() if b.name in names)
        if fams:
            out[b.name] = fams
    return out


def backend_names(arg: str | None, suite: Any) -> list[str]:
    """The backends to run: --backends (comma-separated), else the suite's (``backends:`` and the
    ``backends_for:`` of its cases' attention families), else every registered one."""
    if not arg:
        if suite.backends_for:
            per_family, _ = family_backends(suite)
            return list(dict.fromkeys([*(suite.backends or []), *(n for ns in per_family.values() for n in ns)]))
        return list(suite.backends or registry.known_backends())
    names = [n.strip() for n in arg.split(",") if n.strip()]
    if not names:
        raise FilterError(f"--backends {arg!r}: names no backend; known: {', '.join(sorted(registry.known_backends()))}")
    return names


def empty_plan_reason(suite: Any, backends: list, opts: Any) -> str | None:
    """Why the filters leave no cell to run, or None when some cell is left."""
    from harness.plan.cells import select_cases, select_variants

    if opts.case_patterns and not select_cases(suite, opts):
        names = [c.name for c in suite.cases]
        groups = list(dict.fromkeys(c.group for c in suite.cases if c.group))
        pats = opts.case_patterns
        # A case group names every case swept from it: offer it as a glob ("llama3-8b*").
        hint = _closest(pats[0], list(dict.fromkeys([*names, *(f"{g}*" for g in groups if g not in names)])))
        shown = ", ".join(names[:5]) + (f" (+{len(names) - 5} more)" if len(names) > 5 else "")
        return (f"--case {' --case '.join(repr(p) for p in pats)}: matches none of the {len(names)} case(s) of "
                f"{suite.source}{hint or f'; its cases: {shown}'} (an exact name, or a glob such as 'decode*')")
    if backends and not any(select_variants(b, suite, opts) for b in backends):
        flt = {b.name: opts.variant_filters.get(b.name) or suite.variants.get(b.name) for b in backends}
        detail = "; ".join(f"{name}: {', '.join(f'{a}={v}' for a, v in f.items())}" for name, f in flt.items() if f)
        return f"the variant filters (--variant, the suite's variants:) match no variant of the backends run ({detail})"
    return None
