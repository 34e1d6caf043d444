"""How serving engines name a backend: the setting that makes an engine run it.

A backend declares one ``EngineName`` per engine that can run it (``AttentionBackend.engine_names``,
keyed by engine: ``"vllm"``, ``"sglang"``); the harness turns a measured winner into flags from
these declarations only, so it never spells a backend's name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class EngineName:
    """One engine's name for a backend.

    ``name``: the engine's backend name (vLLM ``FLASH_ATTN``). ``version_axis``: the variant axis
    whose value the engine selects as a kernel version (vLLM passes it as a setting; a variant
    without a concrete version has no setting). ``version_names``: where the engine names each
    version apart (SGLang ``fa3``/``fa4``), version -> name; a version not listed has no setting.
    ``runs``: the values of the other variant axes the engine runs (ordered, most telling first);
    variants with other values have no switch in the engine. ``caveat``: what the setting does
    not pin down. ``aliases``: other spellings of ``name`` (benchmark files). ``version_tag``:
    a short prefix naming a version in tables ("fa" gives "fa3"). ``attention_kinds``: the
    attention kinds (attn_contract/mla.py: "mha", "mla_absorbed", "mla_expanded") this name runs
    in the engine; None: every kind the backend declares. A backend running both MHA and MLA
    whose engine has no MLA counterpart (torch SDPA in SGLang's torch_native) says {"mha"}, and a
    row of another kind then has no setting. vLLM's and SGLang's MLA backends are separate
    names (vLLM ``FLASHMLA``, ``FLASHINFER_MLA``, ``FLASH_ATTN_MLA``, ``TRITON_MLA``,
    ``CUTLASS_MLA``; SGLang ``flashmla``, ``flashinfer``, ``fa3``, ``triton``), each declared by
    the MLA backend that runs the same kernel. ``mla_prefill``: the engine's name for this
    library's MLA prefill (the expanded 192/128 form) where the engine picks that kernel apart
    from the decode backend (vLLM's ``mla_prefill_backend``: ``FLASH_ATTN``, ``FLASHINFER``,
    ``TRTLLM_RAGGED``); empty: none of the engine's prefill choices runs it."""

    name: str = ""
    version_axis: str | None = None
    version_names: dict[Any, str] = field(default_factory=dict)
    runs: dict[str, Any] = field(default_factory=dict)
    caveat: str = ""
    aliases: tuple[str, ...] = ()
    version_tag: str = ""
    attention_kinds: frozenset[str] | None = None
    mla_prefill: str = ""

    def runs_kind(self, attention_kind: str) -> bool:
        """Whether this engine setting runs attention of ``attention_kind``."""
        return self.attention_kinds is None or attention_kind in self.attention_kinds
