"""One FLOP and byte accounting for every backend (see docs/metrics.md).

FLOPs: 4 * Hq * D per visible (query, key) pair (QK^T and PV, one multiply-add each = 2 FLOPs),
counting only pairs the mask lets through (causal, sliding window), request by request.

Bytes (the least traffic a kernel must move): Q read and O written once
(num_tokens * Hq * D * dtype bytes each); K and V read once per KV head for every key any query
of the request can see (fp8 at one byte); the block-table entries of those keys' blocks and
the per-request metadata (query_start_loc, seq_lens: int32).
"""

from __future__ import annotations

from dataclasses import dataclass

DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "fp8_e4m3": 1, "fp8_e5m2": 1}


def visible_pairs(q_len: int, s_len: int, causal: bool, window: int | None) -> int:
    """Number of (query, key) pairs the bottom-right-aligned mask keeps for one request."""
    total = 0
    offset = s_len - q_len
    if not causal and window is None:
        return q_len * s_len
    # Per query row i the visible keys form one interval [lo, hi] (clipped to [0, s_len-1]).
    for i in range(q_len):
        diag = i + offset
        hi = min(diag, s_len - 1) if causal else s_len - 1
        lo = 0
        if window is not None:
            lo = max(0, diag - window + 1)
            if not causal:
                hi = min(s_len - 1, diag + window - 1)
        total += max(0, hi - lo + 1)
    return total


def _visible_pairs_fast(q_len: int, s_len: int, causal: bool, window: int | None) -> int:
    """Closed form for causal without a window (row i sees i + s - q + 1 keys); else the loop."""
    if causal and window is None:
        offset = s_len - q_len
        first = max(0, -offset)  # rows whose diagonal is left of key 0 see nothing
        n = q_len - first
        return (first + offset + 1 + q_len + offset) * n // 2 if n > 0 else 0
    return visible_pairs(q_len, s_len, causal, window)


def visible_keys(q_len: int, s_len: int, causal: bool, window: int | None) -> int:
    """Distinct keys at least one query of the request sees (what must be read)."""
    if window is None:
        return s_len  # the last query (causal) or every query (non-causal) sees all keys
    offset = s_len - q_len
    lo = max(0, offset - window + 1)
    hi = min(s_len - 1, q_len - 1 + offset + (0 if causal else window - 1))
    return max(0, hi - lo + 1)


@dataclass(frozen=True)
class Work:
    flops: float
    bytes: float
    bytes_q: float
    bytes_kv: float
    bytes_o: float
    bytes_meta: float

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes if self.bytes else 0.0

    def as_dict(self) -> dict:
        return {
            "flops": self.flops,
            "bytes": self.bytes,
            "bytes_q": self.bytes_q,
            "bytes_kv": self.bytes_kv,
            "bytes_o": self.bytes_o,
            "bytes_meta": self.bytes_meta,
            "intensity": self.intensity,
        }


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
) -> Work:
    elt = DTYPE_BYTES[dtype]
    kv_elt = elt if kv_cache_dtype == "auto" else DTYPE_BYTES[kv_cache_dtype]
    pairs = 0
    keys = 0
    blocks = 0
    for q, s in zip(query_lens, seq_lens):
        pairs += _visible_pairs_fast(q, s, causal, sliding_window)
        k = visible_keys(q, s, causal, sliding_window)
        keys += k
        blocks += -(-k // block_size) if k else 0
    tokens = sum(query_lens)
    bytes_q = tokens * num_heads * head_size * elt
    bytes_o = bytes_q
    bytes_kv = 2.0 * keys * num_kv_heads * head_size * kv_elt
    bytes_meta = 4.0 * blocks + 4.0 * (2 * len(query_lens) + 1)
    return Work(
        flops=4.0 * num_heads * head_size * pairs,
        bytes=bytes_q + bytes_o + bytes_kv + bytes_meta,
        bytes_q=bytes_q,
        bytes_kv=bytes_kv,
        bytes_o=bytes_o,
        bytes_meta=bytes_meta,
    )
