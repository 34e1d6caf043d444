"""Installed library versions against the ranges the backends were tested with
(``AttentionBackend.tested_versions``), and ``harness --version``. Versions come from the
installed distributions' metadata (importlib.metadata): no backend library is imported."""

from __future__ import annotations

import argparse
import platform
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Sequence


def installed_version(dist: str) -> str | None:
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def outside_tested(dist: str, installed: str, spec: str) -> bool:
    """True when ``installed`` is not in the PEP 440 range ``spec`` (an unparsable version is outside)."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    try:
        return not SpecifierSet(spec).contains(Version(installed), prereleases=True)
    except InvalidVersion:
        return True


def untested(backend: Any) -> list[dict[str, str]]:
    """The backend's installed libraries outside its declared tested range."""
    out = []
    for dist, spec in sorted(getattr(backend, "tested_versions", {}).items()):
        v = installed_version(dist)
        if v is not None and outside_tested(dist, v, spec):
            out.append({"dist": dist, "installed": v, "tested": spec})
    return out


def untested_note(items: list[dict[str, str]]) -> str:
    return "; ".join(f"UNTESTED {u['dist']} {u['installed']} (tested: {u['tested']})" for u in items)


def version_lines() -> list[str]:
    """harness, Python, torch and every registered backend's libraries, marked where untested.
    Loading the backend classes imports torch (their modules need it), none of their libraries."""
    lines = [f"attn-harness {installed_version('attn-harness') or 'unknown (not installed)'}",
             f"python {platform.python_version()}", f"torch {installed_version('torch') or 'not installed'}"]
    from harness import registry

    libs: dict[str, tuple[str, list[str]]] = {}
    for name in sorted(registry.known_backends()):
        try:
            cls = registry.resolve(name)
        except registry.BackendLookupError as e:
            lines.append(f"backend {name}: {str(e).splitlines()[0]}")
            continue
        for dist, spec in getattr(cls, "tested_versions", {}).items():
            libs.setdefault(dist, (spec, []))[1].append(name)
    for dist, (spec, users) in sorted(libs.items()):
        v = installed_version(dist)
        mark = "" if v is None or not outside_tested(dist, v, spec) else f"  UNTESTED (tested: {spec})"
        lines.append(f"{dist} {v or 'not installed'}{mark}  [{', '.join(users)}]")
    return lines


class VersionAction(argparse.Action):
    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kw: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="print the versions of harness, torch and each backend library, then exit")

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        print("\n".join(version_lines()))
        parser.exit()
