"""Helpers the torch backends share: reading a request's K/V back out of the paged cache."""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib.resources import files
from typing import TypeVar

import torch

from attn_contract import (
    MLA_ABSORBED,
    MLA_EXPANDED,
    AttentionConfig,
    AttentionMetadataBuilder,
    FP8_DTYPES,
    CommonAttentionMetadata,
    HeadSizes,
    LayerParams,
    index_kv,
)

# What the torch backends that run MLA add to their capabilities (both forms, any value head).
MLA_TORCH_KINDS: frozenset[str] = frozenset({"mha", MLA_ABSORBED, MLA_EXPANDED})
MLA_CAPABILITIES = dict(attention_kinds=MLA_TORCH_KINDS,
                        v_head_sizes=HeadSizes(min=1, max=1024, multiple_of=1))


@dataclass
class HostLoopMetadata:
    """What the torch backends need: host lists to loop over and the device block table."""

    query_start_loc: list[int]
    seq_lens: list[int]
    block_table: torch.Tensor
    block_size: int
    causal: bool
    # Where each request's keys start in MLA's expanded key/value (kv_start_loc_cpu).
    kv_start_loc: list[int] = field(default_factory=list)

    @property
    def query_lens(self) -> list[int]:
        """Query rows of each request, from ``query_start_loc``."""
        qsl = self.query_start_loc
        return [qsl[r + 1] - qsl[r] for r in range(len(self.seq_lens))]


M = TypeVar("M", bound=HostLoopMetadata)


class HostLoopMetadataBuilder(AttentionMetadataBuilder[HostLoopMetadata]):
    def build(self, common: CommonAttentionMetadata) -> HostLoopMetadata:
        return self.host_metadata(common, HostLoopMetadata)

    @staticmethod
    def host_metadata(common: CommonAttentionMetadata, cls: type[M]) -> M:
        """The host lists as ``cls``, a subclass whose own fields have defaults (its builder
        fills them in)."""
        return cls(
            query_start_loc=common.query_start_loc_cpu.tolist(),
            seq_lens=common.seq_lens_cpu.tolist(),
            block_table=common.block_table,
            block_size=common.block_size,
            causal=common.causal,
            kv_start_loc=common.kv_start_loc_cpu.tolist(),
        )


