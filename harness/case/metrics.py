"""One FLOP and byte accounting for every backend (formulas and a worked example:
docs/measurement.md).

FLOPs: 4 * Hq * D per visible (query, key) pair (QK^T and PV, one multiply-add each = 2 FLOPs
per element), counting only the pairs the bottom-right-aligned mask lets through (causal,
sliding window), request by request. Softmax, scaling and masking are not counted.

Bytes (the least traffic a kernel must move): Q read and O written once
(num_tokens * Hq * D * dtype bytes each); K and V read once per KV head (not once per query
head: GQA shares them) for every key any query of the request can see, at the cache's element
size (fp8: one byte); the block-table entries of the blocks holding those keys and the
per-request metadata (query_start_loc, seq_lens: int32). A shared prefix is counted once per
request that reads it: that is what a non-cascade kernel reads.

A value head size ``Dv`` apart from ``D`` (MLA) makes it ``2 * Hq * (D + Dv)`` FLOPs per pair and
``Dv`` in the output. MLA's absorbed form (docs/mla.md) reads ONE latent vector per key for all
heads, ``D`` = 576 values (1152 bytes in bf16; its first 512 are the values, read once):
``bytes_kv = keys * D * kv_elt`` and ``2 * Hq * (576 + 512)`` FLOPs per pair. Its expanded form
reads per-head K (192) and V (128) in the model dtype (the up-projected latent).
"""

from __future__ import annotations

from harness.records.payloads import Work

from harness.case.layout import INDEX_BYTES, CaseLayout
from harness.spec.dtypes import dtype_bytes, kv_element_bytes


def _row_interval(i: int, q_len: int, s_len: int, causal: bool, window: int | None) -> tuple[int, int]:
    """Visible keys [lo, hi] (inclusive, maybe empty) of query row ``i``: FA's bottom-right
    alignment, an HF-style window of ``window`` keys ending at the diagonal (both sides of it
    when not causal)."""
    diag = i + s_len - q_len
    hi = min(diag, s_len - 1) if causal else s_len - 1
    lo = 0
    if window is not None:
        lo = max(0, diag - window + 1)
        if not causal:
            hi = min(s_len - 1, diag + window - 1)
    return lo, hi


def visible_pairs(q_len: int, s_len: int, causal: bool, window: int | None) -> int:
    """Number of (query, key) pairs the bottom-right-aligned mask keeps for one request."""
    if not causal and window is None:
        return q_len * s_len
    if causal and window is None:
        # Row i sees keys 0..i+s-q: an arithmetic series over the rows whose diagonal is >= 0.
        offset = s_len - q_len
        first = max(0, -offset)
        n = q_len - first
        return (first + offset + 1 + q_len + offset) * n // 2 if n > 0 else 0
    total = 0
    for i in range(q_len):
        lo, hi = _row_interval(i, q_len, s_len, causal, window)
        total += max(0, hi - lo + 1)
    return total


def visible_key_range(q_len: int, s_len: int, causal: bool, window: int | None) -> tuple[int, int]:
    """[lo, hi) of the keys at least one query of the request sees. The rows' intervals move
    right one key per row, so their union is one interval: row 0's start to the last row's end."""
    if q_len <= 0 or s_len <= 0:
        return 0, 0
    lo, _ = _row_interval(0, q_len, s_len, causal, window)
    _, hi = _row_interval(q_len - 1, q_len, s_len, causal, window)
    return (lo, hi + 1) if hi >= lo else (0, 0)


def visible_keys(q_len: int, s_len: int, causal: bool, window: int | None) -> int:
    """Distinct keys at least one query of the request sees (what must be read)."""
    lo, hi = visible_key_range(q_len, s_len, causal, window)
    return hi - lo


def attention_work(
    query_lens: list[int],
    seq_lens: list[int],
    *,
    num_heads: int,
    num_kv_heads: int,
    head_size: int,
    dtype: str,
    kv_cache_dtype: str,
    block_size: int,
    causal: bool,
    sliding_window: int | None,
    v_head_size: int | None = None,
    attention_kind: str = "mha",
) -> Work:
    """FLOPs and bytes of one forward over a batch (see the module docstring)."""
    if len(query_lens) != len(seq_lens):
        raise ValueError(f"{len(query_lens)} query lengths but {len(seq_lens)} sequence lengths")
    if block_size <= 0:
        raise ValueError(f"block_size must be positive, not {block_size}")
    elt = dtype_bytes(dtype)
    kv_elt = kv_element_bytes(dtype, kv_cache_dtype)
    pairs = 0
    keys = 0
    blocks = 0
    for q, s in zip(query_lens, seq_lens):
        pairs += visible_pairs(q, s, causal, sliding_window)
        lo, hi = visible_key_range(q, s, causal, sliding_window)
        keys += hi - lo
        if hi > lo:  # block-table entries of every block holding a visible key
            blocks += (hi - 1) // block_size - lo // block_size + 1
    tokens = sum(query_lens)
    dv = head_size if v_head_size is None else v_head_size
    bytes_q = float(tokens * num_heads * head_size * elt)
    bytes_o = float(tokens * num_heads * dv * elt)
    if attention_kind == "mla_absorbed":  # one latent vector per key for all heads; V is its head
        bytes_kv = float(keys * head_size * kv_elt)
    elif attention_kind == "mla_expanded":  # up-projected K and V, model dtype
        bytes_kv = float(keys * num_kv_heads * (head_size + dv) * elt)
    else:
        bytes_kv = float(keys * num_kv_heads * (head_size + dv) * kv_elt)
    bytes_meta = float(INDEX_BYTES * blocks + INDEX_BYTES * (2 * len(query_lens) + 1))
    return Work(
        flops=2.0 * num_heads * (head_size + dv) * pairs,
        bytes=bytes_q + bytes_o + bytes_kv + bytes_meta,
        bytes_q=bytes_q,
        bytes_kv=bytes_kv,
        bytes_o=bytes_o,
        bytes_meta=bytes_meta,
        visible_pairs=pairs,
        kv_tokens_read=keys,
    )


def layout_work(layout: CaseLayout) -> Work:
    """FLOPs and bytes of one forward over a case's batch (request order does not matter)."""
    cfg = layout.config
    return attention_work(list(layout.query_lens), list(layout.seq_lens), num_heads=cfg.num_heads,
                          num_kv_heads=cfg.num_kv_heads, head_size=cfg.head_size, dtype=cfg.dtype,
                          kv_cache_dtype=cfg.kv_cache_dtype, block_size=cfg.block_size, causal=cfg.causal,
                          sliding_window=cfg.sliding_window, v_head_size=cfg.v_head_size,
                          attention_kind=cfg.attention_kind)
