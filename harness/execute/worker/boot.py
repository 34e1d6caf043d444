"""Workers started before the parent imports torch (``prestart``), told what to run later.

``harness run``'s parent imports torch (3.1-3.4 s on the H200 machine) and plans the cells; a
worker imports torch again. Started first, the worker's import overlaps the parent's: it begins
with only its pipe (``boot``), imports torch and the cell code, and waits for a ``Setup``
message (device, suite, options: sent by ``LocalExecutor.start`` once the parent has them).

Light on purpose: nothing here imports torch, pydantic or the harness's cell code, so the
parent can start workers in the first milliseconds of the command.
"""

from __future__ import annotations

import multiprocessing as mp
import signal
from dataclasses import dataclass
from typing import Any


@dataclass
class Prestarted:
    """A worker process started by ``prestart`` and the parent's end of its pipe."""

    proc: Any
    conn: Any
    started_at: float  # time.monotonic() at start


def boot(conn: Any) -> None:
    """The worker's entry point: import the worker (torch and all), then wait for its Setup."""
    from harness.execute.worker.messages import Setup, Shutdown
    from harness.execute.worker.process import worker_main

    try:
        msg = conn.recv()
    except (EOFError, OSError, KeyboardInterrupt):
        return  # the parent is gone or never needed this worker (a bad flag, an empty plan)
    if isinstance(msg, Shutdown) or not isinstance(msg, Setup):
        return
    worker_main(conn, msg.device, msg.suite, msg.opts, msg.budget_mib, msg.cpu_share, msg.threads, msg.warm)


def start_process(ctx: Any, target: Any, args: tuple, name: str) -> Any:
    """``ctx.Process(target, args).start()`` with SIGINT blocked in the child until it ignores it.

    The mask survives exec, so a Ctrl-C while the worker still imports torch stays pending there
    until worker_main ignores it (no traceback from the worker), and one that reaches the parent
    meanwhile is delivered as soon as this returns (an ignored one would be lost: seen in CI).
    The spawn context starts multiprocessing's resource tracker on the first start(); that start
    blocks and then UNBLOCKS SIGINT itself, which would undo the block for the worker started right
    after it (a Ctrl-C then killed the worker inside `site`). Start it first."""
    from multiprocessing import resource_tracker

    from harness.execute.worker.spawn_main import main_not_reimported

    proc = ctx.Process(target=target, name=name, daemon=True, args=args)
    resource_tracker.ensure_running()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        with main_not_reimported():  # harness/execute/worker/spawn_main.py: scripts without a guard, stdin
            proc.start()
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    return proc


def prestart(count: int) -> list[Prestarted]:
    """Start ``count`` workers now; each imports torch and waits for its Setup."""
    import time

    ctx = mp.get_context("spawn")
    out = []
    for i in range(count):
        parent_conn, child_conn = ctx.Pipe(duplex=True)
        proc = start_process(ctx, boot, (child_conn,), f"harness-worker-{i}")
        child_conn.close()  # so the parent sees EOF when the worker dies
        out.append(Prestarted(proc, parent_conn, time.monotonic()))
    return out


def discard(workers: list[Prestarted]) -> None:
    """Workers the run did not use (bad input, an empty plan): killed at once. They hold nothing
    yet, and one still importing torch would read its closed pipe only after the import, so an
    error line would wait for it."""
    for w in workers:
        try:
            w.conn.close()
        except OSError:
            pass
        if w.proc.is_alive():
            w.proc.kill()
        w.proc.join(timeout=5)
    workers.clear()
