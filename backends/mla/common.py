"""What the MLA library adapters (flashinfer_mla, flash_attn_mla, flashmla) share: the contract's
two forms cut the way kernels take them, the packed-latent gather, and the rules every one of
them checks. Pure torch; no library import (attn_contract/mla.py describes the forms)."""

from __future__ import annotations

import functools
import importlib.util
import subprocess
import sys
from typing import Any

import torch

from attn_contract import MLA_ABSORBED, MLA_EXPANDED, AttentionConfig, HeadSizes

# DeepSeek-V2/V3, Kimi-K2: the one latent geometry the kernels are built for (FlashMLA's
# head_dim 576/512, FlashInfer's AOT/JIT MLA modules and FA3's qv 64/512 as probed).
LATENT_DIMS = frozenset({(512, 64)})
MLA_KINDS = frozenset({MLA_ABSORBED, MLA_EXPANDED})
# (query/key, value) head sizes of the two forms for those dims.
MLA_HEAD_SIZES = HeadSizes(values=(576, 192))
MLA_V_HEAD_SIZES = HeadSizes(values=(512, 128))


def form_reason(config: AttentionConfig) -> str | None:
    """A config whose head sizes are not its MLA form's (None when they are, or not MLA)."""
    if config.mla is None:
        return None
    want = config.mla.head_sizes(config.attention_kind)
    got = (config.head_size, config.value_head_size)
    if got != want:
        return f"{config.attention_kind}: head sizes {got[0]}/{got[1]} are not the form's {want[0]}/{want[1]}"
    if config.attention_kind == MLA_ABSORBED and config.num_kv_heads != 1:
        return f"mla_absorbed has one (latent) KV head, not {config.num_kv_heads}"
    return None


def split_query(query: torch.Tensor, kv_lora_rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The absorbed query ``[T, H, L + R]`` as (q_nope ``[T, H, L]``, q_pe ``[T, H, R]``) views."""
    return query[..., :kv_lora_rank], query[..., kv_lora_rank:]


def split_latent(cache: torch.Tensor, kv_lora_rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The latent cache ``[..., L + R]`` as (ckv ``[..., L]``, kpe ``[..., R]``) views."""
    return cache[..., :kv_lora_rank], cache[..., kv_lora_rank:]


def packed_slots(block_table: torch.Tensor, seq_lens: torch.Tensor, block_size: int,
                 device: torch.device) -> torch.Tensor:
    """int64 ``[sum(seq_lens)]``: the flat cache slot (``block * block_size + offset``) of every
    request's tokens, request after request, in token order. Indexing the flattened latent cache
    ``[num_blocks * block_size, L + R]`` with it packs the batch's latent into one contiguous
    varlen cache (``kv_start_loc`` offsets). Built on the host side of a step (builder)."""
    lens = seq_lens.to(torch.int64).cpu()
    if lens.numel() and int(lens.min()) < 0:
        raise ValueError("negative sequence length")
    total = int(lens.sum())
    pages = -(-lens // block_size)
    if lens.numel() and int(pages.max()) > block_table.shape[1]:
        raise ValueError(f"a request needs {int(pages.max())} pages; the block table has {block_table.shape[1]}")
    bt = block_table.to(device=device, dtype=torch.int64)
    req = torch.repeat_interleave(torch.arange(lens.numel()), lens).to(device)
    start = torch.cumsum(lens, 0) - lens
    t = torch.arange(total, device=device) - start.to(device)[req]
    return bt[req, t // block_size] * block_size + t % block_size


def cuda_capability() -> tuple[int, int] | None:
    """The current CUDA device's compute capability, or None without one."""
    if not torch.cuda.is_available():
        return None
    return tuple(torch.cuda.get_device_capability())  # type: ignore[return-value]


def import_reason(module: str, install: str, probe_first: bool = False) -> str | None:
    """Why ``module`` cannot be imported here (None if it can): not installed, or the import's
    error (a binary built for another torch says so here, not as a crash). ``probe_first``:
    import it in a child process before this one (``subprocess_import_reason``)."""
    if importlib.util.find_spec(module.split(".")[0]) is None:
        return f"{module} is not installed ({install})"
    if probe_first and module not in sys.modules:
        reason = subprocess_import_reason(module)
        if reason:
            return reason
    try:
        importlib.import_module(module)
    except BaseException as e:  # an ABI mismatch can raise anything, even SystemExit from a bad .so
        if isinstance(e, KeyboardInterrupt):
            raise
        return f"import {module} failed: {type(e).__name__}: {str(e).strip()[:300]}"
    return None


@functools.lru_cache(maxsize=None)
def subprocess_import_reason(module: str, timeout_s: float = 180.0) -> str | None:
    """Import ``module`` in a child interpreter first (once per process): a binary built for
    another torch can abort the process on import (a crash no ``except`` catches), which would
    take the harness worker down with it. None when the child imported it."""
    try:
        r = subprocess.run([sys.executable, "-c", f"import torch, {module}"], capture_output=True, text=True,
                           timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return f"import {module} did not finish in {timeout_s:.0f} s (in a child process)"
    if r.returncode == 0:
        return None
    tail = (r.stderr.strip().splitlines() or [f"exit status {r.returncode}"])[-1]
    how = f"exit status {r.returncode}" if r.returncode > 0 else f"killed by signal {-r.returncode}"
    return f"import {module} failed in a child process ({how}): {tail[:300]}"


def module_version(module: str, dists: tuple[str, ...] = ()) -> str:
    """A distribution's version (the first of ``dists`` installed), else the module's __version__."""
    from importlib import metadata

    for d in dists:
        try:
            return metadata.version(d)
        except metadata.PackageNotFoundError:
            continue
    try:
        return str(getattr(importlib.import_module(module), "__version__", "unknown"))
    except Exception:
        return "unknown"


def copy_lse(lse_out: torch.Tensor | None, lse: torch.Tensor | None) -> None:
    """Write a kernel's ``[T, H]``-shaped LSE (any strides) into the harness's buffer."""
    if lse_out is not None and lse is not None:
        lse_out.copy_(lse.reshape(lse_out.shape))


def describe_form(config: AttentionConfig) -> dict[str, Any]:
    return {"attention_kind": config.attention_kind, "head_size": config.head_size,
            "value_head_size": config.value_head_size}
