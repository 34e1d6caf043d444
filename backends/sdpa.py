"""torch SDPA as a PyTorch user batches it: the requests' K/V gathered from the paged cache into
padded ``[B, Hk, S_max, D]`` tensors and ONE ``scaled_dot_product_attention`` call per chunk
(usually the whole batch), with an additive mask for lengths, causality and the window.

GQA without copying K/V: a KV head's query heads stack into the query rows
(``[B, Hk, group * Q_max, D]``), so the call is plain multi-head attention. The mask depends
only on the lengths, so the builder makes it once per batch (as a model makes it once per
step for all its layers); the gather, the call and the scatter back to token order run in
``forward``, i.e. are timed; nothing in ``forward`` waits on the device, so the call is
graph-captured like the kernels' (docs/measurement.md, "The host-bound baseline"). Masks make CUDA pick the memory-efficient kernel (FlashAttention's
SDPA path takes no mask). Runs on CPU (fp32 compute) and GPU (model dtype).
``sdpa-loop`` keeps the one-call-per-request version as a cross-check."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from attn_contract import (
    AttentionImpl,
    Capabilities,
    CommonAttentionMetadata,
    CudaGraphSupport,
)
from attn_contract.engines import EngineName
from backends._paged import (
    SDPA_CALL,
    HostLoopMetadata,
    HostLoopMetadataBuilder,
    PaddedChunk,
    MLA_CAPABILITIES,
    MLA_TORCH_KINDS,
    chunk_dims,
    gather_kv,
    padded_chunk,
    plan_chunks,
    scatter_rows,
)
from backends._torch import TorchBackend, torch_capabilities

# Padded score elements (B x Hq x Q_max x S_max) per SDPA call: a decode batch of 256 x 32k
# context x 32 heads is one call; long prefills split (the math fallback would materialise it).
MAX_SCORE_ELEMS_GPU = 1 << 28
MAX_SCORE_ELEMS_CPU = 1 << 26
MASK_ALIGN = 16  # the memory-efficient kernel wants the mask's row stride aligned
# The ``sdpa_backend`` axis of backends/sdpa_kernel.py: "auto" lets torch pick (what ``sdpa``
# does); the others force one SDPA kernel through torch.nn.attention.sdpa_kernel (CUDA only).
SDPA_KERNELS = {"auto": None, "cudnn": "CUDNN_ATTENTION", "flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION"}


def compute_dtype(config, device_type: str) -> torch.dtype:
    # CPU SDPA in reduced precision is slow and loose; compute in fp32 there.
    return torch.float32 if device_type == "cpu" else config.torch_dtype


def score_budget(device_type: str) -> int:
    return MAX_SCORE_ELEMS_CPU if device_type == "cpu" else MAX_SCORE_ELEMS_GPU


@dataclass
class SDPAChunk:
    pc: PaddedChunk
    mask: torch.Tensor  # additive, [b, 1 | Hk, group * qmax, smax]
    empty: torch.Tensor | None  # [b, qmax] real rows that see no key (output 0), if any
    alibi_ready: bool = False
    # [b, smax] padded key positions some real row sees; the rest read slots no request owns
    # (NaN under --adversarial) and are zeroed, since SDPA's P.V would carry 0 * NaN.
    kv_valid: torch.Tensor | None = None


@dataclass
class SDPAMetadata(HostLoopMetadata):
    chunks: list[SDPAChunk] = field(default_factory=list)


class SDPAMetadataBuilder(HostLoopMetadataBuilder):
    def build(self, common: CommonAttentionMetadata) -> SDPAMetadata:
        md = self.host_metadata(common, SDPAMetadata)
        cfg, dev = self.config, self.device
        dtype = compute_dtype(cfg, dev.type)
        qlens = md.query_lens
        group = cfg.num_heads // cfg.num_kv_heads
        for chunk in plan_chunks(qlens, md.seq_lens, cfg.num_heads, score_budget(dev.type), md.causal):
            pc = padded_chunk(chunk, md, int(common.query_start_loc_cpu[-1]), cfg.sliding_window, dev)
            assert pc.keep is not None  # a fresh chunk: freed only below
            b, qmax, smax = chunk_dims(chunk)
            # Padding rows see key 0 so no row is all -inf (their output is dropped anyway).
            j0 = torch.arange(smax, device=dev).view(1, 1, smax) == 0
            keep = pc.keep | (~pc.row_valid.unsqueeze(-1) & j0)
            empty = pc.row_valid & ~pc.keep.any(-1)
            kv_valid = pc.keep.any(1)
            keep_rows = keep.unsqueeze(1).expand(b, group, qmax, smax).reshape(b, 1, group * qmax, smax)
            if cfg.alibi:
                mask = _aligned((b, cfg.num_kv_heads, group * qmax, smax), dtype, dev)
                mask.copy_(keep_rows.to(dtype))  # placeholder: the impl writes the ALiBi bias on first use
                pc.keep = keep_rows
            else:
                mask = _aligned((b, 1, group * qmax, smax), dtype, dev).zero_()
                mask.masked_fill_(~keep_rows, float("-inf"))
                pc.keep = pc.dist = None  # only the mask is needed from here on
            md.chunks.append(SDPAChunk(pc, mask, empty if bool(empty.any()) else None,
                                       kv_valid=None if bool(kv_valid.all()) else kv_valid))
        return md


def _aligned(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """An uninitialised tensor whose rows start at multiples of MASK_ALIGN elements (a slice
    of a wider buffer), so SDPA's memory-efficient kernel takes the mask without a copy."""
    spad = -(-shape[-1] // MASK_ALIGN) * MASK_ALIGN
    return torch.empty((*shape[:-1], spad), dtype=dtype, device=device)[..., : shape[-1]]


def _write_alibi(ch: SDPAChunk, slopes: torch.Tensor, num_kv_heads: int) -> None:
    """The ALiBi mask (-slope_h * |diagonal - key|, -inf where not visible) from the chunk's
    distances; slopes live on the layer, which the builder does not see."""
    pc, mask = ch.pc, ch.mask
    assert pc.keep is not None and pc.dist is not None  # kept for this (ALiBi) and freed below
    b, hk, rows, smax = mask.shape
    group, qmax = rows // pc.qmax, pc.qmax
    dist = pc.dist.abs().to(mask.dtype).view(b, 1, 1, qmax, smax)
    bias = -slopes.to(mask.dtype).view(1, hk, group, 1, 1) * dist
    mask.copy_(bias.reshape(b, hk, rows, smax))
    mask.masked_fill_(~pc.keep, float("-inf"))
    pc.keep = pc.dist = None
    ch.alibi_ready = True


class SDPAImpl(AttentionImpl[SDPAMetadata]):
    def forward(self, query, key, value, kv_cache, metadata, out, lse_out=None):
        cfg = self.config
        dtype = compute_dtype(cfg, query.device.type)
        hk, hq = cfg.num_kv_heads, cfg.num_heads
        group = hq // hk
        for ch in metadata.chunks:
            if self.layer.alibi_slopes is not None and not ch.alibi_ready:
                _write_alibi(ch, self.layer.alibi_slopes, hk)
            pc = ch.pc
            b, qmax = len(pc.segments), pc.qmax
            k, v = gather_kv(kv_cache, key, value, pc, cfg, self.layer, dtype)
            if ch.kv_valid is not None:
                unseen = ~ch.kv_valid[..., None, None]
                k.masked_fill_(unseen, 0.0)  # in place: fresh gathered copies (MLA's absorbed V is a view of K)
                if not cfg.absorbed:
                    v.masked_fill_(unseen, 0.0)
            k, v = k.transpose(1, 2), v.transpose(1, 2)  # [b, Hk, smax, D]
            q = query[pc.tok].to(dtype).view(b, qmax, hk, group, -1).permute(0, 2, 3, 1, 4).reshape(b, hk, group * qmax, -1)
            with _forced_kernel(self.variant):
                o = F.scaled_dot_product_attention(q, k, v, attn_mask=ch.mask, scale=cfg.softmax_scale)
            o = o.view(b, hk, group, qmax, -1).permute(0, 3, 1, 2, 4).reshape(b, qmax, hq, -1)
            if ch.empty is not None:  # SDPA gives NaN for rows with no visible key; FA semantics are 0
                o = o.masked_fill(ch.empty.view(b, qmax, 1, 1), 0.0)
            scatter_rows(out, o, pc, metadata)
        return out

    def describe_call(self, metadata) -> dict:
        dims = [chunk_dims(c.pc.segments) for c in metadata.chunks]
        forced = {"sdpa_backend": self.variant["sdpa_backend"]} if "sdpa_backend" in self.variant else {}
        return {"sdpa_calls": len(dims), **forced, "padded_dims": [list(d) for d in dims[:4]],
                "mask": "additive, per KV head (ALiBi)" if metadata.chunks and metadata.chunks[0].mask.shape[1] > 1
                else "additive, broadcast over heads"}


def _forced_kernel(variant: dict):
    import contextlib

    name = SDPA_KERNELS.get((variant or {}).get("sdpa_backend", "auto"))
    if name is None:
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([getattr(SDPBackend, name)])


_PROBES: dict[tuple, str | None] = {}


def probe_kernel(config, kernel: str) -> str | None:
    """Why torch's forced SDPA ``kernel`` cannot take this layer's calls (None: it can), asked of
    torch itself (``torch.backends.cuda.can_use_*``, debug warnings give the reasons) on a small
    call of the shapes and mask this backend passes; None too if torch cannot be asked."""
    import warnings

    key = (kernel, config.dtype, config.head_size, config.value_head_size, config.num_heads // config.num_kv_heads,
           config.alibi)
    if key in _PROBES:
        return _PROBES[key]
    check = {"cudnn": "can_use_cudnn_attention", "flash": "can_use_flash_attention",
             "efficient": "can_use_efficient_attention"}[kernel]
    try:
        fn, params_cls = getattr(torch.backends.cuda, check), torch.backends.cuda.SDPAParams
        dev, dt = torch.device("cuda"), config.torch_dtype
        hk, rows, d = config.num_kv_heads, config.num_heads // config.num_kv_heads * 4, config.head_size
        q = torch.empty(2, hk, rows, d, device=dev, dtype=dt)
        k = torch.empty(2, hk, 64, d, device=dev, dtype=dt)
        v = torch.empty(2, hk, 64, config.value_head_size, device=dev, dtype=dt)  # MLA: Ev != E
        mask = _aligned((2, hk if config.alibi else 1, rows, 64), dt, dev)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ok = fn(params_cls(q, k, v, mask, 0.0, False, False), True)
    except Exception:  # an older torch without the probe: the call itself decides
        _PROBES[key] = None
        return None
    why = "; ".join(str(w.message).strip() for w in caught)[:300]
    _PROBES[key] = None if ok else f"torch SDPA's {kernel} kernel declines this call: {why or 'no reason given'}"
    return _PROBES[key]


class SDPABackend(TorchBackend):
    name = "sdpa"
    attention_kinds = MLA_TORCH_KINDS
    description = "torch SDPA, one batched call over padded requests gathered from the paged KV (what a PyTorch user runs)"
    engine_names = {"sglang": EngineName("torch_native", attention_kinds=frozenset({"mha"}),
                                         caveat="SGLang's torch_native runs torch SDPA per request, unpaged")}

    @classmethod
    def capabilities(cls, variant=None) -> Capabilities:
        forced = (variant or {}).get("sdpa_backend", "auto") != "auto"
        return torch_capabilities(
            sliding_window=True,
            alibi=True,
            softcap=False,
            sinks=False,
            returns_lse=False,
            # A forced kernel is a CUDA kernel; "auto" also runs on the CPU.
            devices=frozenset({"cuda"}) if forced else frozenset({"cpu", "cuda"}),
            # The forward is static per batch: index tensors, masks and chunk shapes are the
            # builder's, and no op in it reads device data on the host (the scatter uses
            # precomputed row indices), so any batch can be replayed from a CUDA graph.
            cudagraph=CudaGraphSupport.ALWAYS,
            cudagraph_source='this harness: device-side gather and mask, no host state per batch (tests/backends/test_sdpa_graph_safe.py); no vLLM backend',
            # MLA: the absorbed decode is plain MQA with q/k head 576 and v = latent[:512]; the
            # expanded prefill passes a 128-wide value with 192-wide q/k (SDPA takes Ev != E).
            **MLA_CAPABILITIES,
            notes=("one SDPA call per chunk of padded requests (a decode batch is one call); "
                   "the paged-KV gather is part of the timed forward",
                   "graph-safe: no host sync in forward (gather, SDPA, scatter by precomputed indices)")
            + (("the forced SDPA kernel: torch's can_use_* checks (with their reasons) decide support per layer; "
                "flash takes no attn_mask, which every call here has",) if forced else ()),
        )

    @classmethod
    def batch_workspace_bytes(cls, config, variant, query_lens, seq_lens, cache_bytes: int, device_type: str = "cuda") -> int:
        """Scratch of this batch (harness.plan.memory), from the chunk plan: every chunk's mask
        persists in the metadata; per call, the gathered K/V (cache dtype, then compute dtype;
        fp8 adds an fp32 copy), padded Q (gathered, cast, permuted), output (+ permuted and
        masked copies), index tensors, and three fp32 score-sized tensors in case SDPA falls
        back to its math kernel (it materialises scores and probabilities)."""
        hq, hk, d = config.num_heads, config.num_kv_heads, config.head_size
        ec = 4 if device_type == "cpu" else (2 if config.dtype in ("float16", "bfloat16") else 4)
        chunks = plan_chunks(list(query_lens), list(seq_lens), hq, score_budget(device_type), config.causal)
        persistent = transient = 0
        for c in chunks:
            b, qmax, smax = chunk_dims(c)
            spad = -(-smax // MASK_ALIGN) * MASK_ALIGN
            heads = hk if config.alibi else 1
            mask = b * heads * (hq // hk) * qmax * spad * ec
            index = 2 * b * smax * 8 + 2 * b * qmax * 8 + b * qmax * 2
            # keep/dist while building (kept until first use with ALiBi), the folded keep rows
            build = b * qmax * smax * (8 + 3) + b * hq * qmax * smax // hk
            if config.alibi:
                index += b * qmax * smax * 8 + b * hq * qmax * smax // hk
                build += 2 * b * hq * qmax * smax * ec
            persistent += mask + index
            kv = 2 * b * smax * hk * d * (cache_bytes + ec + (4 if cache_bytes == 1 else 0))
            q = b * qmax * hq * d * (2 + 2 * ec)
            o = 3 * b * qmax * hq * d * ec
            fallback = 3 * b * hq * qmax * smax * 4
            transient = max(transient, build, kv + q + o + fallback)
        return persistent + transient

    @classmethod
    def standalone_call(cls, config, variant, call=None) -> str | None:
        if config.is_mla:  # the reproducer's names describe the (K, V) cache, not the latent one
            return None
        # A subclass with its own impl makes a different call: it must say which itself.
        forced = (variant or {}).get("sdpa_backend", "auto") != "auto"
        return SDPA_CALL if cls.get_impl_cls() is SDPAImpl and not forced else None

    @classmethod
    def get_builder_cls(cls):
        return SDPAMetadataBuilder

    @classmethod
    def get_impl_cls(cls):
        return SDPAImpl
