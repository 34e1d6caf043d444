"""Cell statuses and the groups the core, compare and report reason about.

One definition, so "which statuses count as a failure" is never spelled out twice.
"""

from __future__ import annotations

import enum


class Status(str, enum.Enum):
    """Outcome of one case x backend x variant cell. The value is what results.jsonl stores."""

    PASS = "pass"            # checked against the reference and within tolerance
    UNCHECKED = "unchecked"  # ran (and was timed) without the reference check: --no-check
    MISMATCH = "mismatch"    # ran, numbers wrong
    ERROR = "error"          # the backend raised, or its worker died
    UNSUPPORTED = "unsupported"  # outside what the backend declares; reason names the limit
    SKIPPED = "skipped"      # unavailable here, or too large for the device
    TIMEOUT = "timeout"      # the cell's worker was killed at --cell-timeout

    def __str__(self) -> str:
        return self.value


RAN: frozenset[Status] = frozenset({Status.PASS, Status.UNCHECKED, Status.MISMATCH})
# Rows whose timing stands for a working kernel: a checked pass, or a run that skipped the check
# (a reader that ranks kernels by correctness too asks for PASS alone).
TIMED_OK: frozenset[Status] = frozenset({Status.PASS, Status.UNCHECKED})
FAILED: frozenset[Status] = frozenset({Status.MISMATCH, Status.ERROR, Status.TIMEOUT})
NOT_RUN: frozenset[Status] = frozenset({Status.UNSUPPORTED, Status.SKIPPED})
