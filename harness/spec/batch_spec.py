"""vLLM's batch-spec grammar (its attention benchmarks' ``2q1k_32q1s1k``) -> request groups.

Segments are joined by ``_``; each is ``(<count>)?q<q_len>(k)?(s<seq_len>(k)?)?``, where ``k``
multiplies by 1024 and seq_len (the KV length, query included) defaults to q_len. q == 1 is a
decode (``q1``, with seq_len 1 too, included: a decode over an empty cache, as vLLM's
``BatchRequest.is_decode`` is tested before ``is_prefill`` in its benchmarks' batch_spec.py),
otherwise q == seq a prefill and the rest an extend; an extend with at most
``SPEC_DECODE_MAX_Q`` query tokens is a speculative decode (vLLM's classification), a decode
with query_len here.
"""

from __future__ import annotations

import re
from typing import Any

SPEC_DECODE_MAX_Q = 8
_SEGMENT = re.compile(r"(\d+)?q(\d+)(k?)(?:s(\d+)(k?))?")


class BatchSpecError(ValueError):
    """A spec string that does not parse, naming the bad segment."""


def _size(digits: str, k: str) -> int:
    return int(digits) * (1024 if k else 1)


def looks_like_batch_spec(value: Any) -> bool:
    return isinstance(value, str)


def parse_batch_spec(spec: str) -> list[dict[str, Any]]:
    """``"2q1k_32q1s1k"`` -> ``[{kind: prefill, count: 2, query_len: 1024}, {kind: decode, count:
    32, context_len: 1023}]`` (raw request groups, validated later by the suite models)."""
    if not isinstance(spec, str) or not spec.strip():
        raise BatchSpecError(f"a batch spec is a non-empty string such as '2q1k_32q1s1k', got {str(repr(spec))[:40]}")
    groups = []
    for seg in spec.strip().split("_"):
        m = _SEGMENT.fullmatch(seg)
        if not m:
            raise BatchSpecError(f"segment {seg[:40]!r} of {spec[:80]!r} is not (<count>)?q<q_len>(k)?(s<seq_len>(k)?)?"
                                 " (e.g. 32q1s1k: 32 decodes over 1024 tokens; q2k: a 2048-token prefill)")
        count = int(m.group(1)) if m.group(1) else 1
        q = _size(m.group(2), m.group(3))
        seq = _size(m.group(4), m.group(5)) if m.group(4) else q
        if count < 1 or q < 1:
            raise BatchSpecError(f"segment {seg!r} of {spec[:80]!r}: count and q_len must be at least 1")
        if seq < q:
            raise BatchSpecError(f"segment {seg!r} of {spec[:80]!r}: seq_len ({seq}) is the KV length including the"
                                 f" query, so at least q_len ({q})")
        if seq == q and q > 1:
            groups.append({"kind": "prefill", "count": count, "query_len": q})
        elif q <= SPEC_DECODE_MAX_Q:
            g = {"kind": "decode", "count": count, "context_len": seq - q}
            if q > 1:
                g["query_len"] = q
            groups.append(g)
        else:
            groups.append({"kind": "extend", "count": count, "query_len": q, "context_len": seq - q})
    return groups
