"""Where the wall time of a run went: the per-stage stopwatch of a cell (or case), a row's
``host.breakdown_ms`` / ``host.case_ms``, and the sums the CLI and the executors print."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Iterable

import torch

if TYPE_CHECKING:
    from harness.records.results import ResultRow


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Stopwatch:
    """Milliseconds per named stage of one cell (or case); the device is synchronised at each
    stage end so GPU work lands in the stage that queued it."""

    def __init__(self, device: torch.device):
        self.device = device
        self.ms: dict[str, float] = {}
        self.start = self._last = time.perf_counter()

    def lap(self, stage: str) -> float:
        sync(self.device)
        now = time.perf_counter()
        ms = (now - self._last) * 1e3
        self.ms[stage] = self.ms.get(stage, 0.0) + ms
        self._last = now
        return ms

    def skip(self) -> None:
        """Start the next stage now (time since the last lap belongs to no stage: overhead)."""
        self._last = time.perf_counter()

    def total_ms(self) -> float:
        return (time.perf_counter() - self.start) * 1e3


def breakdown(sw: Stopwatch, case_data: Any = None) -> dict[str, Any]:
    """Where a cell's wall time went (``host.breakdown_ms``: prepare = batch view, KV-cache
    layout copy and output buffers, setup = builder/impl construction (library warm-up),
    build = metadata/plan, first_call = first forward incl. JIT, check,
    timing, metrics, other = the rest of run_cell), plus the case-level stages it shared
    (``host.case_ms``: generate, reference, made once per case for ``case_cells`` cells;
    ``case_data`` is the case's ``harness.cell.run.CaseContext``)."""
    ms = dict(sw.ms)
    total = sw.total_ms()
    ms["other"] = max(0.0, total - sum(ms.values()))
    out: dict[str, Any] = {"breakdown_ms": ms, "cell_ms": total}
    if case_data is not None:
        out["case_ms"] = dict(case_data.case_ms)
        out["case_cells"] = case_data.num_cells
    return out


def sum_breakdown(rows: Iterable[ResultRow]) -> dict[str, float]:
    """Seconds per stage summed over ``rows`` (``host.breakdown_ms``), with the case-level
    stages (``host.case_ms``) counted once per case and the cells' own wall time."""
    total: dict[str, float] = {}
    seen_cases: set[str] = set()
    for r in rows:
        host = r.host
        if host is None:
            continue
        for k, v in (host.breakdown_ms or {}).items():
            total[k] = total.get(k, 0.0) + v / 1e3
        if host.cell_ms is not None:
            total["cells"] = total.get("cells", 0.0) + host.cell_ms / 1e3
        if host.case_ms and r.case not in seen_cases:
            seen_cases.add(r.case)
            for k, v in host.case_ms.items():
                total[k] = total.get(k, 0.0) + v / 1e3
    return {k: round(v, 3) for k, v in total.items()}


def row_busy_s(row: ResultRow, case_seen: set[str]) -> float:
    """Seconds a worker spent on ``row``: its cell, its precheck/import and, once per case
    (``case_seen`` remembers), the case's generate/reference."""
    host = row.host
    if host is None:
        return 0.0
    ms = host.cell_ms or 0.0
    b = host.breakdown_ms or {}
    ms += b.get("precheck", 0.0) + b.get("import", 0.0)
    if host.case_ms and row.case not in case_seen:
        case_seen.add(row.case)
        ms += sum(host.case_ms.values())
    return ms / 1e3
