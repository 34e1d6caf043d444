"""Serving engines' names for this harness's backends and variants, as the run recorded each
backend's declaration (``AttentionBackend.engine_names``, ``attn_contract.engines.EngineName``) in
run.json's ``backend_facts``, else as engine_table.json has them: turn a measured winner into the
flags to paste. Records only: no backend class is looked up, and the core spells no backend's name.

vLLM (one attention backend per process):
    ``--attention-backend FLASH_ATTN|FLASHINFER|FLEX_ATTENTION`` (from vLLM PR #26315, 2025-10,
    which deprecated the variables; up to 0.14.x they are still read, with a warning); older
    releases read ``VLLM_ATTENTION_BACKEND``. FlashAttention's version: ``--attention-config
    '{"flash_attn_version": N}'`` (same PR), else the ``VLLM_FLASH_ATTN_VERSION`` variable,
    which takes 2 or 3 only (so FA4 has no environment form).
SGLang (prefill and decode may differ):
    ``--attention-backend fa3|flashinfer|flex_attention|torch_native`` for both, or
    ``--prefill-attention-backend X --decode-attention-backend Y`` (``fa4``: prefill only, see
    ``SGLANG_PREFILL_ONLY``); for MLA models
    ``fa3|flashinfer|flashmla|triton|cutlass_mla|trtllm_mla`` (declared by the MLA backends).
vLLM's MLA backends: ``--attention-backend FLASH_ATTN_MLA|FLASHMLA|FLASHINFER_MLA|TRITON_MLA|CUTLASS_MLA``.

A candidate whose backend declares no name for an engine has no setting there.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from attn_contract.engines import EngineName
from harness.analysis.selection_rules import VllmChoice
from harness.records.engine_facts import BackendFacts
from harness.records.load import Run, backend_facts

ENGINES = ("vllm", "sglang")

# SGLang's flags as its sources have them, each with the PR (date) it came in: printed under
# ``recommend --engine sglang`` so a reader can check them against the release they run.
SGLANG_FACTS = (
    "`--attention-backend NAME` for prefill and decode alike; names from SGLang's server_args choices: "
    "`fa3`, `flashinfer`, `triton`, `torch_native` (2024-2025), `flex_attention`, `fa4` (SGLang PR #10937, "
    "2025-09, FA4 for MHA prefill)",
    "`--prefill-attention-backend X --decode-attention-backend Y` (SGLang PR #6338, 2025-05): prefill "
    "(and extend) and decode may differ",
    "`fa4` for prefill: SGLang's server_args from PR #10937 refuses `--attention-backend fa4` and "
    "`--decode-attention-backend fa4` (\"FA4 backend is only supported for prefill\"), and FA4 decode on sm90 "
    "came only with PR #18442 (2026-02), so the settings here name fa4 with `--prefill-attention-backend`",
)

# SGLang backend names its releases take for prefill only (the flag to name them with) and what
# SGLang then changes that the harness's rows did not: server_args' choices, each with its PR.
SGLANG_PREFILL_ONLY = {"fa4": "PR #10937"}
# ``--prefill-attention-backend fa4`` moves the whole KV cache to page 128 for non-MLA models:
# unconditionally in PR #10937's server_args, non-MLA only from PR #12801 (2025-11), and on sm100
# only from PR #18442 (2026-02, which gave sm90 paged FA4).
SGLANG_FA4_PAGE = 128

# SGLang's automatic MLA backend per GPU (server_args' auto-selection; SGLang issue #5064, 2025-04).
SGLANG_MLA_FACT = ("MLA models (DeepSeek, Kimi-K2): with no `--attention-backend`, SGLang picks `fa3` on Hopper and "
                   "`flashinfer` on Blackwell, else `triton` (server_args auto-selection, SGLang issue #5064, 2025-04); "
                   "`flashmla`, `cutlass_mla` (SGLang PR #5390) and `trtllm_mla` are opt-in; prefill and decode may "
                   "differ with `--prefill-attention-backend` / `--decode-attention-backend`")

# Results written before run.json recorded ``backend_facts``: the built-in backends' declarations
# as committed with this package (harness/tools/engine_table.py writes it, a test checks it).
TABLE = Path(__file__).resolve().with_name("engine_table.json")

@functools.lru_cache(maxsize=1)
def _table() -> dict[str, BackendFacts]:
    data = json.loads(TABLE.read_text(encoding="utf-8"))
    return {name: BackendFacts.model_validate(f) for name, f in data["backend_facts"].items()}


@dataclass(frozen=True)
class EngineFacts:
    """The backend facts of the runs being read (``recorded``: run.json's ``backend_facts``,
    harness/records/load.py ``backend_facts``), over the committed table; the engine rules ask
    this object, so the facts travel with the loaded runs. ``EngineFacts()``: the table alone."""

    recorded: Mapping[str, BackendFacts] = field(default_factory=dict)

    @classmethod
    def of(cls, runs: Sequence[Run]) -> "EngineFacts":
        return cls(backend_facts(runs))

    def facts(self, name: str) -> BackendFacts | None:
        """A backend's facts: from the loaded run headers, else the committed table, else None."""
        return self.recorded.get(name) or _table().get(name)

    def known_backends(self) -> list[str]:
        """Every backend with facts: the table's (in its order), then those only run headers name."""
        return list(dict.fromkeys([*_table(), *self.recorded]))

    def engine_name(self, backend: str, engine: str) -> EngineName | None:
        """The backend's recorded ``EngineName`` for ``engine``, or None."""
        facts = self.facts(backend)
        rec = None if facts is None else facts.engine_names.get(engine)
        return None if rec is None else rec.declaration()

    def plain_counterpart(self, backend: str) -> str | None:
        """The plain backend a cascade backend pairs with (``Capabilities.plain_counterpart``), or None."""
        facts = self.facts(backend)
        return None if facts is None else facts.plain_counterpart

    def cascade_of(self, backend: str, names: Iterable[str]) -> list[str]:
        """The cascade backends among ``names`` whose plain counterpart is ``backend``."""
        return [n for n in names if n != backend and self.plain_counterpart(n) == backend]

    def engine_backends(self, engine: str) -> list[tuple[str, EngineName]]:
        """(backend name, EngineName) of every backend with facts the engine can run, in ``known_backends`` order."""
        out = []
        for name in self.known_backends():
            decl = self.engine_name(name, engine)
            if decl is not None:
                out.append((name, decl))
        return out

    def harness_candidates(self, choice: VllmChoice) -> list[tuple[str, dict[str, Any]]]:
        """The harness backend+variant that runs what vLLM would run, best match first."""
        out = []
        for name, decl in self.engine_backends("vllm"):
            if (decl.mla_prefill if choice.mla_prefill else decl.name) != choice.backend:
                continue
            axis, fixed = decl.version_axis, decl.runs
            want = {**fixed, **({axis: choice.fa_version} if axis else {})}
            out.append((name, want))
            if len(fixed) > 1:  # then any value of the axes after the first
                first = next(iter(fixed))
                out.append((name, {first: fixed[first], **({axis: choice.fa_version} if axis else {})}))
        return out

    def from_vllm_name(self, name: str) -> str | None:
        """A vLLM backend name (``FLASH_ATTN``, ``flashinfer``, ...) -> this harness's backend, or
        None when there is no counterpart (MLA kernels, Triton...)."""
        key = name.strip()
        decls = self.engine_backends("vllm")
        for ours, decl in decls:
            if key.upper() == decl.name:
                return ours
        return next((ours for ours, decl in decls if key.lower() in decl.aliases), None)

    def sglang_setting(self, backend: str, variant: Mapping[str, Any],
                       attention_kind: str = "mha") -> dict[str, Any] | None:
        """SGLang's backend name for one harness backend+variant, with whether SGLang runs exactly
        that variant; None when SGLang has no such backend (for this attention kind: MLA rows need a
        name declared for MLA, ``EngineName.attention_kinds``)."""
        decl = self.engine_name(backend, "sglang")
        if decl is None or not decl.runs_kind(attention_kind):
            return None
        axis, fixed, caveat = decl.version_axis, decl.runs, decl.caveat
        names: Mapping[Any, str] = decl.version_names if axis else {None: decl.name}
        v = variant.get(axis) if axis else None
        try:
            v = int(v) if v is not None else None
        except (TypeError, ValueError):
            return None  # "auto": not a version SGLang can be told
        if v not in names:
            return None
        exact = all(str(variant.get(k, want)) == str(want) for k, want in fixed.items())
        out: dict[str, Any] = {"attention_backend": names[v], "exact": exact}
        if caveat:
            out["caveat"] = caveat
        if not exact:
            out["caveat"] = (caveat + "; " if caveat else "") + "SGLang does not run this variant (" + ",".join(
                f"{k}={variant.get(k)}" for k in fixed) + ")"
        return out


