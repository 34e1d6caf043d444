"""A backend whose graph replay goes stale: its impl snapshots the metadata (its "plan") on the
first call and runs every later call on that snapshot, as a library does whose plan() leaves
scheduling state on the host or in buffers it reallocates per plan, so a CUDA graph captured once
bakes the capture step's plan. Every single-batch check passes (the first call, the timed calls
and the repeat call all see the batch the plan was made for); only replays with metadata updated
in place between steps (harness/cell/graph_replay.py) catch it.

``stale_plan(Base)`` wraps any backend; ``SDPA_StalePlan`` (CPU and GPU) and
``FlashAttn_StalePlan`` (GPU) are the instances the tests run (``--backends
mutants.stale_graph:SDPA_StalePlan`` with tests/ on PYTHONPATH).
"""

from __future__ import annotations

import copy
from typing import Any

from attn_contract import AttentionBackend, AttentionImpl
from backends.flash_attn.backend import FlashAttentionBackend
from backends.sdpa import SDPABackend

_MOD = "mutants.stale_graph"


def stale_plan(base: type[AttentionBackend]) -> type[AttentionBackend]:
    """``base`` with an impl that plans once: the first call's metadata, deep-copied, serves every call."""
    base_impl = base.get_impl_cls()

    def forward(self: Any, query, key, value, kv_cache, metadata, out, lse_out=None):  # type: ignore[no-untyped-def]
        if getattr(self, "_plan", None) is None:
            self._plan = copy.deepcopy(metadata)
        return base_impl.forward(self, query, key, value, kv_cache, self._plan, out, lse_out)

    impl: type[AttentionImpl] = type(f"{base_impl.__name__}StalePlan", (base_impl,),
                                     {"forward": forward, "__module__": _MOD})
    name = f"{base.__name__.removesuffix('Backend')}_StalePlan"
    return type(name, (base,), {
        "name": f"mutant-stale-plan-{base.name}", "__module__": _MOD,
        "description": f"{base.name} whose impl keeps the first call's plan (stale under graph replay)",
        "get_impl_cls": classmethod(lambda cls: impl),
    })


SDPA_StalePlan = stale_plan(SDPABackend)
FlashAttn_StalePlan = stale_plan(FlashAttentionBackend)
STALE_MUTANTS = (SDPA_StalePlan, FlashAttn_StalePlan)
