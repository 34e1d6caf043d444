"""The vLLM side: the setting that runs a candidate (from the backend's ``engine_names``
declaration), vLLM's default choice per bucket against the measured winner, and the cost of one
setting for a whole deployment."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from attn_contract.engines import EngineName
from attn_contract.mla import MLA_EXPANDED
from attn_contract.status import Status, reason_kind
from harness.analysis.engines import TABLE_ONLY, EngineFacts
from harness.analysis.recommend.buckets import Bucket
from harness.analysis.recommend.rank import BucketResult, Candidate, Ratio, ratio, tie_kind
from harness.analysis.selection_rules import VllmChoice, vllm_default

# What vLLM's releases do, each with the release (or PR) it was read from: vLLM's sources
# (vllm/config/model.py, vllm/config/attention.py, fa_utils.get_flash_attn_version) and PRs.
CASCADE_FACT = ("cascade attention: vLLM releases up to early 2026 applied a per-batch rule by default "
                "(`--disable-cascade-attn` turned it off, vLLM PR #15243, 2025-03); since vLLM PR #36318 (merged "
                "2026-03-07) it is off by default (`disable_cascade_attn` defaults to True) and "
                "`--no-disable-cascade-attn` opts in, the rule still deciding per batch")
FA_VERSION_FACT = ("FlashAttention version: `--attention-config '{\"flash_attn_version\": N}'` (from vLLM PR #26315, "
                   "2025-10); earlier releases read `VLLM_FLASH_ATTN_VERSION`, which takes 2 or 3 only (fa_utils asserts it): "
                   "FA4 has no environment-variable form")
BACKEND_FLAG_FACT = ("backend: `--attention-backend FLASH_ATTN|FLASHINFER|FLEX_ATTENTION` (from vLLM PR #26315, 2025-10, "
                     "which deprecated the VLLM_ATTENTION_BACKEND variable; vLLM PR #30564, 2025-12-12, dropped it from "
                     "the docs; releases up to 0.14.x still read it with a deprecation warning, vLLM PR #32812, "
                     "2026-01-21, removed it; earlier releases read only the variable)")
MLA_DECODE_FACT = ("MLA decode (absorbed form): `--attention-backend FLASH_ATTN_MLA|FLASHMLA|FLASHINFER_MLA|TRITON_MLA|"
                   "CUTLASS_MLA`; with none named, Hopper walks FLASH_ATTN_MLA, FLASHMLA, FLASHINFER_MLA, TRITON_MLA "
                   "(vllm/platforms/cuda.py) and Blackwell starts at FLASHINFER_MLA, then CUTLASS_MLA (vLLM PR #32615, "
                   "2026-01-19); FLASHINFER_MLA and CUTLASS_MLA run on compute capability 10.x only")
MLA_PREFILL_FACT = ("MLA prefill (expanded form, 192/128) is chosen apart from the decode backend: "
                    "`--attention-config '{\"mla_prefill_backend\": \"FLASH_ATTN|FLASHINFER|TRTLLM_RAGGED\"}'` (vLLM PR "
                    "#32623, 2026-01, which replaced `use_cudnn_prefill`, `use_trtllm_ragged_deepseek_prefill` and "
                    "`disable_flashinfer_prefill`); with none named FLASH_ATTN is tried first on every GPU, Blackwell "
                    "falling back to TRTLLM_RAGGED then FLASHINFER (vllm/v1/attention/backends/mla/prefill/selector.py; "
                    "vLLM PR #43697, 2026-05-26); the FLASHINFER prefill (ragged wrapper, cutlass) runs on 10.x only, so "
                    "on Hopper the only MLA prefill is FLASH_ATTN")
VLLM_FACTS = (BACKEND_FLAG_FACT, FA_VERSION_FACT, CASCADE_FACT, MLA_DECODE_FACT, MLA_PREFILL_FACT)
VLLM_NOT_EXPRESSIBLE = [
    "One attention backend per process: vLLM's selector picks it once per layer configuration at start-up "
    "(`--attention-backend` from vLLM PR #26315; `VLLM_ATTENTION_BACKEND` before). It cannot switch backend "
    "per batch (decode vs prefill, batch size, context length), so a per-bucket policy only applies as "
    "one setting per deployment: see the single-setting line.",
    FA_VERSION_FACT[0].upper() + FA_VERSION_FACT[1:] + ".",
    "FlashInfer's decode kernel and prefill backend: vLLM decodes with tensor cores and lets FlashInfer pick "
    "its prefill kernel; the harness variants decode_tensor_cores=False and prefill_backend=fa2/fa3 have no "
    "vLLM switch.",
    "Cascade cannot be forced, only allowed: " + CASCADE_FACT + ".",
    "KV layout is global (`VLLM_KV_CACHE_LAYOUT`); the page size is global (`--block-size`) and each "
    "backend only accepts its kernel block sizes (FA: multiple of 16; FlashInfer on Hopper: 16, 32, 64).",
    "torch-math and sdpa are harness baselines, not vLLM decoder backends.",
    "MLA (DeepSeek-V2/V3/R1, Kimi-K2): `--attention-backend FLASH_ATTN_MLA|FLASHMLA|FLASHINFER_MLA|TRITON_MLA|"
    "CUTLASS_MLA` picks the decode (absorbed) kernel; vLLM runs prefill's 192/128 attention through its own MLA "
    "prefill selection, so an expanded-form winner is not a decode-backend setting. With no backend named, vLLM "
    "forces 64-token pages on Hopper (FlashMLA's page) and walks FLASH_ATTN_MLA, FLASHMLA, FLASHINFER_MLA, "
    "TRITON_MLA (docs/mla.md).",
    "MLA prefill rows time the 192/128 attention call alone: the context's up-projection (kv_b_proj over the "
    "cached latent), which vLLM runs every chunked-prefill step, is left out for every backend alike (the rows "
    "say so in call.untimed_work), so they rank the attention kernels, not the whole prefill step.",
]


def vllm_setting(c: Candidate, facts: EngineFacts = TABLE_ONLY) -> dict[str, Any] | None:
    """The vLLM settings that run candidate ``c``, with what they cannot express; None when
    vLLM has no setting for it. ``facts``: the runs' backend facts (default: the committed table)."""
    base = facts.plain_counterpart(c.backend)
    if base is not None:  # a cascade backend: vLLM runs its plain counterpart, cascading by its own rule
        decl = facts.engine_name(base, "vllm")
        plain = Candidate(base, {**(decl.runs if decl else {}), **c.variant}, c.variant_label, c.times,
                          attention_kind=c.attention_kind)
        s = vllm_setting(plain, facts)
        if s is None:
            return None
        return {**s, "exact": False,
                "caveat": "cascade cannot be forced in vLLM: " + CASCADE_FACT}
    decl = facts.engine_name(c.backend, "vllm")
    if decl is None:
        return None
    if c.attention_kind == MLA_EXPANDED:
        return _mla_prefill_setting(c, decl)
    if not decl.runs_kind(c.attention_kind):
        return None
    vllm_name, version_axis, fixed = decl.name, decl.version_axis, decl.runs
    v = c.variant.get(version_axis) if version_axis else None
    if version_axis and (v is None or str(v) == "auto"):
        return None
    v = int(v) if v is not None else None
    exact = all(str(c.variant.get(k, want)) == str(want) for k, want in fixed.items())
    cli = f"--attention-backend {vllm_name}" + (f" --attention-config '{{\"flash_attn_version\": {v}}}'" if v else "")
    # The environment form is for releases before --attention-config (vLLM PR #26315); their
    # VLLM_FLASH_ATTN_VERSION takes 2 or 3, and none of them has FA4: FA4 has no such form.
    env = {} if v is not None and v not in (2, 3) else {
        "VLLM_ATTENTION_BACKEND": vllm_name, **({"VLLM_FLASH_ATTN_VERSION": str(v)} if v else {})}
    out: dict[str, Any] = {"attention_backend": vllm_name, "flash_attn_version": v, "exact": exact, "cli": cli, "env": env}
    if not exact:
        out["caveat"] = f"vLLM cannot select {c.backend} variant {c.variant_label} (it runs {variant_label_of(fixed)})"
    return out


