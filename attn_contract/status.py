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


# Why a backend cannot run a config, as two kinds a reader must keep apart: ``kernel`` (the
# library's kernel has no such feature: no build of it would run the cell) and ``build`` (the
# kernel has it, this installed build was compiled without it: the cell is not measured here,
# another build, e.g. a serving engine's own, runs it). The kind is spelled in the reason a row
# records, so readers of old and new rows alike get it from the text (``reason_kind``).
KERNEL_LIMIT = "not supported by the kernel"
BUILD_LIMIT = "not in this build (the kernel has it; this build was compiled without it)"


def reason_kind(reason: str | None) -> str:
    """'build', 'kernel', or '' (a reason that says neither: an older row, or another limit)."""
    text = reason or ""
    if BUILD_LIMIT in text:
        return "build"
    if KERNEL_LIMIT in text:
        return "kernel"
    return ""


# Resource errors: a cell that ran out of memory or out of time says nothing about the kernel's
# numbers. Readers (compare, gate) keep them apart from correctness failures; the runner retries
# them once in a fresh worker. Recognised from the row's status and reason text, so rows written
# before this rule are read the same way: an error row's reason starts with the stage and the
# exception's type name (``forward: OutOfMemoryError: CUDA out of memory. ...``).
OUT_OF_MEMORY_MARKERS = ("OutOfMemoryError", "out of memory", "MemoryError:", "CUBLAS_STATUS_ALLOC_FAILED")


def resource_kind(status: "Status | str", reason: str | None) -> str:
    """'memory' (an out-of-memory error), 'time' (the cell's worker was killed at
    --cell-timeout), or '' (any other outcome: a real error stays an error)."""
    st = Status(status)
    if st == Status.TIMEOUT:
        return "time"
    if st == Status.ERROR and any(m.lower() in (reason or "").lower() for m in OUT_OF_MEMORY_MARKERS):
        return "memory"
    return ""
