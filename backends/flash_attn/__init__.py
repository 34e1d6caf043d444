"""FlashAttention 2/3/4 (``flash-attn``): one class per generation plus the ``auto`` selector.

- ``fa2.py``, ``fa3.py``, ``fa4.py``: one ``FAGeneration`` each (library, limits, call);
- ``selector.py``: the generations by version and vLLM's per-case ``auto`` choice;
- ``backend.py``: ``FlashAttentionBackend`` with its metadata builder and impl;
- ``common.py``: the features, segment metadata and base class they share.
"""

from backends.flash_attn.backend import FlashAttentionBackend, FlashAttentionImpl, FlashAttentionMetadataBuilder
from backends.flash_attn.common import (
    DOCUMENTED_CC,
    FAGeneration,
    FASegment,
    FlashAttentionMetadata,
    LibFeatures,
    cuda_capability,
)
from backends.flash_attn.fa2 import FA2
from backends.flash_attn.fa3 import FA3
from backends.flash_attn.fa4 import FA4
from backends.flash_attn.selector import (
    GENERATIONS,
    MODULES,
    VERSIONS,
    availability_from,
    capabilities_for,
    detect_features,
    documented_features,
    fa_window,
    hardware_reason,
    resolve_version,
    select_fa_version,
    support_reason,
)

__all__ = [
    "DOCUMENTED_CC",
    "FA2",
    "FA3",
    "FA4",
    "GENERATIONS",
    "MODULES",
    "VERSIONS",
    "FAGeneration",
    "FASegment",
    "FlashAttentionBackend",
    "FlashAttentionImpl",
    "FlashAttentionMetadata",
    "FlashAttentionMetadataBuilder",
    "LibFeatures",
    "availability_from",
    "capabilities_for",
    "cuda_capability",
    "detect_features",
    "documented_features",
    "fa_window",
    "hardware_reason",
    "resolve_version",
    "select_fa_version",
    "support_reason",
]
