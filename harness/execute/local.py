"""Running a suite's cells so that no backend can take the run down with it.

Worker model (docs/robustness.md): the parent process owns the results file and a queue of
cases; each device slot (``--devices``, default one slot on ``--device``) holds one worker
process started with the "spawn" context (CUDA does not survive fork). The parent sends a
worker one case and the cells of it still to run; the worker generates the batch and the
reference once, runs the cells and streams back an event before each phase (so the parent
knows what is in flight) and a row after each cell. Rows are written and fsynced by the
parent as they arrive. The messages are the typed dataclasses below (``RunCase``/``Shutdown``
one way, ``WorkerReady``, ``PreparingCase``, ``CellStarted``, ``RowDone``, ``CaseDone``,
``CaseFailed``, ``RestartMe`` the other); the parent tracks each slot's ``SlotPhase``.

- The worker dies (segfault, abort, OOM-kill): the cell in flight gets ``error`` with the
  signal ("worker died: SIGSEGV"); the worker is replaced and the case's remaining cells go
  to the new one.
- A cell (or a case's batch/reference generation) runs past ``cell_timeout``: the worker is
  killed, the cell gets ``timeout``, and the rest continues in a new worker.
- A cell runs out of memory, or (isolated) past ``cell_timeout``: it is retried once after the
  rest of its case, in a fresh worker (harness/execute/retry.py); the second attempt's row stands.
- A cell errors on a GPU and the CUDA context no longer works (illegal memory access,
  device-side assert, ...): the worker reports it and exits after sending the row; it is
  replaced before the next cell.

``InProcessExecutor`` (``isolation=False``) runs everything in this process (no timeouts, no
crash protection). Both implement harness/execute/api.py's ``Executor``; the worker's own side
is harness/execute/worker/process.py.
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing as mp
import os
import signal
import time
from dataclasses import dataclass, field
from enum import StrEnum
from multiprocessing.connection import wait
from typing import Any, Callable, Generator, Iterator, Sequence

import torch

from harness import interrupts
from harness.plan.balance import CaseQueues
from harness.plan.memory import make_fit_check, make_fit_together
from harness.records.results import ResultRow, Status, Worker
from harness.plan.cells import Cell, RunOptions, cell_timed, group_by_case
from harness.cell.case import iterate_case
from harness.cell.accounting import row_busy_s
from harness.cell.prepare import status_row
from harness.execute.worker.boot import Prestarted, discard, start_process
from harness.spec import Suite
from harness.plan.resume import cell_key
from harness.execute.worker.messages import (CaseDone, CaseFailed, CasePartDeferred, CellStarted, LibrariesReady, PreparingCase,
                                     RestartMe, RowDone, RunCase, Setup, Shutdown, WorkerReady)
from harness.execute.worker.process import worker_main
from harness.execute.retry import RETRIED_IN_PROCESS, free_memory, second_attempt, wants_retry

log = logging.getLogger(__name__)  # -v / -vv (harness/cli/flags.py): workers and rows

STARTUP_TIMEOUT_S = 300.0  # importing torch and a GPU library on a cold machine
MAX_FAILED_STARTS = 3  # a slot whose worker dies this often without progress is given up


class SlotPhase(StrEnum):
    """What a device slot's worker is doing, as far as the parent knows."""

    IDLE = "idle"  # no case
    SENT = "sent"  # a case was sent; the worker runs its availability/support/memory checks
    PREPARE = "prepare"  # generating the case's batch and reference
    CELL = "cell"  # running one cell (``_Slot.current``)
    RESTART = "restart"  # the worker asked to be replaced


@dataclass
class ExecOptions:
    devices: list[str]
    isolation: bool = True
    cell_timeout: float | None = None  # seconds; None or 0 = no limit
    memory_budget_mib: float | None = None
    # Keep the workers between run() calls (a --ray actor runs one case per call: the worker's
    # imports, CUDA context and compiled kernels are paid once); close() ends them.
    keep_workers: bool = False


def default_cell_timeout(device_type: str) -> float:
    """GPU cells include JIT compilation on first call; CPU cells are small by construction."""
    return 600.0 if device_type == "cuda" else 120.0


