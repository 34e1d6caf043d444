"""A worker's library imports on a thread, so its first cells start at once.

FlashAttention's import (the CuTe DSL behind FA4) takes seconds of a worker's start (docs/measurement.md §12):
no cell ran before it was done. Here the worker is ready
as soon as torch and its CUDA context are and imports the modules each backend declares slow
(``AttentionBackend.library_modules``) on a thread, meanwhile running the cells of every backend
whose modules are in; the rest of a case goes back to the parent's queue (``CasePartDeferred``)
and runs later, its batch made again from the same seed. A case none of whose backends is ready
waits for the imports.

The thread only imports modules: availability, feature detection and their caches stay on the
worker's main thread (``finish``, the cells' prechecks), so an import that fails on a thread
(e.g. a library that installs a signal handler) fails there uncached and is simply made again,
with its error, by the main thread. Timing stays honest while the thread runs: each sample's
launch is held behind a spin kernel and a sample whose host enqueue outlasted the hold is
retaken with a longer one (harness/timing/device.py), and the GIL is handed over every 0.1 ms
instead of 5 ms meanwhile.
"""

from __future__ import annotations

import importlib
import sys
import threading
import time
from typing import Any, Sequence

import torch

from attn_contract import AttentionBackend
from harness.plan.cells import Cell, RunOptions, backend_versions, warm_backend
from harness.spec import Suite

_SWITCH_INTERVAL_S = 1e-4  # while importing: the main thread waits at most this long for the GIL


class LibraryLoader:
    """Imports ``backends``' library modules on a thread (``start``); ``ready(backend)`` says
    whether a cell of that backend may run now; ``finish`` (main thread, once the thread is done)
    probes every backend's availability and versions for the run header."""

    def __init__(self, backends: Sequence[type[AttentionBackend]], suite: Suite, opts: RunOptions, device: torch.device):
        self.backends = list(backends)
        self.suite, self.opts, self.device = suite, opts, device
        self.pending = {b for b in self.backends if b.library_modules}
        self.import_s: dict[str, float] = {}
        self.reported = not self.backends  # nothing asked for: nothing to report
        self._thread = threading.Thread(target=self._run, name="harness-imports", daemon=True)
        self._interval = sys.getswitchinterval()

    def start(self) -> None:
        if self.pending:
            sys.setswitchinterval(_SWITCH_INTERVAL_S)
            self._thread.start()

    def _run(self) -> None:
        try:
            if self.device.type == "cuda":
                # The CUDA device is per thread: a library that touches CUDA on import must not
                # make a context on another GPU.
                torch.cuda.set_device(self.device.index if self.device.index is not None else 0)
            for b in [b for b in self.backends if b in self.pending]:  # the suite's order
                t0 = time.perf_counter()
                for module in b.library_modules:
                    try:
                        importlib.import_module(module)
                    except BaseException:  # not installed, or not on a thread: the main thread's
                        pass               # precheck imports it again and reports why
                self.import_s[b.name] = time.perf_counter() - t0
                self.pending.discard(b)
        finally:
            self.pending.clear()
            sys.setswitchinterval(self._interval)

    def finish(self) -> tuple[dict[str, float], dict[str, dict[str, Any]]]:
        """Main thread, after the imports: seconds per backend (module imports plus the first
        availability probe of its selected variants) and the run header's versions."""
        self.wait()
        versions: dict[str, dict[str, Any]] = {}
        import_s: dict[str, float] = {}
        for b in self.backends:
            probe_s = warm_backend(b, self.suite, self.opts)
            import_s[b.name] = round(self.import_s.get(b.name, 0.0) + probe_s, 4)
            try:
                versions[b.name] = backend_versions(b)
            except Exception as e:  # the cells' own prechecks report it; the header says so too
                versions[b.name] = {"available": False, "reason": f"availability() raised {type(e).__name__}"}
        self.reported = True
        return import_s, versions

    @property
    def busy(self) -> bool:
        return self._thread.is_alive()

    @property
    def finished(self) -> bool:
        return not self.pending and not self.busy

    def ready(self, backend: type) -> bool:
        return backend not in self.pending

    def wait(self) -> None:
        if self._thread.is_alive():
            self._thread.join()

    def split(self, cells: list[Cell]) -> tuple[list[Cell], list[Cell]]:
        """(cells to run now, cells to give back). Cells of backends still importing are given
        back when some of the case can run now; when none can, the worker waits for the imports
        and runs them all (a part given back is never split again)."""
        ready = [self.ready(c.backend) for c in cells]  # once: the thread may finish meanwhile
        if all(ready):
            return cells, []
        if any(ready):
            return [c for c, r in zip(cells, ready) if r], [c for c, r in zip(cells, ready) if not r]
        self.wait()
        return cells, []
