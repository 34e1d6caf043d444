"""Element sizes: one table for the whole project, the contract's dtype names -> torch dtypes
(``TORCH_DTYPES``); a name's size is its torch dtype's ``itemsize`` (fp8: 1 byte). KV formats
with no torch dtype have their size in ``PACKED_KV_BYTES`` (nvfp4: 0.5625 byte). The suite model
(bounds of a case's KV bytes) and the case layout both read it."""

from __future__ import annotations

from attn_contract import TORCH_DTYPES

# Packed KV formats with no torch dtype: bytes per element, scales included. nvfp4 stores 4-bit
# values (0.5 byte) plus one fp8 scale per 16 elements (1/16 byte).
PACKED_KV_BYTES: dict[str, float] = {"nvfp4": 0.5 + 1 / 16}


def dtype_bytes(name: str, what: str = "dtype") -> int:
    """Bytes of one element of the dtype ``name`` ("bfloat16", "fp8_e4m3", ...)."""
    try:
        return TORCH_DTYPES[name].itemsize
    except KeyError:
        raise ValueError(f"{what} {name!r}: unknown element size (known: {sorted(TORCH_DTYPES)})") from None


def kv_element_bytes(dtype: str, kv_cache_dtype: str) -> float:
    """Bytes of one KV-cache element: the model dtype's when the cache dtype is "auto"; a
    fraction for packed formats (nvfp4)."""
    if kv_cache_dtype == "auto":
        return dtype_bytes(dtype)
    if kv_cache_dtype in PACKED_KV_BYTES:
        return PACKED_KV_BYTES[kv_cache_dtype]
    return dtype_bytes(kv_cache_dtype, "kv_cache_dtype")