def sglang_flags(prefill: str | None, decode: str | None) -> str:
    """The flags for a prefill and a decode backend (one flag when they agree and SGLang takes
    that name for decode too; a prefill-only name, ``SGLANG_PREFILL_ONLY``, gets its own flag)."""
    if prefill in SGLANG_PREFILL_ONLY and decode in (None, prefill):
        return f"--prefill-attention-backend {prefill}" + (f" --decode-attention-backend {decode}" if decode else "")
    if prefill and decode and prefill != decode:
        return f"--prefill-attention-backend {prefill} --decode-attention-backend {decode}"
    one = prefill or decode
    return f"--attention-backend {one}" if one else ""


def sglang_page_note(flags: Iterable[str], pages: Iterable[int | None]) -> str | None:
    """What SGLang changes under these settings that the rows (measured at ``pages``) did not
    have: a ``--prefill-attention-backend fa4`` setting moves a non-MLA model's KV cache to page
    128. None when no setting names it or every row was measured at page 128."""
    if not any("--prefill-attention-backend fa4" in f for f in flags):
        return None
    measured = sorted({p for p in pages if p})
    if measured == [SGLANG_FA4_PAGE]:
        return None
    at = ", ".join(map(str, measured)) or "an unrecorded size"
    return (f"`--prefill-attention-backend fa4`: SGLang then runs the whole KV cache (prefill and decode) at page "
            f"{SGLANG_FA4_PAGE} for non-MLA models (server_args: on every GPU from PR #10937, non-MLA only from PR "
            f"#12801, on sm100 only from PR #18442), whatever `--page-size` says; these rows were measured at page "
            f"{at}, so page {SGLANG_FA4_PAGE} is not what they timed: measure it (`block_size: {SGLANG_FA4_PAGE}`) "
            "before taking the setting on such a release.")


def vllm_flags(setting: dict[str, Any]) -> str:
    """CLI flags, then the environment variables for releases without them."""
    env = " ".join(f"{k}={v}" for k, v in setting.get("env", {}).items())
    return f"{setting['cli']} (vLLM before PR #26315: {env})" if env else setting["cli"]


# The committed table alone: the facts of readers that read no run (a vLLM study, a candidate
# built by hand) and the default of the rules' helpers.
TABLE_ONLY = EngineFacts()
