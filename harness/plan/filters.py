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


def backend_names(arg: str | None, suite: Any) -> list[str]:
    """The backends to run: --backends (comma-separated), else the suite's, else every registered one."""
    if not arg:
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
