"""torch FlexAttention (``torch.nn.attention.flex_attention``) over the paged KV cache.

The batch is packed as one sequence (B=1), as vLLM's FLEX_ATTENTION backend packs it: query
tokens in batch order, every request's K/V gathered from the paged cache through its block
table into one packed key range (the gather, and fp8 dequantization, run in ``forward``, so
they are timed). A ``BlockMask`` built on the host (``BlockMask.from_kv_blocks``, no dense
mask) lists per query block the key blocks it may see, full blocks apart from partial ones;
the ``mask_mod`` keeps a query to its own request's keys, bottom-right causal and the sliding
window. Softcap and ALiBi are ``score_mod``s; sinks are merged exactly after the call through
the returned LSE (softmax over [scores, sink] = the kernel's output scaled by
``exp(lse - logaddexp(lse, sink))``).

vLLM reads its own cache layout in place (K and V packed in the head dim, an inverse page
table in the mask_mod); the harness's cache is vLLM's FlashAttention layout, whose K plane
cannot be viewed as one token axis, hence the gather.

On CUDA the call is ``torch.compile(flex_attention)`` (Triton), compiled once per shape class:
padded packed lengths rounded up to a few buckets, heads, head size, dtype, mods. The first
call of a shape class compiles; it is the cell's first call, which the harness records apart
(``host.first_call_ms``) and never times; ``describe_call`` records the compile seconds. On
CPU torch 2.13's inductor cannot lower flex_attention with the LSE ("torch.compile on CPU only
supports inference and `return_lse` is not supported yet") and compiling one shape took about
2 minutes here, so the CPU runs eager flex_attention (the unfused reference path, fp32) in
chunks of bounded size, with dynamo's tracing of the mods switched off for the call
(``_FLEX_ATTENTION_DISABLE_COMPILE_DEBUG``: same math, 0.5 s instead of 2.5 s a cell here);
``describe_call`` says which mode ran."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from attn_contract import (
    MLA_EXPANDED,
    AttentionConfig,
    AttentionImpl,
    Availability,
    Capabilities,
    CommonAttentionMetadata,
    CudaGraphSupport,
    HeadSizes,
    LayerParams,
    index_kv,
)
from attn_contract.engines import EngineName
from backends._paged import HostLoopMetadata, HostLoopMetadataBuilder, Segment, dequantize, plan_chunks
from backends._torch import TorchBackend, torch_capabilities

KV_BLOCK = 128  # key block of the BlockMask (flex's default sparse block)
Q_BLOCK_PREFILL = 128
Q_BLOCK_DECODE = 16  # decode rows of many requests share a query block: keep it small (as vLLM)
# Eager flex materializes [H, Q, K] scores: bound the packed product per call on the CPU.
CPU_SCORE_ELEMS = 1 << 24
GPU_SCORE_ELEMS = 1 << 62  # one call: the block mask keeps the work sparse
# CUDA: the packed K/V of one call ([1, Hk, kv_pad, D]) stays under 2**31 elements: the kernel's
# offsets look 32-bit (bigger calls gave wrong output or an illegal memory access, docs/measurement.md §12).
# Bigger batches are split into calls.
GPU_KEY_ELEMS = (1 << 31) - 1
_COMPILED: dict[str, Any] = {}


def _bucket(n: int, base: int) -> int:
    """``n`` rounded up to a multiple of ``base`` of the form m * 2**k with 8 <= m < 16 (at most
    12.5% padding), so compiled shapes recur across batches."""
    n = max(base, -(-n // base) * base)
    units = n // base
    if units <= 8:
        return units * base
    shift = units.bit_length() - 4
    return (-(-units >> shift) << shift) * base if units & ((1 << shift) - 1) else units * base


def pack_segments(segments: list[Segment], query_lens: list[int], seq_lens: list[int], num_heads: int,
                  budget: int, max_keys: int | None = None) -> list[list[Segment]]:
    """Segments grouped into calls whose packed score product (heads x rows x keys) stays
    within ``budget`` and whose packed keys stay within ``max_keys``; a segment alone may exceed
    them (plan_chunks already split by rows)."""
    calls: list[list[Segment]] = []
    cur: list[Segment] = []
    rows = keys = 0
    for seg in segments:
        r, lo, hi, k = seg
        if cur and (num_heads * (rows + hi - lo) * (keys + k) > budget
                    or (max_keys is not None and keys + k > max_keys)):
            calls.append(cur)
            cur, rows, keys = [], 0, 0
        cur.append(seg)
        rows, keys = rows + hi - lo, keys + k
    if cur:
        calls.append(cur)
    return calls


@dataclass
class FlexCall:
    """One flex_attention call: packed query rows and keys of some segments, padded."""

    segments: list[Segment]
    tok: torch.Tensor  # [n_rows] destination tokens of the real (leading) packed rows
    q_src: torch.Tensor  # [q_pad] query tokens gathered (padding repeats a real token)
    blocks: torch.Tensor  # [kv_pad] cache block of each packed key
    offsets: torch.Tensor  # [kv_pad]
    q_doc: torch.Tensor  # [q_pad] segment id (-1: padding)
    q_pos: torch.Tensor  # [q_pad] logical position (the row's diagonal)
    kv_doc: torch.Tensor  # [kv_pad] segment id (-2: padding)
    kv_pos: torch.Tensor  # [kv_pad] logical key position
    block_mask: Any
    n_rows: int
    q_pad: int
    kv_pad: int
    q_block: int
    kv_tok: torch.Tensor | None = None  # [kv_pad] MLA expanded: each packed key's row in key/value


@dataclass
class FlexMetadata(HostLoopMetadata):
    calls: list[FlexCall] = field(default_factory=list)


class FlexMetadataBuilder(HostLoopMetadataBuilder):
    def build(self, common: CommonAttentionMetadata) -> FlexMetadata:
        md = self.host_metadata(common, FlexMetadata)
        cfg, dev = self.config, self.device
        qlens = md.query_lens
        budget = CPU_SCORE_ELEMS if dev.type == "cpu" else GPU_SCORE_ELEMS
        segs = [s for chunk in plan_chunks(qlens, md.seq_lens, cfg.num_heads, budget, md.causal) for s in chunk]
        for call in pack_segments(segs, qlens, md.seq_lens, cfg.num_heads, budget, max_call_keys(cfg, dev)):
            md.calls.append(_build_call(call, md, qlens, cfg, dev, self.query_offset))
        return md

    def query_offset(self, seq_len: int, query_len: int) -> int:
        """Logical position of a request's first query row (bottom-right alignment)."""
        return seq_len - query_len


