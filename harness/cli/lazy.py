"""Deferred imports for the command line: `harness --help` and `harness --version` answer
without loading torch, pandas or the backend registry (each costs a second or more)."""

from __future__ import annotations

import importlib
from typing import Any, Callable


class LazyModule:
    """Stands for a module; imports it on the first attribute read."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        return getattr(importlib.import_module(self._name), attr)

    def __repr__(self) -> str:
        return f"<lazy module {self._name}>"


def lazy_function(module: str, name: str) -> Callable[..., Any]:
    """A function of ``module``, imported when first called."""

    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    return call


class LazyText(str):
    """Help text computed only when argparse formats it (``harness run --help``), so building
    the parser imports nothing heavy."""

    _make: Callable[[], str]

    def __new__(cls, make: Callable[[], str]) -> "LazyText":
        obj = super().__new__(cls, "(computed)")
        obj._make = make
        return obj

    def __mod__(self, params: Any) -> str:
        return self._make() % params

    def strip(self, chars: str | None = None) -> str:
        return self._make().strip(chars)
