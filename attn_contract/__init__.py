"""The attention-backend contract: the one package both the harness core and every backend import.

Nothing else crosses between ``harness`` and ``backends``: capabilities, common metadata, the
builder/impl/backend bases, cell statuses, the LSE merge op and the shared-prefix batch
preconditions all live here.
"""

from attn_contract.backend import AttentionBackend, AttentionImpl, AttentionMetadataBuilder
from attn_contract.capabilities import (
    AlibiLse,
    Availability,
    Capabilities,
    CudaGraphSupport,
    HeadSizes,
    MultipleOf,
    SplitKV,
)
from attn_contract.merge import lse_to_natural, merge_attn_states
from attn_contract.metadata import (
    TORCH_DTYPES,
    AttentionConfig,
    CommonAttentionMetadata,
    DecodePrefillSplit,
    LayerParams,
    decode_first_order,
    split_decodes_and_prefills,
)
from attn_contract.shared_prefix import GroupLayout, cascade_batch_reason, group_layout
from attn_contract.status import FAILED, NOT_RUN, RAN, Status

__all__ = [
    "FAILED",
    "NOT_RUN",
    "RAN",
    "TORCH_DTYPES",
    "AlibiLse",
    "AttentionBackend",
    "AttentionConfig",
    "AttentionImpl",
    "AttentionMetadataBuilder",
    "Availability",
    "Capabilities",
    "CommonAttentionMetadata",
    "CudaGraphSupport",
    "DecodePrefillSplit",
    "GroupLayout",
    "HeadSizes",
    "LayerParams",
    "MultipleOf",
    "SplitKV",
    "Status",
    "cascade_batch_reason",
    "decode_first_order",
    "group_layout",
    "lse_to_natural",
    "merge_attn_states",
    "split_decodes_and_prefills",
]
