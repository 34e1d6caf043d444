"""Case spec -> a concrete batch: request lengths, Q/K/V tensors, a shuffled paged KV cache.

The generator keeps the logical (unpaged) K/V of every request next to the paged cache, so
the reference never reads the cache it is checking. The block table is a random permutation
of the pool (never the identity), spare blocks hold finite random values, and block tables
alias only where a case asks for a shared prefix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from attn_contract import MLA_EXPANDED, AttentionConfig, CommonAttentionMetadata, LayerParams
from harness.case.layout import CaseLayout, case_layout, draw_lengths, sample_lengths  # noqa: F401 (re-exported)
from harness.spec import CaseSpec

FP8_MAX = {"fp8_e4m3": 448.0, "fp8_e5m2": 57344.0}


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """The standard ALiBi slopes (Press et al.), with the usual extension to non-powers of 2."""
    closest = 2 ** math.floor(math.log2(num_heads))
    base = 2.0 ** (-(2.0 ** -(math.log2(closest) - 3)))
    slopes = [base ** (i + 1) for i in range(closest)]
    if closest != num_heads:
        extra_base = 2.0 ** (-(2.0 ** -(math.log2(2 * closest) - 3)))
        slopes += [extra_base ** (2 * i + 1) for i in range(num_heads - closest)]
    return torch.tensor(slopes, dtype=torch.float32)


@dataclass
class Batch:
    """One generated batch. Tensors live on ``device``; per-request lists are host data."""

    case: CaseSpec
    config: AttentionConfig
    device: torch.device
    kinds: list[str]
    query_lens: list[int]
    seq_lens: list[int]
    query: torch.Tensor  # [num_tokens, Hq, D], model dtype
    key: torch.Tensor  # [num_tokens, Hk, D] new tokens' K, model dtype (MLA: attn_contract/mla.py)
    value: torch.Tensor
    k_logical: list[torch.Tensor]  # per request [seq_len, Hk, D], cache dtype (never read from the cache)
    v_logical: list[torch.Tensor]
    kv_cache: torch.Tensor  # canonical [num_blocks, 2, block_size, Hk, D], cache dtype (MLA: [num_blocks, block_size, 576])
    block_table: torch.Tensor  # int32 [num_reqs, max_blocks]
    slot_mapping: torch.Tensor  # int64 [num_tokens]
    layer: LayerParams
    prefix_group_lens: tuple[int, ...] = ()
    prefix_group_of_req: tuple[int, ...] = ()
    num_blocks_used: int = 0
    extra: dict = field(default_factory=dict)
    layout: CaseLayout | None = None  # the case's layout the batch was built from

    @property
    def num_reqs(self) -> int:
        return len(self.query_lens)

    @property
    def num_tokens(self) -> int:
        return int(self.query.shape[0])

    @property
    def context_lens(self) -> list[int]:
        return [s - q for s, q in zip(self.seq_lens, self.query_lens)]

    @property
    def query_start_loc(self) -> list[int]:
        return [0] + np.cumsum(self.query_lens).tolist()

    def summary(self) -> dict:
        return {
            "num_reqs": self.num_reqs,
            "num_tokens": self.num_tokens,
            "num_decode": sum(k == "decode" for k in self.kinds),
            "num_prefill": sum(k == "prefill" for k in self.kinds),
            "num_extend": sum(k == "extend" for k in self.kinds),
            "max_query_len": max(self.query_lens),
            "max_seq_len": max(self.seq_lens),
            "mean_seq_len": float(np.mean(self.seq_lens)),
            "total_kv_tokens": int(sum(self.seq_lens)),
            "num_blocks": int(self.kv_cache.shape[0]),
            "prefix_groups": len(self.prefix_group_lens),
        }

    def common_metadata(self) -> CommonAttentionMetadata:
        qsl = torch.tensor(self.query_start_loc, dtype=torch.int32)
        sl = torch.tensor(self.seq_lens, dtype=torch.int32)
        return CommonAttentionMetadata(
            query_start_loc=qsl.to(self.device),
            query_start_loc_cpu=qsl,
            seq_lens=sl.to(self.device),
            seq_lens_cpu=sl,
            block_table=self.block_table,
            slot_mapping=self.slot_mapping,
            num_reqs=self.num_reqs,
            num_actual_tokens=self.num_tokens,
            max_query_len=max(self.query_lens),
            max_seq_len=max(self.seq_lens),
            causal=self.config.causal,
            block_size=self.config.block_size,
            prefix_group_lens=self.prefix_group_lens,
            prefix_group_of_req=self.prefix_group_of_req,
        )

    def dequantized_kv(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Request ``i``'s logical K/V as float32 real values (fp8 scaled back; MLA's expanded
        K/V are already real values in the model dtype)."""
        k = self.k_logical[i].float()
        v = self.v_logical[i].float()
        if self.config.is_fp8_kv and self.k_logical[i].dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
            k = k * self.layer.k_scale
            v = v * self.layer.v_scale
        return k, v

    def key_rows(self, reqs: list[int], token_index: torch.Tensor) -> torch.Tensor:
        """Rows of ``key``/``value`` belonging to requests ``reqs``, in that order: their query
        tokens (``token_index``), or in MLA's expanded form every token of each request."""
        if self.config.attention_kind != MLA_EXPANDED:
            return token_index
        ksl = [0] + np.cumsum(self.seq_lens).tolist()
        return torch.cat([torch.arange(ksl[i], ksl[i + 1], device=self.device) for i in reqs])

    def reordered(self, order: list[int]) -> tuple["Batch", torch.Tensor]:
        """The same batch with requests in ``order``, and, for each new token position, the
        token position it had before (so outputs can be mapped back)."""
        if order == list(range(self.num_reqs)):
            return self, torch.arange(self.num_tokens, device=self.device)
        qsl = self.query_start_loc
        token_index = torch.cat(
            [torch.arange(qsl[i], qsl[i + 1], device=self.device) for i in order]
        )
        group_of = tuple(self.prefix_group_of_req[i] for i in order) if self.prefix_group_of_req else ()
        kv_index = self.key_rows(order, token_index)
        return (
            replace(
                self,
                kinds=[self.kinds[i] for i in order],
                query_lens=[self.query_lens[i] for i in order],
                seq_lens=[self.seq_lens[i] for i in order],
                query=self.query[token_index],
                key=self.key[kv_index],
                value=self.value[kv_index],
                k_logical=[self.k_logical[i] for i in order],
                v_logical=[self.v_logical[i] for i in order],
                block_table=self.block_table[torch.tensor(order, device=self.device)],
                slot_mapping=self.slot_mapping[token_index],
                prefix_group_of_req=group_of,
            ),
            token_index,
        )


