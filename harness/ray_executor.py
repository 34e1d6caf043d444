"""``harness run SUITE --ray [ADDRESS]``: cells dispatched as Ray tasks (docs/scale-out.md).

One Ray task per case (a case's cells share one batch and one reference), asking for one GPU
(``num_gpus=1``; Ray sets CUDA_VISIBLE_DEVICES, so one case at a time per GPU) or one CPU.
Inside the task the local ``Executor`` runs the cells in its isolated worker process on the
task's device: a segfaulting or hanging cell costs only that cell (``error``/``timeout`` row),
exactly as with ``--devices``. A task whose Ray worker or node is lost is retried by Ray
(``max_retries``) on another worker; when the retries are spent, each of its cells gets an
``error`` row with Ray's reason, so no cell is ever lost. Rows come back to the driver as each
case finishes and the driver writes the one results file (so ``--resume`` works as usual).

Ray is an optional extra: ``pip install 'attn-harness[ray]'`` (ray>=2.60).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

from attn_contract import Status
from harness.results import ResultRow
from harness.runner import Cell, RunOptions, group_by_case, status_row

RAY_INSTALL = "pip install 'attn-harness[ray]' (or pip install 'ray>=2.60')"
MAX_RETRIES = 2  # a lost worker or node: the case runs again elsewhere, then error rows


class RayUnavailable(RuntimeError):
    """Ray is not importable here (the message says how to install it)."""


def import_ray() -> Any:
    try:
        import ray
    except ImportError as e:
        raise RayUnavailable(f"--ray needs the ray package ({e}); install it with {RAY_INSTALL}") from None
    return ray


def _run_case(suite: Any, opts: RunOptions, exec_fields: dict, cells: list[Cell]) -> list[str]:
    """Body of the Ray task: the local Executor on this task's one device; rows as JSON lines."""
    import torch

    from harness.executor import ExecOptions, Executor
    from harness.results import row_json

    if opts.device.type == "cuda":
        device = "cuda:0"  # Ray's CUDA_VISIBLE_DEVICES leaves this task exactly its GPU
    else:
        device = "cpu"
    run_opts = dataclasses.replace(opts, device=torch.device(device))
    ex = Executor(suite, run_opts, ExecOptions(devices=[device], isolation=True, **exec_fields))
    return [row_json(r) for r in ex.run(cells)]


def _local_pythonpath() -> str:
    """The driver's source folders (this checkout, tests/plugins, ...) for a local cluster's workers."""
    root = str(Path(__file__).resolve().parent.parent)
    dirs = [root] + [p for p in sys.path if p and os.path.isdir(p) and "-packages" not in p
                     and "lib/python" not in p]
    if os.environ.get("PYTHONPATH"):
        dirs.append(os.environ["PYTHONPATH"])
    return os.pathsep.join(dict.fromkeys(os.path.abspath(d) for d in dirs))


class RayExecutor:
    """Same interface as ``harness.executor.Executor`` (``run`` yields rows, ``queue`` is None)."""

    queue = None

    def __init__(self, suite: Any, opts: RunOptions, exec_opts: Any, address: str | None = None,
                 max_retries: int = MAX_RETRIES):
        self.ray = import_ray()
        self.suite, self.opts, self.exec_opts = suite, opts, exec_opts
        self.address = None if address in (None, "", "local") else address
        self.max_retries = max_retries
        self.started = False

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

    def run(self, cells: list[Cell], on_start: Callable[[Cell], None] | None = None) -> Iterator[ResultRow]:
        cases = group_by_case(cells)
        if not cases:
            return
        self._init()
        ray = self.ray
        gpu = self.opts.device.type == "cuda"
        task = ray.remote(_run_case).options(
            num_gpus=1 if gpu else 0, num_cpus=1, max_retries=self.max_retries, retry_exceptions=False)
        exec_fields = {"cell_timeout": self.exec_opts.cell_timeout, "memory_budget_mib": self.exec_opts.memory_budget_mib}
        suite_ref, opts_ref = ray.put(self.suite), ray.put(self.opts)
        pending = {task.remote(suite_ref, opts_ref, exec_fields, c): c for c in cases}
        try:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                ref = done[0]
                case_cells = pending.pop(ref)
                if on_start is not None:
                    on_start(case_cells[0])
                try:
                    lines = ray.get(ref)
                except Exception as e:  # retries spent (node lost, worker killed): record, never drop
                    why = f"ray task failed after {self.max_retries} retries: {type(e).__name__}: {str(e).splitlines()[0][:300]}"
                    for c in case_cells:
                        yield status_row(c, self.suite, self.opts, Status.ERROR, why)
                    continue
                got = {}
                for line in lines:
                    row = ResultRow.model_validate_json(line)
                    got[row.key] = row
                    yield row
                from harness.executor import cell_key

                for c in case_cells:  # the local executor always yields one row per cell; guard anyway
                    if cell_key(self.suite, c) not in got:
                        yield status_row(c, self.suite, self.opts, Status.ERROR, "ray task returned no row for this cell")
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)
            if self.started:
                ray.shutdown()
