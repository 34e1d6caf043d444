"""Spreading cases over several workers (``--devices 0,1``) by estimated cost, not by count.

A case's cost is estimated from its layout before anything runs (docs/measurement.md):

    kernel_s  = max(bytes / BW, flops / PEAK)                  one forward, roofline-style
    cell_s    = CELL_OVERHEAD_S + FIRST_CALL_S                 set-up, check, first call (JIT allowance)
              + [timing] min(max_time, TIMING_BASE_S + TIMING_CALLS * kernel_s)
    case_s    = generate + reference (GPU: one fp32 pass per request, REQ_S each) + sum(cell_s)

The cases wait in one queue shared by the workers, largest estimate first; each worker takes
the next case when it goes idle (dynamic longest-processing-time-first), so the workers finish
within one case of each other whatever the estimate's error. Nothing here
decides a result, only which worker computes it.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any, Callable

from harness.case.layout import case_layout
from harness.case.metrics import layout_work

# Deliberately round figures: only ratios between cases matter for the split.
GPU = {"bw": 3.0e12, "peak": 4.0e14, "ref_flops": 2.0e13, "gen_bw": 5.0e11, "req_s": 2e-4}
CPU = {"bw": 1.0e10, "peak": 5.0e10, "ref_flops": 5.0e9, "gen_bw": 1.0e9, "req_s": 2e-4}
CELL_OVERHEAD_S = 0.05
FIRST_CALL_S = 0.05
TIMING_BASE_S = 0.05
TIMING_CALLS = 200  # warm-up, probes and samples: about this many calls per timed cell


def case_cost_s(cells: list[Any], device_type: str, timed: bool | Callable[[Any], bool], max_time_s: float,
                check: bool = True) -> float:
    """Estimated seconds for one case's cells (all of the same case) on one worker; ``timed``
    may say per cell whether it is timed (a reference backend's cells are not, on a GPU)."""
    if not cells:
        return 0.0
    hw = CPU if device_type == "cpu" else GPU
    layout = case_layout(cells[0].case)
    work = layout_work(layout)
    kernel_s = max(work.bytes / hw["bw"], work.flops / hw["peak"])
    cell_s = CELL_OVERHEAD_S + FIRST_CALL_S + kernel_s
    n_timed = sum(1 for c in cells if timed(c)) if callable(timed) else (len(cells) if timed else 0)
    case_s = layout.kv_cache_bytes / hw["gen_bw"]
    if check:
        case_s += work.flops / hw["ref_flops"] + layout.num_reqs * hw["req_s"]
    return case_s + len(cells) * cell_s + n_timed * min(max_time_s, TIMING_BASE_S + TIMING_CALLS * kernel_s)


def _largest_first(costs: list[float]) -> list[int]:
    """Indices by estimated cost, largest first; ties keep the suite's order."""
    return sorted(range(len(costs)), key=lambda i: (-costs[i], i))


def order_cases(cases: list[list[Any]], device_type: str, timed: bool | Callable[[Any], bool], max_time_s: float,
                check: bool = True) -> list[list[Any]]:
    """The cases in the order a shared queue hands them out: largest estimate first."""
    costs = [case_cost_s(c, device_type, timed, max_time_s, check) for c in cases]
    return [cases[i] for i in _largest_first(costs)]


def plan_assignment(costs: list[float], n_slots: int) -> list[list[int]]:
    """Indices of ``costs`` per slot: largest first onto the least-loaded slot (LPT)."""
    loads = [0.0] * n_slots
    plan: list[list[int]] = [[] for _ in range(n_slots)]
    for i in sorted(range(len(costs)), key=lambda i: (-costs[i], i)):
        s = min(range(n_slots), key=lambda s: (loads[s], s))
        plan[s].append(i)
        loads[s] += costs[i]
    return plan


@dataclass
class CaseQueues:
    """One queue of cases (lists of cells) shared by every worker, largest estimated cost
    first: a worker that goes idle takes the next case (dynamic LPT). A static split by
    estimate (the first version here) left one GPU running its last cases while the other
    idled whenever the estimate was off (docs/measurement.md §12); with the queue the tail is at most one case whatever the estimate's error, and the
    estimate only orders the cases. ``slot`` arguments name the worker for the summary."""

    queue: collections.deque = field(default_factory=collections.deque)
    costs: dict[int, float] = field(default_factory=dict)  # id(case cells) -> estimate
    devices: list[str] = field(default_factory=list)
    taken: list[list[float]] = field(default_factory=list)  # per slot: estimates of the cases it took
    planned_loads: list[float] = field(default_factory=list)  # the static LPT plan's loads, for reference

    @classmethod
    def plan(cls, cases: list[list[Any]], devices: list[str], timed: bool | Callable[[Any], bool],
             max_time_s: float, check: bool = True) -> "CaseQueues":
        dev_type = "cpu" if devices[0] == "cpu" else "cuda"
        costs = [case_cost_s(c, dev_type, timed, max_time_s, check) for c in cases]
        order = _largest_first(costs)
        lpt = plan_assignment(costs, len(devices))
        return cls(queue=collections.deque(cases[i] for i in order),
                   costs={id(cases[i]): costs[i] for i in range(len(cases))}, devices=list(devices),
                   taken=[[] for _ in devices],
                   planned_loads=[round(sum(costs[i] for i in idx), 3) for idx in lpt])

    def __bool__(self) -> bool:
        return bool(self.queue)

    def __iter__(self):
        yield from self.queue

    def clear(self) -> None:
        self.queue.clear()

    def appendleft(self, cells: list[Any], slot: int = 0) -> None:
        """A case given back (its worker died or restarts): first in line again (the summary
        counts it for every worker that took it)."""
        self.queue.appendleft(cells)

    def append(self, cells: list[Any], slot: int = 0) -> None:
        """Part of a case a worker gave back to run later (its backends were still importing:
        harness/execute/worker/imports.py): last in line."""
        self.queue.append(cells)

    def popleft(self, slot: int = 0) -> list[Any]:
        cells = self.queue.popleft()
        self.taken[slot].append(self.costs.get(id(cells), 0.0))
        return cells

    def summary(self) -> list[dict[str, Any]]:
        """Per worker: cases it took from the queue and their estimated seconds."""
        return [{"device": d, "cases": len(t), "est_cost_s": round(sum(t), 3), "static_plan_est_s": p}
                for d, t, p in zip(self.devices, self.taken, self.planned_loads)]
