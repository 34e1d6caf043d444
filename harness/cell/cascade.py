"""Cascade (shared-prefix) attention: the decision rule vLLM used to pick cascade over plain
attention (adapted to several prefix groups). The runner applies the rule to every backend that
declares ``Capabilities.cascade`` and records its verdict in the row's ``call``
(harness.analysis.cascade_agreement reads it against the measurement). The LSE merge and the
batch preconditions cascade backends share are part of the contract (``attn_contract.merge``,
``attn_contract.shared_prefix``).

Cascade splits each request's keys into the prefix it shares with its group and its own
suffix. Attention over the prefix is computed once for all of a group's queries (non-causal:
every query comes after the prefix), attention over the suffix per request (causal,
bottom-right aligned), and the two are merged exactly with their log-sum-exps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from attn_contract import AttentionConfig, CommonAttentionMetadata

# ---------------------------------------------------------------- decision rule

MIN_PREFIX_TOKENS = 256  # vLLM's threshold: shorter prefixes are not worth a second pass
MIN_REQUESTS_PER_PREFIX = 8  # vLLM's threshold on requests sharing the prefix
Q_TILE = 128  # FA's default tile sizes, which the cost model counts in
KV_TILE = 128
DEFAULT_NUM_SMS = 132  # H100/H200 SXM; used when no GPU is visible (recorded in the costs)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class CascadeDecision:
    """What the rule says for one batch, why, and the numbers it looked at."""

    use_cascade: bool
    reason: str
    costs: dict[str, Any] = field(default_factory=dict)

    def call_fields(self) -> dict[str, Any]:
        """The fields the runner adds to a cascade backend's ``call`` (after its ``describe_call``)."""
        return {"rule_says_cascade": self.use_cascade, "rule_reason": self.reason, "rule_costs": dict(self.costs)}


def use_cascade_attention(
    prefix_group_lens: Sequence[int],
    prefix_group_of_req: Sequence[int],
    query_lens: Sequence[int],
    num_heads: int,
    num_kv_heads: int,
    *,
    alibi: bool = False,
    sliding_window: int | None = None,
    num_sms: int = DEFAULT_NUM_SMS,
) -> CascadeDecision:
    """vLLM's historical ``use_cascade_attention``, with one shared prefix per group.

    In order: no cascade when there is no shared prefix, when the shortest group prefix is
    under 256 tokens, with ALiBi or a sliding window, or when fewer than 8 requests share a
    prefix on average. Otherwise cascade, unless the plain path would use FlashDecoding
    (GQA > 1 and every query_len == 1), where it compares a wave count with 128x128 tiles:

    - cascade prefix pass: sum_g Hq * ceil(T_g / 128) CTAs, each walking ceil(P / 128) KV
      tiles: ceil(CTAs / SMs) waves * max_g ceil(P_g / 128);
    - FlashDecoding: sum_g n_g * Hk * ceil(G / 128) * ceil(P_g / 128) CTA-tiles / SMs,

    with T_g the query tokens and n_g the requests of group g, P_g its prefix, G = Hq / Hk.
    With one group this is vLLM's model exactly. The suffix is the same work for both paths
    and is left out, as vLLM did.
    """
    costs: dict[str, Any] = {"num_sms": num_sms}
    members: dict[int, list[int]] = {g: [] for g in range(len(prefix_group_lens))}
    for r, g in enumerate(prefix_group_of_req):
        if g in members:
            members[g].append(r)
    live = [g for g in members if members[g]]
    if not live:
        return CascadeDecision(False, "no shared prefix", costs)
    gqa = num_heads // num_kv_heads
    prefix = {g: int(prefix_group_lens[g]) for g in live}
    n_req = {g: len(members[g]) for g in live}
    tokens = {g: int(sum(query_lens[r] for r in members[g])) for g in live}
    min_prefix = min(prefix.values())
    reqs_per_prefix = sum(n_req.values()) / len(live)
    flash_decoding = gqa > 1 and all(q == 1 for q in query_lens)
    tiles = {g: _cdiv(prefix[g], KV_TILE) for g in live}
    cascade_ctas = sum(num_heads * _cdiv(tokens[g], Q_TILE) for g in live)
    cascade_time = _cdiv(cascade_ctas, num_sms) * max(tiles.values())
    fd_ctas = sum(n_req[g] * num_kv_heads * _cdiv(gqa, Q_TILE) * tiles[g] for g in live)
    fd_time = _cdiv(fd_ctas, num_sms)
    costs.update(
        num_groups=len(live),
        min_prefix_len=min_prefix,
        requests_per_prefix=reqs_per_prefix,
        flash_decoding=flash_decoding,
        cascade_ctas=cascade_ctas,
        cascade_time=cascade_time,
        flash_decoding_ctas=fd_ctas,
        flash_decoding_time=fd_time,
    )
    if min_prefix < MIN_PREFIX_TOKENS:
        return CascadeDecision(False, f"shared prefix {min_prefix} < {MIN_PREFIX_TOKENS} tokens", costs)
    if alibi or sliding_window is not None:
        return CascadeDecision(False, "ALiBi/sliding window: cascade not supported", costs)
    if reqs_per_prefix < MIN_REQUESTS_PER_PREFIX:
        return CascadeDecision(
            False, f"{reqs_per_prefix:g} requests per shared prefix < {MIN_REQUESTS_PER_PREFIX}", costs
        )
    if not flash_decoding:
        return CascadeDecision(True, "plain path would not use FlashDecoding: cascade saves prefix reads", costs)
    if cascade_time < fd_time:
        return CascadeDecision(True, f"cost model: cascade {cascade_time} < FlashDecoding {fd_time} tile-waves", costs)
    return CascadeDecision(False, f"cost model: cascade {cascade_time} >= FlashDecoding {fd_time} tile-waves", costs)


def device_num_sms(device: torch.device | str) -> int:
    """SM count of a CUDA device; ``DEFAULT_NUM_SMS`` elsewhere."""
    device = torch.device(device)
    if device.type == "cuda" and torch.cuda.is_available():
        return int(torch.cuda.get_device_properties(device).multi_processor_count)
    return DEFAULT_NUM_SMS


def decide(common: CommonAttentionMetadata, config: AttentionConfig, device: torch.device | str) -> CascadeDecision:
    """The rule applied to a batch as the harness describes it."""
    return use_cascade_attention(
        common.prefix_group_lens,
        common.prefix_group_of_req,
        common.query_lens_cpu.tolist(),
        config.num_heads,
        config.num_kv_heads,
        alibi=config.alibi,
        sliding_window=config.sliding_window,
        num_sms=device_num_sms(device),
    )


__all__ = [
    "CascadeDecision",
    "decide",
    "device_num_sms",
    "use_cascade_attention",
]
