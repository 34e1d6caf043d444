"""Report sections: every module here is imported, and each registers its sections with
``@section`` (harness.report.core). Adding a section = adding one module to this folder."""

from __future__ import annotations

import importlib
import pkgutil

for _mod in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    importlib.import_module(f"{__name__}.{_mod}")
