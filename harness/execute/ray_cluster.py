"""``harness run SUITE --ray [ADDRESS]``: cases spread over a Ray cluster (docs/scale-out.md).

One long-lived Ray actor per GPU (``num_gpus=1``: Ray sets CUDA_VISIBLE_DEVICES, so one case at
a time per GPU) or per CPU slot. Each actor owns the local ``Executor`` with one isolated worker
process that it keeps between cases (``keep_workers``), so Python, torch, the GPU libraries, the
CUDA context and JIT-compiled kernels are paid once per GPU, as with ``--devices``, not once per
case (the first version started a Ray task and a fresh worker per case: on the H200 that was
about 20 s a case, docs/scale-out.md). A segfaulting or hanging cell still costs only that cell
(``error``/``timeout`` row; the actor's Executor replaces its worker).

The driver holds the queue of cases (largest estimated cost first, harness/plan/balance.py) and hands
the next one to whichever actor is free; each finished case's rows come back to the driver, which
writes the one results file (so ``--resume`` works as usual). A lost actor (its process killed,
its node gone) is replaced and the case it was running goes back to the front of the queue for
another actor, up to ``MAX_RETRIES`` times; after that each of its cells gets an ``error`` row
with Ray's reason. No cell is ever lost.

Ray is an optional extra: ``pip install 'attn-harness[ray]'`` (ray>=2.60).
"""

from __future__ import annotations

import collections
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Generator, Iterator, Sequence

from attn_contract import Status
from harness.records.results import ResultRow
from harness.plan.cells import Cell, RunOptions, group_by_case
from harness.cell.prepare import status_row

RAY_INSTALL = "pip install 'attn-harness[ray]' (or pip install 'ray>=2.60')"
MAX_RETRIES = 2  # a lost actor or node: the case runs again on another actor, then error rows
START_TIMEOUT_S = 300.0  # an actor that cannot be placed/started (no free GPU left) is given up


class RayUnavailable(RuntimeError):
    """Ray is not importable here (the message says how to install it)."""


def import_ray() -> Any:
    try:
        import ray
    except ImportError as e:
        raise RayUnavailable(f"--ray needs the ray package ({e}); install it with {RAY_INSTALL}") from None
    return ray


class CaseRunner:
    """Body of the Ray actor: one device, one kept isolated worker, one case per ``run_case``."""

    def __init__(self, suite: Any, opts: RunOptions, exec_fields: dict) -> None:
        import dataclasses

        import torch

        from harness.execute.local import ExecOptions, LocalExecutor

        # Ray's CUDA_VISIBLE_DEVICES leaves this actor exactly its GPU.
        device = "cuda:0" if opts.device.type == "cuda" else "cpu"
        run_opts = dataclasses.replace(opts, device=torch.device(device))
        self.executor = LocalExecutor(suite, run_opts, ExecOptions(devices=[device], isolation=True,
                                                                   keep_workers=True, **exec_fields))

    def ready(self) -> int:
        return os.getpid()

    def run_case(self, cells: list[Cell]) -> list[str]:
        """The case's rows as JSON lines (``ResultRow`` is rebuilt on the driver)."""
        from harness.records.results import row_json

        return [row_json(r) for r in self.executor.run(cells)]

    def close(self) -> None:
        self.executor.close()


def _local_pythonpath() -> str:
    """The driver's source folders (this checkout, tests/plugins, ...) for a local cluster's workers."""
    root = str(Path(__file__).resolve().parents[2])
    dirs = [root] + [p for p in sys.path if p and os.path.isdir(p) and "-packages" not in p
                     and "lib/python" not in p]
    if os.environ.get("PYTHONPATH"):
        dirs.append(os.environ["PYTHONPATH"])
    return os.pathsep.join(dict.fromkeys(os.path.abspath(d) for d in dirs))


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0][:300] if text else ''}"


