"""Multi-head latent attention (MLA, DeepSeek-V2/V3, Kimi-K2): its dimensions, its two forms and
its latent paged cache, as vLLM's MLA backends run it (vllm/v1/attention/backends/mla/common.py).

An MLA layer caches ONE vector per token, shared by every query head: the compressed KV
(``ckv``, ``kv_lora_rank`` = 512 values, after kv_a_layernorm) followed by the rotary key part
(``kpe``, ``qk_rope_head_dim`` = 64), 576 values. Per head the layer's up-projection
(``kv_b_proj``) turns ``ckv`` into a key part ``k_nope`` (``qk_nope_head_dim`` = 128) and a value
(``v_head_dim`` = 128). vLLM runs the attention in one of two forms, and so does the contract
(``AttentionConfig.attention_kind``):

``mla_absorbed`` (decode and speculative decode: FlashMLA, FlashInfer MLA, FA3 ``qv``, Triton MLA)
    W_UK is absorbed into the query, so the call is multi-query attention over the latent cache:
    ``num_kv_heads`` 1, ``head_size`` = kv_lora_rank + qk_rope_head_dim (576), value head size
    ``kv_lora_rank`` (512). The query is ``[T, H, 576]`` = ``[q_nope @ W_UK (512) | q_pe (64)]``
    (latent part first, rope part last, as vLLM concatenates ``ql_nope`` and ``q_pe``); the keys are
    the 576-wide cache entries; the values are their first 512 entries (``ckv``); the output is
    ``[T, H, 512]`` (vLLM then multiplies it by W_UV).
``mla_expanded`` (prefill and chunked prefill: FA3/FA2 varlen, FlashInfer ragged prefill, cuDNN)
    The latent is up-projected, so the call is multi-head attention with a value head size
    distinct from the query/key one: ``head_size`` = qk_nope + qk_rope (192), value head size
    ``v_head_dim`` (128), ``num_kv_heads`` = ``num_heads``. The query is ``[T, H, 192]`` =
    ``[q_nope (128) | q_pe (64)]``; each key is ``[k_nope (128) | kpe (64, the same for every
    head)]``. See ``AttentionImpl.forward`` for where the keys and values are passed.

Both forms use the softmax scale of the 192-wide query/key head, ``(qk_nope + qk_rope) ** -0.5``,
times ``mscale ** 2`` when the model's ``rope_scaling`` is yarn with ``mscale_all_dim``
(vLLM's DeepseekV2 attention: ``scaling = qk_head_dim**-0.5 * yarn_get_mscale(factor,
mscale_all_dim)**2``), never the 576-wide absorbed head's.

The latent paged cache (both forms; the canonical layout the harness generates and
``AttentionBackend.materialize_kv_cache`` receives): ``(num_blocks, block_size, 576)`` in the
cache dtype, ``ckv`` in ``[..., :kv_lora_rank]`` and ``kpe`` in ``[..., kv_lora_rank:]`` (vLLM's
MLA ``get_kv_cache_shape``: ``(num_blocks, block_size, head_size)`` with one KV head). An fp8
latent cache stores ``value / k_scale`` (one per-layer scale, ``LayerParams.k_scale``, for the
whole 576-wide vector; ``v_scale`` equals it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# AttentionConfig.attention_kind values, and what Capabilities.attention_kinds holds.
MHA = "mha"  # ordinary multi-head / grouped-query attention over the (K, V) paged cache
MLA_ABSORBED = "mla_absorbed"
MLA_EXPANDED = "mla_expanded"
ATTENTION_KINDS: tuple[str, ...] = (MHA, MLA_ABSORBED, MLA_EXPANDED)
MLA_KINDS: frozenset[str] = frozenset({MLA_ABSORBED, MLA_EXPANDED})
# Attention families: what a suite case's ``attention:`` names and what a suite's
# ``backends_for:`` selects by ("mha": the K/V cache; "mla": either MLA form).
FAMILY_KINDS: dict[str, frozenset[str]] = {"mha": frozenset({MHA}), "mla": MLA_KINDS}


def declares_family(attention_kinds: frozenset[str], family: str) -> bool:
    """A backend declaring ``attention_kinds`` runs some form of ``family`` ("mha" or "mla")."""
    return bool(attention_kinds & FAMILY_KINDS[family])


def yarn_get_mscale(scale: float = 1.0, mscale: float = 1.0) -> float:
    """vLLM's ``yarn_get_mscale`` (rotary_embedding): ``0.1 * mscale * ln(scale) + 1`` for a
    rope scaling ``factor`` above 1, else 1."""
    if scale <= 1:
        return 1.0
    return 0.1 * mscale * math.log(scale) + 1.0


@dataclass(frozen=True)
class MLADims:
    """The dimensions of one MLA layer (config.json names) and its yarn attention factor.

    ``mscale``: ``yarn_get_mscale(rope_scaling.factor, rope_scaling.mscale_all_dim)`` when the
    model's rope scaling is yarn with ``mscale_all_dim``, else 1.0. The softmax scale is
    multiplied by its square."""

    kv_lora_rank: int = 512
    qk_rope_head_dim: int = 64
    qk_nope_head_dim: int = 128
    v_head_dim: int = 128
    mscale: float = 1.0

    @property
    def latent_dim(self) -> int:
        """Values per token in the latent cache (ckv + kpe): 576."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    @property
    def qk_head_dim(self) -> int:
        """The query/key head of the expanded form (q_nope + q_pe): 192."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def softmax_scale(self) -> float:
        """``qk_head_dim ** -0.5 * mscale ** 2`` (both forms)."""
        return self.qk_head_dim ** -0.5 * self.mscale ** 2

    def head_sizes(self, kind: str) -> tuple[int, int]:
        """(query/key head size, value head size) of the call in form ``kind``."""
        if kind == MLA_ABSORBED:
            return self.latent_dim, self.kv_lora_rank
        if kind == MLA_EXPANDED:
            return self.qk_head_dim, self.v_head_dim
        raise ValueError(f"attention kind {kind!r} is not an MLA form ({sorted(MLA_KINDS)})")

    def describe(self) -> dict[str, float | int]:
        return {"kv_lora_rank": self.kv_lora_rank, "qk_rope_head_dim": self.qk_rope_head_dim,
                "qk_nope_head_dim": self.qk_nope_head_dim, "v_head_dim": self.v_head_dim, "mscale": self.mscale}
