"""Resource errors are retried once: a cell that ran out of memory (or, in a worker, out of time)
is run again after the rest of its case, in a fresh worker (isolated runs: its allocator empty,
nothing of the case's other cells held) or, in this process, after the case's tensors are freed
and torch's cached blocks are given back. An out-of-memory cell often fits on its own: what
filled the device was the case's other cells or the caching allocator's fragments. What the
second attempt gives is the row; a second resource error says it was the second
(attn_contract.status.resource_kind; compare and gate list such rows apart, never as
``pass -> error``)."""

from __future__ import annotations

import gc

import torch

from attn_contract.status import resource_kind
from harness.records.results import ResultRow

RETRIED_NOTE = "retried once in a fresh worker"
RETRIED_IN_PROCESS = "retried once after freeing the case's memory"


def wants_retry(row: ResultRow, retried: set) -> bool:
    """Whether ``row`` is a resource error not yet retried (``retried``: keys already retried)."""
    return row.key not in retried and resource_kind(row.status, row.reason) != ""


def second_attempt(row: ResultRow, first: ResultRow, note: str = RETRIED_NOTE) -> ResultRow:
    """The retried cell's row: as it is when it passed (or failed otherwise); a second resource
    error names the retry and the first attempt's reason."""
    if not resource_kind(row.status, row.reason):
        return row
    return row.model_copy(update={"reason": f"{row.reason} ({note}; first attempt: {first.reason[:300]})"})


def free_memory(device: torch.device) -> None:
    """Give back what the last case left: Python's cycles and torch's cached device blocks."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


__all__ = ["RETRIED_IN_PROCESS", "RETRIED_NOTE", "free_memory", "second_attempt", "wants_retry"]
