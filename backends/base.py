"""The one interface every attention backend implements.

Mirrors vLLM v1's split: a static ``AttentionBackend`` (what it can do, how its KV cache is
laid out), a per-batch ``AttentionMetadataBuilder`` and an ``AttentionImpl`` that makes the
kernel call. The harness core only talks to these classes; it never branches on a name.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

import torch

from harness.metadata import AttentionConfig, CommonAttentionMetadata, LayerParams


class CudaGraphSupport(enum.IntEnum):
    """How much of a batch a backend can replay from a CUDA graph (vLLM's AttentionCGSupport)."""

    NEVER = 0
    UNIFORM_SINGLE_TOKEN_DECODE = 1
    UNIFORM_BATCH = 2
    ALWAYS = 3


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
    sinks: bool = False
    cascade: bool = False
    gqa: bool = True
    returns_lse: bool = False
    devices: frozenset[str] = frozenset({"cuda"})
    cudagraph: CudaGraphSupport = CudaGraphSupport.NEVER
    # Largest query length a request may have and still count as decode for this backend's
    # batch reordering (vLLM's reorder_batch_threshold); None means "do not reorder".
    reorder_batch_threshold: int | None = None
    notes: tuple[str, ...] = ()

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
            "sinks": self.sinks,
            "cascade": self.cascade,
            "gqa": self.gqa,
            "returns_lse": self.returns_lse,
            "devices": sorted(self.devices),
            "cudagraph": self.cudagraph.name,
            "reorder_batch_threshold": self.reorder_batch_threshold,
        }

    def unsupported_reason(self, config: AttentionConfig, device: str) -> str | None:
        """The first declared limit ``config`` breaks, or None when it is within all of them."""
        if device not in self.devices:
            return f"runs on {'/'.join(sorted(self.devices))}, not {device}"
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
        if config.sliding_window is not None and not self.sliding_window:
            return "sliding window not supported"
        if config.softcap and not self.softcap:
            return "logits softcap not supported"
        if config.alibi and not self.alibi:
            return "ALiBi not supported"
        if config.sinks and not self.sinks:
            return "attention sinks not supported"
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


M = TypeVar("M")


class AttentionMetadataBuilder(ABC, Generic[M]):
    """Turns the common per-batch metadata into what this backend's kernel needs.

    Host work (splitting, planning) belongs here so it is timed apart from the kernel.
    """

    def __init__(self, config: AttentionConfig, variant: dict[str, Any], device: torch.device):
        self.config = config
        self.variant = variant
        self.device = device

    @abstractmethod
    def build(self, common: CommonAttentionMetadata) -> M: ...


class AttentionImpl(ABC, Generic[M]):
    """One kernel call. ``forward`` writes ``out`` (and ``lse_out`` when given) in place."""

    def __init__(
        self, config: AttentionConfig, variant: dict[str, Any], device: torch.device, layer: LayerParams
    ):
        self.config = config
        self.variant = variant
        self.device = device
        self.layer = layer

    @abstractmethod
    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: M,
        out: torch.Tensor,
        lse_out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """query ``[num_tokens, num_heads, head_size]``; key/value are the new tokens'
        ``[num_tokens, num_kv_heads, head_size]`` (already written into ``kv_cache``);
        ``lse_out`` is ``[num_tokens, num_heads]`` float32, natural log."""

    def graph_safe(self, metadata: M) -> str | None:
        """None when ``forward`` with this metadata may be captured in a CUDA graph, else why not."""
        return None

    def describe_call(self, metadata: M) -> dict[str, Any]:
        """Facts about the resolved call worth recording in the result (kernel family, flags)."""
        return {}


