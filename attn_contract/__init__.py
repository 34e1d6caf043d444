"""The attention-backend contract: the one package both the harness core and every backend import.

Nothing else crosses between ``harness`` and ``backends``: capabilities, common metadata, the
builder/impl/backend bases, cell statuses, the LSE merge op and the shared-prefix batch
preconditions all live here.
"""

from __future__ import annotations

import importlib
from typing import Any

# Names resolve on first use (PEP 562): `harness --help`, the schemas and the result readers
# import the statuses without torch, which attn_contract.backend and .metadata need.
_EXPORTS = {
    "AlibiLse": "attn_contract.capabilities",
    "AttentionBackend": "attn_contract.backend",
    "AttentionConfig": "attn_contract.metadata",
    "AttentionImpl": "attn_contract.backend",
    "CALL_FORMS": "attn_contract.standalone",
    "CALL_FORM_AXIS": "attn_contract.standalone",
    "CALL_FORM_FASTEST": "attn_contract.standalone",
    "CALL_FORM_VLLM": "attn_contract.standalone",
    "STANDALONE_NAMES": "attn_contract.standalone",
    "AttentionMetadataBuilder": "attn_contract.backend",
    "Availability": "attn_contract.capabilities",
    "Capabilities": "attn_contract.capabilities",
    "CommonAttentionMetadata": "attn_contract.metadata",
    "CudaGraphSupport": "attn_contract.capabilities",
    "DecodePrefillSplit": "attn_contract.metadata",
    "EngineName": "attn_contract.engines",
    "FAILED": "attn_contract.status",
    "FP8_DTYPES": "attn_contract.metadata",
    "GroupLayout": "attn_contract.shared_prefix",
    "HeadSizes": "attn_contract.capabilities",
    "LayerParams": "attn_contract.metadata",
    "MHA": "attn_contract.mla",
    "MLA_ABSORBED": "attn_contract.mla",
    "MLA_EXPANDED": "attn_contract.mla",
    "MLA_KINDS": "attn_contract.mla",
    "FAMILY_KINDS": "attn_contract.mla",
    "declares_family": "attn_contract.mla",
    "MLADims": "attn_contract.mla",
    "yarn_get_mscale": "attn_contract.mla",
    "MultipleOf": "attn_contract.capabilities",
    "NOT_RUN": "attn_contract.status",
    "RAN": "attn_contract.status",
    "SplitKV": "attn_contract.capabilities",
    "Status": "attn_contract.status",
    "TIMED_OK": "attn_contract.status",
    "TORCH_DTYPES": "attn_contract.metadata",
    "BUILD_LIMIT": "attn_contract.status",
    "KERNEL_LIMIT": "attn_contract.status",
    "reason_kind": "attn_contract.status",
    "cascade_batch_reason": "attn_contract.shared_prefix",
    "decode_first_order": "attn_contract.metadata",
    "group_layout": "attn_contract.shared_prefix",
    "index_kv": "attn_contract.metadata",
    "lse_to_natural": "attn_contract.merge",
    "merge_attn_states": "attn_contract.merge",
    "split_decodes_and_prefills": "attn_contract.metadata",
}


__all__ = [
    "BUILD_LIMIT",
    "FAILED",
    "FP8_DTYPES",
    "KERNEL_LIMIT",
    "NOT_RUN",
    "RAN",
    "TIMED_OK",
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
    "MHA",
    "MLADims",
    "MLA_ABSORBED",
    "MLA_EXPANDED",
    "MLA_KINDS",
    "FAMILY_KINDS",
    "declares_family",
    "MultipleOf",
    "SplitKV",
    "Status",
    "cascade_batch_reason",
    "decode_first_order",
    "group_layout",
    "index_kv",
    "lse_to_natural",
    "merge_attn_states",
    "reason_kind",
    "split_decodes_and_prefills",
    "yarn_get_mscale",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'attn_contract' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once: later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
