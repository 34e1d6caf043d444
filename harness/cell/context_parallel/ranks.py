"""The collectives of a CP group, two ways, behind one interface (``combine.Comm``):

- ``ThreadComm``: N ranks as threads of this process (CPU or one GPU); a collective deposits each
  rank's tensors and reads everyone's after a barrier. Sums run in rank order.
- ``DistComm``: one rank of a ``torch.distributed`` process group (gloo on CPU, NCCL on GPUs).
  gloo lacks reduce-scatter, so it is an all-reduce of which each rank keeps its slice there;
  all-to-all is gloo's own where it has one, else an all-gather of every rank's chunks.

The combine code (combine.py) is the same for both; only these three calls differ.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

import torch


class _Group:
    def __init__(self, n: int, timeout_s: float = 120.0):
        self.n = n
        self.barrier = threading.Barrier(n, timeout=timeout_s)
        self.slots: list[Any] = [None] * n


class ThreadComm:
    """One simulated rank: ``rank`` of ``group.n`` threads sharing ``group``."""

    def __init__(self, group: _Group, rank: int):
        self.group, self.rank, self.size = group, rank, group.n

    def _exchange(self, obj: Any) -> list[Any]:
        g = self.group
        g.slots[self.rank] = obj
        g.barrier.wait()
        seen = list(g.slots)
        g.barrier.wait()  # nobody overwrites a slot before every rank has read it
        return seen

    def all_gather(self, t: torch.Tensor) -> list[torch.Tensor]:
        return [x.clone() for x in self._exchange(t)]

    def reduce_scatter(self, chunks: list[torch.Tensor]) -> torch.Tensor:
        every = self._exchange(chunks)
        total = every[0][self.rank].clone()
        for r in range(1, self.size):
            total += every[r][self.rank]
        return total

    def all_to_all(self, chunks: list[torch.Tensor]) -> list[torch.Tensor]:
        every = self._exchange(chunks)
        return [every[r][self.rank].clone() for r in range(self.size)]


def run_simulated(n: int, fn: Callable[[ThreadComm], Any]) -> list[Any]:
    """``fn(comm)`` on n threads, one per rank; the results in rank order. A rank that raises
    breaks the barrier for the others, and the first error is raised here."""
    group = _Group(n)
    results: list[Any] = [None] * n
    errors: list[BaseException] = []

    def body(r: int) -> None:
        try:
            results[r] = fn(ThreadComm(group, r))
        except threading.BrokenBarrierError:
            pass
        except BaseException as e:  # re-raised in the caller's thread
            errors.append(e)
            group.barrier.abort()

    threads = [threading.Thread(target=body, args=(r,), name=f"cp-rank-{r}") for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    if any(r is None for r in results):
        raise RuntimeError("a simulated CP rank did not finish (barrier broken or timed out)")
    return results


class DistComm:
    """This process's rank of the default ``torch.distributed`` group."""

    def __init__(self) -> None:
        import torch.distributed as dist

        self.dist = dist
        self.rank, self.size = dist.get_rank(), dist.get_world_size()
        self.backend = dist.get_backend()

    def all_gather(self, t: torch.Tensor) -> list[torch.Tensor]:
        t = t.contiguous()
        out = [torch.empty_like(t) for _ in range(self.size)]
        self.dist.all_gather(out, t)
        return out

    def reduce_scatter(self, chunks: list[torch.Tensor]) -> torch.Tensor:
        chunks = [c.contiguous() for c in chunks]
        if self.backend == "nccl":
            out = torch.empty_like(chunks[self.rank])
            self.dist.reduce_scatter(out, chunks)
            return out
        full = torch.stack(chunks)
        self.dist.all_reduce(full)
        return full[self.rank]

    def all_to_all(self, chunks: list[torch.Tensor]) -> list[torch.Tensor]:
        chunks = [c.contiguous() for c in chunks]
        if self.backend == "nccl":
            out = [torch.empty_like(c) for c in chunks]
            self.dist.all_to_all(out, chunks)
            return out
        every = self.all_gather(torch.stack(chunks))  # [N ranks][N chunks, ...]
        return [every[r][self.rank] for r in range(self.size)]
