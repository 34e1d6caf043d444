"""An MLA decode batch on a shuffled paged latent cache, and its fp32 reference.

Pool: ``ckv`` [pages, page, 512] and ``kpe`` [pages, page, 64] (FlashInfer's two-tensor form;
FlashMLA and vLLM concatenate them into [pages, page, 576]); request b's token t lives in page
``block_table[b, t // page]``, slot ``t % page``; spare pages hold finite noise."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from tools.mla_probe.common import mla_reference

CKV, KPE = 512, 64
# DeepSeek-V3: qk_nope 128 + qk_rope 64 before absorption.
SM_SCALE = 1.0 / math.sqrt(128 + 64)


@dataclass
class MLABatch:
    heads: int
    q_len: int
    page: int
    kv_lens: list[int]
    q_nope: torch.Tensor  # [B*q_len, H, 512] bf16
    q_pe: torch.Tensor  # [B*q_len, H, 64]
    ckv: torch.Tensor  # [pages, page, 512] bf16 (or fp8 with ckv_scale)
    kpe: torch.Tensor  # [pages, page, 64]
    block_table: torch.Tensor  # [B, max_pages] int32, device
    kv_indptr: torch.Tensor  # [B+1] int32 (CSR over pages), cpu
    kv_indices: torch.Tensor  # [nnz pages] int32, device
    scale: float = 1.0  # dequantization scale of an fp8 cache (ckv and kpe share it)
    ref_out: torch.Tensor | None = None
    ref_lse: torch.Tensor | None = None  # natural log [B*q_len, H]
    extras: dict = field(default_factory=dict)

    @property
    def batch(self) -> int:
        return len(self.kv_lens)

    @property
    def cache_bytes(self) -> int:
        """Bytes of latent cache the batch reads (576 values per token)."""
        return sum(self.kv_lens) * (CKV + KPE) * self.ckv.element_size()

    def logical(self, b: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Request b's latent cache in token order, dequantized to fp32 if fp8."""
        n = -(-self.kv_lens[b] // self.page)
        pages = self.block_table[b, :n].long()
        ckv = self.ckv[pages].reshape(-1, CKV)[: self.kv_lens[b]].float() * self.scale
        kpe = self.kpe[pages].reshape(-1, KPE)[: self.kv_lens[b]].float() * self.scale
        return ckv, kpe

    def reference(self, causal: bool = True) -> None:
        outs, lses = [], []
        for b in range(self.batch):
            ckv, kpe = self.logical(b)
            sl = slice(b * self.q_len, (b + 1) * self.q_len)
            o, lse = mla_reference(self.q_nope[sl], self.q_pe[sl], ckv, kpe, SM_SCALE, causal)
            outs.append(o)
            lses.append(lse)
        self.ref_out, self.ref_lse = torch.cat(outs), torch.cat(lses)

    def contiguous(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The latent gathered into a padded contiguous cache [B, max_len, 1, D] (FA3's
        flash_attn_with_kvcache form)."""
        lmax = max(self.kv_lens)
        ckv = torch.zeros(self.batch, lmax, 1, CKV, dtype=self.ckv.dtype, device=self.ckv.device)
        kpe = torch.zeros(self.batch, lmax, 1, KPE, dtype=self.kpe.dtype, device=self.kpe.device)
        for b in range(self.batch):
            n = -(-self.kv_lens[b] // self.page)
            pages = self.block_table[b, :n].long()
            ckv[b, : self.kv_lens[b], 0] = self.ckv[pages].reshape(-1, CKV)[: self.kv_lens[b]]
            kpe[b, : self.kv_lens[b], 0] = self.kpe[pages].reshape(-1, KPE)[: self.kv_lens[b]]
        return ckv, kpe

    def as_views(self) -> "MLABatch":
        """The same batch with q and the cache held as ONE 576-wide tensor each and the 512/64
        parts as strided views of it (the contract's latent layout, as the harness adapters and
        SGLang pass them to FlashInfer); the reference is shared."""
        pool = torch.cat([self.ckv, self.kpe], dim=-1)
        q = torch.cat([self.q_nope, self.q_pe], dim=-1)
        return MLABatch(self.heads, self.q_len, self.page, self.kv_lens, q[..., :CKV], q[..., CKV:], pool[..., :CKV],
                        pool[..., CKV:], self.block_table, self.kv_indptr, self.kv_indices, self.scale, self.ref_out,
                        self.ref_lse, extras={"pool": pool, "q": q})

    def token_slots(self) -> torch.Tensor:
        """Flat pool slot (page * page_size + offset) of every cached token, request by request:
        the index a packed (varlen) gather reads."""
        idx = []
        for b in range(self.batch):
            t = torch.arange(self.kv_lens[b], device=self.block_table.device)
            idx.append(self.block_table[b, t // self.page].long() * self.page + t % self.page)
        return torch.cat(idx)


def make_mla_batch(heads: int, q_len: int, page: int, kv_lens: list[int], seed: int = 0,
                   fp8: bool = False, device: str = "cuda") -> MLABatch:
    gen = torch.Generator(device="cpu").manual_seed(seed)
    dev = torch.device(device)
    need = [-(-n // page) for n in kv_lens]
    pool = sum(need) + 4  # spares
    perm = torch.randperm(pool, generator=gen).to(torch.int32)
    bt = torch.zeros(len(kv_lens), max(need), dtype=torch.int32)
    at = 0
    for b, n in enumerate(need):
        bt[b, :n] = perm[at: at + n]
        at += n
    ckv = torch.randn(pool, page, CKV, generator=gen).to(dev, torch.bfloat16)
    kpe = torch.randn(pool, page, KPE, generator=gen).to(dev, torch.bfloat16)
    scale = 1.0
    if fp8:
        # One per-tensor scale for the latent (vLLM's MLA fp8 cache keeps one k scale).
        amax = max(float(ckv.abs().max()), float(kpe.abs().max()))
        scale = amax / 448.0
        ckv = (ckv.float() / scale).to(torch.float8_e4m3fn)
        kpe = (kpe.float() / scale).to(torch.float8_e4m3fn)
    t = len(kv_lens) * q_len
    q_nope = torch.randn(t, heads, CKV, generator=gen).to(dev, torch.bfloat16)
    q_pe = torch.randn(t, heads, KPE, generator=gen).to(dev, torch.bfloat16)
    indptr = torch.zeros(len(kv_lens) + 1, dtype=torch.int32)
    indptr[1:] = torch.cumsum(torch.tensor(need), 0)
    indices = torch.cat([bt[b, :n] for b, n in enumerate(need)])
    return MLABatch(heads, q_len, page, list(kv_lens), q_nope, q_pe, ckv, kpe, bt.to(dev), indptr,
                    indices.to(dev), scale)
