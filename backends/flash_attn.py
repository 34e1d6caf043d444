"""FlashAttention 2, 3 and 4 behind one adapter, the way vLLM's FlashAttentionBackend wraps them.

One backend, one variant axis ``fa_version`` (``auto``, 2, 3, 4):
- FA2 ``flash_attn``: paged prefill through ``flash_attn_varlen_func(block_table=...)``, paged
  decode through ``flash_attn_with_kvcache`` (its split-KV "flash-decoding" path);
- FA3 ``flash_attn_interface``: ``flash_attn_with_kvcache(page_table=..., cu_seqlens_q=...)`` for
  both segments, with ahead-of-time scheduler metadata built in the metadata builder;
- FA4 ``flash_attn.cute``: ``flash_attn_varlen_func(page_table=..., seqused_k=...)``.

``auto`` resolves per case like vLLM's ``get_flash_attn_version``: FA3 on Hopper, FA4 on
Blackwell or where FA3 cannot serve the case, FA2 on Ampere/Ada and for ALiBi.

The batch arrives decode-first (``reorder_batch_threshold=1``); the builder splits it into a
decode and a prefill segment with device tensors built once, and ``forward`` makes one kernel
call per non-empty segment into slices of ``out``. Libraries are imported lazily, so this
module imports (and ``harness list`` works) without any of them.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import torch

from attn_contract import (
    AttentionBackend,
    AttentionConfig,
    AttentionImpl,
    AttentionMetadataBuilder,
    Availability,
    Capabilities,
    CommonAttentionMetadata,
    CudaGraphSupport,
    HeadSizes,
    MultipleOf,
    split_decodes_and_prefills,
)

VERSIONS: tuple[int, ...] = (2, 3, 4)
MODULES: dict[int, str] = {2: "flash_attn", 3: "flash_attn_interface", 4: "flash_attn.cute"}
# Shown when a library cannot be asked (not installed here): the builds measured on the H200.
DOCUMENTED_CC: tuple[int, int] = (9, 0)
FP8_E4M3_MAX = 448.0
FA3_HEAD_BUCKETS: tuple[int, ...] = (64, 96, 128, 192, 256)  # FA3 rounds head dims up to these


# ------------------------------------------------------------------ library detection
@dataclass(frozen=True)
class LibFeatures:
    """What one installed FlashAttention generation can do, read from the library itself."""

    version: int
    installed: bool
    error: str = ""  # import error text when not installed/importable
    lib_version: str = ""
    detected: bool = False  # True when the fields below came from the library, not the docs
    softcap: bool = True
    sinks: bool = False
    alibi: bool = False
    sliding_window: bool = True
    fp16: bool = True
    fp8: bool = False
    paged: bool = True
    scheduler_metadata: bool = False
    head_buckets: tuple[int, ...] = FA3_HEAD_BUCKETS  # FA3 only: kernel head dims compiled in
    build_flags: dict[str, bool] = field(default_factory=dict)


def documented_features(version: int, installed: bool = False, error: str = "") -> LibFeatures:
    """Documented facts of the builds on the H200 (FA2 2.8.3, tokenspeed FA3, FA4 4.0.0b36)."""
    if version == 2:
        return LibFeatures(2, installed, error, softcap=True, alibi=True, sinks=False)
    if version == 3:
        # tokenspeed_fa3: forward only, softcap compiled out, sinks= added, fp8 e4m3.
        return LibFeatures(3, installed, error, softcap=False, sinks=True, fp8=True, scheduler_metadata=True,
                           head_buckets=(64, 128, 192, 256))
    if version == 4:
        return LibFeatures(4, installed, error, softcap=True, sinks=True)
    raise ValueError(f"unknown FlashAttention version {version!r}")


def _dist_version(module_name: str, candidates: tuple[str, ...]) -> str:
    """Version of the distribution that installed ``module_name`` (FA3 has no __version__)."""
    from importlib import metadata

    names = list(candidates)
    try:
        names += metadata.packages_distributions().get(module_name.split(".")[0], [])
    except Exception:
        pass
    for n in names:
        try:
            return f"{n} {metadata.version(n)}"
        except metadata.PackageNotFoundError:
            continue
    return ""


def _params(fn: Any) -> set[str]:
    try:
        return set(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return set()


@functools.lru_cache(maxsize=None)
def detect_features(version: int) -> LibFeatures:
    """Import FA``version`` lazily and read its limits; never raises."""
    name = MODULES[version]
    try:
        mod = importlib.import_module(name)
    except Exception as e:  # ImportError, OSError from a .so built for another torch, ...
        text = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return documented_features(version, installed=False, error=f"cannot import {name}: {type(e).__name__}: {text}"[:300])
    base = documented_features(version, installed=True)
    if version == 2:
        varlen, kvc = getattr(mod, "flash_attn_varlen_func", None), getattr(mod, "flash_attn_with_kvcache", None)
        if varlen is None or kvc is None:
            return replace(base, installed=False, error="flash_attn has no flash_attn_varlen_func/flash_attn_with_kvcache")
        p = _params(varlen)
        return replace(
            base, detected=True, lib_version=f"flash_attn {getattr(mod, '__version__', '?')}",
            softcap="softcap" in p, alibi="alibi_slopes" in p, sliding_window="window_size" in p,
            paged="block_table" in p,
        )
    if version == 3:
        kvc = getattr(mod, "flash_attn_with_kvcache", None)
        if kvc is None:
            return replace(base, installed=False, error="flash_attn_interface has no flash_attn_with_kvcache")
        p = _params(kvc)
        flags: dict[str, bool] = {}
        try:  # FA3's setup.py writes its build flags (features compiled out) into flash_attn_config
            cfg = importlib.import_module("flash_attn_config")
            flags = {str(k): bool(v) for k, v in dict(getattr(cfg, "CONFIG", {}).get("build_flags", {})).items()}
        except Exception:
            pass

        def disabled(feature: str) -> bool:
            return any(k.endswith(f"DISABLE_{feature}") and v for k, v in flags.items())

        buckets = tuple(b for b in FA3_HEAD_BUCKETS if not disabled(f"HDIM{b}")) if flags else FA3_HEAD_BUCKETS
        return replace(
            base, detected=True, build_flags=flags,
            lib_version=_dist_version(name, ("tokenspeed_fa3", "tokenspeed-fa3", "flash_attn_3", "flash-attn-3")) or "flash_attn_interface ?",
            softcap="softcap" in p and not disabled("SOFTCAP"), sinks="sinks" in p,
            sliding_window="window_size" in p and not disabled("LOCAL"),
            fp16=not disabled("FP16"), fp8="q_descale" in p and not disabled("FP8"),
            paged="page_table" in p and not disabled("PAGEDKV"),
            scheduler_metadata=hasattr(mod, "get_scheduler_metadata") and "scheduler_metadata" in p,
            head_buckets=buckets,
        )
    varlen = getattr(mod, "flash_attn_varlen_func", None)
    if varlen is None:
        return replace(base, installed=False, error="flash_attn.cute has no flash_attn_varlen_func")
    p = _params(varlen)
    return replace(
        base, detected=True,
        lib_version=_dist_version(name, ("flash-attn-4", "flash_attn_4")) or f"flash_attn.cute {getattr(mod, '__version__', '?')}",
        softcap="softcap" in p, sinks="learnable_sink" in p, sliding_window="window_size" in p,
        # FA2's sdist ships an old flash_attn/cute without paged KV; it can shadow the FA4 wheel.
        paged="page_table" in p and "seqused_k" in p,
    )


def cuda_capability() -> tuple[int, int] | None:
    """Compute capability of the current CUDA device, or None without one."""
    try:
        if not torch.cuda.is_available():
            return None
        return tuple(torch.cuda.get_device_capability())  # type: ignore[return-value]
    except Exception:
        return None


# ------------------------------------------------------------------ pure rules (CPU-testable)
def hardware_reason(version: int, cc: tuple[int, int] | None) -> str | None:
    """Why FA``version`` cannot run on a GPU of capability ``cc`` at all (vLLM's is_fa_version_supported)."""
    if cc is None:
        return "no CUDA device (torch.cuda.is_available() is False)"
    sm = f"sm{cc[0]}{cc[1]}"
    if version == 2 and cc[0] < 8:
        return f"FA2 needs sm80 or newer, this GPU is {sm}"
    if version == 3 and cc[0] != 9:
        return f"FA3 runs on Hopper (sm90) only, this GPU is {sm}"
    if version == 4 and cc[0] not in (9, 10, 11):
        return f"FA4 paged KV needs sm90/sm100/sm110, this GPU is {sm}"
    return None


def availability_from(version: int, feats: LibFeatures, cc: tuple[int, int] | None) -> Availability:
    versions = {f"fa{version}": feats.lib_version} if feats.lib_version else {}
    if not feats.installed:
        return Availability.no(feats.error or f"{MODULES[version]} is not installed", **versions)
    if not feats.paged:
        return Availability.no(f"{feats.lib_version or MODULES[version]} has no paged-KV entry point "
                               "(for FA4: flash_attn.cute is the old snapshot from FA2's sdist?)", **versions)
    why = hardware_reason(version, cc)
    if why:
        return Availability.no(why, **versions)
    return Availability.ok(**versions)


def capabilities_for(version: int, cc: tuple[int, int] | None, feats: LibFeatures) -> Capabilities:
    """FA``version``'s declared limits on a GPU of capability ``cc`` with library features ``feats``."""
    cc = cc or DOCUMENTED_CC
    src = "detected from the installed library" if feats.detected else "documented (library not importable here)"
    layouts = frozenset({"NHD", "HND"})  # kernels take the cache strides; HND to be verified on GPU
    notes = [f"limits {src}", "NHD and HND declared: HND passes non-contiguous token strides (verify on GPU)"]
    if version == 2:
        notes += ["paged KV needs block_size % 256 == 0 (upstream FA2; vLLM's fork allows 16)",
                  "decode segment: flash_attn_with_kvcache (split-KV); prefill: varlen + block_table"]
        return Capabilities(
            dtypes=frozenset({"float16", "bfloat16"}), kv_cache_dtypes=frozenset({"auto"}),
            head_sizes=HeadSizes(min=8, max=256, multiple_of=8), block_sizes=(MultipleOf(256),),
            kv_layouts=layouts, sliding_window=feats.sliding_window, softcap=feats.softcap,
            alibi=feats.alibi, sinks=False, returns_lse=True,
            cudagraph=CudaGraphSupport.UNIFORM_BATCH, reorder_batch_threshold=1, notes=tuple(notes),
        )
    if version == 3:
        dtypes = {"bfloat16"} | ({"float16"} if feats.fp16 else set())
        kv = {"auto"} | ({"fp8_e4m3"} if feats.fp8 and cc[0] == 9 else set())
        # a head dim runs on the smallest compiled kernel at least as large: the largest bounds it
        heads = HeadSizes(min=8, max=max(feats.head_buckets, default=0), multiple_of=8)
        notes += ["fp8: e4m3 only, Hopper only; q is quantized to e4m3 in forward (per-tensor dynamic scale), "
                  "descales (num_reqs, num_kv_heads), output bf16: needs dtype bfloat16 and head_size % 16 == 0",
                  f"head dims rounded up to compiled kernels {list(feats.head_buckets)}",
                  "no ALiBi", "sinks passed as bf16 (H,) (tokenspeed build)"]
        if not feats.softcap:
            notes.append("softcap compiled out of this build (FLASHATTENTION_DISABLE_SOFTCAP)")
        cg = CudaGraphSupport.ALWAYS if feats.scheduler_metadata else CudaGraphSupport.UNIFORM_BATCH
        notes.append("CUDA graphs: ALWAYS with AOT scheduler metadata (vLLM), else UNIFORM_BATCH")
        return Capabilities(
            dtypes=frozenset(dtypes), kv_cache_dtypes=frozenset(kv),
            head_sizes=heads, block_sizes=(MultipleOf(1),), kv_layouts=layouts,
            sliding_window=feats.sliding_window, softcap=feats.softcap, alibi=False, sinks=feats.sinks,
            returns_lse=True, cudagraph=cg, reorder_batch_threshold=1, notes=tuple(notes),
        )
    if version == 4:
        if cc[0] == 9:
            heads = HeadSizes(min=8, max=256, multiple_of=8)
            notes += ["sm90: no split-KV (num_splits=1), no fp8"]
        else:
            heads = HeadSizes(values=tuple(range(8, 129, 8)) + (256,))
            notes += ["sm100/sm110: head <= 128 or 256; split-KV by heuristic (unverified here)"]
        notes += ["fp8 only through a private sm100 entry point: not used", "no ALiBi",
                  "vLLM picks FA4 for head > 256 on Blackwell (its vendored FA4); PyPI FA4 stops at 256",
                  "sinks via learnable_sink (fp32 (H,)); JIT-compiles each variant on first call"]
        return Capabilities(
            dtypes=frozenset({"float16", "bfloat16"}), kv_cache_dtypes=frozenset({"auto"}),
            head_sizes=heads, block_sizes=(MultipleOf(1),), kv_layouts=layouts,
            sliding_window=feats.sliding_window, softcap=feats.softcap, alibi=False, sinks=feats.sinks,
            returns_lse=True, cudagraph=CudaGraphSupport.UNIFORM_BATCH, reorder_batch_threshold=1,
            notes=tuple(notes),
        )
    raise ValueError(f"unknown FlashAttention version {version!r}")


def support_reason(version: int, config: AttentionConfig, cc: tuple[int, int] | None, feats: LibFeatures,
                   device: str = "cuda") -> str | None:
    """Why FA``version`` cannot serve ``config`` (None if it can): the table plus rules it cannot hold."""
    caps = capabilities_for(version, cc, feats)
    if config.is_fp8_kv and config.kv_cache_dtype not in caps.kv_cache_dtypes:
        if version == 3 and config.kv_cache_dtype == "fp8_e4m3" and (cc or DOCUMENTED_CC)[0] != 9:
            return "FA3 fp8 runs on Hopper (sm90) only"
        why = {2: "FA2 has no fp8 path", 3: "FA3 supports fp8 e4m3 only (no e5m2)" if feats.fp8 else
               "fp8 compiled out of this FA3 build", 4: "FA4 has no public fp8 path (sm100 private API only; none on sm90)"}
        return f"kv_cache_dtype {config.kv_cache_dtype} not supported: {why[version]}"
    reason = caps.unsupported_reason(config, device)
    if reason:
        return f"FA{version}: {reason}"
    if version == 3 and config.is_fp8_kv:
        if config.dtype != "bfloat16":
            return f"FA3 fp8 attention writes bf16 output; model dtype {config.dtype} with fp8 KV is unsupported"
        if config.head_size % 16:
            return f"FA3 fp8 needs head_size % 16 == 0, got {config.head_size}"
    return None


def select_fa_version(config: AttentionConfig | None, cc: tuple[int, int] | None,
                      usable: Callable[[int], str | None] | None = None) -> tuple[int | None, str]:
    """vLLM's get_flash_attn_version, per case: (version or None, why).

    Preference: ALiBi -> FA2 (the only one with it); Hopper -> FA3, then FA4 where FA3 cannot
    serve (e.g. head > 256 or a feature compiled out), then FA2; Blackwell -> FA4, then FA2;
    Ampere/Ada/sm120 -> FA2. ``usable(v)`` says why v cannot serve the case (default: the
    documented limits on ``cc``); the first usable candidate wins."""
    if cc is None:
        return None, "no CUDA device to select a FlashAttention version for"
    if cc[0] < 8:
        return None, f"FlashAttention needs sm80 or newer, this GPU is sm{cc[0]}{cc[1]}"
    if config is not None and config.alibi:
        order, why = [2], "ALiBi: only FA2 has it"
    elif cc[0] == 9:
        order, why = [3, 4, 2], "Hopper: FA3 by default"
    elif cc[0] in (10, 11):
        order, why = [4, 2], f"sm{cc[0]}{cc[1]}: FA4 by default (FA3 is Hopper-only)"
    else:
        order, why = [2], f"sm{cc[0]}{cc[1]}: FA2"
    if config is None:
        return order[0], why
    if usable is None:
        def usable(v: int) -> str | None:  # noqa: E306 - the documented limits on this GPU
            return hardware_reason(v, cc) or support_reason(v, config, cc, documented_features(v, True))
    rejected = []
    for v in order:
        r = usable(v)
        if r is None:
            return v, why if v == order[0] else f"{why}; " + "; ".join(rejected) + f" -> FA{v}"
        rejected.append(f"FA{v} rejected ({r})")
    return None, f"{why}; no version can serve this case: " + "; ".join(rejected)


def fa_window(config: AttentionConfig, version: int) -> tuple[Any, Any]:
    """FA ``window_size`` for the config: (left, 0) causal, (left, left) otherwise; unbounded is
    -1 for FA2/FA3 and None for FA4 (which reads a lone -1 as a real window)."""
    left = config.window_left
    if left < 0:
        return (None, None) if version == 4 else (-1, -1)
    return (left, 0) if config.causal else (left, left)


# ------------------------------------------------------------------ variants and resolution
def _installed_usable(config: AttentionConfig, cc: tuple[int, int] | None, device: str) -> Callable[[int], str | None]:
    def usable(v: int) -> str | None:
        feats = detect_features(v)
        avail = availability_from(v, feats, cc)
        return avail.reason if not avail.available else support_reason(v, config, cc, feats, device)
    return usable


def resolve_version(variant: dict[str, Any] | None, config: AttentionConfig | None = None,
                    cc: tuple[int, int] | None = None, device: str = "cuda") -> tuple[int | None, str]:
    """The FA version a variant runs for ``config`` on this machine, and why."""
    v = (variant or {}).get("fa_version", "auto")
    if str(v) != "auto":
        try:
            n = int(v)
        except (TypeError, ValueError):
            n = -1
        if n not in VERSIONS:
            return None, f"unknown fa_version {v!r}; expected auto, 2, 3 or 4"
        return n, "explicit"
    cc = cc if cc is not None else cuda_capability()
    if config is None:
        return select_fa_version(None, cc)
    return select_fa_version(config, cc, _installed_usable(config, cc, device))


def _union_caps(caps: list[Capabilities], note: str) -> Capabilities:
    """What ``auto`` may serve: the union of its candidates (check_support does the real work)."""
    blocks: tuple[int | MultipleOf, ...] = (MultipleOf(1),) if any(MultipleOf(1) in c.block_sizes for c in caps) \
        else tuple(dict.fromkeys(b for c in caps for b in c.block_sizes))
    hs = [c.head_sizes for c in caps]
    if all(not h.values for h in hs):
        heads = HeadSizes(min=min(h.min for h in hs), max=max(h.max for h in hs),
                          multiple_of=math.gcd(*(h.multiple_of for h in hs)))
    else:
        heads = HeadSizes(values=tuple(sorted({v for h in hs for v in (h.values or range(h.min, h.max + 1, h.multiple_of))})))
    return Capabilities(
        dtypes=frozenset().union(*(c.dtypes for c in caps)),
        kv_cache_dtypes=frozenset().union(*(c.kv_cache_dtypes for c in caps)),
        head_sizes=heads, block_sizes=blocks,
        kv_layouts=frozenset().union(*(c.kv_layouts for c in caps)),
        sliding_window=any(c.sliding_window for c in caps), softcap=any(c.softcap for c in caps),
        alibi=any(c.alibi for c in caps), sinks=any(c.sinks for c in caps), returns_lse=True,
        cudagraph=min(c.cudagraph for c in caps), reorder_batch_threshold=1, notes=(note,),
    )


# ------------------------------------------------------------------ metadata
@dataclass
class FASegment:
    """One kernel call: a contiguous run of requests (decodes, or prefills/extends)."""

    kind: str  # "decode" | "prefill"
    req_start: int
    req_end: int
    token_start: int
    token_end: int
    query_start_loc: torch.Tensor  # int32 [n + 1], rebased to 0, on device
    seq_lens: torch.Tensor  # int32 [n]
    block_table: torch.Tensor  # int32 [n, blocks], contiguous, trimmed to the segment's longest request
    max_query_len: int
    max_seq_len: int
    cu_seqlens_k: torch.Tensor | None = None  # FA2 varlen only: exclusive cumsum of seq_lens
    scheduler_metadata: torch.Tensor | None = None  # FA3 AOT scheduling

    @property
    def num_reqs(self) -> int:
        return self.req_end - self.req_start

    @property
    def num_tokens(self) -> int:
        return self.token_end - self.token_start


@dataclass
class FlashAttentionMetadata:
    fa_version: int
    version_reason: str
    segments: list[FASegment]
    causal: bool
    block_size: int
    num_actual_tokens: int
    num_decodes: int
    num_prefills: int
    uniform_batch: bool  # every request has the same query length
    scheduler_metadata_note: str = ""

    @property
    def scheduler_metadata_used(self) -> bool:
        return bool(self.segments) and all(s.scheduler_metadata is not None for s in self.segments)


class FlashAttentionMetadataBuilder(AttentionMetadataBuilder[FlashAttentionMetadata]):
    """Splits the decode-first batch into segments; builds every device tensor the calls need."""

    def __init__(self, config: AttentionConfig, variant: dict[str, Any], device: torch.device):
        super().__init__(config, variant, device)
        version, why = resolve_version(variant, config, device=torch.device(device).type)
        if version is None:
            raise ValueError(f"flash-attn {variant}: {why}")
        self.fa_version, self.version_reason = version, why

    def _scheduler_metadata(self, seg: FASegment) -> tuple[torch.Tensor | None, str]:
        """FA3 AOT scheduler metadata for one segment; every argument mirrors the later call."""
        cfg = self.config
        if torch.device(self.device).type != "cuda":
            return None, "not built: no CUDA device"
        feats = detect_features(3)
        if not feats.scheduler_metadata:
            return None, "not built: this FA3 has no get_scheduler_metadata"
        import flash_attn_interface as fa3

        qkv_dtype = torch.float8_e4m3fn if cfg.is_fp8_kv else cfg.torch_dtype
        md = fa3.get_scheduler_metadata(
            batch_size=seg.num_reqs, max_seqlen_q=seg.max_query_len,
            # with a page table and no cu_seqlens_k, the call's seqlen_k is pages_per_seq * page_size
            max_seqlen_k=seg.block_table.shape[1] * cfg.block_size,
            num_heads_q=cfg.num_heads, num_heads_kv=cfg.num_kv_heads, headdim=cfg.head_size,
            cache_seqlens=seg.seq_lens, qkv_dtype=qkv_dtype, headdim_v=cfg.head_size,
            cu_seqlens_q=seg.query_start_loc, page_size=cfg.block_size, causal=cfg.causal,
            window_size=fa_window(cfg, 3), has_softcap=cfg.softcap > 0, num_splits=0,
            pack_gqa=None, sm_margin=0,
        )
        return md, "built per segment with get_scheduler_metadata"

    def build(self, common: CommonAttentionMetadata) -> FlashAttentionMetadata:
        dev = torch.device(self.device)
        split = split_decodes_and_prefills(common, decode_threshold=1)
        qsl = common.query_start_loc_cpu.tolist()
        seq = common.seq_lens_cpu.tolist()
        bs = common.block_size
        bounds = [("decode", 0, split.num_decodes), ("prefill", split.num_decodes, common.num_reqs)]
        segments: list[FASegment] = []
        for kind, lo, hi in bounds:
            if hi <= lo:
                continue
            seg_qsl = [q - qsl[lo] for q in qsl[lo : hi + 1]]
            seg_seq = seq[lo:hi]
            max_seq = max(seg_seq)
            nblk = max(1, math.ceil(max_seq / bs))
            table = common.block_table[lo:hi, :nblk].to(device=dev, dtype=torch.int32).contiguous()
            seg = FASegment(
                kind=kind, req_start=lo, req_end=hi, token_start=qsl[lo], token_end=qsl[hi],
                query_start_loc=torch.tensor(seg_qsl, dtype=torch.int32, device=dev),
                seq_lens=torch.tensor(seg_seq, dtype=torch.int32, device=dev),
                block_table=table,
                max_query_len=max(b - a for a, b in zip(seg_qsl[:-1], seg_qsl[1:])),
                max_seq_len=max_seq,
            )
            if self.fa_version == 2 and kind == "prefill":
                cu_k = [0]
                for s in seg_seq:
                    cu_k.append(cu_k[-1] + s)
                seg.cu_seqlens_k = torch.tensor(cu_k, dtype=torch.int32, device=dev)
            segments.append(seg)
        note = ""
        if self.fa_version == 3:
            notes = []
            for seg in segments:
                seg.scheduler_metadata, note = self._scheduler_metadata(seg)
                notes.append(note)
            note = notes[0] if notes else ""
        qlens = common.query_lens_cpu.tolist()
        return FlashAttentionMetadata(
            fa_version=self.fa_version, version_reason=self.version_reason, segments=segments,
            causal=common.causal, block_size=bs, num_actual_tokens=common.num_actual_tokens,
            num_decodes=split.num_decodes, num_prefills=split.num_prefills,
            uniform_batch=len(set(qlens)) <= 1, scheduler_metadata_note=note,
        )


# ------------------------------------------------------------------ the kernel calls
class FlashAttentionImpl(AttentionImpl[FlashAttentionMetadata]):
    def __init__(self, config: AttentionConfig, variant: dict[str, Any], device: torch.device, layer: Any):
        super().__init__(config, variant, device, layer)
        version, why = resolve_version(variant, config, device=torch.device(device).type)
        if version is None:
            raise ValueError(f"flash-attn {variant}: {why}")
        self.fa_version = version
        cfg = config
        self.cc = cuda_capability()
        self.window = fa_window(cfg, version)
        self.softcap = float(cfg.softcap or 0.0)
        dev = torch.device(device)
        # Per-layer tensors converted once, as a model would hold them.
        self.alibi = layer.alibi_slopes.to(dev, torch.float32).contiguous() if cfg.alibi and layer.alibi_slopes is not None else None
        self.sinks = None
        if cfg.sinks and layer.sinks is not None:
            # FA3 (tokenspeed) insists on bf16 sinks; FA4 takes fp32.
            self.sinks = layer.sinks.to(dev, torch.bfloat16 if version == 3 else torch.float32).contiguous()
        self.k_scale = torch.tensor([[layer.k_scale]], dtype=torch.float32, device=dev)
        self.v_scale = torch.tensor([[layer.v_scale]], dtype=torch.float32, device=dev)
        # FA4 on sm90 has no split-KV; elsewhere let its heuristic choose.
        self.fa4_num_splits = 1 if (self.cc is None or self.cc[0] == 9) else 0
        self._fn: dict[str, Callable[..., Any]] = {}
        if dev.type == "cuda":
            self._load()

    def _load(self) -> None:
        if self.fa_version == 2:
            import flash_attn

            self._fn = {"varlen": flash_attn.flash_attn_varlen_func, "kvcache": flash_attn.flash_attn_with_kvcache}
        elif self.fa_version == 3:
            import flash_attn_interface

            self._fn = {"kvcache": flash_attn_interface.flash_attn_with_kvcache}
        else:
            from flash_attn.cute import flash_attn_varlen_func

            self._fn = {"varlen": flash_attn_varlen_func}

    def _quantize_query(self, query: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """q -> e4m3 with a dynamic per-tensor scale (device ops only: no host sync, graph-safe).
        Done in forward because the builder never sees q; it is timed, as in vLLM."""
        scale = (query.abs().amax().float() / FP8_E4M3_MAX).clamp_min(1e-12)
        q8 = (query.float() / scale).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn)
        return q8, scale.reshape(1, 1)

    def forward(self, query, key, value, kv_cache, metadata: FlashAttentionMetadata, out, lse_out=None):
        if not self._fn:
            raise RuntimeError(f"FA{self.fa_version} runs on CUDA only; tensors are on {query.device}")
        key_cache, value_cache = kv_cache.unbind(1)  # each (num_blocks, block_size, Hk, D), strided
        q_all, q_scale = query, None
        if self.fa_version == 3 and self.config.is_fp8_kv:
            q_all, q_scale = self._quantize_query(query)
        want_lse = lse_out is not None
        for seg in metadata.segments:
            q = q_all[seg.token_start : seg.token_end]
            o, lse = getattr(self, f"_fa{self.fa_version}")(q, key_cache, value_cache, seg, metadata, want_lse, q_scale)
            # The public entry points have no out=: one copy into the caller's buffer.
            out[seg.token_start : seg.token_end].copy_(o)
            if want_lse:
                lse_out[seg.token_start : seg.token_end].copy_(lse)
        return out

    def _fa2(self, q, kc, vc, seg: FASegment, md, want_lse, q_scale):
        cfg = self.config
        common = dict(softmax_scale=cfg.softmax_scale, causal=md.causal, window_size=self.window,
                      softcap=self.softcap, alibi_slopes=self.alibi)
        if seg.kind == "decode":
            # q_len 1 per request: the with_kvcache path splits the KV (flash-decoding).
            res = self._fn["kvcache"](q.unsqueeze(1), kc, vc, cache_seqlens=seg.seq_lens, block_table=seg.block_table,
                                      num_splits=0, return_softmax_lse=want_lse, **common)
            if want_lse:
                o, lse = res
                return o.squeeze(1), lse.squeeze(-1)  # lse (B, H, 1) -> (T, H)
            return res.squeeze(1), None
        res = self._fn["varlen"](q, kc, vc, cu_seqlens_q=seg.query_start_loc, cu_seqlens_k=seg.cu_seqlens_k,
                                 max_seqlen_q=seg.max_query_len, max_seqlen_k=seg.max_seq_len, dropout_p=0.0,
                                 block_table=seg.block_table, return_attn_probs=want_lse, **common)
        if want_lse:
            o, lse, _ = res
            return o, lse.transpose(0, 1)  # (H, T) -> (T, H)
        return res, None

    def _fa3(self, q, kc, vc, seg: FASegment, md, want_lse, q_scale):
        cfg = self.config
        kw: dict[str, Any] = {}
        if q_scale is not None:
            shape = (seg.num_reqs, cfg.num_kv_heads)  # FA3 descales are per (request, KV head)
            kw.update(q_descale=q_scale.expand(shape), k_descale=self.k_scale.expand(shape),
                      v_descale=self.v_scale.expand(shape))
        if self.sinks is not None:
            kw["sinks"] = self.sinks
        if self.softcap:
            kw["softcap"] = self.softcap
        res = self._fn["kvcache"](
            q, kc, vc, cache_seqlens=seg.seq_lens, page_table=seg.block_table, cu_seqlens_q=seg.query_start_loc,
            max_seqlen_q=seg.max_query_len, softmax_scale=cfg.softmax_scale, causal=md.causal,
            window_size=self.window, scheduler_metadata=seg.scheduler_metadata, num_splits=0, pack_gqa=None,
            sm_margin=0, return_softmax_lse=want_lse, **kw,
        )
        if want_lse:
            o, lse, *_ = res  # 4 values: out, lse (H, T), split partials
            return o, lse.transpose(0, 1)
        return res, None

    def _fa4(self, q, kc, vc, seg: FASegment, md, want_lse, q_scale):
        cfg = self.config
        o, lse = self._fn["varlen"](
            q, kc, vc, cu_seqlens_q=seg.query_start_loc, max_seqlen_q=seg.max_query_len,
            seqused_k=seg.seq_lens, page_table=seg.block_table, softmax_scale=cfg.softmax_scale,
            causal=md.causal, window_size=self.window, learnable_sink=self.sinks, softcap=self.softcap,
            num_splits=self.fa4_num_splits, return_lse=want_lse,
        )
        return o, (lse.transpose(0, 1) if want_lse else None)

    def graph_safe(self, metadata: FlashAttentionMetadata) -> str | None:
        if metadata.fa_version == 3 and metadata.scheduler_metadata_used:
            return None  # vLLM: ALWAYS with AOT scheduling
        if metadata.uniform_batch:
            return None
        why = "no AOT scheduler metadata" if metadata.fa_version == 3 else "vLLM declares UNIFORM_BATCH"
        return f"FA{metadata.fa_version} ({why}): a batch with mixed query lengths is not graph-safe"

    def describe_call(self, metadata: FlashAttentionMetadata) -> dict[str, Any]:
        entry = {2: {"decode": "flash_attn.flash_attn_with_kvcache", "prefill": "flash_attn.flash_attn_varlen_func"},
                 3: {"decode": "flash_attn_interface.flash_attn_with_kvcache",
                     "prefill": "flash_attn_interface.flash_attn_with_kvcache"},
                 4: {"decode": "flash_attn.cute.flash_attn_varlen_func",
                     "prefill": "flash_attn.cute.flash_attn_varlen_func"}}[metadata.fa_version]
        d: dict[str, Any] = {
            "fa_version": metadata.fa_version,
            "fa_version_requested": str(self.variant.get("fa_version", "auto")),
            "version_reason": metadata.version_reason,
            "segments": [{"kind": s.kind, "num_reqs": s.num_reqs, "num_tokens": s.num_tokens,
                          "max_query_len": s.max_query_len, "max_seq_len": s.max_seq_len,
                          "kernel": entry[s.kind]} for s in metadata.segments],
            "window_size": list(self.window),
            "output_copy": True,
            "graph_safe": self.graph_safe(metadata) or "yes",
        }
        if metadata.fa_version == 3:
            d["scheduler_metadata"] = metadata.scheduler_metadata_used
            d["scheduler_metadata_note"] = metadata.scheduler_metadata_note
            if self.config.is_fp8_kv:
                d["q_quantization"] = "e4m3, dynamic per-tensor scale computed in forward (timed)"
        if metadata.fa_version == 4:
            d["num_splits"] = self.fa4_num_splits
        if metadata.fa_version == 2:
            d["decode_num_splits"] = "0 (heuristic)"
        return d


# ------------------------------------------------------------------ the backend
class FlashAttentionBackend(AttentionBackend):
    name = "flash-attn"
    description = "FlashAttention 2/3/4 (flash_attn, flash_attn_interface, flash_attn.cute) over vLLM's paged KV cache"
    variant_axes = {"fa_version": ("auto", 2, 3, 4)}

    @classmethod
    def default_variants(cls) -> list[dict[str, Any]]:
        # auto aliases one of these; it runs only when asked for
        return [{"fa_version": v} for v in VERSIONS]

    @classmethod
    def availability(cls, variant: dict[str, Any] | None = None) -> Availability:
        v = (variant or {}).get("fa_version", "auto")
        cc = cuda_capability()
        if str(v) == "auto":
            per = {n: availability_from(n, detect_features(n), cc) for n in VERSIONS}
            versions = {k: s for a in per.values() for k, s in a.versions.items()}
            if any(a.available for a in per.values()):
                return Availability.ok(**versions)
            return Availability.no("; ".join(f"FA{n}: {a.reason}" for n, a in per.items()), **versions)
        n, why = resolve_version(variant)
        if n is None:
            return Availability.no(why)
        return availability_from(n, detect_features(n), cc)

    @classmethod
    def capabilities(cls, variant: dict[str, Any] | None = None) -> Capabilities:
        cc = cuda_capability()
        v = (variant or {}).get("fa_version", "auto")
        if str(v) == "auto":
            caps = [capabilities_for(n, cc, detect_features(n)) for n in VERSIONS if hardware_reason(n, cc or DOCUMENTED_CC) is None]
            return _union_caps(caps, "auto: union of the versions this GPU runs; resolved per case (see describe_call)")
        n, why = resolve_version(variant)
        if n is None:
            raise ValueError(why)
        return capabilities_for(n, cc, detect_features(n))

    @classmethod
    def check_support(cls, config: AttentionConfig, variant: dict[str, Any], device: str) -> str | None:
        if device != "cuda":
            return f"runs on cuda, not {device}"
        cc = cuda_capability()
        n, why = resolve_version(variant, config, cc, device)
        if n is None:
            return f"auto: {why}" if str(variant.get("fa_version", "auto")) == "auto" else why
        return support_reason(n, config, cc, detect_features(n), device)

    @classmethod
    def get_builder_cls(cls) -> type[AttentionMetadataBuilder]:
        return FlashAttentionMetadataBuilder

    @classmethod
    def get_impl_cls(cls) -> type[AttentionImpl]:
        return FlashAttentionImpl
