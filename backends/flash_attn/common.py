"""What the FlashAttention generations share: the features read from a library, the per-segment
metadata, and ``FAGeneration``, the class each generation (fa2.py, fa3.py, fa4.py) fills in.

A generation knows its own library (module, entry points, how to read its limits), its
capability table, the metadata its call needs beyond the common segment, and the call itself.
Nothing outside a generation's file branches on the version number.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

import torch

from attn_contract import AttentionConfig, Availability, Capabilities

# Shown when a library cannot be asked (not installed here): the builds measured on the H200.
DOCUMENTED_CC: tuple[int, int] = (9, 0)
FP8_E4M3_MAX = 448.0
FA3_HEAD_BUCKETS: tuple[int, ...] = (64, 96, 128, 192, 256)  # FA3 rounds head dims up to these
# The ``call_form`` variant axis: how the library is called for a batch.
# vllm: as vLLM's FlashAttentionImpl: ONE varlen call over the whole batch (cu_seqlens_q,
#   seqused_k, block table), out= where the entry point has it, FA3 AOT scheduler metadata from
#   the builder, num_splits as vLLM's builder sets it under its default full CUDA graphs.
# fastest: the library's fastest documented call for the batch: decodes as one batched
#   [B, 1, H, D] call (cache_seqlens, no cu_seqlens_q), the rest as a varlen call; the library's
#   own num_splits heuristic; out= where available; FA3 scheduler metadata per call.
from attn_contract.standalone import CALL_FORMS  # noqa: E402,F401  (vllm, fastest; this package imports it from here)
# vLLM's defaults behind its FA3 num_splits (FlashAttentionMetadataBuilder): cudagraph_mode
# FULL_AND_PIECEWISE, max_cudagraph_capture_size 512, flash_attn_max_num_splits_for_cuda_graph 32.
VLLM_MAX_CUDAGRAPH_TOKENS = 512
VLLM_MAX_NUM_SPLITS_FOR_CUDA_GRAPH = 32


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


@dataclass
class FASegment:
    """One kernel call: a contiguous run of requests (decodes, or prefills/extends)."""

    kind: str  # "decode" | "prefill" | "batch" (call_form vllm: the whole batch in one call)
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
    # The variant's ``num_splits`` (0: the library's heuristic; 1: no split-KV; >1: forced).
    num_splits: int = 0
    # q goes in as [num_reqs, max_query_len, H, D] with no cu_seqlens_q (uniform query lengths,
    # call_form fastest); else flattened varlen [T, H, D] with cu_seqlens_q.
    batched: bool = False

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
    call_form: str = "vllm"
    num_splits_note: str = ""

    @property
    def scheduler_metadata_used(self) -> bool:
        return bool(self.segments) and all(s.scheduler_metadata is not None for s in self.segments)


def dist_version(module_name: str, candidates: tuple[str, ...]) -> str:
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


def params(fn: Any) -> set[str]:
    """Parameter names of a library function (what its signature says it accepts)."""
    try:
        return set(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return set()


def cuda_capability() -> tuple[int, int] | None:
    """Compute capability of the current CUDA device, or None without one."""
    try:
        if not torch.cuda.is_available():
            return None
        return tuple(torch.cuda.get_device_capability())  # type: ignore[return-value]
    except Exception:
        return None


class FAGeneration:
    """One FlashAttention generation. Class methods are its static facts (library, limits,
    per-segment metadata); an instance holds one layer's call state and makes the call."""

    version: ClassVar[int]
    module: ClassVar[str]  # what ``import`` loads
    kernels: ClassVar[dict[str, str]]  # segment kind -> entry point, as recorded in describe_call
    # The entry point of a segment: by kind, and for a batched decode (FA2 differs by form).
    batched_kernel: ClassVar[str] = ""
    no_fp8: ClassVar[str]  # why an fp8 KV cache is refused when the table lacks it
    sinks_dtype: ClassVar[torch.dtype] = torch.float32
    graph_unsafe_why: ClassVar[str] = "vLLM declares UNIFORM_BATCH"

    # ---------------------------------------------------------------- the library
    @classmethod
    def documented(cls, installed: bool = False, error: str = "") -> LibFeatures:
        """Documented facts of the build on the H200, used when the library cannot be asked."""
        raise NotImplementedError

    @classmethod
    def read_features(cls, mod: Any, base: LibFeatures) -> LibFeatures:
        """The limits the imported library ``mod`` shows (signatures, build flags)."""
        raise NotImplementedError

    @classmethod
    def features(cls) -> LibFeatures:
        """Import the library lazily and read its limits, once per process; never raises."""
        return _features(cls)

    @classmethod
    def load_entry_points(cls) -> dict[str, Callable[..., Any]]:
        """The library functions the calls use, by role ("varlen", "kvcache")."""
        raise NotImplementedError

    # ---------------------------------------------------------------- limits
    @classmethod
    def gpu_reason(cls, cc: tuple[int, int], sm: str) -> str | None:
        """Why this generation cannot run on a GPU of capability ``cc`` (``sm`` = "sm90")."""
        raise NotImplementedError

    @classmethod
    def hardware_reason(cls, cc: tuple[int, int] | None) -> str | None:
        """Why it cannot run on this GPU at all (vLLM's is_fa_version_supported)."""
        if cc is None:
            return "no CUDA device (torch.cuda.is_available() is False)"
        return cls.gpu_reason(cc, f"sm{cc[0]}{cc[1]}")

    @classmethod
    def availability(cls, feats: LibFeatures, cc: tuple[int, int] | None) -> Availability:
        versions = {f"fa{cls.version}": feats.lib_version} if feats.lib_version else {}
        if not feats.installed:
            return Availability.no(feats.error or f"{cls.module} is not installed", **versions)
        if not feats.paged:
            return Availability.no(f"{feats.lib_version or cls.module} has no paged-KV entry point "
                                   "(for FA4: flash_attn.cute is the old snapshot from FA2's sdist?)", **versions)
        why = cls.hardware_reason(cc)
        if why:
            return Availability.no(why, **versions)
        return Availability.ok(**versions)

    @classmethod
    def capabilities(cls, cc: tuple[int, int] | None, feats: LibFeatures) -> Capabilities:
        """Declared limits on a GPU of capability ``cc`` with library features ``feats``."""
        raise NotImplementedError

    @staticmethod
    def common_notes(feats: LibFeatures) -> tuple[frozenset[str], list[str]]:
        """KV layouts and the notes every generation's table starts with."""
        src = "detected from the installed library" if feats.detected else "documented (library not importable here)"
        layouts = frozenset({"NHD", "HND"})  # kernels take the cache strides; HND to be verified on GPU
        return layouts, [f"limits {src}", "NHD and HND declared: HND passes non-contiguous token strides (verify on GPU)"]

    @classmethod
    def fp8_reason(cls, config: AttentionConfig, cc: tuple[int, int] | None, feats: LibFeatures) -> str:
        """Why the fp8 KV cache of ``config`` is refused (it is not in the table)."""
        return f"kv_cache_dtype {config.kv_cache_dtype} not supported: {cls.no_fp8}"

    @classmethod
    def extra_reason(cls, config: AttentionConfig) -> str | None:
        """Rules a capability table cannot hold (checked after it)."""
        return None

    @classmethod
    def support_reason(cls, config: AttentionConfig, cc: tuple[int, int] | None, feats: LibFeatures,
                       device: str = "cuda") -> str | None:
        """Why this generation cannot serve ``config`` (None if it can): the table plus extra rules."""
        caps = cls.capabilities(cc, feats)
        if config.is_fp8_kv and config.kv_cache_dtype not in caps.kv_cache_dtypes:
            return cls.fp8_reason(config, cc, feats)
        reason = caps.unsupported_reason(config, device)
        if reason:
            return f"FA{cls.version}: {reason}"
        return cls.extra_reason(config)

    @classmethod
    def window(cls, config: AttentionConfig) -> tuple[Any, Any]:
        """FA ``window_size``: (left, 0) causal, (left, left) otherwise; unbounded is -1."""
        left = config.window_left
        if left < 0:
            return (-1, -1)
        return (left, 0) if config.causal else (left, left)

    # ---------------------------------------------------------------- metadata
    @classmethod
    def prepare_segment(cls, seg: FASegment, seq_lens: list[int], config: AttentionConfig,
                        device: torch.device) -> str:
        """Add what this generation's call needs to ``seg`` (host lists in ``seq_lens``); a note."""
        return ""

    @classmethod
    def vllm_num_splits(cls, num_tokens: int) -> tuple[int, str]:
        """``num_splits`` vLLM's builder passes for a batch of ``num_tokens``, and why."""
        return 0, "0 (the library's heuristic; vLLM passes no bound here)"

    @classmethod
    def graph_safe_always(cls, metadata: FlashAttentionMetadata) -> bool:
        """Graph-safe whatever the batch's query lengths (vLLM's ALWAYS)."""
        return False

    # ---------------------------------------------------------------- the call
    def __init__(self, config: AttentionConfig, layer: Any, device: torch.device, cc: tuple[int, int] | None):
        dev = torch.device(device)
        self.config = config
        self.cc = cc
        self.window_size = self.window(config)  # the layer's, as the call passes it
        self.softcap = float(config.softcap or 0.0)
        # Per-layer tensors converted once, as a model would hold them.
        self.alibi = (layer.alibi_slopes.to(dev, torch.float32).contiguous()
                      if config.alibi and layer.alibi_slopes is not None else None)
        self.sinks = (layer.sinks.to(dev, self.sinks_dtype).contiguous()
                      if config.sinks and layer.sinks is not None else None)
        self.k_scale = torch.tensor([[layer.k_scale]], dtype=torch.float32, device=dev)
        self.v_scale = torch.tensor([[layer.v_scale]], dtype=torch.float32, device=dev)
        self.fn: dict[str, Callable[..., Any]] = self.load_entry_points() if dev.type == "cuda" else {}

    def prepare_query(self, query: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The query the kernel takes, and its scale (fp8 paths quantize here)."""
        return query, None

    def call(self, q: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, seg: FASegment,
             md: FlashAttentionMetadata, want_lse: bool, q_scale: torch.Tensor | None,
             out: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One segment's kernel call: (out ``[T, H, D]``, lse ``[T, H]`` or None). ``out`` (the
        caller's slice) is passed as the library's ``out=`` where ``takes_out`` says it has one."""
        raise NotImplementedError

    def takes_out(self, seg: FASegment) -> bool:
        """Whether this segment's entry point accepts ``out=`` (read from its signature)."""
        fn = self.fn.get(self.role(seg))
        return fn is not None and "out" in params(fn)

    def role(self, seg: FASegment) -> str:
        """Which entry point (``load_entry_points`` key) serves this segment."""
        return next(iter(self.fn), "")

    @classmethod
    def kernel_of(cls, seg: FASegment) -> str:
        """The library function this segment calls, for describe_call."""
        if seg.batched and cls.batched_kernel:
            return cls.batched_kernel
        return cls.kernels["decode" if seg.kind == "decode" else "prefill"]

    @staticmethod
    def q_for(q: torch.Tensor, seg: FASegment) -> torch.Tensor:
        """The query as the call takes it: batched [B, Lq, H, D] (a view) or varlen [T, H, D]."""
        return q.view(seg.num_reqs, seg.max_query_len, *q.shape[1:]) if seg.batched else q

    @staticmethod
    def from_batched(t: torch.Tensor, seg: FASegment) -> torch.Tensor:
        return t.reshape(seg.num_tokens, *t.shape[2:]) if seg.batched else t

    def describe(self, metadata: FlashAttentionMetadata) -> dict[str, Any]:
        """Generation-specific facts for describe_call, after the common ones."""
        return {}

    # ---------------------------------------------------------------- standalone reproducer
    @classmethod
    def standalone_source(cls, config: AttentionConfig) -> tuple[str, str]:
        """(imports and per-layer setup, one segment's call) as source for ``harness repro``;
        the call reads ``qs`` and ``seg_*`` (see ``standalone_call``) and sets ``o``."""
        raise NotImplementedError


def lse_tokens(lse: torch.Tensor, seg: FASegment) -> torch.Tensor:
    """A call's LSE as [T, H]: varlen calls return (H, T), batched ones (B, H, Lq)."""
    if seg.batched:
        return lse.permute(0, 2, 1).reshape(seg.num_tokens, lse.shape[1])
    return lse.transpose(0, 1)


def standalone_call(gen: type[FAGeneration], config: AttentionConfig, call_form: str = "vllm",
                    call: dict[str, Any] | None = None) -> str:
    """Source of what ``FlashAttentionImpl.forward`` does with generation ``gen`` in ``call_form``:
    the builder's segments of the decode-first batch (vllm: the whole batch in one call;
    fastest: the decodes batched, then the rest), one library call each, with the num_splits
    the row recorded (``call``; else what the builder would pick), out= where the library has it."""
    setup, body = gen.standalone_source(config)
    body = "\n".join("    " + line if line else "" for line in body.strip("\n").splitlines())
    splits = [s.get("num_splits") for s in (call or {}).get("segments", []) if isinstance(s, dict)]
    # None: no row (or an old one): the builder's rule
    recorded = splits if splits and all(isinstance(x, int) for x in splits) else None
    if call_form == "vllm":
        bounds = "((\"batch\", 0, n),)"
        n_tok = "QSL[n]"
        split_rule = f"{gen.vllm_num_splits(VLLM_MAX_CUDAGRAPH_TOKENS)[0]} if {n_tok} <= {VLLM_MAX_CUDAGRAPH_TOKENS} else 0" \
            if gen.vllm_num_splits(VLLM_MAX_CUDAGRAPH_TOKENS)[0] else "0"
    else:
        bounds = "((\"decode\", 0, nd), (\"prefill\", nd, n))"
        split_rule = "0"
    return f"""{setup.strip()}


def takes_out(f):
    \"\"\"Whether a library function has an out= parameter (the adapter passes it where it has).\"\"\"
    code = getattr(f, "__code__", None)
    return code is not None and "out" in code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]


key_cache, value_cache = kv_cache.unbind(1)  # each (num_blocks, BLOCK_SIZE, NUM_KV_HEADS, HEAD_SIZE)
nd = next((i for i, ql in enumerate(QUERY_LENS) if ql > 1), n)  # leading decodes (query_len 1)
CALL_FORM = {call_form!r}  # vllm: one varlen call over the batch; fastest: decodes batched [B, 1, H, D]
RECORDED_SPLITS = {recorded!r}  # num_splits per call as the row recorded them (None: the builder's rule)
SEGMENTS = [s for s in {bounds} if s[2] > s[1]]
# Per-call metadata is the builder's work, made once before the calls (the adapter's rows do not
# time it, so a re-timing of the calls below must not either).
SEG_QSL = [query_start_loc[lo:hi + 1] - QSL[lo] for _, lo, hi in SEGMENTS]
SEG_TABLE = [block_table[lo:hi, :-(-max(SEQ_LENS[lo:hi]) // BLOCK_SIZE)].contiguous() for _, lo, hi in SEGMENTS]
BUILT = {{}}  # metadata a generation's builder makes once per batch (FA3's scheduler metadata)
out = torch.empty_like(q)
for i, (seg_kind, lo, hi) in enumerate(SEGMENTS):
    qs = q_all[QSL[lo]:QSL[hi]]
    dst = out[QSL[lo]:QSL[hi]]
    seg_qsl, seg_table = SEG_QSL[i], SEG_TABLE[i]
    seg_seq = seq_lens[lo:hi]
    seg_max_q, seg_max_k = max(QUERY_LENS[lo:hi]), max(SEQ_LENS[lo:hi])
    batched = CALL_FORM == "fastest" and seg_kind == "decode"
    qs4 = qs.view(hi - lo, 1, *qs.shape[1:]) if batched else qs
    seg_splits = RECORDED_SPLITS[i] if RECORDED_SPLITS else {split_rule}
{body}
    o = o.reshape(dst.shape)
    if o.data_ptr() != dst.data_ptr():
        dst.copy_(o)
"""


_FEATURES: dict[type[FAGeneration], LibFeatures] = {}  # read once per process and generation


def _features(gen: type[FAGeneration]) -> LibFeatures:
    # A dict, not functools.cache: mypy does not take a type[...] argument as Hashable.
    if gen not in _FEATURES:
        _FEATURES[gen] = _read_features(gen)
    return _FEATURES[gen]


def _read_features(gen: type[FAGeneration]) -> LibFeatures:
    try:
        mod = importlib.import_module(gen.module)
    except Exception as e:  # ImportError, OSError from a .so built for another torch, ...
        text = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return gen.documented(installed=False, error=f"cannot import {gen.module}: {type(e).__name__}: {text}"[:300])
    return gen.read_features(mod, gen.documented(installed=True))
