"""Progress of ``harness run`` with an ETA: rich's bar on a terminal, and without one (a pipe, a
CI log) a plain line per finished case group and at least every ``every_s`` seconds, so a log
shows the run advancing instead of nothing between the first line and ``done`` for minutes."""

from __future__ import annotations

import time
from typing import Callable

from rich.console import Console


def fmt_s(s: float) -> str:
    s = max(0, int(round(s)))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def eta_s(done: int, total: int, elapsed_s: float) -> float | None:
    """Seconds left at the mean pace so far (None before the first cell)."""
    if done <= 0 or elapsed_s <= 0:
        return None
    return elapsed_s / done * max(0, total - done)


class PlainProgress:
    """Lines like ``decode: 120/360 cells, 0:41 elapsed, ETA 1:22 (group decode-gqa done)``."""

    def __init__(self, console: Console, total: int, label: str, every_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic):
        self.console, self.total, self.label, self.every_s, self.clock = console, total, label, every_s, clock
        self.t0 = clock()
        self.last = self.t0
        self.done = 0
        self.group: str | None = None

    def line(self, why: str = "") -> str:
        elapsed = self.clock() - self.t0
        eta = eta_s(self.done, self.total, elapsed)
        left = f", ETA {fmt_s(eta)}" if eta is not None and self.done < self.total else ""
        return f"{self.label}: {self.done}/{self.total} cells, {fmt_s(elapsed)} elapsed{left}{why}"

    def advance(self, group: str) -> None:
        """One cell finished; ``group``: its case group (a new one means the last is done)."""
        finished = self.group is not None and group != self.group
        why = f" (group {self.group} done)" if finished else ""
        self.group = group
        self.done += 1
        now = self.clock()
        if finished or now - self.last >= self.every_s or self.done == self.total:
            self.console.print(self.line(why), highlight=False, markup=False, soft_wrap=True)
            self.last = now
