"""What the readers need to know about a run's backends, recorded at run time in run.json
(``RunHeader.backend_facts``): each backend's serving-engine names (``engine_names``, the
``attn_contract.engines.EngineName`` declarations) and its plain counterpart (cascade backends).

recommend and the report's engine section read these records, never the backend classes, so the
same rows give the same verdict on any install (docs/architecture.md).
"""

from __future__ import annotations

from typing import Any, Iterable

from pydantic import BaseModel, ConfigDict

from attn_contract.engines import EngineName


class EngineNameRecord(BaseModel):
    """One ``EngineName`` as JSON. ``version_names`` keys are kernel versions: integers, since the
    readers compare them with a variant's value cast to int."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)
    name: str = ""
    """The engine's name for the backend (vLLM's ``FLASH_ATTN``, SGLang's ``fa3``)."""
    version_axis: str | None = None
    """The variant axis that picks the kernel version (``fa_version``), if any."""
    version_names: dict[int, str] = {}
    """Kernel version -> the engine's name for it (SGLang: 3 -> fa3, 4 -> fa4)."""
    runs: dict[str, Any] = {}
    """The variant values the engine runs (axis -> value)."""
    caveat: str = ""
    """What the engine's setting does differently, in words."""
    aliases: list[str] = []
    """Other names the engine accepts for it."""
    version_tag: str = ""
    """The prefix a kernel version is written with (``fa`` of fa3)."""
    attention_kinds: list[str] | None = None
    """The attention kinds the name serves, sorted; None: every kind the backend declares."""
    mla_prefill: str = ""
    """The engine's name for the backend's MLA prefill kernel (vLLM's ``mla_prefill_backend``); "": none."""

    @classmethod
    def of(cls, decl: EngineName) -> "EngineNameRecord":
        kinds = None if decl.attention_kinds is None else sorted(decl.attention_kinds)
        return cls(name=decl.name, version_axis=decl.version_axis, version_names=dict(decl.version_names),
                   runs=dict(decl.runs), caveat=decl.caveat, aliases=list(decl.aliases), version_tag=decl.version_tag,
                   attention_kinds=kinds, mla_prefill=decl.mla_prefill)

    def declaration(self) -> EngineName:
        """The contract's ``EngineName`` again (what the readers' rules take)."""
        kinds = None if self.attention_kinds is None else frozenset(self.attention_kinds)
        return EngineName(name=self.name, version_axis=self.version_axis, version_names=dict(self.version_names),
                          runs=dict(self.runs), caveat=self.caveat, aliases=tuple(self.aliases),
                          version_tag=self.version_tag, attention_kinds=kinds, mla_prefill=self.mla_prefill)


class BackendFacts(BaseModel):
    """What the readers ask about one backend."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)
    engine_names: dict[str, EngineNameRecord] = {}
    """Engine (``vllm``, ``sglang``) -> its name for the backend."""
    plain_counterpart: str | None = None
    """A cascade backend's plain backend (``Capabilities.plain_counterpart``)."""


def backend_facts(cls: Any) -> BackendFacts:
    """The facts a backend class declares (``engine_names``, ``plain_counterpart``), read from
    class attributes only: the run's parent records them before any library is imported."""
    plain = getattr(cls, "plain_counterpart", None)
    names = {engine: EngineNameRecord.of(decl) for engine, decl in (getattr(cls, "engine_names", None) or {}).items()}
    return BackendFacts(engine_names=names, plain_counterpart=plain)


def facts_of(classes: Iterable[Any]) -> dict[str, dict[str, Any]]:
    """run.json's ``backend_facts``: backend name -> its facts, as JSON-ready dicts."""
    return {c.name: backend_facts(c).model_dump(mode="json") for c in classes}