# ------------------------------------------------------------------ parent side
@dataclass
class _Slot:
    index: int
    device: str
    opts: RunOptions  # with this slot's device, for rows the parent writes itself
    proc: Any = None
    conn: Any = None
    pid: int | None = None
    ready: bool = False
    libraries_pending: bool = False  # asked to import libraries, LibrariesReady not yet received
    started_at: float = 0.0
    cells: list[Cell] = field(default_factory=list)  # cells of the current case not yet reported
    phase: SlotPhase = SlotPhase.IDLE
    current: tuple | None = None  # the running cell's key (phase CELL)
    deadline: float | None = None
    failed_starts: int = 0
    last_failure: str = ""
    dead: bool = False
    # Accounting (run.json "workers"): first start to ready, library imports, time in rows.
    spawned_at: float | None = None
    ready_s: float | None = None
    import_s: dict[str, float] = field(default_factory=dict)
    busy_s: float = 0.0
    cases_seen: set = field(default_factory=set)
    retry: list[Cell] = field(default_factory=list)  # cells of the current case to retry in a fresh worker


def _log_rows(rows: Iterator[ResultRow]) -> Iterator[ResultRow]:
    for row in rows:
        log.debug("row %s / %s%s: %s%s", row.case, row.backend, f" [{row.variant_label}]" if row.variant_label else "",
                  row.status, f" ({row.reason})" if row.reason else "")
        yield row


class InProcessExecutor:
    """``--no-isolation``: the cells run in this process, one case after another (no worker, no
    timeout, no crash protection), with the memory planner (harness.execute.api.Executor)."""

    reports_versions = False  # the parent probes the versions itself
    t_all_ready: float | None = None

    def __init__(self, suite: Suite, opts: RunOptions, exec_opts: ExecOptions):
        self.suite, self.opts, self.exec_opts = suite, opts, exec_opts
        self.backend_versions: dict[str, dict[str, Any]] = {}

    def start(self, backends: Sequence[type] = ()) -> None:
        pass  # nothing to start: the first cell imports its library here

    def run(self, cells: list[Cell], on_start: Callable[[Cell], None] | None = None) -> Generator[ResultRow, None, None]:
        cases = group_by_case(cells)
        if not cases:
            return
        log.info("%d cell(s) in %d case(s), %s", len(cells), len(cases), "in this process")
        yield from _log_rows(self._rows(cases, on_start))

    def _rows(self, cases: list[list[Cell]], on_start: Callable[[Cell], None] | None) -> Iterator[ResultRow]:
        device = torch.device(self.exec_opts.devices[0])
        if device.type == "cuda":
            # As in the worker: kernels, graph capture and streams follow the current device.
            torch.cuda.set_device(device.index if device.index is not None else 0)
        opts = dataclasses.replace(self.opts, device=device,
                                   fit_check=make_fit_check(device, self.opts.check, self.exec_opts.memory_budget_mib),
                                   fit_together=make_fit_together(device, self.opts.check,
                                                                  self.exec_opts.memory_budget_mib))
        for case_cells in cases:
            interrupts.check()  # a Ctrl-C whose exception a library swallowed
            first: dict[tuple, ResultRow] = {}
            for row in iterate_case(case_cells, self.suite, opts, on_start=on_start):
                if wants_retry(row, set(first)):
                    first[row.key] = row  # retried after the case, its memory freed
                else:
                    yield row
            if first:
                free_memory(device)
                again = [c for c in case_cells if cell_key(self.suite, c) in first]
                for row in iterate_case(again, self.suite, opts, on_start=on_start):
                    yield second_attempt(row, first[row.key], RETRIED_IN_PROCESS)

    def placement(self) -> str:
        return f"{torch.device(self.exec_opts.devices[0])} (in-process)"

    def header_fields(self) -> dict[str, Any]:
        return {"workers": []}  # no worker process: run.json says so

    def close(self) -> None:
        pass