def _randn(shape: tuple[int, ...], gen: torch.Generator, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(shape, generator=gen, device=device, dtype=torch.float32).to(dtype)


def _quantize(x: torch.Tensor, scale: float, cache_dtype: torch.dtype) -> torch.Tensor:
    if cache_dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        fmax = torch.finfo(cache_dtype).max
        return (x.float() / scale).clamp(-fmax, fmax).to(cache_dtype)
    return x.to(cache_dtype)


def kv_scales(case: CaseSpec) -> tuple[float, float]:
    """(k_scale, v_scale) of the case's layer: fp8 caches store value / scale, and "auto" maps
    the data's absmax onto the format's max; 1.0 without an fp8 cache."""
    if not case.kv_cache_dtype.startswith("fp8"):
        return 1.0, 1.0
    amax_guess = 5.5  # |N(0,1)| over millions of draws stays under this; exact value only sets range use
    k, v = (amax_guess / FP8_MAX[case.kv_cache_dtype] if s == "auto" else float(s) for s in case.kv_scales)
    return k, v


def generate(case: CaseSpec, device: torch.device | str = "cpu", layout: CaseLayout | None = None) -> Batch:
    """Build the batch a case describes, deterministically from ``case.seed``. ``layout`` is
    the case's ``case_layout`` when the caller has it already (lengths and blocks come from it)."""
    device = torch.device(device)
    layout = layout or case_layout(case)
    cfg = layout.config
    if cfg.is_mla:  # one latent vector per token: harness/case/workload_mla.py
        from harness.case.workload_mla import generate_mla

        return Batch(**generate_mla(case, device, layout, kv_scales(case)[0]))
    qlens, seq_lens, group_of = list(layout.query_lens), list(layout.seq_lens), list(layout.group_of_req)
    n = layout.num_reqs
    bs = cfg.block_size
    hk, hq, d = cfg.num_kv_heads, cfg.num_heads, cfg.head_size
    model_dtype = cfg.torch_dtype
    cache_dtype = cfg.cache_torch_dtype
    prefix_len, num_groups = layout.prefix_len, layout.prefix_groups

    # Block pool (see CaseLayout): shared prefix blocks once per group, each request's own
    # blocks after them, plus spare blocks; physical ids are a random permutation of the pool.
    prefix_blocks, own_blocks = layout.prefix_blocks, layout.own_blocks
    used, num_blocks = layout.num_blocks_used, layout.num_blocks
    gen = torch.Generator(device=device).manual_seed(case.seed)
    cpu_gen = torch.Generator().manual_seed(case.seed)
    perm = torch.randperm(num_blocks, generator=cpu_gen).tolist()
    if num_blocks > 1 and perm[:used] == list(range(used)):
        perm = perm[1:] + perm[:1]  # never the identity mapping
    cursor = 0
    group_blocks = []
    for _ in range(num_groups):
        group_blocks.append(perm[cursor : cursor + prefix_blocks])
        cursor += prefix_blocks
    max_blocks = layout.max_blocks_per_req
    table = torch.zeros((n, max_blocks), dtype=torch.int32)
    for i in range(n):
        row = (group_blocks[group_of[i]] if num_groups else []) + perm[cursor : cursor + own_blocks[i]]
        cursor += own_blocks[i]
        table[i, : len(row)] = torch.tensor(row, dtype=torch.int32)

    kv_scale_k, kv_scale_v = kv_scales(case)

    # Spare (unused) blocks keep finite random data: a kernel that reads them shows up as a mismatch.
    kv_cache = _quantize(_randn((num_blocks, 2, bs, hk, d), gen, device, model_dtype), kv_scale_k, cache_dtype)  # spare blocks
    mag = float(case.magnitude)

    k_logical: list[torch.Tensor] = []
    v_logical: list[torch.Tensor] = []
    prefix_kv = [
        (_randn((prefix_len, hk, d), gen, device, model_dtype), _randn((prefix_len, hk, d), gen, device, model_dtype))
        for _ in range(num_groups)
    ]
    for i in range(n):
        own = seq_lens[i] - (prefix_len if num_groups else 0)
        k = _randn((own, hk, d), gen, device, model_dtype)
        v = _randn((own, hk, d), gen, device, model_dtype)
        if mag != 1.0:
            k = (k.float() * mag).to(model_dtype)
        if num_groups:
            pk, pv = prefix_kv[group_of[i]]
            if mag != 1.0:
                pk = (pk.float() * mag).to(model_dtype)
            k, v = torch.cat([pk, k]), torch.cat([pv, v])
        k_logical.append(_quantize(k, kv_scale_k, cache_dtype))
        v_logical.append(_quantize(v, kv_scale_v, cache_dtype))

    # Write every logical token through the block table; shared prefix blocks get the same data
    # from each request of the group.
    table_dev = table.to(device)
    all_blocks, all_offsets, slot_new = [], [], []
    for i in range(n):
        t = torch.arange(seq_lens[i], device=device)
        blk = table_dev[i, t // bs].long()
        off = t % bs
        all_blocks.append(blk)
        all_offsets.append(off)
        slot_new.append((blk * bs + off)[seq_lens[i] - qlens[i] :])
    blk_cat, off_cat = torch.cat(all_blocks), torch.cat(all_offsets)
    if case.adversarial:
        kv_cache.fill_(float("nan"))  # every slot no request owns (spare pages, last-page tails) stays NaN
    kv_cache[blk_cat, 0, off_cat] = torch.cat(k_logical)
    kv_cache[blk_cat, 1, off_cat] = torch.cat(v_logical)

    query = _randn((sum(qlens), hq, d), gen, device, model_dtype)
    if mag != 1.0:
        query = (query.float() * mag).to(model_dtype)
    key = torch.cat([k[s - q :] for k, s, q in zip(k_logical, seq_lens, qlens)])
    value = torch.cat([v[s - q :] for v, s, q in zip(v_logical, seq_lens, qlens)])
    if cfg.is_fp8_kv:
        key = (key.float() * kv_scale_k).to(model_dtype)
        value = (value.float() * kv_scale_v).to(model_dtype)

    layer = LayerParams(
        k_scale=kv_scale_k,
        v_scale=kv_scale_v,
        sinks=torch.randn((hq,), generator=cpu_gen).to(device) if cfg.sinks else None,
        alibi_slopes=alibi_slopes(hq).to(device) if cfg.alibi else None,
    )
    return Batch(
        case=case,
        config=cfg,
        device=device,
        kinds=list(layout.kinds),
        query_lens=qlens,
        seq_lens=seq_lens,
        query=query,
        key=key,
        value=value,
        k_logical=k_logical,
        v_logical=v_logical,
        kv_cache=kv_cache,
        block_table=table_dev,
        slot_mapping=torch.cat(slot_new).long(),
        layer=layer,
        prefix_group_lens=tuple([prefix_len] * num_groups),
        prefix_group_of_req=tuple(group_of),
        num_blocks_used=used,
        layout=layout,
    )