def _mla_prefill_setting(c: Candidate, decl: EngineName) -> dict[str, Any] | None:
    """An MLA prefill (expanded, 192/128) row: vLLM picks that kernel apart from the decode
    backend, through ``mla_prefill_backend`` (``MLA_PREFILL_FACT``); the backend's declared
    ``EngineName.mla_prefill`` names it, and no decode flag (``--attention-backend``) applies."""
    if not decl.mla_prefill:
        return None
    exact = all(str(c.variant.get(k, want)) == str(want) for k, want in decl.runs.items())
    cli = f"--attention-config '{{\"mla_prefill_backend\": \"{decl.mla_prefill}\"}}'"
    out: dict[str, Any] = {"attention_backend": f"mla_prefill_backend={decl.mla_prefill}", "flash_attn_version": None,
                           "exact": exact, "cli": cli, "env": {}, "mla_prefill": decl.mla_prefill}
    if not exact:
        out["caveat"] = f"vLLM cannot select {c.backend} variant {c.variant_label} (it runs {variant_label_of(decl.runs)})"
    return out


def variant_label_of(variant: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(variant.items()))


def _find(res: BucketResult, backend: str, want: dict[str, Any]) -> Candidate | None:
    for c in res.ranked + res.excluded:
        # A row without an axis predates it (it ran the axis's default, e.g. decode_backend).
        if c.backend == backend and all(str(c.variant.get(k, v)) == str(v) for k, v in want.items()):
            return c
    return None


