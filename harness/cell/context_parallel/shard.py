"""KV sharding over context-parallel ranks, and the sub-batch one rank runs.

Sharding (per request, positions are absolute token indices of the request's KV):
- ``interleaved`` (vLLM's DCP): token t lives on rank ``t % N``;
- ``contiguous``: rank r holds ``[r * c, (r + 1) * c)`` with ``c = ceil(seq_len / N)``.
A request shorter than N leaves some ranks with an empty shard.

Masking. A query at absolute position ``a`` sees the keys at positions ``<= a``. On a shard,
those are a *prefix* of the shard's keys (they are sorted by position), of length
``#{p in shard : p <= a}``. Backends mask causally bottom-right relative to the request's own
key count, which cannot express a shard's mask for a multi-token query (interleaved shards
gain one visible key every N queries, not every query). So a rank's sub-batch has one
single-query request per query token over that prefix: exact for any backend, and for a
decode batch the sub-batch is the natural one (each request its one query). Rows whose prefix
is empty (an empty shard, or a query before the shard's first key) are not sent to the backend:
their partial is output NaN (never trusted) with LSE -inf (weight 0), which the combine must
handle.

Heads: ``tp_slice`` gives the query and KV heads of one tensor-parallel rank (KV heads are
replicated when there are fewer than TP ranks, as vLLM does); each TP slice is its own CP group.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from attn_contract import index_kv
from harness.case.workload import Batch


def shard_positions(seq_len: int, degree: int, rank: int, sharding: str) -> torch.Tensor:
    """The absolute KV positions of one request that ``rank`` of ``degree`` holds (sorted)."""
    if sharding == "interleaved":
        return torch.arange(min(rank, seq_len), seq_len, degree)
    if sharding == "contiguous":
        c = math.ceil(seq_len / degree)
        return torch.arange(min(rank * c, seq_len), min((rank + 1) * c, seq_len))
    raise ValueError(f"unknown sharding {sharding!r} (interleaved, contiguous)")


def tp_heads(num_heads: int, num_kv_heads: int, tp_size: int, tp_rank: int) -> tuple[list[int], list[int]]:
    """(query heads, KV heads) of one TP rank; KV heads replicated when fewer than ``tp_size``."""
    hq = num_heads // tp_size
    q = list(range(tp_rank * hq, (tp_rank + 1) * hq))
    group = num_heads // num_kv_heads
    if num_kv_heads >= tp_size:
        hk = num_kv_heads // tp_size
        kv = list(range(tp_rank * hk, (tp_rank + 1) * hk))
    else:
        kv = [q[0] // group]
    return q, kv


@dataclass
class RankBatch:
    """One rank's work: ``batch`` (None when every row of this rank is empty) and, for each of
    its requests, the token of the full batch it answers (``rows``)."""

    batch: Batch | None
    rows: torch.Tensor  # int64 [num_sub_requests]: full-batch token of each sub-request
    num_tokens: int  # tokens of the full batch (the partial's first dim)
    empty_rows: int  # full-batch tokens this rank has no visible key for
    empty_shards: int  # requests whose shard on this rank is empty
    kv_tokens: int  # KV tokens this rank holds


def _slice_heads(batch: Batch, q_heads: list[int], kv_heads: list[int]) -> Batch:
    if len(q_heads) == batch.config.num_heads and len(kv_heads) == batch.config.num_kv_heads:
        return batch
    qi = torch.tensor(q_heads, device=batch.device)
    ki = torch.tensor(kv_heads, device=batch.device)
    cfg = replace(batch.config, num_heads=len(q_heads), num_kv_heads=len(kv_heads))
    return replace(batch, config=cfg, query=batch.query[:, qi], key=batch.key[:, ki], value=batch.value[:, ki],
                   k_logical=[index_kv(k, slice(None), ki) for k in batch.k_logical],
                   v_logical=[index_kv(v, slice(None), ki) for v in batch.v_logical],
                   kv_cache=index_kv(batch.kv_cache, slice(None), slice(None), slice(None), ki).contiguous())


def tp_batch(batch: Batch, tp_size: int, tp_rank: int) -> Batch:
    """The batch as one TP rank sees it: its query heads and KV heads only."""
    cfg = batch.config
    q, kv = tp_heads(cfg.num_heads, cfg.num_kv_heads, tp_size, tp_rank)
    return _slice_heads(batch, q, kv)


def rank_batch(batch: Batch, degree: int, rank: int, sharding: str) -> RankBatch:
    """The sub-batch ``rank`` runs: its shard of every request's KV in pages of its own cache
    (copied slot by slot from the case's cache, so fp8 bytes are identical), and one
    single-query request per query token that sees any key of the shard (module doc)."""
    cfg, dev = batch.config, batch.device
    bs = cfg.block_size
    qsl = batch.query_start_loc
    shards = [shard_positions(s, degree, rank, sharding) for s in batch.seq_lens]
    nblk = [math.ceil(len(p) / bs) for p in shards]
    total = sum(nblk)
    # Physical blocks in reverse order (never the identity) plus one spare of finite noise.
    src_cache = batch.kv_cache
    cache = torch.empty((total + 1, *src_cache.shape[1:]), dtype=src_cache.dtype, device=dev)
    cache[total] = src_cache[int(batch.block_table[0, 0])]
    phys = list(range(total - 1, -1, -1))
    tables, cursor = [], 0
    for i, p in enumerate(shards):
        row = phys[cursor:cursor + nblk[i]]
        cursor += nblk[i]
        tables.append(row)
        if len(p):
            src_blk = batch.block_table[i, (p // bs).to(dev)].long()
            src_off = (p % bs).to(dev)
            loc = torch.arange(len(p), device=dev)
            dst_blk = torch.tensor(row, device=dev, dtype=torch.long)[loc // bs]
            cache[dst_blk, :, loc % bs] = index_kv(src_cache, src_blk, slice(None), src_off)
    width = max(1, max(nblk, default=1))
    sub_rows, sub_req, sub_len = [], [], []
    empty_rows = 0
    for i, p in enumerate(shards):
        s, q = batch.seq_lens[i], batch.query_lens[i]
        absolute = torch.arange(s - q, s)
        if not cfg.causal:
            counts = [len(p)] * q  # every query sees every key
        else:
            counts = torch.searchsorted(p, absolute, right=True).tolist() if len(p) else [0] * q
        for j, c in enumerate(counts):
            if c == 0:
                empty_rows += 1
                continue
            sub_rows.append(qsl[i] + j)
            sub_req.append(i)
            sub_len.append(c)
    info = dict(num_tokens=batch.num_tokens, empty_rows=empty_rows,
                empty_shards=sum(len(p) == 0 for p in shards), kv_tokens=sum(len(p) for p in shards))
    rows = torch.tensor(sub_rows, dtype=torch.long)
    if not sub_rows:
        return RankBatch(None, rows, **info)
    table = torch.zeros((len(sub_rows), width), dtype=torch.int32)
    for n, i in enumerate(sub_req):
        table[n, :len(tables[i])] = torch.tensor(tables[i], dtype=torch.int32)
    table = table.to(dev)
    # The "new" token of each single-query request is the last key of its prefix.
    last = torch.tensor([int(shards[i][c - 1]) for i, c in zip(sub_req, sub_len)])
    k_log = [index_kv(batch.k_logical[i], shards[i][:c].to(dev)) for i, c in zip(sub_req, sub_len)]
    v_log = [index_kv(batch.v_logical[i], shards[i][:c].to(dev)) for i, c in zip(sub_req, sub_len)]
    key = torch.stack([batch.k_logical[i][int(a)] for i, a in zip(sub_req, last)]).float()
    value = torch.stack([batch.v_logical[i][int(a)] for i, a in zip(sub_req, last)]).float()
    if cfg.is_fp8_kv:
        key, value = key * batch.layer.k_scale, value * batch.layer.v_scale
    loc = torch.tensor(sub_len) - 1
    slots = table[torch.arange(len(sub_rows), device=dev), (loc // bs).to(dev)].long() * bs + (loc % bs).to(dev)
    sub = replace(
        batch, kinds=["decode"] * len(sub_rows), query_lens=[1] * len(sub_rows), seq_lens=sub_len,
        query=batch.query[rows.to(dev)], key=key.to(cfg.torch_dtype), value=value.to(cfg.torch_dtype),
        k_logical=k_log, v_logical=v_log, kv_cache=cache, block_table=table, slot_mapping=slots,
        prefix_group_lens=(), prefix_group_of_req=(), num_blocks_used=total, layout=None, extra={},
    )
    return RankBatch(sub, rows, **info)
