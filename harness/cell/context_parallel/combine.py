"""The two ways vLLM's decode context parallelism merges the ranks' partial attentions.

Every rank r holds, for all tokens T and heads H, a partial output ``o_r`` (normalized over its
own keys) and its natural-log LSE ``l_r`` (converted from the backend's declared base before it
gets here). The exact merge over the union of the shards (disjoint key sets) is::

    m = max_r l_r                     (0 where every l_r is -inf: the row saw no key at all)
    L = m + log sum_r exp(l_r - m)     (the full LSE)
    o = sum_r exp(l_r - L) o_r         (weight 0 for l_r = -inf: o_r is then never read)

- ``ag_rs`` (``cp_lse_ag_out_rs``): all-gather the LSEs, each rank computes L and rescales its
  own output by ``exp(l_r - L)``, then a reduce-scatter sums the rescaled outputs over the ranks,
  leaving each rank the sum for its slice of the heads;
- ``a2a`` (``dcp_a2a_lse_reduce``): an all-to-all sends every rank the partials (outputs and
  LSEs) of its head slice from all ranks, and each rank reduces its slice with the formula above.

Both end with each rank owning ``H / N`` heads (heads padded to a multiple of N with empty
partials); ``gather_heads`` puts the full output together for the check. The max shift keeps
``exp`` finite at large logits; +inf LSEs (FA2's empty rows) are read as -inf.

``Combine`` carries the knobs the mutation test turns (base, shift, -inf guard, gather order):
the harness always runs the correct setting; tests/mutants/cp.py registers broken ones.
"""

from __future__ import annotations

import functools
import math
import operator
from dataclasses import dataclass
from typing import Callable, Protocol

import torch

INF = float("inf")


class Comm(Protocol):
    """The collectives one rank of a CP group calls (harness/cell/context_parallel/ranks.py)."""

    rank: int
    size: int

    def all_gather(self, t: torch.Tensor) -> list[torch.Tensor]: ...
    def reduce_scatter(self, chunks: list[torch.Tensor]) -> torch.Tensor: ...
    def all_to_all(self, chunks: list[torch.Tensor]) -> list[torch.Tensor]: ...


@dataclass(frozen=True)
class Combine:
    """How a strategy reduces. The defaults are the correct merge."""

    strategy: str  # "ag_rs" | "a2a"
    lse_base: str | int = "e"  # the base the reducer assumes its (natural-log) input is in
    max_shift: bool = True
    inf_guard: bool = True  # +inf -> -inf, weight-0 partials never read, all-empty rows 0
    gather_order: str = "rank"  # "rank" | "reversed" (which rank's LSE is whose)

    def _exp(self, x: torch.Tensor) -> torch.Tensor:
        return torch.exp(x) if self.lse_base == "e" else torch.exp2(x)

    def _log(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(x) if self.lse_base == "e" else torch.log2(x)

    def total_lse(self, lses: torch.Tensor) -> torch.Tensor:
        """[N, ...] per-rank LSEs -> the merged LSE [...]."""
        if self.inf_guard:
            lses = lses.masked_fill(lses == INF, -INF)
        if not self.max_shift:
            return self._log(self._exp(lses).sum(0))
        m = lses.amax(0)
        if self.inf_guard:
            m = m.masked_fill(torch.isinf(m), 0.0)
        return m + self._log(self._exp(lses - m).sum(0))

    def weights(self, lse: torch.Tensor, total: torch.Tensor) -> torch.Tensor:
        """exp(l_r - L), 0 where l_r is -inf (or L is: the row saw no key anywhere)."""
        if self.inf_guard:
            lse = lse.masked_fill(lse == INF, -INF)
            w = self._exp(lse - total.masked_fill(torch.isinf(total), 0.0))
            return w.masked_fill(torch.isinf(total) | torch.isinf(lse), 0.0)
        if not self.max_shift:
            # Unshifted: the weight as a ratio of exponentials (overflows at large logits).
            return self._exp(lse) / self._exp(total)
        return self._exp(lse - total)

    def scale(self, out: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """out [T, H, D] times w [T, H]; a weight-0 partial contributes 0 even if ``out`` is NaN."""
        scaled = out * w.unsqueeze(-1)
        if self.inf_guard:
            scaled = torch.where((w != 0).unsqueeze(-1), scaled, torch.zeros((), dtype=scaled.dtype))
        return scaled

    def order(self, gathered: list[torch.Tensor]) -> list[torch.Tensor]:
        return gathered[::-1] if self.gather_order == "reversed" else gathered


def _pad_heads(x: torch.Tensor, n: int, fill: float) -> torch.Tensor:
    h = x.shape[1]
    extra = (-h) % n
    if not extra:
        return x
    pad = torch.full((x.shape[0], extra, *x.shape[2:]), fill, dtype=x.dtype, device=x.device)
    return torch.cat([x, pad], 1)


def ag_rs(out: torch.Tensor, lse: torch.Tensor, comm: Comm, how: Combine) -> tuple[torch.Tensor, torch.Tensor]:
    """All-gather LSEs, rescale my output, reduce-scatter over heads: (my head slice of the merged
    output [T, H/N, D], of the merged LSE [T, H/N])."""
    n = comm.size
    out, lse = _pad_heads(out.float(), n, 0.0), _pad_heads(lse.float(), n, -INF)
    gathered = how.order(comm.all_gather(lse))
    total = how.total_lse(torch.stack(gathered))
    w = how.weights(gathered[comm.rank], total)
    mine = comm.reduce_scatter(list(how.scale(out, w).chunk(n, dim=1)))
    return mine, total.chunk(n, dim=1)[comm.rank]


def a2a(out: torch.Tensor, lse: torch.Tensor, comm: Comm, how: Combine) -> tuple[torch.Tensor, torch.Tensor]:
    """All-to-all of outputs and LSEs by head slice, then reduce my slice locally."""
    n = comm.size
    out, lse = _pad_heads(out.float(), n, 0.0), _pad_heads(lse.float(), n, -INF)
    outs = comm.all_to_all([c.contiguous() for c in out.chunk(n, dim=1)])
    lses = how.order(comm.all_to_all([c.contiguous() for c in lse.chunk(n, dim=1)]))
    total = how.total_lse(torch.stack(lses))
    merged = functools.reduce(operator.add, [how.scale(o, how.weights(l, total)) for o, l in zip(outs, lses)])
    return merged, total


STRATEGIES: dict[str, Callable[..., tuple[torch.Tensor, torch.Tensor]]] = {"ag_rs": ag_rs, "a2a": a2a}
# Combines by name: the two correct ones; tests/mutants/cp.py registers broken ones here.
COMBINES: dict[str, Combine] = {"ag_rs": Combine("ag_rs"), "a2a": Combine("a2a")}


def combine_rank(out: torch.Tensor, lse: torch.Tensor, comm: Comm, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """One rank's part of combine ``name``, then the full heads back on every rank:
    (merged output [T, H, D] float32, merged natural-log LSE [T, H])."""
    how = COMBINES[name]
    h = out.shape[1]
    o, l = STRATEGIES[how.strategy](out, lse, comm, how)
    if how.lse_base == 2:
        l = l * math.log(2.0)  # the strategy's LSE is in the base it assumed
    return torch.cat(comm.all_gather(o.contiguous()), 1)[:, :h], torch.cat(comm.all_gather(l.contiguous()), 1)[:, :h]