def gather_request_kv(
    kv_cache: torch.Tensor, block_table_row: torch.Tensor, seq_len: int, block_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """K, V ``[seq_len, Hk, D]`` of one request, read through its block table.

    ``kv_cache`` is the logical ``(num_blocks, 2, block_size, Hk, D)`` view in either stride
    order; indexing goes through the view, so HND memory works unchanged."""
    t = torch.arange(seq_len, device=kv_cache.device)
    blocks = block_table_row[t // block_size].long()
    offsets = t % block_size
    return index_kv(kv_cache, blocks, 0, offsets), index_kv(kv_cache, blocks, 1, offsets)


def dequantize(k: torch.Tensor, v: torch.Tensor, layer: LayerParams, out_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """fp8 cache entries back to real values (stored * scale); other dtypes just cast."""
    if k.dtype in FP8_DTYPES:
        return (k.float() * layer.k_scale).to(out_dtype), (v.float() * layer.v_scale).to(out_dtype)
    return k.to(out_dtype), v.to(out_dtype)


# ---------------------------------------------------------------- padded batches
# A segment is query rows [lo, hi) of request r, which needs the request's first `keys` keys
# (all of them, or with causal masking only those up to its last row's diagonal).
Segment = tuple[int, int, int, int]


def plan_chunks(query_lens: list[int], seq_lens: list[int], num_heads: int, budget_elems: int,
                causal: bool) -> list[list[Segment]]:
    """Requests grouped into chunks whose PADDED score matrix (chunk size x max rows x max keys
    x heads) stays within ``budget_elems``; a request too large on its own is split by query
    rows. The torch backends compute one chunk per call, and harness.plan.memory estimates their
    peak from the same plan, so the estimate and the allocation cannot drift apart."""
    chunks: list[list[Segment]] = []
    cur: list[Segment] = []
    qmax = smax = 0
    for r, (q, s) in enumerate(zip(query_lens, seq_lens)):
        if q <= 0:
            continue
        rows = q if q * s * num_heads <= budget_elems else max(1, budget_elems // max(1, num_heads * s))
        for lo in range(0, q, rows):
            hi = min(q, lo + rows)
            keys = min(s, s - q + hi) if causal else s
            nq, ns = max(qmax, hi - lo), max(smax, keys)
            if cur and (len(cur) + 1) * nq * ns * num_heads > budget_elems:
                chunks.append(cur)
                cur, nq, ns = [], hi - lo, keys
            cur.append((r, lo, hi, keys))
            qmax, smax = nq, ns
    if cur:
        chunks.append(cur)
    return chunks


def chunk_dims(chunk: list[Segment]) -> tuple[int, int, int]:
    """(requests, padded query rows, padded keys) of a chunk."""
    return len(chunk), max(hi - lo for _, lo, hi, _ in chunk), max(k for *_, k in chunk)


@dataclass
class PaddedChunk:
    """Device index tensors that turn one chunk of the paged batch into padded tensors:
    K/V ``[b, smax, Hk, D]`` through (blocks, offsets), Q ``[b, qmax, Hq, D]`` through ``tok``,
    and which keys each padded query row may see (``keep`` [b, qmax, smax], ``dist`` = query
    diagonal minus key position, for ALiBi)."""

    segments: list[Segment]
    blocks: torch.Tensor
    offsets: torch.Tensor
    tok: torch.Tensor
    row_valid: torch.Tensor  # [b, qmax] padded rows that are real query tokens
    # keep [b, qmax, smax] and dist [b, qmax, smax] int; None once SDPA's builder holds only its mask.
    keep: torch.Tensor | None
    dist: torch.Tensor | None
    qmax: int
    smax: int
    # Flat padded rows (b * qmax) that are real query tokens, and their tokens: the scatter back
    # reads them instead of indexing by ``row_valid``, a boolean index whose size the host must
    # read from the device (a sync in every forward, which kept launches from being hidden and
    # a CUDA graph from being captured).
    src: torch.Tensor
    dst: torch.Tensor
    # [b, smax] each padded key's row in MLA's expanded key/value (past a request's end: its last key).
    kv_tok: torch.Tensor | None = None


def padded_chunk(chunk: list[Segment], md: HostLoopMetadata, num_tokens: int, sliding_window: int | None,
                 device: torch.device) -> PaddedChunk:
    b, qmax, smax = chunk_dims(chunk)
    qsl = md.query_start_loc
    reqs = torch.tensor([r for r, *_ in chunk], device=device)
    lo = torch.tensor([s[1] for s in chunk], device=device)
    nrows = torch.tensor([s[2] - s[1] for s in chunk], device=device)
    qlens = torch.tensor([qsl[r + 1] - qsl[r] for r, *_ in chunk], device=device)
    slens = torch.tensor([md.seq_lens[r] for r, *_ in chunk], device=device)
    starts = torch.tensor([qsl[r] for r, *_ in chunk], device=device)
    t = torch.arange(smax, device=device)
    table = md.block_table[reqs].long()
    # Positions past a request's length read its last table entry (or block 0) and are masked.
    blocks = table[:, (t // md.block_size).clamp_max(table.shape[1] - 1)]
    offsets = (t % md.block_size).expand(b, smax).contiguous()
    rows = torch.arange(qmax, device=device)
    row_valid = rows.view(1, qmax) < nrows.view(b, 1)
    tok = (starts.view(b, 1) + lo.view(b, 1) + rows).clamp_max(num_tokens - 1)
    diag = (lo.view(b, 1) + rows.view(1, qmax) + (slens - qlens).view(b, 1)).unsqueeze(-1)  # [b, qmax, 1]
    j = t.view(1, 1, smax)
    keep = j < slens.view(b, 1, 1)
    if md.causal:
        keep = keep & (j <= diag)
    if sliding_window is not None:
        keep = keep & (diag - j < sliding_window)
        if not md.causal:
            keep = keep & (j - diag < sliding_window)
    keep = keep & row_valid.unsqueeze(-1)
    src = row_valid.flatten().nonzero().squeeze(1)  # built once per batch: the sync is the builder's
    kv_tok = None
    if md.kv_start_loc:
        kstart = torch.tensor([md.kv_start_loc[r] for r, *_ in chunk], device=device)
        kv_tok = kstart.view(b, 1) + torch.minimum(t.view(1, smax), (slens - 1).clamp_min(0).view(b, 1))
    return PaddedChunk(chunk, blocks, offsets, tok, row_valid, keep, diag - j, qmax, smax,
                       src=src, dst=tok.flatten()[src], kv_tok=kv_tok)


def gather_kv(kv_cache: torch.Tensor, key: torch.Tensor, value: torch.Tensor, pc: PaddedChunk,
              cfg: AttentionConfig, layer: LayerParams, out_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """K, V ``[b, smax, Hk, D]`` / ``[b, smax, Hk, Dv]`` of a padded chunk, in ``out_dtype``: from
    the (K, V) paged cache; MLA absorbed: the latent cache's entries (keys) and their first
    kv_lora_rank values (values; a view of the keys), one KV head; MLA expanded: the packed
    key/value rows (attn_contract/mla.py)."""
    if cfg.attention_kind == MLA_ABSORBED:
        lat = index_kv(kv_cache, pc.blocks, pc.offsets)  # [b, smax, L + R]
        lat, _ = dequantize(lat, lat, layer, out_dtype)
        lat = lat.unsqueeze(2)
        return lat, lat[..., : cfg.mla.kv_lora_rank]
    if cfg.attention_kind == MLA_EXPANDED:
        return key[pc.kv_tok].to(out_dtype), value[pc.kv_tok].to(out_dtype)
    return dequantize(index_kv(kv_cache, pc.blocks, 0, pc.offsets), index_kv(kv_cache, pc.blocks, 1, pc.offsets),
                      layer, out_dtype)


def scatter_rows(out: torch.Tensor, o: torch.Tensor, pc: PaddedChunk, md: HostLoopMetadata) -> None:
    """Padded per-chunk output ``o [b, qmax, H, ...]`` back into token order in ``out``, by the
    chunk's precomputed row indices: no op here waits on the device."""
    out.index_copy_(0, pc.dst, o.flatten(0, 1).index_select(0, pc.src).to(out.dtype))


# ---------------------------------------------------------------- standalone reproducer source
# The torch backends' library calls for `harness repro` / `harness crosscheck` (names:
# AttentionBackend.standalone_call), kept as plain Python in backends/templates/, each the call
# its adapter makes (crosscheck times them against the adapter: tests/crosscheck/test_crosscheck.py):
# padded_chunks: plan_chunks / padded_chunk below, inline; torch_math_call: padded fp32
# softmax(QK^T)V per chunk; sdpa_call: one batched SDPA call per chunk with the builder's mask.
def _call_template(name: str) -> str:
    return (files("backends") / "templates" / name).read_text(encoding="utf-8")


_PADDED = _call_template("padded_chunks.py.tmpl")
TORCH_MATH_CALL = _PADDED + _call_template("torch_math_call.py.tmpl")
SDPA_CALL = _PADDED + _call_template("sdpa_call.py.tmpl")
