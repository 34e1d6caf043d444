"""The one interface every attention backend implements: its builder, impl and backend bases.

Mirrors vLLM v1's split: a static ``AttentionBackend`` (what it can do, how its KV cache is
laid out), a per-batch ``AttentionMetadataBuilder`` and an ``AttentionImpl`` that makes the
kernel call. The harness core only talks to these classes; it never branches on a name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any, ClassVar, Generic, TypeVar

import torch

from attn_contract.capabilities import Availability, Capabilities
from attn_contract.metadata import AttentionConfig, CommonAttentionMetadata, LayerParams


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
        ``out`` is ``[num_tokens, num_heads, value_head_size]``;
        ``lse_out`` is ``[num_tokens, num_heads]`` float32, in the base the capabilities declare (``lse_base``).

        MLA (``config.attention_kind``, attn_contract/mla.py), ``L`` = kv_lora_rank, ``R`` =
        qk_rope_head_dim: ``kv_cache`` is the latent cache ``(num_blocks, block_size, L + R)``
        as ``materialize_kv_cache`` returned it, in both forms.

        - ``mla_absorbed``: query ``[T, H, L + R]`` (absorbed q_nope first, q_pe last); key
          ``[T, 1, L + R]`` the new tokens' latent vectors (already in ``kv_cache``); value
          ``[T, 1, L]`` = ``key[..., :L]``; every request attends over its ``seq_lens[i]``
          cache entries read through ``block_table`` (keys: the whole entry; values: its first
          ``L``); ``out`` ``[T, H, L]``.
        - ``mla_expanded``: query ``[T, H, qk_nope + R]`` (q_nope first); key
          ``[sum(seq_lens), H, qk_nope + R]`` and value ``[sum(seq_lens), H, v_head_dim]`` hold
          EVERY token of each request (its cached context, up-projected from the latent cache
          with ``layer.mla_w_uk``/``mla_w_uv`` as vLLM's ``_compute_prefill_context`` does, then
          its new tokens), packed in batch order from ``metadata``'s
          ``CommonAttentionMetadata.kv_start_loc_cpu``; the rope part of each key is the same
          for every head. ``out`` ``[T, H, v_head_dim]``. A backend may attend in one call or
          as vLLM does (causal over the new tokens, non-causal over context chunks, merged by
          their LSEs: ``attn_contract.merge_attn_states``)."""

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
    # Segment kinds ("decode", "extend", "prefill"; see ``applicable_axes``) for which a
    # variant axis can change the result; an axis not listed matters for every batch. The
    # planner runs one variant where the only differences are axes that do not apply to the
    # case's batch (e.g. FlashInfer's prefill_backend on a decode-only batch).
    variant_axis_kinds: ClassVar[dict[str, frozenset[str]]] = {}
    # Axes whose values outside ``default_variants()`` run only where a suite's ``variants:`` or a
    # ``--variant`` filter names the axis (e.g. extra kernel families): a filter on another axis
    # then does not pull them in.
    opt_in_axes: ClassVar[frozenset[str]] = frozenset()
    # Device types whose cells are not timed by default (a correctness reference), declared as
    # class data so a run's parent can plan without importing any library; ``capabilities()``
    # must carry the same set (``Capabilities.untimed_on``, which the cell itself obeys).
    untimed_on: ClassVar[frozenset[str]] = frozenset()
    # The library versions the project was tested with: distribution name -> PEP 440 specifier
    # (e.g. {"flashinfer-python": ">=0.6.18,<0.7"}); `harness list` and `harness --version`
    # mark an installed version outside it.
    tested_versions: ClassVar[dict[str, str]] = {}
    # The Python modules whose import is the slow part of using this backend (a GPU library):
    # a run's worker imports them on a thread at start and runs other backends' cells meanwhile
    # (harness/execute/worker/imports.py). Empty: nothing beyond torch, ready at once.
    library_modules: ClassVar[tuple[str, ...]] = ()
    # How serving engines name this backend ("vllm", "sglang" -> attn_contract.engines.EngineName);
    # engines that cannot run it are absent.
    engine_names: ClassVar[dict[str, Any]] = {}
    # A cascade backend's plain counterpart (also in its Capabilities), readable without calling
    # capabilities(), which may import the library: run.json records it in the parent process.
    plain_counterpart: ClassVar[str | None] = None
    # The attention kinds (attn_contract/mla.py: "mha", "mla_absorbed", "mla_expanded") any of
    # its variants runs, as class data so a run's parent can pick backends by kind without
    # importing a library (a suite's ``backends_for:``); ``capabilities()`` carries the same set
    # (each variant's ``Capabilities.attention_kinds`` is a subset of it).
    attention_kinds: ClassVar[frozenset[str]] = frozenset({"mha"})

    @classmethod
    def applicable_axes(cls, segment_kinds: Iterable[str]) -> tuple[str, ...]:
        """The variant axes that can matter for a batch holding these segment kinds."""
        kinds = set(segment_kinds)
        return tuple(a for a in cls.variant_axes
                     if a not in cls.variant_axis_kinds or cls.variant_axis_kinds[a] & kinds)

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
    def check_batch_support(cls, common: CommonAttentionMetadata, variant: dict[str, Any],
                            config: AttentionConfig | None = None) -> str | None:
        """Reason this backend variant cannot serve this particular batch (None if it can).

        For rules that depend on the batch rather than the layer alone, such as a cascade
        backend needing a shared prefix or a size limit of batch times heads (``config``, the
        layer, when the caller has it); the runner reports the reason as ``unsupported``."""
        return None

    @classmethod
    def diagnose_mismatch(cls, config: AttentionConfig, variant: dict[str, Any], layer: LayerParams,
                          check: dict[str, Any]) -> str | None:
        """One line naming a known library bug this mismatch matches (``check`` is the row's
        check dict: per-request problems, rel L2, ...), appended to the row's reason; None
        when the backend knows of none. The verdict stays ``mismatch`` either way."""
        return None

    @classmethod
    def standalone_call(cls, config: AttentionConfig, variant: dict[str, Any],
                        call: dict[str, Any] | None = None) -> str | None:
        """Python source making this backend's library call the way its impl does, for the
        standalone reproducer ``harness repro`` writes (no harness import); None: not offered.

        ``call`` is the row's recorded ``describe_call`` (e.g. a resolved version), if any.
        The source runs at module level of the script and may import the library. It finds
        (the names of attn_contract/standalone.py ``STANDALONE_NAMES``, which harness/crosscheck/repro.py and
        harness/crosscheck/run.py define):
        ``q`` [num_tokens, NUM_HEADS, HEAD_SIZE] in DTYPE; ``kv_cache`` the logical
        (num_blocks, 2, BLOCK_SIZE, NUM_KV_HEADS, HEAD_SIZE) cache in CACHE_DTYPE (KV_LAYOUT
        memory order, as ``materialize_kv_cache`` makes it); ``block_table`` int32
        [num_reqs, max_blocks]; ``seq_lens`` int32 [num_reqs]; ``query_start_loc`` int32
        [num_reqs + 1] (all on DEVICE); host lists QUERY_LENS, SEQ_LENS, QSL; constants DEVICE,
        DTYPE, CACHE_DTYPE, FP8, NUM_HEADS, NUM_KV_HEADS, HEAD_SIZE, BLOCK_SIZE, KV_LAYOUT,
        SCALE, CAUSAL, WINDOW_LEFT (-1: no window), SOFTCAP (0: none), K_SCALE, V_SCALE (1.0
        without fp8), ALIBI_SLOPES and SINKS (float32 [NUM_HEADS] on DEVICE, or None), and
        ``visible(i)``: request i's bool mask [query_len, seq_len]. The batch is already in
        the order the backend asks for (decode-first with ``reorder_batch_threshold``). It
        must leave the output in ``out`` [num_tokens, NUM_HEADS, HEAD_SIZE]."""
        return None

    @staticmethod
    def get_latent_cache_shape(num_blocks: int, block_size: int, latent_dim: int) -> tuple[int, ...]:
        """Logical MLA latent-cache shape (vLLM's MLA layout, one 576-wide vector per token)."""
        return (num_blocks, block_size, latent_dim)

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
        (as vLLM allocates it), so the kernel sees real NHD or HND strides.

        MLA: ``canonical`` is the latent cache ``(num_blocks, block_size, latent_dim)``
        (3 dims), handed to ``materialize_latent_cache`` (the layout does not apply)."""
        if canonical.dim() == 3:
            return cls.materialize_latent_cache(canonical)
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
    def materialize_latent_cache(cls, canonical: torch.Tensor) -> torch.Tensor:
        """This backend's MLA latent cache holding the canonical one's data. The default is the
        canonical ``(num_blocks, block_size, latent_dim)`` tensor itself (contiguous, vLLM's
        layout); a kernel that wants ckv and kpe apart slices ``[..., :L]`` / ``[..., L:]``."""
        shape = cls.get_latent_cache_shape(*canonical.shape)
        if tuple(shape) != tuple(canonical.shape):
            raise NotImplementedError(f"{cls.name} declares latent-cache shape {tuple(shape)}; override"
                                      " materialize_latent_cache to convert from the canonical one")
        return canonical

    @classmethod
    @abstractmethod
    def get_builder_cls(cls) -> type[AttentionMetadataBuilder]: ...

    @classmethod
    @abstractmethod
    def get_impl_cls(cls) -> type[AttentionImpl]: ...
