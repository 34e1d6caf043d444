"""What a backend declares it can do, and whether it can run here.

Read by the harness before any call (a case outside the declared limits becomes an
``unsupported`` row naming the limit) and written by every backend.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from attn_contract.metadata import AttentionConfig
from attn_contract.mla import MHA
from attn_contract.status import BUILD_LIMIT, KERNEL_LIMIT


class CudaGraphSupport(enum.IntEnum):
    """How much of a batch a backend can replay from a CUDA graph (vLLM's AttentionCGSupport)."""

    NEVER = 0
    UNIFORM_SINGLE_TOKEN_DECODE = 1
    UNIFORM_BATCH = 2
    ALWAYS = 3


class AlibiLse(str, enum.Enum):
    """Which ALiBi bias a backend's returned LSE includes. Softmax is shift-invariant per row, so
    outputs agree under either; the LSE differs by ``slope_h * (i + s - q)`` (the diagonal key
    position of query row i), which the conformance check adds to the reference's LSE.

    - ``relative``: logit -= slope * |i + s - q - j| (the harness reference; FA2 non-causal/local);
    - ``key_index_causal``: under causal masking without a sliding window the kernel adds
      ``+slope * j`` instead (FA2's alibi.h drops the row constant ``-slope * (i + s - q)``);
      other masks fall back to ``relative``.
    """

    RELATIVE = "relative"
    KEY_INDEX_CAUSAL = "key_index_causal"


@dataclass(frozen=True)
class SplitKV:
    """A variant key that forces the KV split, for the ``split-kv`` invariant: the backend is run
    with ``{key: one}`` (no split) and ``{key: many}`` (forced splits) and must agree with itself."""

    key: str
    one: Any
    many: Any


@dataclass(frozen=True)
class MultipleOf:
    """A block-size rule such as vLLM's ``MultipleOf(16)``."""

    base: int

    def __str__(self) -> str:
        return f"multiple of {self.base}"


@dataclass(frozen=True)
class HeadSizes:
    """Allowed head sizes: an explicit list, or a range with a step."""

    values: tuple[int, ...] = ()
    min: int = 0
    max: int = 0
    multiple_of: int = 1

    def allows(self, head_size: int) -> bool:
        if self.values:
            return head_size in self.values
        return self.min <= head_size <= self.max and head_size % self.multiple_of == 0

    def __str__(self) -> str:
        if self.values:
            return ",".join(map(str, self.values))
        return f"{self.min}..{self.max} (multiple of {self.multiple_of})"


@dataclass(frozen=True)
class Capabilities:
    """What a backend (one variant of it) declares it supports. Checked before any call."""

    dtypes: frozenset[str] = frozenset({"float16", "bfloat16"})
    kv_cache_dtypes: frozenset[str] = frozenset({"auto"})
    head_sizes: HeadSizes = HeadSizes(min=8, max=256, multiple_of=8)
    block_sizes: tuple[int | MultipleOf, ...] = (MultipleOf(1),)
    kv_layouts: frozenset[str] = frozenset({"NHD"})
    causal: bool = True
    non_causal: bool = True
    sliding_window: bool = False
    softcap: bool = False
    alibi: bool = False
    # The ALiBi convention of the returned LSE (see AlibiLse); outputs do not depend on it.
    alibi_lse: AlibiLse = AlibiLse.RELATIVE
    sinks: bool = False
    # Runs cascade (shared-prefix) attention; the runner records vLLM's rule's verdict in its rows.
    cascade: bool = False
    # A cascade backend's plain counterpart (registry name) for the ``cascade-vs-plain`` invariant.
    plain_counterpart: str | None = None
    # The knob that forces the KV split (None: the backend has none), for the ``split-kv`` invariant.
    split_kv: SplitKV | None = None
    gqa: bool = True
    returns_lse: bool = False
    # The base of the LSE ``forward`` writes into ``lse_out``: "e" (natural log; FA, torch) or 2
    # (FlashInfer). The harness converts it explicitly (``merge.lse_to_natural``) wherever it
    # checks or combines LSEs; a backend that declares the wrong base fails the LSE check.
    lse_base: str | int = "e"
    devices: frozenset[str] = frozenset({"cuda"})
    cudagraph: CudaGraphSupport = CudaGraphSupport.NEVER
    # Where the level is read from (the serving engine's declaration and its release), recorded
    # with the graph-mode axis (harness/records/graph_modes.py) so a reader can check it.
    cudagraph_source: str = ""
    # Largest query length a request may have and still count as decode for this backend's
    # batch reordering (vLLM's reorder_batch_threshold); None means "do not reorder".
    reorder_batch_threshold: int | None = None
    # What the backend is for. "kernel": something a user would run; its cells are timed.
    # "reference": a correctness reference, slow by design (e.g. fp32 math over padded
    # requests), not a baseline anyone would deploy: on the devices in ``untimed_on`` its cells
    # are checked but not timed unless the run asks (``harness run --time-references``); the
    # row says why (``timing_skipped``). The core reads these fields, never the backend's name.
    role: str = "kernel"
    untimed_on: frozenset[str] = frozenset()
    # MLA (attn_contract/mla.py). Which forms of attention the backend runs: "mha" (the K/V
    # cache), "mla_absorbed" (latent cache, 576/512, one KV head), "mla_expanded" (192/128 over
    # expanded K/V). A backend that runs an MLA form declares it here; the other fields
    # (dtypes, kv_cache_dtypes for the latent cache, block_sizes for its page size) apply to
    # every kind the backend declares.
    attention_kinds: frozenset[str] = frozenset({MHA})
    # Value head sizes allowed when they differ from the query/key head size (None: the value
    # head must equal head_size, the case for most kernels and builds).
    v_head_sizes: HeadSizes | None = None
    # MLA latent geometries the backend's kernels take, as (kv_lora_rank, qk_rope_head_dim)
    # pairs (FlashMLA: only (512, 64)); None: any.
    mla_latent_dims: frozenset[tuple[int, int]] | None = None
    notes: tuple[str, ...] = ()
    # Features (sliding_window, softcap, alibi, sinks) the library's kernel has but this
    # installed build lacks: a config needing one is unsupported with a BUILD_LIMIT reason.
    build_lacks: frozenset[str] = frozenset()

    def timing_skip_reason(self, device: str) -> str | None:
        """Why a cell of this backend is not timed by default on ``device``, or None."""
        if device in self.untimed_on:
            return (f"{self.role}, not timed on {device} by default (a correctness reference; "
                    "--time-references times it)")
        return None

    def block_size_allowed(self, block_size: int) -> bool:
        for rule in self.block_sizes:
            if isinstance(rule, MultipleOf):
                if block_size % rule.base == 0:
                    return True
            elif block_size == rule:
                return True
        return False

    def describe(self) -> dict[str, Any]:
        return {
            "dtypes": sorted(self.dtypes),
            "kv_cache_dtypes": sorted(self.kv_cache_dtypes),
            "head_sizes": str(self.head_sizes),
            "block_sizes": [str(b) for b in self.block_sizes],
            "kv_layouts": sorted(self.kv_layouts),
            "causal": self.causal,
            "non_causal": self.non_causal,
            "sliding_window": self.sliding_window,
            "softcap": self.softcap,
            "alibi": self.alibi,
            "alibi_lse": self.alibi_lse.value,
            "sinks": self.sinks,
            "cascade": self.cascade,
            "gqa": self.gqa,
            "returns_lse": self.returns_lse,
            "lse_base": str(self.lse_base),
            "devices": sorted(self.devices),
            "cudagraph": self.cudagraph.name,
            "cudagraph_source": self.cudagraph_source,
            "reorder_batch_threshold": self.reorder_batch_threshold,
            "role": self.role,
            "untimed_on": sorted(self.untimed_on),
            "attention_kinds": sorted(self.attention_kinds),
            "v_head_sizes": None if self.v_head_sizes is None else str(self.v_head_sizes),
            "mla_latent_dims": None if self.mla_latent_dims is None else sorted(self.mla_latent_dims),
            "build_lacks": sorted(self.build_lacks),
        }

    def kind_reason(self, config: AttentionConfig) -> str | None:
        """Why a layer of ``config.attention_kind`` is not this backend's (None: it declares it).
        The harness asks it before ``check_support`` too, so an override written before MLA
        never sees an MLA layer."""
        if config.attention_kind not in self.attention_kinds:
            return (f"attention kind {config.attention_kind} not supported (this backend runs:"
                    f" {', '.join(sorted(self.attention_kinds))})")
        return None

    def unsupported_reason(self, config: AttentionConfig, device: str) -> str | None:
        """The first declared limit ``config`` breaks, or None when it is within all of them."""
        if device not in self.devices:
            # The default is CUDA only: a plugin that runs elsewhere must say so, and this
            # reason is what its author sees on every cell until it does.
            declared = "{" + ", ".join(repr(d) for d in sorted(self.devices | {device})) + "}"
            return (f"runs on {'/'.join(sorted(self.devices))}, not {device}"
                    f" (a backend that runs on {device} declares it: Capabilities(devices=frozenset({declared})))")
        kind = self.kind_reason(config)
        if kind:
            return kind
        if config.mla is not None and self.mla_latent_dims is not None:
            dims = (config.mla.kv_lora_rank, config.mla.qk_rope_head_dim)
            if dims not in self.mla_latent_dims:
                return (f"MLA latent {dims[0]}+{dims[1]} not supported"
                        f" (supported: {', '.join(f'{a}+{b}' for a, b in sorted(self.mla_latent_dims))})")
        if config.value_head_size != config.head_size:
            if self.v_head_sizes is None:
                return (f"value head size {config.value_head_size} != query/key head size {config.head_size}"
                        " not supported")
            if not self.v_head_sizes.allows(config.value_head_size):
                return f"value head size {config.value_head_size} not in {self.v_head_sizes}"
        if config.dtype not in self.dtypes:
            return f"dtype {config.dtype} not in {sorted(self.dtypes)}"
        if config.kv_cache_dtype not in self.kv_cache_dtypes:
            return f"kv_cache_dtype {config.kv_cache_dtype} not in {sorted(self.kv_cache_dtypes)}"
        if not self.head_sizes.allows(config.head_size):
            return f"head_size {config.head_size} not in {self.head_sizes}"
        if not self.block_size_allowed(config.block_size):
            allowed = ", ".join(str(b) for b in self.block_sizes)
            return f"block_size {config.block_size} not allowed (supported: {allowed})"
        if config.kv_layout not in self.kv_layouts:
            return f"kv_layout {config.kv_layout} not in {sorted(self.kv_layouts)}"
        if config.causal and not self.causal:
            return "causal attention not supported"
        if not config.causal and not self.non_causal:
            return "non-causal attention not supported"
        for feature, needed, has, text in (
                ("sliding_window", config.sliding_window is not None, self.sliding_window, "sliding window"),
                ("softcap", bool(config.softcap), self.softcap, "logits softcap"),
                ("alibi", bool(config.alibi), self.alibi, "ALiBi"),
                ("sinks", bool(config.sinks), self.sinks, "attention sinks")):
            if needed and not has:
                return f"{text} {BUILD_LIMIT if feature in self.build_lacks else KERNEL_LIMIT}"
        if config.num_heads != config.num_kv_heads and not self.gqa:
            return "GQA/MQA (num_heads != num_kv_heads) not supported"
        return None


@dataclass(frozen=True)
class Availability:
    """Whether a backend can run here at all, and why not."""

    available: bool
    reason: str = ""
    versions: dict[str, str] = field(default_factory=dict)

    @classmethod
    def ok(cls, **versions: str) -> "Availability":
        return cls(True, "", dict(versions))

    @classmethod
    def no(cls, reason: str, **versions: str) -> "Availability":
        return cls(False, reason, dict(versions))