class LocalExecutor:
    """Isolated worker processes, one per ``--devices`` entry, cases spread over them (see the
    module docstring; harness.execute.api.Executor). ``isolation=False`` hands the cells to
    ``InProcessExecutor``."""

    def __init__(self, suite: Suite, opts: RunOptions, exec_opts: ExecOptions):
        self.suite = suite
        self.opts = opts
        self.exec_opts = exec_opts
        self.mp_context = mp.get_context("spawn")
        self.slots: list[_Slot] = []
        self.restarts = 0
        self.queue: CaseQueues | None = None
        # Standby workers (one per device, started at the first restart) so that replacing a
        # crashed worker does not wait for Python, torch and the libraries to import again.
        self.spares: dict[str, tuple[Any, Any]] = {}
        self.warm: tuple = ()  # backends whose libraries the first workers import at start
        self.t_spawned: float | None = None
        self.t_all_ready: float | None = None
        self.t_done: float | None = None
        self.backend_versions: dict[str, dict[str, Any]] = {}  # from the first ready worker
        self.prestarted: list[Prestarted] = []  # adopt(): workers started before torch was imported
        self.first_attempts: dict[tuple, ResultRow] = {}  # resource errors retried (harness/execute/retry.py)

    @property
    def reports_versions(self) -> bool:
        return self.exec_opts.isolation

    def run(self, cells: list[Cell], on_start: Callable[[Cell], None] | None = None) -> Generator[ResultRow, None, None]:
        if not self.exec_opts.isolation:
            yield from InProcessExecutor(self.suite, self.opts, self.exec_opts).run(cells, on_start)
            return
        cases = group_by_case(cells)
        if not cases:
            return
        log.info("%d cell(s) in %d case(s), %s", len(cells), len(cases),
                 f"{len(self.exec_opts.devices)} worker(s) on {','.join(self.exec_opts.devices)}")
        yield from _log_rows(self._run_isolated(cases, on_start))

    def placement(self) -> str:
        devices = self.exec_opts.devices
        where = ",".join(devices) if len(devices) > 1 else str(torch.device(devices[0]))
        return f"{where} ({len(devices)} worker(s))" if self.exec_opts.isolation else f"{where} (in-process)"

    def header_fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.queue is not None and len(self.exec_opts.devices) > 1:
            # The shared queue (harness/plan/balance.py): cases and estimated seconds each worker took.
            out["devices_plan"] = self.queue.summary()
        out["workers"] = self.accounting()
        return out

    # ---------------------------------------------------------------- workers
    def start(self, backends: Sequence[type] = ()) -> None:
        """Start every worker now, all at once, importing ``backends``' libraries, so that the
        start-up overlaps the parent's suite expansion and the workers' imports overlap each
        other. ``run`` uses these workers (and starts them itself if this was not called)."""
        if not self.exec_opts.isolation or self.slots:
            return
        self.warm = tuple(backends)
        self.slots = [_Slot(i, d, dataclasses.replace(self.opts, device=torch.device(d)))
                      for i, d in enumerate(self.exec_opts.devices)]
        self.t_spawned = time.monotonic()
        for slot in self.slots:
            pre = self.prestarted.pop(0) if self.prestarted else None
            if pre is not None and pre.proc.is_alive():
                try:
                    pre.conn.send(Setup(*self._worker_args(slot.device, warm=True)))
                except OSError:
                    pre = None
            else:
                pre = None
            if pre is None:
                self._spawn(slot, warm=True)
                continue
            slot.proc, slot.conn, slot.pid, slot.ready = pre.proc, pre.conn, pre.proc.pid, False
            slot.libraries_pending = bool(self.warm)
            slot.started_at = slot.spawned_at = pre.started_at
            self.t_spawned = min(self.t_spawned, pre.started_at)
            log.info("worker pid %s on %s started before the parent imported torch", slot.pid, slot.device)
        discard(self.prestarted)  # more than the devices (none today): not needed

    def _timed(self, cell: Cell) -> bool:
        """Whether ``cell`` will be timed (the cost estimate leaves untimed references' timing out)."""
        return cell_timed(cell, "cpu" if self.exec_opts.devices[0] == "cpu" else "cuda", self.opts)

    def accounting(self) -> list[dict[str, Any]]:
        """Per worker: seconds from the first start to ready, library imports, in rows, idle
        (from ready to the last row of the run, not in a row: waiting, IPC, the tail)."""
        out = []
        end = self.t_done or time.monotonic()
        for s in self.slots:
            ready_at = (s.spawned_at or end) + (s.ready_s or 0.0)
            span = max(0.0, end - ready_at)
            out.append({"device": s.device, "ready_s": round(s.ready_s, 3) if s.ready_s is not None else None,
                        "import_s": round(sum(s.import_s.values()), 3), "import_by_backend_s": s.import_s,
                        "busy_s": round(s.busy_s, 3), "idle_s": round(max(0.0, span - s.busy_s), 3)})
        return out

    def _worker_args(self, device: str, warm: bool) -> tuple:
        """``worker_main``'s arguments after its pipe (the same as a prestarted worker's Setup)."""
        n_cpu = sum(d == "cpu" for d in self.exec_opts.devices)
        threads = max(1, (os.cpu_count() or 1) // n_cpu) if device == "cpu" and n_cpu > 1 else None
        return (device, self.suite, self.opts, self.exec_opts.memory_budget_mib, max(1, n_cpu), threads,
                self.warm if warm else ())

    def _start_process(self, device: str, warm: bool = False) -> tuple[Any, Any]:
        parent_conn, child_conn = self.mp_context.Pipe(duplex=True)
        proc = start_process(self.mp_context, worker_main, (child_conn, *self._worker_args(device, warm)),
                             f"harness-worker-{device}")
        child_conn.close()  # so the parent sees EOF when the worker dies
        return proc, parent_conn

    def adopt(self, prestarted: list[Prestarted]) -> None:
        """Workers started before this process imported torch (harness/execute/worker/boot.py):
        ``start`` hands them their Setup instead of starting new ones."""
        self.prestarted = list(prestarted)

    @property
    def _queued(self) -> CaseQueues:  # the run's case queues, made before any slot takes a case
        assert self.queue is not None
        return self.queue

    def _spawn(self, slot: _Slot, restart: bool = False, warm: bool = False) -> None:
        spare = self.spares.pop(slot.device, None)
        if spare is not None and not spare[0].is_alive():
            spare[1].close()
            spare = None
        # Standby workers import nothing ahead (they wait without a CUDA context); a cell's
        # precheck imports what it needs.
        slot.proc, slot.conn = spare or self._start_process(slot.device, warm=warm)
        slot.pid, slot.ready = slot.proc.pid, False
        slot.libraries_pending = spare is None and warm and bool(self.warm)
        log.info("worker pid %s on %s %s", slot.pid, slot.device, "restarted" if restart else "started")
        slot.started_at = time.monotonic()
        if slot.spawned_at is None:
            slot.spawned_at = slot.started_at
        if restart and slot.device not in self.spares:
            self.spares[slot.device] = self._start_process(slot.device)

    def _kill(self, slot: _Slot) -> None:
        if slot.proc is not None and slot.proc.is_alive():
            slot.proc.kill()
        if slot.proc is not None:
            slot.proc.join(timeout=10)
        if slot.conn is not None:
            slot.conn.close()
        slot.proc = slot.conn = None

    def _shutdown(self) -> None:
        """Idle workers are asked to exit; busy ones (an interrupted run) are killed, and so are
        workers not ready yet: one still importing torch reads its pipe only when the import is
        done (a Ctrl-C at startup was honoured 4.6-5.8 s late, waiting for that)."""
        for slot in self.slots:
            if (slot.conn is not None and slot.proc is not None and slot.proc.is_alive()
                    and slot.phase == SlotPhase.IDLE and slot.ready):
                try:
                    slot.conn.send(Shutdown())
                except (OSError, BrokenPipeError):
                    pass
                slot.proc.join(timeout=5)
            self._kill(slot)
        for proc, conn in self.spares.values():
            proc.kill()
            proc.join(timeout=10)
            conn.close()
        self.spares.clear()
        discard(self.prestarted)

    def _cell_by_key(self, slot: _Slot, key: tuple | None) -> Cell | None:
        for c in slot.cells:
            if cell_key(self.suite, c) == key:
                return c
        return None

    def _row(self, slot: _Slot, cell: Cell, status: Status, reason: str) -> ResultRow:
        row = status_row(cell, self.suite, slot.opts, status, reason)
        return row.model_copy(update={"worker": Worker(pid=slot.pid, device=slot.device)})

    def _lost(self, slot: _Slot, status: Status, why: str) -> list[ResultRow]:
        """The worker is gone (died, killed, gave up its context): rows for what it was doing,
        and the case's remaining cells back to the front of the queue."""
        rows: list[ResultRow] = []
        if slot.phase == SlotPhase.CELL:
            cell = self._cell_by_key(slot, slot.current)
            if cell is not None:
                row = self._row(slot, cell, status, why)
                slot.cells.remove(cell)
                if wants_retry(row, set(self.first_attempts)):
                    self.first_attempts[row.key] = row
                    slot.retry.append(cell)
                else:
                    rows.append(self._finished(row))
        elif slot.phase in (SlotPhase.PREPARE, SlotPhase.SENT):
            # The batch/reference itself failed: every cell of the case shares that fate.
            where = "generating the batch/reference" if slot.phase == SlotPhase.PREPARE else "starting the case"
            rows += [self._row(slot, c, status, f"{why} (while {where})") for c in slot.cells]
            slot.cells = []
        remaining = slot.cells + slot.retry
        slot.cells, slot.retry, slot.phase, slot.current, slot.deadline = [], [], SlotPhase.IDLE, None, None
        if remaining:
            self._queued.appendleft(remaining, slot.index)
        return rows

    def _finished(self, row: ResultRow) -> ResultRow:
        """A row as it is written: a retried cell's second attempt names the first."""
        first = self.first_attempts.get(row.key)
        return row if first is None else second_attempt(row, first)

    def _restart(self, slot: _Slot, progressed: bool, why: str = "") -> None:
        self._kill(slot)
        self.restarts += 1
        slot.last_failure = why or slot.last_failure
        slot.failed_starts = 0 if progressed else slot.failed_starts + 1
        if slot.failed_starts >= MAX_FAILED_STARTS:
            slot.dead = True
            return
        self._spawn(slot, restart=True)

    def _assign(self, slot: _Slot) -> None:
        if not slot.proc.is_alive():  # died while idle (e.g. the OOM killer): not this case's fault
            self._restart(slot, progressed=True, why=_exit_reason(slot.proc))
            if slot.dead:
                return
        slot.cells = self._queued.popleft(slot.index)
        slot.phase, slot.current = SlotPhase.SENT, None
        slot.deadline = time.monotonic() + self.timeout if self.timeout and slot.ready else None
        try:
            slot.conn.send(RunCase(slot.cells))
        except OSError:
            pass  # it died just now: the sentinel wakes the loop and _drain accounts for it

    def _run_isolated(self, cases: list[list[Cell]], on_start: Callable[[Cell], None] | None) -> Iterator[ResultRow]:
        # Cases spread over the workers by estimated cost (harness/plan/balance.py), largest first.
        timing_opts = self.opts.timing
        self.queue = CaseQueues.plan(cases, self.exec_opts.devices, self._timed,
                                     timing_opts.max_time_s if timing_opts is not None else 2.0, self.opts.check)
        self.timeout = timeout = self.exec_opts.cell_timeout or None
        reuse = bool(self.slots)  # keep_workers: the previous call's live workers take this call's cases
        if not reuse:
            self.slots = [_Slot(i, d, dataclasses.replace(self.opts, device=torch.device(d)))
                          for i, d in enumerate(self.exec_opts.devices)]
        try:
            for slot in self.slots:
                if not reuse or (slot.proc is None and not slot.dead):
                    self._spawn(slot)
            while True:
                interrupts.check()  # a Ctrl-C whose exception a library swallowed
                live = [s for s in self.slots if not s.dead]
                for slot in live:
                    if slot.phase == SlotPhase.IDLE and self.queue:
                        self._assign(slot)
                # A worker still importing is waited for even when idle: its LibrariesReady carries
                # the versions for run.json.
                busy = [s for s in live if s.phase != SlotPhase.IDLE or s.libraries_pending]
                if not busy:
                    if self.queue:  # every slot gave up: nothing can run the rest
                        why = "; ".join(sorted({s.last_failure for s in self.slots if s.last_failure}))
                        for case_cells in self.queue:
                            for c in case_cells:
                                yield self._row(self.slots[0], c, Status.ERROR,
                                                f"no worker could start ({MAX_FAILED_STARTS} attempts per device): {why}")
                        self.queue.clear()
                    break
                now = time.monotonic()
                deadlines = [s.deadline for s in busy if s.deadline is not None]
                deadlines += [s.started_at + STARTUP_TIMEOUT_S for s in busy
                              if not s.ready or (s.libraries_pending and s.phase == SlotPhase.IDLE)]
                wait_s = max(0.0, min(deadlines) - now) if deadlines else None
                ready = wait([s.conn for s in busy] + [s.proc.sentinel for s in busy], timeout=wait_s)
                for slot in busy:
                    if slot.conn in ready or slot.proc.sentinel in ready:
                        yield from self._drain(slot, timeout, on_start)
                now = time.monotonic()
                for slot in busy:
                    if slot.dead or slot.proc is None:
                        continue
                    if slot.deadline is not None and now > slot.deadline:
                        what = {SlotPhase.PREPARE: "case preparation (generate/reference)",
                                SlotPhase.SENT: "case start (availability/support checks)"}.get(slot.phase, "cell")
                        why = f"{what} exceeded --cell-timeout {timeout:g} s; worker killed"
                        rows = self._lost(slot, Status.TIMEOUT, why)
                        yield from rows
                        self._restart(slot, progressed=True)
                    elif (slot.ready and slot.libraries_pending and slot.phase == SlotPhase.IDLE
                          and now > slot.started_at + STARTUP_TIMEOUT_S):
                        # Its imports hang: the cells that need them say so in their own rows;
                        # run.json goes without the versions rather than the run never ending.
                        log.warning("worker pid %s: library imports not done after %g s", slot.pid, STARTUP_TIMEOUT_S)
                        slot.libraries_pending = False
                    elif not slot.ready and now > slot.started_at + STARTUP_TIMEOUT_S:
                        why = f"worker did not start within {STARTUP_TIMEOUT_S:g} s"
                        self._requeue(slot)
                        self._restart(slot, progressed=False, why=why)
        finally:
            self.t_done = time.monotonic()
            if self.exec_opts.keep_workers:
                self._release_busy()
            else:
                self._shutdown()

    def _release_busy(self) -> None:
        """keep_workers, after a run() call: idle workers stay for the next call; a worker still
        busy (the call was abandoned mid-case) is killed so it cannot answer the next call."""
        for slot in self.slots:
            if slot.phase != SlotPhase.IDLE:
                self._kill(slot)
                slot.cells, slot.phase, slot.current, slot.deadline = [], SlotPhase.IDLE, None, None

    def close(self) -> None:
        """End the workers kept by ``keep_workers`` (a no-op otherwise: run() already did)."""
        self._shutdown()
        self.slots = []

    def _drain(self, slot: _Slot, timeout: float | None, on_start: Callable[[Cell], None] | None) -> Iterator[ResultRow]:
        """Handle everything the worker sent; then, if it is gone, what it left behind."""
        gone = None
        while slot.conn is not None:
            try:
                if not slot.conn.poll():
                    if slot.proc.is_alive():
                        break
                    slot.proc.join(timeout=5)
                    if not slot.conn.poll():
                        raise EOFError
                msg = slot.conn.recv()
            except (EOFError, OSError):
                gone = gone or _exit_reason(slot.proc)
                break
            now = time.monotonic()
            if isinstance(msg, WorkerReady):
                slot.ready, slot.pid = True, msg.pid
                if slot.ready_s is None:
                    assert slot.spawned_at is not None  # set when its process started
                    slot.ready_s = now - slot.spawned_at
                    if all(s.ready_s is not None for s in self.slots):
                        self.t_all_ready = now
                if slot.phase == SlotPhase.SENT and timeout:
                    slot.deadline = now + timeout
            elif isinstance(msg, LibrariesReady):
                slot.libraries_pending = False
                slot.import_s = slot.import_s or dict(msg.import_s)
                self.backend_versions = self.backend_versions or dict(msg.versions)
            elif isinstance(msg, CasePartDeferred):
                # Its backends were still importing: these cells run later as a case of their own.
                deferred = {cell_key(self.suite, c) for c in msg.cells}
                slot.cells = [c for c in slot.cells if cell_key(self.suite, c) not in deferred]
                self._queued.append(list(msg.cells), slot.index)
            elif isinstance(msg, PreparingCase):
                slot.phase, slot.current = SlotPhase.PREPARE, None
                slot.deadline = now + timeout if timeout else None
            elif isinstance(msg, CellStarted):
                slot.phase, slot.current = SlotPhase.CELL, msg.key
                slot.deadline = now + timeout if timeout else None
                cell = self._cell_by_key(slot, msg.key)
                if on_start and cell is not None:
                    on_start(cell)
            elif isinstance(msg, RowDone):
                row = msg.row
                cell = self._cell_by_key(slot, row.key)
                slot.cells = [c for c in slot.cells if cell_key(self.suite, c) != row.key]
                slot.busy_s += row_busy_s(row, slot.cases_seen)
                if cell is not None and wants_retry(row, set(self.first_attempts)):
                    self.first_attempts[row.key] = row  # run again after the case, in a fresh worker
                    slot.retry.append(cell)
                else:
                    yield self._finished(row)
            elif isinstance(msg, CaseDone):
                slot.phase, slot.current, slot.deadline, slot.cells = SlotPhase.IDLE, None, None, []
                self._retry_fresh(slot)
            elif isinstance(msg, CaseFailed):
                for c in slot.cells:
                    yield self._row(slot, c, Status.ERROR, f"harness error in worker: {msg.error}")
                slot.phase, slot.current, slot.deadline, slot.cells = SlotPhase.IDLE, None, None, []
                self._retry_fresh(slot)
            elif isinstance(msg, RestartMe):
                gone = f"worker restarted: {msg.reason}"
                slot.phase = SlotPhase.RESTART
                slot.proc.join(timeout=10)
                break
            else:  # a worker of another version: a harness bug, never silent
                raise TypeError(f"unknown worker message {msg!r}")
        if gone is None:
            return
        if slot.phase == SlotPhase.RESTART:  # the worker's own decision, after sending the failing row
            self._requeue(slot)
            self._restart(slot, progressed=True)
        elif not slot.ready:  # died while starting: the case was never touched; retry it
            self._requeue(slot)
            self._restart(slot, progressed=False, why=gone)
        else:
            yield from self._lost(slot, Status.ERROR, gone)
            self._restart(slot, progressed=True, why=gone)

    def _retry_fresh(self, slot: _Slot) -> None:
        """The case is done: its resource-error cells go back to the front of the queue, for a
        fresh worker (this one is replaced: its allocator and whatever it holds go with it)."""
        if slot.retry:
            self._queued.appendleft(slot.retry, slot.index)
            slot.retry = []
            self._restart(slot, progressed=True)

    def _requeue(self, slot: _Slot) -> None:
        if slot.cells or slot.retry:
            self._queued.appendleft(slot.cells + slot.retry, slot.index)
        slot.cells, slot.retry, slot.phase, slot.current, slot.deadline = [], [], SlotPhase.IDLE, None, None


def _exit_reason(proc: Any) -> str:
    proc.join(timeout=5)
    code = proc.exitcode
    if code is None:
        return "worker stopped answering"
    if code < 0:
        try:
            return f"worker died: {signal.Signals(-code).name}"
        except ValueError:
            return f"worker died: signal {-code}"
    return f"worker exited with code {code}"
