"""An MLA case -> a concrete batch (attn_contract/mla.py says what each form passes a backend).

Every token has one latent vector (ckv 512 + kpe 64), written through a shuffled block table
into the latent paged cache ``(num_blocks, block_size, 576)``; spare blocks hold random finite
values (NaN under ``adversarial``). The layer's up-projection W_UK/W_UV is drawn per head.

- absorbed form: the query is ``[T, H, 576]``: the absorbed nope part, ``q_nope @ W_UK``, is drawn
  directly with the variance that product has (0.25 with unit q_nope and W_UK ~ N(0, 1/512)),
  the rope part unit normal, so a logit has the same spread as in the expanded form. The
  reference reads each request's latent vectors (keys) and their first 512 entries (values).
- expanded form: the query is ``[T, H, 192]``; each request's keys are ``[ckv @ W_UK[h].T | kpe]``
  and values ``ckv @ W_UV[h]`` over all its tokens (fp32 products of the dequantized latent,
  rounded to the model dtype once), packed in batch order into ``key``/``value``.
"""

from __future__ import annotations

from typing import Any

import torch

from attn_contract import LayerParams
from harness.case.layout import CaseLayout, case_layout
from harness.spec import CaseSpec


def _randn(shape: tuple[int, ...], gen: torch.Generator, device: torch.device, std: float = 1.0) -> torch.Tensor:
    x = torch.randn(shape, generator=gen, device=device, dtype=torch.float32)
    return x * std if std != 1.0 else x


def _store(x: torch.Tensor, scale: float, cache_dtype: torch.dtype) -> torch.Tensor:
    """Real values -> the cache's stored values (fp8: value / scale, clamped to the format)."""
    if cache_dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        fmax = torch.finfo(cache_dtype).max
        return (x.float() / scale).clamp(-fmax, fmax).to(cache_dtype)
    return x.to(cache_dtype)


def generate_mla(case: CaseSpec, device: torch.device, layout: CaseLayout | None = None,
                 kv_scale: float = 1.0) -> dict[str, Any]:
    """The fields of an ``attention: mla`` case's ``harness.case.workload.Batch`` (which builds
    it: this module stays below it), deterministically from ``case.seed``."""
    layout = layout or case_layout(case)
    cfg = layout.config
    dims = cfg.mla
    assert dims is not None
    qlens, seq_lens = list(layout.query_lens), list(layout.seq_lens)
    n, bs, hq = layout.num_reqs, cfg.block_size, cfg.num_heads
    L, R = dims.kv_lora_rank, dims.qk_rope_head_dim
    model_dtype, cache_dtype = cfg.torch_dtype, cfg.cache_torch_dtype
    gen = torch.Generator(device=device).manual_seed(case.seed)
    cpu_gen = torch.Generator().manual_seed(case.seed)
    used, num_blocks = layout.num_blocks_used, layout.num_blocks
    perm = torch.randperm(num_blocks, generator=cpu_gen).tolist()
    if num_blocks > 1 and perm[:used] == list(range(used)):
        perm = perm[1:] + perm[:1]  # never the identity mapping
    table = torch.zeros((n, layout.max_blocks_per_req), dtype=torch.int32)
    cursor = 0
    for i in range(n):
        row = perm[cursor: cursor + layout.own_blocks[i]]
        cursor += len(row)
        table[i, : len(row)] = torch.tensor(row, dtype=torch.int32)
    table_dev = table.to(device)

    mag = float(case.magnitude)
    cache = _store(_randn((num_blocks, bs, L + R), gen, device).to(model_dtype), kv_scale, cache_dtype)
    if case.adversarial:
        cache.fill_(float("nan"))
    latents: list[torch.Tensor] = []  # per request [s, L + R], stored (cache) values
    blocks, offsets, new_slots = [], [], []
    for i in range(n):
        s = seq_lens[i]
        lat = _randn((s, L + R), gen, device)
        if mag != 1.0:
            lat[:, L:] *= mag  # the rope key part, as the MHA generator scales K
        latents.append(_store(lat.to(model_dtype), kv_scale, cache_dtype))
        t = torch.arange(s, device=device)
        blk, off = table_dev[i, t // bs].long(), t % bs
        blocks.append(blk)
        offsets.append(off)
        new_slots.append((blk * bs + off)[s - qlens[i]:])
    cache[torch.cat(blocks), torch.cat(offsets)] = torch.cat(latents)

    # The layer's kv_b_proj, split per head: unit-variance k_nope and v from a unit latent.
    w_std = L ** -0.5
    w_uk = _randn((hq, dims.qk_nope_head_dim, L), gen, device, w_std).to(model_dtype)
    w_uv = _randn((hq, L, dims.v_head_dim), gen, device, w_std).to(model_dtype)
    T = sum(qlens)
    fp8 = cfg.is_fp8_kv

    def real(lat: torch.Tensor) -> torch.Tensor:
        return lat.float() * kv_scale if fp8 else lat.float()

    if cfg.absorbed:
        # The absorbed nope part has the variance of q_nope @ W_UK: qk_nope_head_dim / L.
        q_nope = _randn((T, hq, L), gen, device, (dims.qk_nope_head_dim / L) ** 0.5)
        q_pe = _randn((T, hq, R), gen, device, mag)
        query = torch.cat([q_nope, q_pe], -1).to(model_dtype)
        k_logical = [lat.unsqueeze(1) for lat in latents]  # [s, 1, L + R] stored values
        v_logical = [lat[:, :L].unsqueeze(1) for lat in latents]
        key = torch.cat([real(lat[s - q:]) for lat, s, q in zip(latents, seq_lens, qlens)]).to(model_dtype)
        key = key.unsqueeze(1)
        value = key[..., :L]
    else:
        q_nope = _randn((T, hq, dims.qk_nope_head_dim), gen, device)
        q_pe = _randn((T, hq, R), gen, device, mag)
        query = torch.cat([q_nope, q_pe], -1).to(model_dtype)
        k_logical, v_logical = [], []
        uk, uv = w_uk.float(), w_uv.float()
        for lat in latents:
            x = real(lat)
            ckv, kpe = x[:, :L], x[:, L:]
            k_nope = torch.einsum("sl,hnl->shn", ckv, uk)
            k_logical.append(torch.cat([k_nope, kpe.unsqueeze(1).expand(-1, hq, -1)], -1).to(model_dtype))
            v_logical.append(torch.einsum("sl,hlv->shv", ckv, uv).to(model_dtype))
        key, value = torch.cat(k_logical), torch.cat(v_logical)

    layer = LayerParams(k_scale=kv_scale, v_scale=kv_scale, mla_w_uk=w_uk, mla_w_uv=w_uv)
    return dict(case=case, config=cfg, device=device, kinds=list(layout.kinds), query_lens=qlens,
                seq_lens=seq_lens, query=query, key=key, value=value, k_logical=k_logical,
                v_logical=v_logical, kv_cache=cache, block_table=table_dev,
                slot_mapping=torch.cat(new_slots).long(), layer=layer, num_blocks_used=used, layout=layout)