def same_times(a: Candidate, b: Candidate, cases: list[str]) -> bool:
    """``a`` is ``b`` on every case (the default's composite picked the winner's rows)."""
    return set(a.times) == set(cases) and all(a.times[k] is b.times.get(k) for k in cases)


def _cascade_for(res: BucketResult, backend: str, want: dict[str, Any], facts: EngineFacts) -> Candidate | None:
    """The bucket's candidate of a cascade backend paired with ``backend``, on the same kernel version."""
    decl = facts.engine_name(backend, "vllm")
    axis = decl.version_axis if decl else None
    names = dict.fromkeys(c.backend for c in res.ranked + res.excluded)
    for name in facts.cascade_of(backend, names):
        found = _find(res, name, {k: v for k, v in want.items() if k == axis})
        if found is not None:
            return found
    return None


def _vllm_pick(choice: VllmChoice, res: BucketResult, facts: EngineFacts, cascade_opt_in: bool = False) -> Candidate | None:
    """The candidate that runs what vLLM would run: the plain backend (cascade attention is off
    by default since vLLM PR #36318, 2026-03-07). With ``cascade_opt_in``
    (``--no-disable-cascade-attn``) vLLM applies its cascade
    rule per batch on shared prefixes: then the pick is, case by case, the cascade row where
    that rule says cascade and the plain row elsewhere."""
    for backend, want in facts.harness_candidates(choice):
        plain = _find(res, backend, want)
        if plain is None:
            continue
        if not cascade_opt_in:
            return plain
        casc = _cascade_for(res, backend, want, facts)
        if casc is None or casc.excluded or plain.excluded or not casc.rule_says_cascade:
            return plain
        shared = set(plain.times) & set(casc.times)
        if not any(casc.rule_says_cascade.get(k) for k in shared):
            return plain
        times = {k: casc.times[k] if casc.rule_says_cascade.get(k) else plain.times[k] for k in shared}
        return Candidate(plain.backend, plain.variant, plain.variant_label, times,
                         rule_says_cascade={k: casc.rule_says_cascade.get(k, False) for k in shared},
                         name_override=f"{plain.name} + vLLM cascade rule", attention_kind=plain.attention_kind)
    return None


