"""What every cascade backend shares: ``CascadeBackend`` declares the family's capabilities (one
place says what a prefix pass + suffix pass + LSE merge can and cannot do), checks a batch's
shared-prefix groups with the contract's ``cascade_batch_reason`` and names its builder and impl
from two class attributes; ``shifted_block_table`` is the suffix pass's block table."""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

import torch

from attn_contract import (
    AttentionBackend,
    AttentionConfig,
    AttentionImpl,
    AttentionMetadataBuilder,
    Capabilities,
    CommonAttentionMetadata,
    CudaGraphSupport,
    MultipleOf,
    cascade_batch_reason,
)

# What a cascade backend is, whatever runs its passes: exact LSE merge (so an LSE), causal
# suffix pass, no CUDA graph (a host plan per batch), and no sliding window or ALiBi (both
# depend on the query-key distance, which the prefix pass, one run of all the group's
# queries, does not see per request).
CASCADE_CAPABILITIES: dict[str, Any] = dict(
    causal=True,
    sliding_window=False,
    alibi=False,
    cascade=True,
    returns_lse=True,
    cudagraph=CudaGraphSupport.NEVER,
)

# The GPU libraries' paged passes (FlashAttention, FlashInfer) alike: half-precision models
# over an unquantized cache, any page size, GQA, causal only, no softcap or sinks.
GPU_CASCADE_CAPABILITIES: dict[str, Any] = dict(
    dtypes=frozenset({"float16", "bfloat16"}),
    kv_cache_dtypes=frozenset({"auto"}),
    block_sizes=(MultipleOf(1),),
    non_causal=False,
    softcap=False,
    sinks=False,
    gqa=True,
    devices=frozenset({"cuda"}),
)
GPU_BATCH_NOTE = "needs a shared prefix of whole blocks, groups contiguous in batch order; other batches are unsupported"


M = TypeVar("M")


class CascadeImpl(AttentionImpl[M]):
    """A cascade backend's kernel side: ``describe_call`` is what ``describe_passes`` says of the
    passes plus ``compare_with``, the plain backend the row is compared against (the report's
    cascade-vs-plain section reads it): its backend class's ``plain_counterpart``, which
    ``CascadeBackend`` hands to its ``impl_cls``, so the name is written once."""

    plain_counterpart: ClassVar[str]

    def describe_passes(self, metadata: M) -> dict[str, Any]:
        return {}

    def describe_call(self, metadata: M) -> dict[str, Any]:
        return {**self.describe_passes(metadata), "compare_with": self.plain_counterpart}


class CascadeBackend(AttentionBackend):
    """A cascade backend: ``plain_counterpart`` (the plain backend the cascade-vs-plain
    invariant runs on the same batch), ``builder_cls`` / ``impl_cls``, whether its passes need
    each group's requests contiguous in batch order (``contiguous_groups``), and (a class
    keyword) the plain backend whose library it calls."""

    plain_counterpart: ClassVar[str]
    builder_cls: ClassVar[type[AttentionMetadataBuilder]]
    impl_cls: ClassVar[type[CascadeImpl]]
    contiguous_groups: ClassVar[bool] = True

    def __init_subclass__(cls, library_of: type[AttentionBackend] | None = None, **kwargs: Any) -> None:
        """``library_of``: the plain backend whose library this one calls; its tested versions
        and library modules are this one's too (``class X(CascadeBackend, library_of=Plain)``)."""
        super().__init_subclass__(**kwargs)
        impl = cls.__dict__.get("impl_cls")
        if impl is not None and issubclass(impl, CascadeImpl):
            impl.plain_counterpart = cls.plain_counterpart
        if library_of is not None:
            cls.tested_versions = library_of.tested_versions
            cls.library_modules = library_of.library_modules

    @classmethod
    def cascade_capabilities(cls, gpu: bool = True, **fields: Any) -> Capabilities:
        """The family's capabilities (``gpu``: with the GPU passes' block) and this backend's
        ``fields`` over them."""
        base = {**CASCADE_CAPABILITIES, **(GPU_CASCADE_CAPABILITIES if gpu else {})}
        return Capabilities(**{**base, "plain_counterpart": cls.plain_counterpart, **fields})

    @classmethod
    def check_batch_support(cls, common: CommonAttentionMetadata, variant: dict[str, Any],
                            config: AttentionConfig | None = None) -> str | None:
        return cascade_batch_reason(common, need_contiguous=cls.contiguous_groups)

    @classmethod
    def get_builder_cls(cls) -> type[AttentionMetadataBuilder]:
        return cls.builder_cls

    @classmethod
    def get_impl_cls(cls) -> type[CascadeImpl]:
        return cls.impl_cls


def shifted_block_table(block_table: torch.Tensor, skip_blocks: list[int]) -> torch.Tensor:
    """Row i of ``block_table`` without its first ``skip_blocks[i]`` entries, left-aligned and
    zero-padded: the block table of each request's suffix."""
    n, width = block_table.shape
    skip = torch.tensor(skip_blocks, dtype=torch.long, device=block_table.device).view(n, 1)
    idx = skip + torch.arange(width, device=block_table.device).view(1, width)
    valid = idx < width
    out = torch.gather(block_table, 1, idx.clamp_max(width - 1))
    return out.masked_fill(~valid, 0).contiguous()
