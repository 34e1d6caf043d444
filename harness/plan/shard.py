"""``harness run SUITE --shard K/N``: one deterministic slice of a suite's cells.

A Slurm job array, a Kubernetes indexed job or a CI matrix runs the same command with K =
1..N; each gets a disjoint set of whole cases (a case's cells share one generated batch and one
reference, so splitting a case would compute them twice) and together they cover every cell.
The split is greedy LPT over the cases' estimated cost (harness/plan/balance.py, the estimate
``--devices`` balances by), on a stable order: cost rounded to 6 significant digits, then the
case name. Nothing depends on dict, hash or file-system order, so every machine computes the
same partition from the same suite and flags. `harness merge` recombines the shard folders.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from harness.plan.balance import case_cost_s, plan_assignment
from harness.plan.cells import group_by_case


@dataclass(frozen=True)
class ShardSpec:
    index: int  # 1-based K
    count: int  # N

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(spec: str) -> ShardSpec:
    """``"2/4"`` -> ShardSpec(2, 4). Raises ValueError with a one-line reason."""
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", spec or "")
    if not m:
        raise ValueError(f"--shard {spec!r}: expected K/N with 1 <= K <= N, e.g. --shard 2/4")
    k, n = int(m.group(1)), int(m.group(2))
    if n < 1 or not 1 <= k <= n:
        raise ValueError(f"--shard {spec!r}: K must be between 1 and N (N >= 1), e.g. --shard 1/{max(n, 1)}")
    return ShardSpec(k, n)


def suite_hash(suite: Any) -> str:
    """sha256 of the validated suite (expanded cases, canonical JSON, without its file path):
    the same suite content gives the same hash on every machine, wherever the file lies."""
    data = suite.model_dump(mode="json")
    data.pop("source", None)
    blob = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def _stable_cost(x: float) -> float:
    return float(f"{x:.6g}")


def partition(cells: list[Any], n: int, device_type: str, timed: bool, max_time_s: float,
              check: bool = True) -> list[list[Any]]:
    """The cells of each of ``n`` shards (index 0 = shard 1/N), whole cases, balanced by cost."""
    cases = sorted(group_by_case(cells), key=lambda c: c[0].case.name)
    costs = [_stable_cost(case_cost_s(c, device_type, timed, max_time_s, check)) for c in cases]
    plan = plan_assignment(costs, n)  # ties: lower case index (name order), lower shard
    shards = []
    for idx in plan:
        chosen = {cases[i][0].case.name for i in idx}
        shards.append([c for c in cells if c.case.name in chosen])  # keep the planner's cell order
    return shards


def shard_costs(cells: list[Any], n: int, device_type: str, timed: bool, max_time_s: float,
                check: bool = True) -> list[float]:
    """Estimated seconds per shard (for the header and the balance test)."""
    return [round(sum(case_cost_s(c, device_type, timed, max_time_s, check) for c in group_by_case(s)), 6)
            for s in partition(cells, n, device_type, timed, max_time_s, check)]
