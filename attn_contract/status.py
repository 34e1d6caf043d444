"""Cell statuses and the groups the core, compare and report reason about.

One definition, so "which statuses count as a failure" is never spelled out twice.
"""

from __future__ import annotations

import enum


class Status(str, enum.Enum):
    """Outcome of one case x backend x variant cell. The value is what results.jsonl stores."""

    PASS = "pass"            # checked against the reference and within tolerance
    MISMATCH = "mismatch"    # ran, numbers wrong
    ERROR = "error"          # the backend raised, or its worker died
    UNSUPPORTED = "unsupported"  # outside what the backend declares; reason names the limit
    SKIPPED = "skipped"      # unavailable here, or too large for the device
    TIMEOUT = "timeout"      # the cell's worker was killed at --cell-timeout

    def __str__(self) -> str:
        return self.value


RAN: frozenset[Status] = frozenset({Status.PASS, Status.MISMATCH})
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
