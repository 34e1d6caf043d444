"""Spreading cases over several workers (``--devices 0,1``) by estimated cost, not by count.

A case's cost is estimated from its layout before anything runs (docs/measurement.md):

    kernel_s  = max(bytes / BW, flops / PEAK)                  one forward, roofline-style
    cell_s    = CELL_OVERHEAD_S + FIRST_CALL_S                 set-up, check, first call (JIT allowance)
              + [timing] min(max_time, TIMING_BASE_S + TIMING_CALLS * kernel_s)
    case_s    = generate + reference (GPU: one fp32 pass per request, REQ_S each) + sum(cell_s)

The planner then gives each case, largest first, to the worker with the least estimated load
(LPT), so the loads differ by at most one case's cost; a worker that runs dry takes the
smallest case left on the most loaded worker's list (estimates are estimates). Nothing here
decides a result, only which worker computes it.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any

from harness.layout import case_layout
from harness.metrics import layout_work

# Deliberately round figures: only ratios between cases matter for the split.
GPU = {"bw": 3.0e12, "peak": 4.0e14, "ref_flops": 2.0e13, "gen_bw": 5.0e11, "req_s": 2e-4}
CPU = {"bw": 1.0e10, "peak": 5.0e10, "ref_flops": 5.0e9, "gen_bw": 1.0e9, "req_s": 2e-4}
CELL_OVERHEAD_S = 0.05
FIRST_CALL_S = 0.05
TIMING_BASE_S = 0.05
TIMING_CALLS = 200  # warm-up, probes and samples: about this many calls per timed cell


def case_cost_s(cells: list[Any], device_type: str, timed: bool, max_time_s: float, check: bool = True) -> float:
    """Estimated seconds for one case's cells (all of the same case) on one worker."""
    if not cells:
        return 0.0
    hw = CPU if device_type == "cpu" else GPU
    layout = case_layout(cells[0].case)
    work = layout_work(layout)
    kernel_s = max(work.bytes / hw["bw"], work.flops / hw["peak"])
    cell_s = CELL_OVERHEAD_S + FIRST_CALL_S + kernel_s
    if timed:
        cell_s += min(max_time_s, TIMING_BASE_S + TIMING_CALLS * kernel_s)
    case_s = layout.kv_cache_bytes / hw["gen_bw"]
    if check:
        case_s += work.flops / hw["ref_flops"] + layout.num_reqs * hw["req_s"]
    return case_s + len(cells) * cell_s


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
    """Per-worker queues of cases (lists of cells), planned by cost; a worker with an empty
    queue steals the smallest case of the queue with the most estimated work left."""

    queues: list[collections.deque] = field(default_factory=list)
    costs: dict[int, float] = field(default_factory=dict)  # id(case cells) -> estimate
    planned: list[dict[str, Any]] = field(default_factory=list)
    stolen: list[int] = field(default_factory=list)

    @classmethod
    def plan(cls, cases: list[list[Any]], devices: list[str], timed: bool, max_time_s: float,
             check: bool = True) -> "CaseQueues":
        dev_type = "cpu" if devices[0] == "cpu" else "cuda"
        costs = [case_cost_s(c, dev_type, timed, max_time_s, check) for c in cases]
        plan = plan_assignment(costs, len(devices))
        q = cls(queues=[collections.deque(cases[i] for i in idx) for idx in plan],
                costs={id(cases[i]): costs[i] for i in range(len(cases))}, stolen=[0] * len(devices))
        q.planned = [{"device": d, "cases": len(idx), "cells": sum(len(cases[i]) for i in idx),
                      "est_cost_s": round(sum(costs[i] for i in idx), 3)} for d, idx in zip(devices, plan)]
        return q

    def __bool__(self) -> bool:
        return any(self.queues)

    def __iter__(self):
        for q in self.queues:
            yield from q

    def clear(self) -> None:
        for q in self.queues:
            q.clear()

    def appendleft(self, cells: list[Any], slot: int = 0) -> None:
        self.queues[slot].appendleft(cells)

    def popleft(self, slot: int = 0) -> list[Any]:
        if self.queues[slot]:
            return self.queues[slot].popleft()
        donor = max(range(len(self.queues)), key=lambda s: sum(self.costs.get(id(c), 0.0) for c in self.queues[s]))
        self.stolen[slot] += 1
        return self.queues[donor].pop()

    def summary(self) -> list[dict[str, Any]]:
        return [{**p, "stolen": n} for p, n in zip(self.planned, self.stolen)]
