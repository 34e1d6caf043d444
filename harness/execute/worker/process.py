"""The worker process of a ``LocalExecutor`` (harness/execute/local.py): started with "spawn", it
imports the backends' libraries on a thread (harness/execute/worker/imports.py) while it runs one case
at a time as the parent sends them, and streams an event before each phase and a row after each
cell (harness/execute/worker/messages.py). After an error that leaves the CUDA context unusable it asks
to be replaced."""

from __future__ import annotations

import dataclasses
import os
import signal
import traceback
from typing import Any

import torch

from harness.plan.memory import make_fit_check, make_fit_together
from harness.records.results import Status, Worker
from harness.plan.resume import cell_key
from harness.plan.cells import Cell, RunOptions
from harness.cell.case import iterate_case
from harness.spec import Suite
from harness.execute.worker.imports import LibraryLoader
from harness.execute.worker.messages import (CaseDone, CaseFailed, CasePartDeferred, CellStarted, LibrariesReady, PreparingCase,
                                     RestartMe, RowDone, Shutdown, WorkerReady)

# Messages of CUDA errors after which the context is unusable (sticky errors): the worker must
# be replaced, whatever the health probe says.
STICKY_CUDA_ERRORS = (
    "illegal memory access",
    "unspecified launch failure",
    "misaligned address",
    "device-side assert",
    "illegal instruction",
    "an illegal address",
    "uncorrectable ECC",
    "CUDA error: unknown error",
    "cudaErrorLaunchFailure",
    # driver-API / runtime-enum spellings (CuTe-DSL, cuda-python, Triton) of the same errors
    "CUDA_ERROR_ILLEGAL_ADDRESS",
    "CUDA_ERROR_LAUNCH_FAILED",
    "CUDA_ERROR_MISALIGNED_ADDRESS",
    "CUDA_ERROR_ILLEGAL_INSTRUCTION",
    "CUDA_ERROR_ASSERT",
    "cudaErrorIllegalAddress",
)

def _die_with_parent() -> None:
    """Linux: the worker gets SIGKILL when the parent dies, so a killed run leaves no orphan."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _context_broken(device: torch.device, reason: str) -> str | None:
    """Why this worker's CUDA context can no longer be trusted, or None."""
    reason = reason or ""
    if any(s.lower() in reason.lower() for s in STICKY_CUDA_ERRORS):
        return f"CUDA context unusable after: {reason}"
    if device.type != "cuda":
        return None
    try:
        x = torch.ones(16, device=device)
        torch.cuda.synchronize(device)
        if float(x.sum()) != 16.0:
            return "CUDA health probe returned a wrong sum"
    except Exception as e:  # any failure of a trivial kernel means the context is gone
        return f"CUDA health probe failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return None


def worker_main(conn: Any, device_name: str, suite: Suite, opts: RunOptions, budget_mib: float | None,
                 cpu_share: int, threads: int | None, warm: tuple = ()) -> None:
    try:
        _serve(conn, device_name, suite, opts, budget_mib, cpu_share, threads, warm)
    except (BrokenPipeError, ConnectionResetError, EOFError):
        # The parent is gone (an interrupted run closing its end while this worker reports
        # ready, say): nobody to tell, and no traceback on the terminal the run shared.
        return


def _serve(conn: Any, device_name: str, suite: Suite, opts: RunOptions, budget_mib: float | None,
           cpu_share: int, threads: int | None, warm: tuple) -> None:
    # Ctrl-C goes to the whole process group; the parent decides how to stop. The worker was
    # started with SIGINT blocked (LocalExecutor._start_process): ignore it (dropping one that is
    # pending), then unblock.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    _die_with_parent()
    if threads:
        torch.set_num_threads(threads)
    device = torch.device(device_name)
    opts = dataclasses.replace(opts, device=device,
                               fit_check=make_fit_check(device, opts.check, budget_mib, cpu_share),
                               fit_together=make_fit_together(device, opts.check, budget_mib, cpu_share))
    cuda_ready = False
    loader = LibraryLoader(warm, suite, opts, device)
    if warm and device.type == "cuda":
        torch.cuda.set_device(device.index if device.index is not None else 0)
        cuda_ready = True
    # Ready now; the backends' libraries import on a thread while the parent expands the suite
    # and the first cells run (harness/execute/worker/imports.py).
    loader.start()
    conn.send(WorkerReady(os.getpid()))

    def on_event(event: str, cell: Cell | None) -> None:
        if event == "prepare":
            conn.send(PreparingCase())
        else:
            assert cell is not None  # every other event names its cell
            conn.send(CellStarted(cell_key(suite, cell)))

    while True:
        try:
            if not loader.reported:
                if loader.finished:
                    conn.send(LibrariesReady(*loader.finish()))
                elif not conn.poll(0.05):
                    continue  # look again: the parent waits for LibrariesReady before it ends
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if isinstance(msg, Shutdown):
            return
        if device.type == "cuda" and not cuda_ready:
            # Only now: a standby worker must not hold a CUDA context (memory) while it waits.
            torch.cuda.set_device(device.index if device.index is not None else 0)
            cuda_ready = True
        cells, later = loader.split(msg.cells)
        broken = None
        try:
            for row in iterate_case(cells, suite, opts, on_event=on_event):
                conn.send(RowDone(row.model_copy(update={"worker": Worker(pid=os.getpid(), device=device_name)})))
                if row.status == Status.ERROR:
                    broken = _context_broken(device, row.reason)
                    if broken:
                        break
        except (BrokenPipeError, EOFError, ConnectionError):
            return  # the parent is gone
        except Exception as e:  # a harness bug in this case: report it, keep the worker
            conn.send(CaseFailed(f"{type(e).__name__}: {e}"[:500], traceback.format_exc(limit=6)))
            continue
        if broken:
            conn.send(RestartMe(broken))
            return
        if later:
            conn.send(CasePartDeferred(later))
        conn.send(CaseDone())