class AttentionBackend(ABC):
    """Static description of a backend: capabilities, availability, KV-cache layout, classes."""

    name: ClassVar[str]
    description: ClassVar[str] = ""
    # Each axis a backend can vary (e.g. FA version); the cartesian product gives its variants.
    variant_axes: ClassVar[dict[str, tuple[Any, ...]]] = {}

    @classmethod
    @abstractmethod
    def availability(cls, variant: dict[str, Any] | None = None) -> Availability: ...

    @classmethod
    @abstractmethod
    def capabilities(cls, variant: dict[str, Any] | None = None) -> Capabilities: ...

    @classmethod
    def variants(cls) -> list[dict[str, Any]]:
        combos: list[dict[str, Any]] = [{}]
        for axis, values in cls.variant_axes.items():
            combos = [{**c, axis: v} for c in combos for v in values]
        return combos

    @classmethod
    def default_variants(cls) -> list[dict[str, Any]]:
        """Variants run when neither the suite nor the command line narrows this backend's axes.
        Override to leave out aliases (e.g. an ``auto`` that resolves to another variant)."""
        return cls.variants()

    @classmethod
    def check_support(cls, config: AttentionConfig, variant: dict[str, Any], device: str) -> str | None:
        """Reason this backend variant cannot serve ``config`` (None if it can).

        The default reads the declared capabilities; override to add rules that need
        more than a table (and keep them declared in ``capabilities().notes``)."""
        return cls.capabilities(variant).unsupported_reason(config, device)

    @classmethod
    def check_batch_support(cls, common: CommonAttentionMetadata, variant: dict[str, Any]) -> str | None:
        """Reason this backend variant cannot serve this particular batch (None if it can).

        For rules that depend on the batch rather than the layer, such as a cascade backend
        needing a shared prefix; the runner reports the reason as ``unsupported``."""
        return None

    @staticmethod
    def get_kv_cache_shape(
        num_blocks: int, block_size: int, num_kv_heads: int, head_size: int, cache_dtype: str = "auto"
    ) -> tuple[int, ...]:
        """Logical KV-cache shape, vLLM's FlashAttention layout: K and V in dim 1."""
        return (num_blocks, 2, block_size, num_kv_heads, head_size)

    @staticmethod
    def get_kv_cache_stride_order(layout: str) -> tuple[int, ...]:
        """Order of the logical dims in memory: NHD keeps them, HND puts heads before tokens."""
        if layout == "NHD":
            return (0, 1, 2, 3, 4)
        if layout == "HND":
            return (0, 1, 3, 2, 4)
        raise ValueError(f"unknown KV layout {layout!r}")

    @classmethod
    def materialize_kv_cache(cls, canonical: torch.Tensor, layout: str) -> torch.Tensor:
        """This backend's KV cache holding the same data as the harness's canonical cache.

        ``canonical`` is ``(num_blocks, 2, block_size, num_kv_heads, head_size)``, contiguous.
        The result has the backend's logical shape, with memory laid out in its stride order
        (as vLLM allocates it), so the kernel sees real NHD or HND strides."""
        nb, _, bs, hk, d = canonical.shape
        shape = cls.get_kv_cache_shape(nb, bs, hk, d)
        if tuple(shape) != tuple(canonical.shape):
            raise NotImplementedError(
                f"{cls.name} declares KV-cache shape {tuple(shape)}; override materialize_kv_cache "
                "to convert from the canonical (num_blocks, 2, block_size, num_kv_heads, head_size)"
            )
        order = cls.get_kv_cache_stride_order(layout)
        physical = canonical.permute(*order).contiguous()
        inverse = sorted(range(len(order)), key=order.__getitem__)
        return physical.permute(*inverse)

    @classmethod
    @abstractmethod
    def get_builder_cls(cls) -> type[AttentionMetadataBuilder]: ...

    @classmethod
    @abstractmethod
    def get_impl_cls(cls) -> type[AttentionImpl]: ...

    @classmethod
    def library_versions(cls) -> dict[str, str]:
        """Versions of the libraries this backend wraps (for the run header)."""
        return dict(cls.availability().versions)
