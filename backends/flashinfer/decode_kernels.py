"""The decode families that are one library call over a block table (no wrapper, no plan()):
FlashInfer's trtllm API (``trtllm_batch_decode_with_kv_cache``, backend ``xqa`` or
``trtllm-gen``) and its cuDNN decode (``flashinfer.cudnn.cudnn_batch_decode_with_kv_cache``).
Signatures as in flashinfer-python 0.6.18.post1 (decode.py, xqa.py, cudnn/decode.py); the
library is imported only when a builder is made on a GPU."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from attn_contract import AttentionConfig

from backends.flashinfer._host import MiB
from backends.flashinfer.families import TRTLLM_API

# xqa takes an 8 MiB semaphore from the head of its workspace and the rest as scratch; the
# buffer "must be initialized to 0 for its first use" (decode.py), and the kernel resets the
# semaphores itself, so it is the family's own buffer, never the wrappers' shared float workspace.
TRTLLM_WORKSPACE_BYTES = 128 * MiB
# "128 MB is sufficient for typical decode workloads" (cudnn/decode.py).
CUDNN_WORKSPACE_BYTES = 128 * MiB


@dataclass
class DecodeCall:
    """What one decode segment's call needs, prepared by the builder (host work)."""

    kernel: str
    block_table: torch.Tensor  # int32 [n, pages], contiguous, on the device
    seq_lens: torch.Tensor  # int32 [n] on the device
    max_seq_len: int


def workspace_bytes(decode_backend: str) -> int:
    """Device scratch a decode family adds to a builder (0 for the wrapper)."""
    if decode_backend in TRTLLM_API:
        return TRTLLM_WORKSPACE_BYTES
    return CUDNN_WORKSPACE_BYTES if decode_backend == "cudnn" else 0


class DecodeFamily:
    """One builder's non-wrapper decode kernel: its workspace and its library function."""

    def __init__(self, name: str, config: AttentionConfig, device: torch.device):
        self.name, self.config, self.device = name, config, device
        self.workspace = torch.zeros(workspace_bytes(name), dtype=torch.uint8, device=device)
        if name in TRTLLM_API:
            from flashinfer.decode import trtllm_batch_decode_with_kv_cache

            self._fn = trtllm_batch_decode_with_kv_cache
        else:
            from flashinfer.cudnn import cudnn_batch_decode_with_kv_cache

            self._fn = cudnn_batch_decode_with_kv_cache

    def plan(self, block_table: torch.Tensor, seq_lens_cpu: torch.Tensor) -> DecodeCall:
        """The segment's block table cut to the pages its longest request uses, and its lengths."""
        max_len = int(seq_lens_cpu.max())
        pages = -(-max_len // self.config.block_size)
        bt = block_table[:, :pages].to(device=self.device, dtype=torch.int32).contiguous()
        seq = seq_lens_cpu.to(torch.int32).to(self.device)
        return DecodeCall(self.name, bt, seq, max_len)

    def run(self, call: DecodeCall, query: torch.Tensor, cache: torch.Tensor, out: torch.Tensor,
            k_scale: float | None, v_scale: float | None) -> None:
        """Write ``out`` [n, H, D]. ``cache`` is [pages, 2, page, Hk, D] (NHD) or
        [pages, 2, Hk, page, D] (HND), the shapes trtllm_batch_decode_with_kv_cache documents."""
        cfg = self.config
        if self.name in TRTLLM_API:
            # bmm1_scale is the whole QK scale (xqa derives its q scale as bmm1 / kv_scale * sqrt(D)),
            # bmm2_scale the V dequant scale: vLLM's FlashInferImpl passes the same pair.
            self._fn(query=query, kv_cache=cache, workspace_buffer=self.workspace, block_tables=call.block_table,
                     seq_lens=call.seq_lens, max_seq_len=call.max_seq_len,
                     bmm1_scale=cfg.softmax_scale * (k_scale if k_scale is not None else 1.0),
                     bmm2_scale=v_scale if v_scale is not None else 1.0,
                     window_left=cfg.window_left, out=out, kv_layout=cfg.kv_layout, backend=self.name)
            return
        # cuDNN takes K and V apart as [pages, Hk, page, D] (strided views of the one cache).
        k, v = cache[:, 0], cache[:, 1]
        if cfg.kv_layout == "NHD":
            k, v = k.transpose(1, 2), v.transpose(1, 2)
        self._fn(query, k, v, cfg.softmax_scale, self.workspace, max_sequence_kv=call.max_seq_len,
                 actual_seq_lens_kv=call.seq_lens.view(-1, 1, 1, 1), block_tables=call.block_table, out=out)


def make_decode_family(variant: dict[str, Any], config: AttentionConfig, device: torch.device) -> DecodeFamily | None:
    """The variant's decode family, or None for the wrapper."""
    name = str(variant.get("decode_backend", "wrapper"))
    return None if name == "wrapper" else DecodeFamily(name, config, device)
