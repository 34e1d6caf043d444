"""Helpers the gloo test's spawned ranks import (kept light: no harness runner import)."""

import torch

from harness.cell.context_parallel.combine import combine_rank


def partials(n: int, seed: int = 0, big: float = 1.0):
    """n partial attentions of 5 tokens x 4 heads over random disjoint key sets, the exact
    merge over their union, and rank 1's rows 0-1 empty (LSE -inf, output NaN)."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(5, 4, 8, generator=g, dtype=torch.float64) * big
    keys = [torch.randn(7, 4, 8, generator=g, dtype=torch.float64) * big for _ in range(n)]
    vals = [torch.randn(7, 4, 8, generator=g, dtype=torch.float64) for _ in range(n)]
    outs, lses = [], []
    for k, v in zip(keys, vals):
        s = torch.einsum("thd,khd->thk", q, k)
        lses.append(torch.logsumexp(s, -1))
        outs.append(torch.einsum("thk,khd->thd", torch.softmax(s, -1), v))
    if n > 1:
        outs[1][:2], lses[1][:2] = float("nan"), float("-inf")
        keep = [torch.ones(5, 1, 1, dtype=torch.bool) for _ in range(n)]
        keep[1][:2] = False
    s_all = torch.cat([torch.einsum("thd,khd->thk", q, k) for k in keys], -1)
    if n > 1:
        s_all[:2, :, 7:14] = float("-inf")
    ref = torch.einsum("thk,khd->thd", torch.softmax(s_all, -1), torch.cat(vals))
    return [o.float() for o in outs], [l.float() for l in lses], ref, torch.logsumexp(s_all, -1)



def gloo_rank(rank: int, n: int, port: int, q) -> None:
    """One gloo rank of the test: both combines over the same process group."""
    import os

    import torch.distributed as dist

    from harness.cell.context_parallel.ranks import DistComm

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=n)
    try:
        outs, lses, _, _ = partials(n)
        for name in ("ag_rs", "a2a"):
            o, l = combine_rank(outs[rank], lses[rank], DistComm(), name)
            q.put((name, rank, o.numpy(), l.numpy()))  # plain arrays: the sender exits before they are read
    finally:
        dist.destroy_process_group()


