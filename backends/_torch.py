"""What the backends built from torch ops alone share: they run wherever torch imports, and
declare one capability block (model dtypes, fp8 caches dequantized in the gather, any head and
block size, both cache layouts, CPU and CUDA) that each backend narrows or extends."""

from __future__ import annotations

from typing import Any

import torch

from attn_contract import AttentionBackend, Availability, Capabilities, HeadSizes, MultipleOf

# The fields every torch backend declares alike; a backend's own arguments override them.
TORCH_CAPABILITIES: dict[str, Any] = dict(
    dtypes=frozenset({"float16", "bfloat16"}),
    kv_cache_dtypes=frozenset({"auto", "fp8_e4m3", "fp8_e5m2"}),
    head_sizes=HeadSizes(min=1, max=1024, multiple_of=1),
    block_sizes=(MultipleOf(1),),
    kv_layouts=frozenset({"NHD", "HND"}),
    devices=frozenset({"cpu", "cuda"}),
)


def torch_capabilities(**fields: Any) -> Capabilities:
    """The shared torch block with this backend's ``fields`` (features, graphs, notes, ...)."""
    return Capabilities(**{**TORCH_CAPABILITIES, **fields})


class TorchBackend(AttentionBackend):
    """A backend made of torch ops: available wherever torch is (a subclass with a narrower
    condition, such as a torch module that older releases lack, overrides ``availability``)."""

    @classmethod
    def availability(cls, variant: dict[str, Any] | None = None) -> Availability:
        return Availability.ok(torch=torch.__version__)
