"""A case's layout, computed once from its spec: request lengths, KV blocks, element sizes and
the bytes they make. The generator (workload.py), the memory planner (memory.py) and the work
accounting (metrics.py) all read it instead of each drawing lengths and counting blocks again.

Lengths come from the case's seed alone (a numpy generator of their own), so the layout is
exactly what ``workload.generate`` builds, without making a tensor.

Element sizes come from harness/spec/dtypes.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from attn_contract import AttentionConfig
from harness.spec import CaseSpec, LengthDist
from harness.spec.dtypes import dtype_bytes, kv_element_bytes

INDEX_BYTES = 4  # block-table entries, query_start_loc and seq_lens are int32
def sample_lengths(dist: object, n: int, rng: np.random.Generator) -> list[int]:
    """Draw ``n`` integer lengths from a spec distribution (each model draws its own)."""
    if not isinstance(dist, LengthDist):
        raise TypeError(f"unknown distribution {dist!r}")
    return dist.sample(n, rng)


def draw_lengths(case: CaseSpec) -> tuple[list[str], list[int], list[int]]:
    """(kinds, query_lens, context_lens) of every request, in batch order. Lengths exclude
    the shared prefix, which ``generate`` adds in front of each request's context."""
    rng = np.random.default_rng(case.seed)
    kinds: list[str] = []
    qlens: list[int] = []
    clens: list[int] = []
    for g in case.batch:
        kinds += [g.kind] * g.count
        qlens += sample_lengths(g.query_dist, g.count, rng)
        clens += sample_lengths(g.context_dist, g.count, rng)
    return kinds, qlens, clens


@dataclass(frozen=True)
class CaseLayout:
    """Everything about a case's batch that follows from its spec without making tensors.

    Block pool: each shared-prefix group's full prefix blocks once, each request's own blocks
    after them, plus spare blocks (``max(2, used // 8)``) the block table never points at.
    """

    config: AttentionConfig
    kinds: tuple[str, ...]
    query_lens: tuple[int, ...]
    context_lens: tuple[int, ...]  # drawn per request, shared prefix excluded
    seq_lens: tuple[int, ...]  # shared prefix + context + query
    prefix_len: int  # shared-prefix tokens per request (0: no shared prefix)
    prefix_groups: int
    group_of_req: tuple[int, ...]  # each request's prefix group (empty: no shared prefix)
    prefix_blocks: int  # full blocks of the prefix each group stores once
    own_blocks: tuple[int, ...]  # blocks each request holds beyond its group's prefix blocks
    num_blocks_used: int
    num_blocks: int  # the pool: used + spares
    elt_bytes: int  # model dtype (q, k, v, output)
    kv_elt_bytes: float  # KV-cache element (1 for fp8, 0.5625 for nvfp4)

    @property
    def block_size(self) -> int:
        return self.config.block_size

    @property
    def num_reqs(self) -> int:
        return len(self.query_lens)

    @property
    def num_tokens(self) -> int:
        return sum(self.query_lens)

    @property
    def max_query_len(self) -> int:
        return max(self.query_lens)

    @property
    def max_seq_len(self) -> int:
        return max(self.seq_lens)

    @property
    def total_kv_tokens(self) -> int:
        return sum(self.seq_lens)

    @property
    def max_blocks_per_req(self) -> int:
        """Block-table width: the longest request's prefix and own blocks."""
        return max(self.prefix_blocks + b for b in self.own_blocks)

    @property
    def kv_token_bytes(self) -> int:
        """K and V of one token over all KV heads, at the cache's element size (whole bytes:
        a packed format's fraction rounds up). MLA: the token's one latent vector (576 values,
        1152 bytes in bf16), whatever the form."""
        if self.config.mla is not None:
            return math.ceil(self.config.mla.latent_dim * self.kv_elt_bytes)
        return math.ceil(2 * self.config.num_kv_heads * self.config.head_size * self.kv_elt_bytes)

    @property
    def logical_kv_bytes(self) -> int:
        """Every request's own view of its K/V (a shared prefix counted per request)."""
        return self.total_kv_tokens * self.kv_token_bytes

    @property
    def kv_cache_bytes(self) -> int:
        """The canonical paged cache, spare blocks included."""
        return self.num_blocks * self.block_size * self.kv_token_bytes

    def as_dict(self) -> dict[str, Any]:
        """The scalar facts a result row carries (``row.layout``)."""
        return {
            "block_size": self.block_size,
            "num_reqs": self.num_reqs,
            "num_tokens": self.num_tokens,
            "max_query_len": self.max_query_len,
            "max_seq_len": self.max_seq_len,
            "total_kv_tokens": self.total_kv_tokens,
            "prefix_len": self.prefix_len,
            "prefix_groups": self.prefix_groups,
            "num_blocks_used": self.num_blocks_used,
            "num_blocks": self.num_blocks,
            "max_blocks_per_req": self.max_blocks_per_req,
            "elt_bytes": self.elt_bytes,
            "kv_elt_bytes": self.kv_elt_bytes,
            "logical_kv_bytes": self.logical_kv_bytes,
            "kv_cache_bytes": self.kv_cache_bytes,
        }


def case_layout(case: CaseSpec) -> CaseLayout:
    """The layout of ``case``'s batch, exactly as ``workload.generate`` will build it."""
    cfg = case.attention_config()
    kinds, qlens, clens = draw_lengths(case)
    n = len(qlens)
    bs = cfg.block_size
    # Shared prefixes: requests split into contiguous groups sharing `prefix_len` tokens.
    sp = case.shared_prefix
    num_groups = sp.groups if sp else 0
    prefix_len = sp.length if sp and num_groups else 0
    group_of: list[int] = []
    if sp and num_groups and sp.sizes:
        for g, size in enumerate(sp.sizes):
            group_of += [g] * size
    elif num_groups:
        bounds = np.linspace(0, n, num_groups + 1).round().astype(int)
        for g in range(num_groups):
            group_of += [g] * int(bounds[g + 1] - bounds[g])
    seq_lens = [prefix_len + c + q for c, q in zip(clens, qlens)]
    prefix_blocks = prefix_len // bs
    own_blocks = [math.ceil((s - prefix_blocks * bs) / bs) for s in seq_lens]
    used = prefix_blocks * num_groups + sum(own_blocks)
    return CaseLayout(
        config=cfg,
        kinds=tuple(kinds),
        query_lens=tuple(qlens),
        context_lens=tuple(clens),
        seq_lens=tuple(seq_lens),
        prefix_len=prefix_len,
        prefix_groups=num_groups,
        group_of_req=tuple(group_of),
        prefix_blocks=prefix_blocks,
        own_blocks=tuple(own_blocks),
        num_blocks_used=used,
        num_blocks=used + max(2, used // 8),
        elt_bytes=dtype_bytes(cfg.dtype),
        kv_elt_bytes=kv_element_bytes(cfg.dtype, cfg.kv_cache_dtype),
    )