def excluded_status(excluded: str) -> str:
    """The verdict on a candidate that was not ranked, keeping apart what this machine could not
    measure (its build lacks a feature) from what the kernel cannot do and from a failed check."""
    if not excluded.startswith(str(Status.UNSUPPORTED)):
        return f"excluded: {excluded}"
    kind = reason_kind(excluded)
    if kind == "build":
        return f"not measured here: this machine's build lacks a feature the kernel has ({excluded})"
    if kind == "kernel":
        return f"not supported by the kernel: {excluded}"
    # Older rows do not say. vLLM's own selector picked this backend for the shape, so vLLM's
    # build runs it: what stopped it here is this machine's build (or the harness's declaration).
    return (f"not measured here: {excluded} (vLLM picks this backend for the shape, so its own build runs it; "
            "this machine's did not)")


@dataclass
class DefaultCost:
    bucket: Bucket
    choice: VllmChoice
    candidate: str | None
    # 'winner' / 'tied' / 'slower' / 'not measured' / 'not measured here: ...' (this machine's
    # build lacks a feature the engine's kernel has, or the rows do not say which limit) /
    # 'not supported by the kernel: ...' / 'excluded: ...' (failed the check, not timed)
    status: str
    cost: Ratio | None  # default / winner
    pick: Candidate | None = None


def default_costs(results: list[BucketResult], capability: str | None, tie: float,
                  cascade_opt_in: bool = False, facts: EngineFacts = TABLE_ONLY) -> list[DefaultCost]:
    out: list[DefaultCost] = []
    if not capability:
        return out
    for res in results:
        if not res.ranked:
            continue
        b, ly = res.bucket, res.bucket.layer_fields
        cfg = res.example.config
        if cfg is None:  # a bucket is made of rows with a layer: its example has one
            continue
        choice = vllm_default(capability, num_heads=ly["num_heads"], num_kv_heads=ly["num_kv_heads"],
                              head_size=ly["head_size"], dtype=ly["dtype"], kv_cache_dtype=ly["kv_cache_dtype"],
                              block_size=ly["block_size"],
                              alibi=cfg.alibi, sinks=cfg.sinks, causal=cfg.causal is not False,
                              attention_kind=cfg.kind_of_attention)
        pick = _vllm_pick(choice, res, facts, cascade_opt_in)
        if pick is None:
            out.append(DefaultCost(b, choice, None, "not measured", None))
        elif pick.excluded:
            out.append(DefaultCost(b, choice, pick.name, excluded_status(pick.excluded), None))
        elif pick is res.top or same_times(pick, res.top, res.cases):
            out.append(DefaultCost(b, choice, pick.name, "winner", Ratio(1.0, 1.0, 1.0, len(res.cases)), pick))
        else:
            r = ratio(pick, res.top)
            status = "tied" if r is not None and tie_kind(r, tie) else "slower"
            out.append(DefaultCost(b, choice, pick.name, status, r, pick))
    return out


def single_setting(results: list[BucketResult], facts: EngineFacts = TABLE_ONLY) -> list[dict[str, Any]]:
    """For each vLLM setting, its cost against the per-bucket winner over the buckets where it
    was measured: what one deployment-wide setting gives up. Best first."""
    acc: dict[str, dict[str, Any]] = {}
    for res in results:
        if not res.ranked:
            continue
        for c in res.ranked:
            s = vllm_setting(c, facts)
            if s is None or not s["exact"]:
                continue
            key = s["cli"]
            r = ratio(c, res.top) if c is not res.top else Ratio(1.0, 1.0, 1.0, len(res.cases))
            if r is None:
                continue
            a = acc.setdefault(key, {"setting": s, "logs": [], "worst": (0.0, ""), "wins": 0})
            a["logs"].append(math.log(r.point))
            a["wins"] += c is res.winner
            if r.pct > a["worst"][0]:
                a["worst"] = (r.pct, res.bucket.label)
    out = []
    for key, a in acc.items():
        out.append({"cli": key, "attention_backend": a["setting"]["attention_backend"],
                    "flash_attn_version": a["setting"]["flash_attn_version"], "buckets": len(a["logs"]),
                    "wins": a["wins"], "geomean_cost_pct": (math.exp(sum(a["logs"]) / len(a["logs"])) - 1) * 100,
                    "worst_cost_pct": a["worst"][0], "worst_bucket": a["worst"][1]})
    return sorted(out, key=lambda d: (-d["buckets"], d["geomean_cost_pct"]))
