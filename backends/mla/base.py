"""The base class of the MLA library adapters: what flashinfer-mla, flash-attn-mla and flashmla
declare alike (both MLA forms by default, the 576/512 and 192/128 head pairs, DeepSeek's latent
geometry, either KV layout, CUDA only, an LSE) and the support check they share (the declared
table, then the form's geometry, then the adapter's own rule)."""

from __future__ import annotations

from typing import Any, ClassVar

from attn_contract import AttentionBackend, AttentionConfig, Capabilities
from backends.mla.common import LATENT_DIMS, MLA_HEAD_SIZES, MLA_KINDS, MLA_V_HEAD_SIZES, form_reason


class MLALibraryBackend(AttentionBackend):
    """An adapter of one MLA library. Subclasses give ``capabilities`` through
    ``mla_capabilities(...)`` (only what differs from the family's defaults) and their own
    support rules in ``mla_support_reason``."""

    attention_kinds: ClassVar[frozenset[str]] = MLA_KINDS

    @classmethod
    def mla_capabilities(cls, **fields: Any) -> Capabilities:
        """The family's declared capabilities with ``fields`` over them."""
        base: dict[str, Any] = dict(
            head_sizes=MLA_HEAD_SIZES, v_head_sizes=MLA_V_HEAD_SIZES, attention_kinds=cls.attention_kinds,
            mla_latent_dims=LATENT_DIMS, kv_layouts=frozenset({"NHD", "HND"}), causal=True, non_causal=True,
            gqa=True, returns_lse=True, devices=frozenset({"cuda"}))
        return Capabilities(**{**base, **fields})

    @classmethod
    def mla_support_reason(cls, config: AttentionConfig, variant: dict[str, Any]) -> str | None:
        """The adapter's own rule beyond the declared table and the form's geometry (None: none)."""
        return None

    @classmethod
    def check_support(cls, config: AttentionConfig, variant: dict[str, Any], device: str) -> str | None:
        return (cls.capabilities(variant).unsupported_reason(config, device) or form_reason(config)
                or cls.mla_support_reason(config, variant))
