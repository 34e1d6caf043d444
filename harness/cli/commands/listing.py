"""`harness list`: every backend, whether it is available here and why."""

from __future__ import annotations

import argparse
import json
import re
from typing import Any
from rich.markup import escape
from rich.table import Table

from harness.records.versions import untested, untested_note
from harness.cli.common import console, registry, terminal, variant_label


_NOT_INSTALLED = re.compile(r"cannot import ([\w.]+): ModuleNotFoundError: No module named '[\w.]+'")


def add_parser(sub: Any) -> None:
    ls = sub.add_parser("list", help="every backend, whether it is available here and why (--verbose: capabilities)")
    ls.add_argument("--verbose", "-v", action="store_true", help="one row per variant, with its declared capabilities")
    ls.add_argument("--json", action="store_true", help="everything --verbose shows, as JSON")
    ls.set_defaults(func=run)


def _axes_label(variants: list[dict[str, Any]]) -> str:
    """Variants as their axes' values ("fa_version=2,3"), or "-" for a backend without axes."""
    axes: dict[str, list[str]] = {}
    for v in variants:
        for k, val in v.items():
            if str(val) not in axes.setdefault(k, []):
                axes[k].append(str(val))
    return "\n".join(f"{k}: {', '.join(vals)}" for k, vals in axes.items()) or "-"


def list_backends() -> list[dict[str, Any]]:
    """Every registered backend with each variant's availability and capabilities (``list --json``)."""
    out = []
    for name, spec in sorted(registry.known_backends().items()):
        entry: dict[str, Any] = {"name": name, "spec": spec, "error": None, "variants": [], "untested": []}
        try:
            cls = registry.resolve(name)  # the checks a run applies (one name, no duplicates)
        except registry.BackendLookupError as e:
            entry["error"] = str(e)
            out.append(entry)
            continue
        entry["untested"] = untested(cls)  # installed libraries outside the backend's tested range
        for v in cls.variants():
            a = cls.availability(v)
            entry["variants"].append({"variant": v, "label": variant_label(v), "available": a.available,
                                      "reason": a.reason, "versions": dict(a.versions),
                                      "capabilities": cls.capabilities(v).describe()})
        out.append(entry)
    return out


def run(args: argparse.Namespace) -> int:
    backends = list_backends()
    if args.json:
        print(json.dumps(backends, indent=1, default=str))
        return 0
    if args.verbose:
        terminal.print_backends_verbose(backends, console())
        return 0
    t = Table(title="Backends (capabilities: harness list --verbose)", expand=True)
    # Names never wrap; the reasons take what is left (80 columns in a pipe or a CI log).
    t.add_column("backend", no_wrap=True)
    t.add_column("variants", overflow="fold", ratio=1)
    t.add_column("ok", no_wrap=True)
    t.add_column("why not / versions", ratio=1, overflow="fold")  # a long token folds, never "…"
    for b in backends:
        if b["error"]:
            t.add_row(escape(b["name"]), "-", "[red]no", escape(b["error"]))
            continue
        # Compact: variants that share an answer share a row; the backend is named once.
        groups: dict[tuple[bool, str], list[dict[str, Any]]] = {}
        for v in b["variants"]:
            info = v["reason"] if not v["available"] else ", ".join(f"{k} {x}" for k, x in v["versions"].items())
            info = _NOT_INSTALLED.sub(r"\1 not installed", info)  # the full text: --verbose
            info = "; ".join(x for x in (info, untested_note(b["untested"])) if x)
            groups.setdefault((v["available"], info), []).append(v["variant"])
        for i, ((ok, info), vs) in enumerate(groups.items()):
            t.add_row(escape(b["name"]) if i == 0 else "", escape(_axes_label(vs)), "[green]yes" if ok else "[red]no",
                      escape(info))
    console().print(t)
    return 0
