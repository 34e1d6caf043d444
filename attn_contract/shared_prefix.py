"""The shared-prefix (cascade) groups of a batch, and the preconditions every cascade backend
checks before it runs one (a cascade over a batch that breaks them would be silently wrong).
"""

from __future__ import annotations

from dataclasses import dataclass

from attn_contract.metadata import CommonAttentionMetadata


@dataclass(frozen=True)
class GroupLayout:
    """Host-side description of the prefix groups of one batch."""

    prefix_lens: list[int]  # per group, tokens
    members: list[list[int]]  # per group, request indices in batch order
    prefix_len_of_req: list[int]  # per request (0 when in no group)
    contiguous: bool  # each group's requests are consecutive, groups in order


def group_layout(common: CommonAttentionMetadata) -> GroupLayout:
    lens = [int(x) for x in common.prefix_group_lens]
    members: list[list[int]] = [[] for _ in lens]
    per_req = [0] * common.num_reqs
    for r, g in enumerate(common.prefix_group_of_req):
        if 0 <= g < len(lens):
            members[g].append(r)
            per_req[r] = lens[g]
    order = [r for m in members for r in m]
    contiguous = order == list(range(common.num_reqs)) and all(
        m == list(range(m[0], m[0] + len(m))) for m in members if m
    )
    return GroupLayout(lens, members, per_req, contiguous)


def cascade_batch_reason(common: CommonAttentionMetadata, *, need_contiguous: bool) -> str | None:
    """Why a cascade backend cannot run this batch (None if it can).

    Checked on the host before the backend runs: a cascade over a batch that breaks these
    would be silently wrong, not slow."""
    if not common.prefix_group_lens:
        return "batch has no shared prefix (set shared_prefix in the case); the plain backends cover it"
    if len(common.prefix_group_of_req) != common.num_reqs:
        return f"prefix_group_of_req has {len(common.prefix_group_of_req)} entries for {common.num_reqs} requests"
    lay = group_layout(common)
    if any(p <= 0 for p in lay.prefix_lens):
        return "shared prefix length is 0: nothing to cascade; the plain backends cover it"
    bad = [p for p in lay.prefix_lens if p % common.block_size]
    if bad:
        return f"shared prefix length {bad[0]} is not a multiple of block_size {common.block_size}"
    if any(not 0 <= g < len(lay.prefix_lens) for g in common.prefix_group_of_req):
        return "some requests belong to no prefix group"
    if any(not m for m in lay.members):
        return "a prefix group has no requests"
    if need_contiguous and not lay.contiguous:
        return "prefix groups are not contiguous in batch order (the prefix pass takes each group's queries as one run)"
    ctx = common.context_lens_cpu.tolist()
    for r, p in enumerate(lay.prefix_len_of_req):
        if ctx[r] < p:
            return f"request {r}: query tokens overlap the shared prefix (context {ctx[r]} < prefix {p})"
    table = common.block_table.cpu()
    for g, m in enumerate(lay.members):
        nb = lay.prefix_lens[g] // common.block_size
        if nb > table.shape[1]:
            return f"group {g}: block table narrower than its {nb} prefix blocks"
        rows = table[m, :nb]
        if not bool((rows == rows[0]).all()):
            return f"group {g}: requests do not share the prefix blocks in their block tables"
    return None