class RayExecutor:
    """The ``--ray`` executor (harness.execute.api.Executor): Ray places the cases."""

    queue = None
    reports_versions = False  # each actor's worker knows them; the driver probes them itself
    t_all_ready: float | None = None

    def __init__(self, suite: Any, opts: RunOptions, exec_opts: Any, address: str | None = None,
                 max_retries: int = MAX_RETRIES, actors: int | None = None):
        self.ray = import_ray()
        self.suite, self.opts, self.exec_opts = suite, opts, exec_opts
        self.address = None if address in (None, "", "local") else address
        self.address_flag = address  # as given to --ray, for the run's first line
        self.max_retries = max_retries
        self.n_actors = actors  # None: one per GPU (per CPU for CPU runs) in the cluster
        self.started = False
        self.lost_actors: list[str] = []  # why each replaced actor was lost (tests, summary)
        self.actor_pids: list[int] = []  # pids of the actors that started, in start order
        self.actors: dict[int, Any] = {}  # pid -> handle of each started actor (tests kill one)

        self.backend_versions: dict[str, dict[str, Any]] = {}

    def start(self, backends: Sequence[type] = ()) -> None:
        pass  # the actors start in run(), where the cluster's size is known

    def placement(self) -> str:
        per = "GPU" if self.opts.device.type == "cuda" else "CPU"
        return f"a Ray cluster ({self.address_flag}) (one actor per {per}, each with one isolated worker)"

    def header_fields(self) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        pass  # run() ends its actors (and a cluster it started) when it is done

    def _init(self) -> None:
        ray = self.ray
        if ray.is_initialized():
            return
        kw: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
        if self.address is None:
            kw["runtime_env"] = {"env_vars": {"PYTHONPATH": _local_pythonpath()}}
            ray.init(**kw)
        else:
            ray.init(address=self.address, **kw)
        self.started = True

    def _slots(self, gpu: bool, n_cases: int) -> int:
        if self.n_actors:
            return max(1, min(self.n_actors, n_cases))
        have = int(self.ray.cluster_resources().get("GPU" if gpu else "CPU", 0))
        if have < 1:
            raise RuntimeError("the Ray cluster has no GPU" if gpu else "the Ray cluster has no CPU")
        return max(1, min(have, n_cases))

    def _order(self, cases: list[list[Cell]]) -> list[list[Cell]]:
        """Largest estimated case first, so the last case to finish is a short one."""
        from harness.plan.balance import order_cases

        t = self.opts.timing
        return order_cases(cases, self.opts.device.type, self.opts.time,
                           t.max_time_s if t is not None else 2.0, self.opts.check)

    def run(self, cells: list[Cell], on_start: Callable[[Cell], None] | None = None) -> Generator[ResultRow, None, None]:
        cases = group_by_case(cells)
        if not cases:
            return
        self._init()
        ray = self.ray
        gpu = self.opts.device.type == "cuda"
        actor_cls = ray.remote(CaseRunner).options(num_gpus=1 if gpu else 0, num_cpus=1, max_restarts=0)
        exec_fields = {"cell_timeout": self.exec_opts.cell_timeout, "memory_budget_mib": self.exec_opts.memory_budget_mib}
        suite_ref, opts_ref = ray.put(self.suite), ray.put(self.opts)
        queue = collections.deque(self._order(cases))
        attempts: dict[int, int] = collections.defaultdict(int)  # id(case) -> lost actors it was on
        starting: dict[Any, tuple[Any, float]] = {}  # ready() ref -> (actor, when asked)
        idle: list[Any] = []
        busy: dict[Any, tuple[Any, list[Cell]]] = {}  # run_case ref -> (actor, case)
        try:
            n_slots = self._slots(gpu, len(cases))
        except RuntimeError as e:  # e.g. --device cuda on a cluster without GPUs: rows say so
            for case in cases:
                for c in case:
                    yield status_row(c, self.suite, self.opts, Status.ERROR, f"--ray: {e}")
            if self.started:
                ray.shutdown()
            return
        spare_starts = n_slots * (self.max_retries + 1)  # replacements allowed, so a crash loop ends

        def start_actor() -> None:
            actor = actor_cls.remote(suite_ref, opts_ref, exec_fields)
            starting[actor.ready.remote()] = (actor, time.monotonic())

        def lost(case: list[Cell], why: str) -> Iterator[ResultRow]:
            self.lost_actors.append(why)
            attempts[id(case)] += 1
            if attempts[id(case)] <= self.max_retries:
                queue.appendleft(case)  # to the next free actor
            else:
                reason = f"ray actor lost {attempts[id(case)]} times while running this case: {why}"
                for c in case:
                    yield status_row(c, self.suite, self.opts, Status.ERROR, reason)

        for _ in range(n_slots):
            start_actor()
        try:
            while queue or busy:
                while queue and idle:
                    actor, case = idle.pop(), queue.popleft()
                    if on_start is not None:
                        on_start(case[0])
                    busy[actor.run_case.remote(case)] = (actor, case)
                if not busy and not starting:  # every actor failed to start and none may replace it
                    why = "; ".join(dict.fromkeys(self.lost_actors)) or "no actor"
                    for case in queue:
                        for c in case:
                            yield status_row(c, self.suite, self.opts, Status.ERROR,
                                             f"no Ray actor could run this case: {why}")
                    queue.clear()
                    break
                deadline = min((t0 + START_TIMEOUT_S for _, t0 in starting.values()), default=None)
                timeout = None if busy or deadline is None else max(0.0, deadline - time.monotonic())
                done, _ = ray.wait(list(starting) + list(busy), num_returns=1, timeout=timeout)
                for ref in done:
                    if ref in starting:
                        actor, _ = starting.pop(ref)
                        try:
                            pid = ray.get(ref)
                            self.actor_pids.append(pid)
                            self.actors[pid] = actor
                            idle.append(actor)
                        except Exception as e:  # the actor could not start (import error, node lost)
                            self.lost_actors.append(f"actor did not start: {_first_line(e)}")
                            if spare_starts > 0:
                                spare_starts -= 1
                                start_actor()
                        continue
                    actor, case = busy.pop(ref)
                    try:
                        lines = ray.get(ref)
                    except ray.exceptions.RayActorError as e:  # actor process or its node is gone
                        yield from lost(case, _first_line(e))
                        ray.kill(actor)
                        if spare_starts > 0:
                            spare_starts -= 1
                            start_actor()
                        continue
                    except Exception as e:  # a harness error raised inside the actor: record it
                        for c in case:
                            yield status_row(c, self.suite, self.opts, Status.ERROR, f"ray actor error: {_first_line(e)}")
                        idle.append(actor)
                        continue
                    idle.append(actor)
                    yield from self._rows(case, lines)
                if not done and not busy:  # only starting actors, and they ran out of time
                    for ref, (actor, _) in list(starting.items()):
                        self.lost_actors.append(f"actor not started within {START_TIMEOUT_S:g} s (no free "
                                                f"{'GPU' if gpu else 'CPU'} in the cluster?)")
                        ray.kill(actor)
                        del starting[ref]
        finally:
            # Interrupted or done: busy actors are killed below (their worker dies with them).
            actors = idle + [a for a, _ in busy.values()] + [a for a, _ in starting.values()]
            if idle:
                ray.wait([a.close.remote() for a in idle], num_returns=len(idle), timeout=30)
            for a in actors:
                ray.kill(a)
            if self.started:
                ray.shutdown()

    def _rows(self, case: list[Cell], lines: list[str]) -> Iterator[ResultRow]:
        from harness.plan.resume import cell_key

        got = set()
        for line in lines:
            row = ResultRow.model_validate_json(line)
            got.add(row.key)
            yield row
        for c in case:  # the local executor always yields one row per cell; guard anyway
            if cell_key(self.suite, c) not in got:
                yield status_row(c, self.suite, self.opts, Status.ERROR, "ray actor returned no row for this cell")
