"""Step sampling for replay: K representative steps stratified by composition, each with the
weight (steps it stands for) used to scale sampled attention time back to the whole trace:
trace_time ~= sum(weight_i * time_i) over sampled steps i; per generated token = that / the
trace's generated tokens. Also the conversion of a step into the suite's request groups."""
from __future__ import annotations

import math
from dataclasses import dataclass

from harness.spec.trace.scheduler import Step, StepRequest


def composition(step: Step) -> tuple[int, int, int]:
    """Stratum key: (has prefill/extend, log2 bucket of decode count, log2 bucket of tokens)."""
    dec = sum(1 for r in step.requests if r.kind == "decode")
    mixed = int(dec < len(step.requests))
    return mixed, int(math.log2(dec)) + 1 if dec else 0, int(math.log2(step.num_tokens))


@dataclass(frozen=True)
class Sampled:
    step: Step
    weight: float   # how many trace steps this one stands for


def sample_steps(steps: list[Step], k: int) -> list[Sampled]:
    """Deterministic stratified sample: every stratum gets picks in proportion to its size
    (at least one while k allows, largest strata first), evenly spaced within the stratum.
    Mixed steps (with a prefill or extend) and decode-only steps are sampled apart, each with
    at least one pick when k >= 2: decode-only strata are the most numerous, and without this a
    small k would sample no prefill at all (and the trace's prompt tokens would have no time)."""
    if k <= 0 or not steps:
        return []
    if k >= len(steps):
        return [Sampled(s, 1.0) for s in steps]
    mixed = [s for s in steps if composition(s)[0]]
    dec = [s for s in steps if not composition(s)[0]]
    if k < 2 or not mixed or not dec:
        return _sample(steps, k)
    k_mixed = min(len(mixed), max(1, min(k - 1, round(k * len(mixed) / len(steps)))))
    both = _sample(mixed, k_mixed) + _sample(dec, k - k_mixed)
    return sorted(both, key=lambda s: s.step.index)


def _sample(steps: list[Step], k: int) -> list[Sampled]:
    if k <= 0 or not steps:
        return []
    if k >= len(steps):
        return [Sampled(s, 1.0) for s in steps]
    strata: dict[tuple[int, int, int], list[Step]] = {}
    for s in steps:
        strata.setdefault(composition(s), []).append(s)
    order = sorted(strata, key=lambda key: (-len(strata[key]), key))
    picks = {key: 0 for key in order}
    for key in order[:k]:
        picks[key] = 1
    left = k - sum(picks.values())
    # remaining picks by largest remainder of the proportional share
    share = {key: k * len(strata[key]) / len(steps) for key in order}
    while left > 0:
        key = max(order, key=lambda q: (share[q] - picks[q], -order.index(q))
                  if picks[q] < len(strata[q]) else (-math.inf, 0))
        picks[key] += 1
        left -= 1
    out: list[Sampled] = []
    for key in order:
        members, n = strata[key], picks[key]
        for j in range(n):
            out.append(Sampled(members[(2 * j + 1) * len(members) // (2 * n)], len(members) / n))
    # strata left without a pick (more strata than k) are spread over the others pro rata
    covered = sum(s.weight for s in out)
    scale = len(steps) / covered
    return sorted((Sampled(s.step, s.weight * scale) for s in out), key=lambda s: s.step.index)


def step_request_groups(step: Step) -> list[dict[str, object]]:
    """The step as the suite's ``requests:`` list (decode-first order, one group per request)."""
    groups: list[dict[str, object]] = []
    for r in sorted(step.requests, key=lambda r: r.kind != "decode"):
        g: dict[str, object] = {"kind": r.kind, "query_len": r.query_len}
        if r.kind != "prefill":
            g["context_len"] = r.context_len
        groups.append(g)
    return groups


@dataclass(frozen=True)
class StepCase:
    """A step as a case's ``batch`` (one group per request) and, where requests share pages,
    its ``shared_prefix`` (None otherwise), with what the sharing amounts to."""

    batch: list[dict[str, object]]
    shared_prefix: dict[str, object] | None
    shared_tokens: int        # KV tokens the case reads from pages another request of the step also reads
    trace_shared_tokens: int  # the same in the scheduler's step (before the common prefix cut)


def _common_pages(tables: list[tuple[int, ...]]) -> int:
    n = min(len(t) for t in tables)
    for i in range(n):
        if any(t[i] != tables[0][i] for t in tables[1:]):
            return i
    return n


def step_case(step: Step, block_size: int) -> StepCase:
    """The step with its prefix-cache sharing carried into the case format.

    Requests whose block tables start with the same page form a group; a group shares its
    common leading pages (cached ones only: never beyond a member's context). The case format
    has one prefix length for all groups, so the case's prefix is L = the smallest of those
    (and of every ungrouped request's cached full pages, which become groups of one: a cascade
    backend needs every request in a group). L is cut from each request's ``context_len``.
    When L is 0 (a fresh prefill in the step, or no sharing) the step stays a plain case
    (decode-first order, no ``shared_prefix``), and cascade backends report it unsupported.
    Groups are ordered decode-only first, members decodes first, so the decode-first view
    keeps them contiguous where it can."""
    plain = StepCase(step_request_groups(step), None, 0, 0)
    by_first: dict[int, list[StepRequest]] = {}
    for r in step.requests:
        if not r.block_table:
            return plain
        by_first.setdefault(r.block_table[0], []).append(r)
    groups = list(by_first.values())
    pages: list[int] = []
    trace_shared = 0
    for g in groups:
        cached = min(r.context_len // block_size for r in g)
        common = min(_common_pages([r.block_table for r in g]), cached) if len(g) > 1 else cached
        if len(g) > 1:
            trace_shared += (len(g) - 1) * common * block_size
        pages.append(common)
    if trace_shared == 0 or min(pages) == 0:
        return StepCase(plain.batch, None, 0, trace_shared)
    length = min(pages) * block_size
    groups.sort(key=lambda g: (any(r.kind != "decode" for r in g), min(r.req_id for r in g)))
    batch: list[dict[str, object]] = []
    for g in groups:
        for r in sorted(g, key=lambda r: (r.kind != "decode", r.req_id)):
            batch.append({"kind": r.kind, "query_len": r.query_len, "context_len": r.context_len - length})
    shared = sum((len(g) - 1) * length for g in groups)
    sp = {"length": length, "groups": len(groups), "sizes": [len(g) for g in groups]}
    return StepCase(batch, sp, shared, trace_shared)
