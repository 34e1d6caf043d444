"""A backend whose library takes as long to import as the test says: torch-math's kernels, but
its library module (plugins/slow_import_lib.py) blocks at import until a gate opens, as a real
library's import (FlashAttention's CuTe DSL: ~11 s on the H200) holds a worker. It declares that
module in ``library_modules``, so a worker imports it on its library thread
(harness/execute/worker/imports.py); ``availability()`` imports it too, as a real backend does.

The gate is the file named by ``SLOW_IMPORT_GATE``: its existence, or, with
``SLOW_IMPORT_GATE_LINES=N``, at least N lines in it (e.g. a run's results.jsonl, so the import
ends once the run has written N rows). Unset: no wait. Waits 120 s at most."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from attn_contract import Availability
from backends.torch_math import TorchMathBackend

GATE_ENV = "SLOW_IMPORT_GATE"
LINES_ENV = "SLOW_IMPORT_GATE_LINES"


def _gate_open(path: Path, lines: int | None) -> bool:
    if lines is None:
        return path.exists()
    try:
        return len(path.read_text().splitlines()) >= lines
    except OSError:
        return False


def wait_for_gate() -> None:
    raw = os.environ.get(GATE_ENV)
    if not raw:
        return
    lines = int(os.environ[LINES_ENV]) if os.environ.get(LINES_ENV) else None
    deadline = time.monotonic() + 120
    while not _gate_open(Path(raw), lines) and time.monotonic() < deadline:
        time.sleep(0.02)


class GatedImportBackend(TorchMathBackend):
    name = "gated-import"
    description = "torch-math whose library module's import waits for a gate (a slow library import)"
    library_modules = ("plugins.slow_import_lib",)

    @classmethod
    def availability(cls, variant: dict[str, Any] | None = None) -> Availability:
        import plugins.slow_import_lib  # noqa: F401  (the library this backend needs)
        return super().availability(variant)
