"""FlashInfer's nvfp4 KV cache (4-bit values, one fp8 scale per 16 elements): declared in its
capabilities, and answered with a reason before any library import, generation or call.

FlashInfer's nvfp4 KV-cache path needs compute capability 10.0+ (Blackwell). On Hopper (sm_90)
or without CUDA the cell is ``unsupported`` with that reason. On Blackwell it is still
``unsupported``, for the harness's own reason: its workload generator makes no nvfp4 cache yet,
so no call could be checked. Kept apart from backends/flashinfer/ so that package stays one
backend's logic."""

from __future__ import annotations

import torch

NVFP4 = "nvfp4"
NVFP4_MIN_CAPABILITY = (10, 0)
NVFP4_NOTE = "kv_cache_dtype nvfp4: FlashInfer's nvfp4 KV cache path needs compute capability 10.0+ (Blackwell)"


def nvfp4_reason(device: str, capability: tuple[int, int] | None = None) -> str:
    """Why FlashInfer does not serve an nvfp4 cell on ``device``; ``capability`` is the GPU's
    (queried from torch when None and CUDA is present)."""
    if capability is None and device == "cuda" and torch.cuda.is_available():
        capability = tuple(torch.cuda.get_device_capability())  # type: ignore[assignment]
    if capability is None:
        return f"{NVFP4_NOTE}; no CUDA device here ({device})"
    major, minor = capability
    if tuple(capability) < NVFP4_MIN_CAPABILITY:
        return f"{NVFP4_NOTE}; this GPU is sm_{major}{minor}"
    return (f"kv_cache_dtype nvfp4: the harness generates no nvfp4 KV cache yet, so FlashInfer is not "
            f"called (this GPU, sm_{major}{minor}, would take it)")