def max_call_keys(cfg, dev: torch.device) -> int | None:
    """Packed keys one CUDA call may hold: GPU_KEY_ELEMS over heads x head size, less the
    padding ``_bucket`` may add (at most 12.5%) and one key block. None on the CPU."""
    if dev.type == "cpu":
        return None
    return max(KV_BLOCK, int(GPU_KEY_ELEMS / (cfg.num_kv_heads * cfg.head_size) / 1.125) - KV_BLOCK)


def _build_call(segs: list[Segment], md: FlexMetadata, qlens: list[int], cfg, dev: torch.device,
                query_offset) -> FlexCall:
    from torch.nn.attention.flex_attention import BlockMask

    qsl, causal, window = md.query_start_loc, md.causal, cfg.sliding_window
    n_rows = sum(hi - lo for _, lo, hi, _ in segs)
    n_keys = sum(k for *_, k in segs)
    q_block = Q_BLOCK_DECODE if max(hi - lo for _, lo, hi, _ in segs) <= Q_BLOCK_DECODE else Q_BLOCK_PREFILL
    on_cpu = dev.type == "cpu"
    q_pad = -(-n_rows // q_block) * q_block if on_cpu else _bucket(n_rows, q_block)
    kv_pad = -(-n_keys // KV_BLOCK) * KV_BLOCK if on_cpu else _bucket(n_keys, KV_BLOCK)
    # Host-side index lists (small: one entry per row / key), then one copy to the device.
    tok: list[int] = []
    q_doc: list[int] = []
    q_pos: list[int] = []
    lo_k: list[int] = []
    hi_k: list[int] = []
    kv_req: list[int] = []
    kv_pos: list[int] = []
    kv_doc: list[int] = []
    kst = 0
    for d, (r, lo, hi, keys) in enumerate(segs):
        ctx = query_offset(md.seq_lens[r], qlens[r])
        for i in range(lo, hi):
            p = ctx + i
            a, b = 0, (p + 1 if causal else keys)
            if window is not None:
                a = max(a, p - window + 1)
                if not causal:
                    b = min(b, p + window)
            b = min(b, keys)
            tok.append(qsl[r] + i)
            q_doc.append(d)
            q_pos.append(p)
            lo_k.append(kst + a if a < b else 1 << 40)
            hi_k.append(kst + b if a < b else -1)
        kv_req += [r] * keys
        kv_pos += range(keys)
        kv_doc += [d] * keys
        kst += keys
    pad_q, pad_k = q_pad - n_rows, kv_pad - n_keys
    q_src = tok + [tok[0]] * pad_q
    q_doc += [-1] * pad_q
    q_pos += [0] * pad_q
    lo_k += [1 << 40] * pad_q
    hi_k += [-1] * pad_q
    # Padding keys read the call's first real key (finite data; masked anyway).
    kv_req += [kv_req[0]] * pad_k
    kv_pos_g = kv_pos + [0] * pad_k
    kv_doc += [-2] * pad_k
    req_t = torch.tensor(kv_req, device=dev)
    pos_t = torch.tensor(kv_pos_g, device=dev)
    table = md.block_table.to(dev).long()
    blocks = table[req_t, pos_t // md.block_size]
    offsets = pos_t % md.block_size
    kv_pos_t = torch.tensor(kv_pos + [-(1 << 30)] * pad_k, device=dev, dtype=torch.int32)
    kv_tok = None
    if cfg.attention_kind == MLA_EXPANDED:  # keys are rows of the packed key/value, not cache slots
        kv_tok = torch.tensor(md.kv_start_loc, device=dev)[req_t] + pos_t
    # Block lists: a key block is partial for a query block if some row's visible key
    # interval touches it, full if every row's interval covers it (then no mask_mod runs).
    lo_t = torch.tensor(lo_k, dtype=torch.int64).view(-1, q_block)
    hi_t = torch.tensor(hi_k, dtype=torch.int64).view(-1, q_block)
    start = torch.arange(kv_pad // KV_BLOCK, dtype=torch.int64).view(1, -1) * KV_BLOCK
    end = start + KV_BLOCK
    touch = (start < hi_t.max(1).values.view(-1, 1)) & (end > lo_t.min(1).values.view(-1, 1))
    full = (start >= lo_t.max(1).values.view(-1, 1)) & (end <= hi_t.min(1).values.view(-1, 1))
    partial = touch & ~full

    def lists(sel: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        order = torch.argsort((~sel).to(torch.int8), dim=1, stable=True).to(torch.int32)
        return sel.sum(1).to(torch.int32).to(dev)[None, None], order.to(dev)[None, None]

    q_doc_t = torch.tensor(q_doc, device=dev, dtype=torch.int32)
    q_pos_t = torch.tensor(q_pos, device=dev, dtype=torch.int32)
    kv_doc_t = torch.tensor(kv_doc, device=dev, dtype=torch.int32)
    mask_mod = _mask_mod(q_doc_t, q_pos_t, kv_doc_t, kv_pos_t, causal, window)
    num, idx = lists(partial)
    fnum, fidx = lists(full)
    bm = BlockMask.from_kv_blocks(num, idx, fnum, fidx, BLOCK_SIZE=(q_block, KV_BLOCK), mask_mod=mask_mod,
                                  seq_lengths=(q_pad, kv_pad), compute_q_blocks=False)
    return FlexCall(segs, torch.tensor(tok, device=dev), torch.tensor(q_src, device=dev), blocks, offsets,
                    q_doc_t, q_pos_t, kv_doc_t, kv_pos_t, bm, n_rows, q_pad, kv_pad, q_block, kv_tok)


def _mask_mod(q_doc, q_pos, kv_doc, kv_pos, causal: bool, window: int | None):
    def mask_mod(b, h, q_idx, kv_idx):
        qp, kp = q_pos[q_idx], kv_pos[kv_idx]
        keep = q_doc[q_idx] == kv_doc[kv_idx]
        if causal:
            keep = keep & (kp <= qp)
        if window is not None:
            keep = keep & (qp - kp < window)
            if not causal:
                keep = keep & (kp - qp < window)
        return keep

    return mask_mod


def _score_mod(softcap: float, slopes: torch.Tensor | None, q_pos, kv_pos):
    if not softcap and slopes is None:
        return None

    def score_mod(score, b, h, q_idx, kv_idx):
        if softcap:
            score = softcap * torch.tanh(score / softcap)
        if slopes is not None:
            score = score - slopes[h] * (q_pos[q_idx] - kv_pos[kv_idx]).abs().to(score.dtype)
        return score

    return score_mod


def _flex_fn(device_type: str):
    """The callable: torch.compile(flex_attention) on CUDA (once per process), eager on CPU."""
    from torch.nn.attention.flex_attention import flex_attention

    if device_type != "cuda":
        return flex_attention, "eager (unfused, no dynamo tracing)"
    if "cuda" not in _COMPILED:
        import torch._dynamo

        # One compiled graph per shape class; a suite has many (vLLM raises the limit too).
        cfg = torch._dynamo.config
        for name in ("recompile_limit", "cache_size_limit"):
            if hasattr(cfg, name):
                setattr(cfg, name, max(getattr(cfg, name), 256))
        _COMPILED["cuda"] = torch.compile(flex_attention, fullgraph=True, dynamic=False)
    return _COMPILED["cuda"], "torch.compile"


class FlexImpl(AttentionImpl[FlexMetadata]):
    def __init__(self, config: AttentionConfig, variant: dict[str, Any], device: torch.device, layer: LayerParams):
        super().__init__(config, variant, device, layer)
        self._fn, self._mode = _flex_fn(device.type)
        self._compiled: dict[tuple, float] = {}  # shape class -> seconds of its first call here

    def _call(self, q, k, v, kwargs):
        if self._mode == "torch.compile":
            return self._fn(q, k, v, **kwargs)
        # Eager flex traces its mods with dynamo on every new closure (about 2.5 s a cell on this
        # CPU); the switch torch names for debugging mods runs the same unfused math without it.
        import torch.nn.attention.flex_attention as fa

        flag = getattr(fa, "_FLEX_ATTENTION_DISABLE_COMPILE_DEBUG", False)
        fa._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = True
        try:
            return self._fn(q, k, v, **kwargs)
        finally:
            fa._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = flag

    def _shape_class(self, call: FlexCall, dtype: torch.dtype) -> tuple:
        return (call.q_pad, call.kv_pad, call.q_block, str(dtype))

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor,
                metadata: FlexMetadata, out: torch.Tensor, lse_out: torch.Tensor | None = None) -> torch.Tensor:
        from torch.nn.attention.flex_attention import AuxRequest

        cfg, layer = self.config, self.layer
        dtype = torch.float32 if query.device.type == "cpu" else cfg.torch_dtype
        slopes = layer.alibi_slopes.float() if layer.alibi_slopes is not None else None
        need_lse = lse_out is not None or layer.sinks is not None
        for call in metadata.calls:
            if call.kv_tok is not None:  # MLA expanded: 192-wide keys, 128-wide values
                k, v = key[call.kv_tok].to(dtype), value[call.kv_tok].to(dtype)
            else:
                k, v = dequantize(index_kv(kv_cache, call.blocks, 0, call.offsets),
                                  index_kv(kv_cache, call.blocks, 1, call.offsets), layer, dtype)
            q = query[call.q_src].to(dtype).transpose(0, 1).unsqueeze(0)  # [1, Hq, q_pad, D]
            k, v = k.transpose(0, 1).unsqueeze(0), v.transpose(0, 1).unsqueeze(0)  # [1, Hk, kv_pad, D]
            kwargs: dict[str, Any] = dict(
                score_mod=_score_mod(cfg.softcap, slopes, call.q_pos, call.kv_pos), block_mask=call.block_mask,
                scale=cfg.softmax_scale, enable_gqa=cfg.num_heads != cfg.num_kv_heads)
            if need_lse:
                kwargs["return_aux"] = AuxRequest(lse=True)
            if self._mode == "torch.compile":
                kwargs["kernel_options"] = ({"BLOCK_M": Q_BLOCK_DECODE, "BLOCK_N": 64}
                                            if call.q_block == Q_BLOCK_DECODE else {})
            key_ = self._shape_class(call, dtype)
            first = key_ not in self._compiled
            t0 = time.perf_counter()
            res = self._call(q, k, v, kwargs)
            if first:
                if query.device.type == "cuda":
                    torch.cuda.synchronize()
                self._compiled[key_] = time.perf_counter() - t0
            o, lse = (res[0], res[1].lse) if need_lse else (res, None)
            o = o[0, :, : call.n_rows].transpose(0, 1)  # [n_rows, Hq, Dv]
            if lse is not None:
                lse = lse[0, :, : call.n_rows].transpose(0, 1).float()  # [n_rows, Hq], natural log
                if layer.sinks is not None:
                    total = torch.logaddexp(lse, layer.sinks.float().view(1, -1))
                    o = o * torch.exp(lse - total).unsqueeze(-1).to(o.dtype)
                    lse = total
                if lse_out is not None:
                    lse_out[call.tok] = lse
            out[call.tok] = o.to(out.dtype)
        return out

    def describe_call(self, metadata) -> dict:
        return {
            "flex_mode": self._mode,
            "flex_calls": len(metadata.calls),
            "paged_kv": "page-table gather into one packed key range (timed)",
            "shape_classes": [list(map(str, k)) for k in list(self._compiled)[:4]],
            "first_call_s_per_shape_class": [round(s, 3) for s in list(self._compiled.values())[:4]],
            "block_mask": [[c.q_pad, c.kv_pad, c.q_block, KV_BLOCK] for c in metadata.calls[:4]],
        }


class FlexAttentionBackend(TorchBackend):
    name = "flex-attention"
    attention_kinds = frozenset({"mha", MLA_EXPANDED})
    description = ("torch FlexAttention: the batch packed into one sequence, paged KV gathered, a BlockMask "
                   "and score/mask mods (torch.compile on CUDA, eager on CPU)")
    # vLLM: --attention-backend FLEX_ATTENTION (vllm/v1/attention/backends/flex_attention.py, the
    # AttentionBackendEnum member; vLLM 0.10+). SGLang: --attention-backend flex_attention
    # (server_args' choices; its TorchFlexAttnBackend). Both read their own cache layout in place.
    engine_names = {
        "vllm": EngineName("FLEX_ATTENTION", aliases=("flex_attention", "flex"),
                           caveat="vLLM's FLEX_ATTENTION reads its cache in place (no gather)"),
        "sglang": EngineName("flex_attention", caveat="SGLang's flex_attention backend reads its own cache layout"),
    }

    @classmethod
    def availability(cls, variant=None) -> Availability:
        try:
            from torch.nn.attention.flex_attention import AuxRequest, BlockMask  # noqa: F401
        except ImportError as e:
            return Availability(False, f"torch {torch.__version__} has no flex_attention with AuxRequest: {e}")
        return Availability.ok(torch=torch.__version__)

    @classmethod
    def capabilities(cls, variant=None) -> Capabilities:
        return torch_capabilities(
            # flex's Triton kernels are built for power-of-two head dims; others are not declared.
            head_sizes=HeadSizes(values=(16, 32, 64, 128, 256)),
            # MLA's expanded prefill (192/128): flex takes a value head size apart from the
            # query's; 192 is declared for that form only (check_support). The absorbed form is
            # not declared: flex's Triton kernel rounds head dims up to a power of two (576 -> 1024).
            attention_kinds=cls.attention_kinds,
            v_head_sizes=HeadSizes(values=(16, 32, 64, 128, 256)),
            sliding_window=True,
            softcap=True,
            alibi=True,
            sinks=True,
            returns_lse=True,
            # The compiled call re-enters dynamo's guards on the host every call; not captured.
            cudagraph=CudaGraphSupport.NEVER,
            cudagraph_source="this harness: host-built BlockMask per batch; no vLLM backend (vLLM's FLEX_ATTENTION declares NEVER)",
            # On the CPU it is torch's unfused reference path (dense scores): checked, but timing it
            # took 18-96 s a decode cell here; --time-references times it.
            untimed_on=frozenset({"cpu"}),
            notes=("paged KV gathered into a packed key range inside the timed forward (the harness's cache "
                   "layout cannot be read in place as vLLM's FLEX_ATTENTION reads its own)",
                   "sinks merged after the call through the LSE; fp8 KV dequantized in the gather",
                   "CUDA: one call's packed K/V stays under 2**31 elements (bigger ones failed on the "
                   "H200); a larger batch is split into several calls",
                   "CUDA: torch.compile once per shape class (first call, host.first_call_ms); CPU: eager, fp32",
                   "MLA: the expanded 192/128 prefill only; the absorbed form's 576-wide heads would round up "
                   "to 1024 in flex's Triton kernel"),
        )

    @classmethod
    def check_support(cls, config, variant, device: str) -> str | None:
        if config.attention_kind == MLA_EXPANDED and config.head_size == 192:
            from dataclasses import replace

            caps = replace(cls.capabilities(variant), head_sizes=HeadSizes(values=(192,)))
            return caps.unsupported_reason(config, device)
        return super().check_support(config, variant, device)

    @classmethod
    def batch_workspace_bytes(cls, config, variant, query_lens, seq_lens, cache_bytes: int,
                              device_type: str = "cuda") -> int:
        """Scratch (harness.plan.memory): gathered K/V (cache dtype, then compute dtype, fp8 adds
        fp32), padded Q, output and LSE, index tensors; on CPU eager flex materializes fp32
        scores and probabilities of each call."""
        hq, hk, d = config.num_heads, config.num_kv_heads, config.head_size
        ec = 4 if device_type == "cpu" else 2
        rows, keys = int(sum(query_lens)), int(sum(seq_lens))
        kv = 2 * keys * hk * d * (cache_bytes + ec + (4 if cache_bytes == 1 else 0)) * 9 // 8
        q = rows * hq * d * (2 + 2 * ec) * 9 // 8
        index = keys * 40 + rows * 40
        dense = 3 * 4 * min(CPU_SCORE_ELEMS, hq * rows * keys) if device_type == "cpu" else 0
        return kv + q + index + dense + 4 * rows * hq * 4

    @classmethod
    def get_builder_cls(cls):
        return FlexMetadataBuilder

    @classmethod
    def get_impl_cls(cls):
        return FlexImpl
