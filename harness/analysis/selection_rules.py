"""Built-in selection rules as pure functions, and a cascade rule fitted to measurements.

Two rules a serving engine applies without measuring anything:

- ``vllm_default``: which attention backend vLLM's selector picks for a layer on a CUDA GPU
  when the user names none, and which FlashAttention version the FA backend then runs. Written
  from the project's design note (FA version by GPU capability, head size, ALiBi, fp8 KV; FA vs
  FlashInfer by the platform's priority list, each candidate validated in turn), checked
  against vLLM's ``vllm/platforms/cuda.py`` (``_get_backend_priorities``) and
  ``vllm/v1/attention/backends/fa_utils.py`` (``get_flash_attn_version``) of the 0.2x series.
  It is this project's own code and needs no vLLM install.
- the cascade decision: ``harness.cell.cascade.use_cascade_attention`` is vLLM's historical rule;
  ``fit_cascade_rule`` learns a replacement per cascade backend from measured cells, kept to
  one or two thresholds on physically meaningful features so a person can read and check it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from itertools import combinations
from typing import Any, Callable, Iterable, Sequence

# ---------------------------------------------------------------- vLLM's default backend

FLASH_ATTN = "FLASH_ATTN"
FLASHINFER = "FLASHINFER"
TRITON_ATTN = "TRITON_ATTN"
FLEX_ATTENTION = "FLEX_ATTENTION"

FA_KV_DTYPES_FP8 = ("fp8", "fp8_e4m3")  # FA accepts fp8 KV only as e4m3, only FA3 on sm90
FLASHINFER_HEAD_SIZES = (64, 128, 256)
FLASHINFER_KV_DTYPES = ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2")
FLASHINFER_BLOCK_SIZES = (16, 32, 64)  # larger pages only on sm100 + GQA (trtllm-gen)
FLASHINFER_LARGE_BLOCK_SIZES = (16, 32, 64, 128, 256, 512, 1024)


@dataclass(frozen=True)
class VllmChoice:
    """What vLLM's selector picks for one layer configuration, and why."""

    backend: str  # FLASH_ATTN, FLASHINFER, TRITON_ATTN, ...
    fa_version: int | None  # only for FLASH_ATTN
    priorities: tuple[str, ...]
    rejected: dict[str, str] = field(default_factory=dict)  # backend -> first reason it was skipped
    # The choice is vLLM's MLA prefill backend (``mla_prefill_backend``: FLASH_ATTN, ...), chosen
    # apart from the decode backend, not an ``--attention-backend`` name.
    mla_prefill: bool = False

    @property
    def label(self) -> str:
        return f"{self.backend} (FA{self.fa_version})" if self.fa_version else self.backend

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["priorities"] = list(self.priorities)
        return d


def _cap(capability: str | tuple[int, int] | float) -> tuple[int, int]:
    if isinstance(capability, tuple):
        return int(capability[0]), int(capability[1])
    major, _, minor = str(capability).partition(".")
    return int(major), int(minor or 0)


def fa_versions_supported(capability: tuple[int, int]) -> tuple[int, ...]:
    """``is_fa_version_supported``: FA2 needs sm80+, FA3 sm9x, FA4 sm9x/10x/11x."""
    major = capability[0]
    out = []
    if major >= 8:
        out.append(2)
    if major == 9:
        out.append(3)
    if major in (9, 10, 11):
        out.append(4)
    return tuple(out)


def vllm_flash_attn_version(
    capability: str | tuple[int, int],
    *,
    head_size: int | None = None,
    alibi: bool = False,
    available: Sequence[int] | None = None,
    override: int | None = None,
) -> int | None:
    """``get_flash_attn_version``: FA3 on sm9x, FA4 on sm10x, FA2 otherwise; ``override``
    (``attention_config.flash_attn_version``) replaces the default; then the fallbacks: no FA3
    on Blackwell (FA4 if it can, else FA2), no FA3/FA4 with ALiBi (FA2), FA3 -> FA4 on sm90 for
    head sizes above 256, FA4 on sm10x+ only up to head 128 (and 192). None when no version runs."""
    cap = _cap(capability)
    ok = set(fa_versions_supported(cap) if available is None else available)
    if cap[0] == 9 and 3 in ok:
        v = 3
    elif cap[0] == 10 and 4 in ok:
        v = 4
    else:
        v = 2
    if override is not None:
        v = override
    if cap[0] >= 10 and v == 3:
        v = 4 if 4 in ok else 2
    if alibi and v in (3, 4):
        v = 2
    if v == 3 and cap[0] == 9 and 4 in ok and head_size is not None and head_size > 256:
        v = 4
    if v == 4 and cap[0] >= 10 and head_size is not None and head_size > 128 and head_size != 192:
        v = 2
    return v if v in ok else None


def vllm_priorities(capability: str | tuple[int, int], *, causal: bool = True) -> tuple[str, ...]:
    """``_get_backend_priorities`` (non-MLA): FlashInfer first on sm10x for causal attention,
    FlashAttention first everywhere else."""
    cap = _cap(capability)
    if cap[0] == 10 and causal:
        return (FLASHINFER, FLASH_ATTN, TRITON_ATTN, FLEX_ATTENTION)
    return (FLASH_ATTN, FLASHINFER, TRITON_ATTN, FLEX_ATTENTION)


def _fa_reject(cap: tuple[int, int], fa: int | None, *, head_size: int, dtype: str, kv_cache_dtype: str,
               block_size: int, sinks: bool) -> str | None:
    if fa is None:
        return "no FlashAttention version runs on this GPU"
    if dtype not in ("float16", "bfloat16"):
        return f"dtype {dtype}"
    if head_size % 8 or (head_size > 256 and fa != 4):
        return f"head size {head_size} (multiple of 8, <= 256 unless FA4)"
    if kv_cache_dtype not in ("auto", "bfloat16", "float16"):
        if not (kv_cache_dtype in FA_KV_DTYPES_FP8 and fa == 3 and cap[0] == 9):
            return f"KV cache dtype {kv_cache_dtype} (fp8 e4m3 only with FA3 on sm90)"
    if block_size % 16:
        return f"block size {block_size} (multiple of 16)"
    if sinks and fa not in (3, 4):
        return "attention sinks need FA3/FA4"
    return None


def _flashinfer_reject(cap: tuple[int, int], *, num_heads: int, num_kv_heads: int, head_size: int, dtype: str,
                       kv_cache_dtype: str, block_size: int, alibi: bool, sinks: bool) -> str | None:
    if cap[0] < 8:
        return "needs sm80+"
    if dtype not in ("float16", "bfloat16"):
        return f"dtype {dtype}"
    if head_size not in FLASHINFER_HEAD_SIZES:
        return f"head size {head_size} (64, 128, 256)"
    if kv_cache_dtype not in FLASHINFER_KV_DTYPES:
        return f"KV cache dtype {kv_cache_dtype}"
    large = cap[0] == 10 and num_kv_heads > 0 and num_heads // num_kv_heads > 1
    sizes = FLASHINFER_LARGE_BLOCK_SIZES if large else FLASHINFER_BLOCK_SIZES
    if block_size not in sizes:
        return f"block size {block_size} (kernel block sizes {list(sizes)})"
    if alibi:
        return "ALiBi"
    if sinks and cap[0] != 10:
        return "attention sinks (trtllm kernels on sm100 only)"
    return None


def vllm_default(
    capability: str | tuple[int, int],
    *,
    num_heads: int,
    num_kv_heads: int,
    head_size: int,
    dtype: str = "bfloat16",
    kv_cache_dtype: str = "auto",
    block_size: int = 16,
    alibi: bool = False,
    sinks: bool = False,
    causal: bool = True,
    fa_available: Sequence[int] | None = None,
    attention_kind: str = "mha",
) -> VllmChoice:
    """vLLM's automatic choice for one decoder attention layer (no ``--attention-backend``):
    walk the platform's priority list and take the first backend whose validation passes.
    Triton and Flex attention, the last resorts, are taken as always valid. An MLA layer
    (``attention_kind`` "mla_*") walks the MLA list instead (``vllm_mla_default``)."""
    if attention_kind == "mla_expanded":
        return vllm_mla_prefill_default(capability)
    if attention_kind.startswith("mla"):
        return vllm_mla_default(capability, kv_cache_dtype=kv_cache_dtype, block_size=block_size)
    cap = _cap(capability)
    prio = vllm_priorities(cap, causal=causal)
    fa = vllm_flash_attn_version(cap, head_size=head_size, alibi=alibi, available=fa_available)
    rejected: dict[str, str] = {}
    for b in prio:
        if b == FLASH_ATTN:
            why = _fa_reject(cap, fa, head_size=head_size, dtype=dtype, kv_cache_dtype=kv_cache_dtype,
                             block_size=block_size, sinks=sinks)
        elif b == FLASHINFER:
            why = _flashinfer_reject(cap, num_heads=num_heads, num_kv_heads=num_kv_heads, head_size=head_size,
                                     dtype=dtype, kv_cache_dtype=kv_cache_dtype, block_size=block_size,
                                     alibi=alibi, sinks=sinks)
        else:
            why = None
        if why is None:
            return VllmChoice(b, fa if b == FLASH_ATTN else None, prio, rejected)
        rejected[b] = why
    return VllmChoice(prio[-1], None, prio, rejected)  # unreachable: the last resorts always pass


# ---------------------------------------------------------------- vLLM's default MLA backend
# Data, read from vLLM's source (vllm-project/vllm: vllm/platforms/cuda.py
# ``_get_backend_priorities(use_mla=True)`` and ``CudaPlatformBase.check_and_update_config``;
# each backend's class in vllm/v1/attention/backends/mla/). The walk is the same as for MHA:
# the first backend of the list whose validation passes.
VLLM_MLA_PRIORITIES: dict[str, tuple[str, ...]] = {
    "sm10x": ("FLASHINFER_MLA", "CUTLASS_MLA", "FLASH_ATTN_MLA", "FLASHMLA", "TRITON_MLA"),
    "other": ("FLASH_ATTN_MLA", "FLASHMLA", "FLASHINFER_MLA", "TRITON_MLA"),
}
# Per backend: GPU majors it runs on (None: any), latent-cache dtypes, kernel page sizes
# (an int, or ("multiple", n)). FLASH_ATTN_MLA (flashattn_mla.py): sm90 (FA3 ``qv``), no fp8,
# multiple of 16. FLASHMLA (flashmla.py): sm90/sm100, fp8 e4m3 accepted, page 64.
# FLASHINFER_MLA and CUTLASS_MLA: Blackwell (trtllm-gen / CUTLASS kernels), pages 32|64k and 128k.
# TRITON_MLA: the last resort, any GPU, no fp8.
VLLM_MLA_BACKENDS: dict[str, dict[str, Any]] = {
    "FLASH_ATTN_MLA": {"majors": (9,), "kv_cache_dtypes": ("auto", "float16", "bfloat16"),
                       "block_sizes": (("multiple", 16),)},
    "FLASHMLA": {"majors": (9, 10), "kv_cache_dtypes": ("auto", "bfloat16", "fp8", "fp8_e4m3"),
                 "block_sizes": (64,)},
    "FLASHINFER_MLA": {"majors": (10,), "kv_cache_dtypes": ("auto", "bfloat16", "fp8", "fp8_e4m3"),
                       "block_sizes": (32, ("multiple", 64))},
    "CUTLASS_MLA": {"majors": (10,), "kv_cache_dtypes": ("auto", "bfloat16", "fp8", "fp8_e4m3"),
                    "block_sizes": (("multiple", 128),)},
    "TRITON_MLA": {"majors": None, "kv_cache_dtypes": ("auto", "float16", "bfloat16"),
                   "block_sizes": (("multiple", 1),)},
}
# With no backend named, vLLM forces the page size (check_and_update_config): 64 on non-Blackwell
# GPUs where FlashMLA runs (for every MLA backend it then picks), FlashInfer MLA's 64 / CUTLASS
# MLA's 128 on Blackwell, unless the user's --block-size is already a multiple.
VLLM_MLA_DEFAULT_BLOCK = {"sm10x": 64, "other": 64}


# vLLM's MLA prefill (the expanded 192/128 form), chosen apart from the decode backend
# (vllm/v1/attention/backends/mla/prefill/selector.py ``_get_mla_prefill_backend_priorities``,
# vLLM PR #32623; order as documented in vLLM PR #43697): FLASH_ATTN first everywhere; on
# Blackwell TRTLLM_RAGGED, then FLASHINFER (its ``supports_compute_capability``: major 10 only).
VLLM_MLA_PREFILL_PRIORITIES: dict[str, tuple[str, ...]] = {
    "sm10x": ("FLASH_ATTN", "TRTLLM_RAGGED", "FLASHINFER"),
    "other": ("FLASH_ATTN",),
}


def vllm_mla_prefill_default(capability: str | tuple[int, int]) -> VllmChoice:
    """vLLM's automatic MLA prefill backend (no ``mla_prefill_backend``): the first of the list;
    FLASH_ATTN (vLLM's FA varlen at 192/128) validates on every GPU vLLM builds it for."""
    cap = _cap(capability)
    prio = VLLM_MLA_PREFILL_PRIORITIES["sm10x" if cap[0] == 10 else "other"]
    return VllmChoice(prio[0], None, prio, {}, mla_prefill=True)


def _page_ok(block_size: int, rules: tuple[Any, ...]) -> bool:
    return any(block_size % r[1] == 0 if isinstance(r, tuple) else block_size == r for r in rules)


def vllm_mla_default(capability: str | tuple[int, int], *, kv_cache_dtype: str = "auto",
                     block_size: int | None = None) -> VllmChoice:
    """vLLM's automatic MLA backend on a CUDA GPU (no ``--attention-backend``): the priority list
    of ``VLLM_MLA_PRIORITIES`` walked with each backend's declared limits. ``block_size`` None:
    the page vLLM forces by default (``VLLM_MLA_DEFAULT_BLOCK``)."""
    cap = _cap(capability)
    key = "sm10x" if cap[0] == 10 else "other"
    prio = VLLM_MLA_PRIORITIES[key]
    page = VLLM_MLA_DEFAULT_BLOCK[key] if block_size is None else block_size
    rejected: dict[str, str] = {}
    for b in prio:
        rule = VLLM_MLA_BACKENDS[b]
        if rule["majors"] is not None and cap[0] not in rule["majors"]:
            rejected[b] = f"needs sm{'/sm'.join(f'{m}x' for m in rule['majors'])}"
        elif kv_cache_dtype not in rule["kv_cache_dtypes"]:
            rejected[b] = f"KV cache dtype {kv_cache_dtype}"
        elif not _page_ok(page, rule["block_sizes"]):
            rejected[b] = f"block size {page}"
        else:
            return VllmChoice(b, None, prio, rejected)
    return VllmChoice(prio[-1], None, prio, rejected)


# ---------------------------------------------------------------- cascade: fitted rule

# Features of one cascade cell, all read from its result row. "kv reads saved" is what
# cascade removes: every request of a group reads the shared prefix once per KV head in the
# plain path, once per group in cascade (tokens x KV heads).
CASCADE_FEATURES: dict[str, Callable[[dict[str, Any]], float]] = {
    "prefix_x_requests_x_kv_heads": lambda c: c["prefix_len"] * c["requests_per_prefix"] * c["num_kv_heads"],
    "prefix_x_requests": lambda c: c["prefix_len"] * c["requests_per_prefix"],
    "prefix_x_requests_x_kv_heads_per_gqa": lambda c: c["prefix_len"] * c["requests_per_prefix"] * c["num_kv_heads"] / c["gqa"],
    "requests_x_kv_heads": lambda c: c["requests_per_prefix"] * c["num_kv_heads"],
    "prefix_len": lambda c: c["prefix_len"],
    "requests_per_prefix": lambda c: c["requests_per_prefix"],
}
FEATURE_TEXT = {
    "prefix_x_requests_x_kv_heads": "prefix_len x requests_per_prefix x num_kv_heads",
    "prefix_x_requests": "prefix_len x requests_per_prefix",
    "prefix_x_requests_x_kv_heads_per_gqa": "prefix_len x requests_per_prefix x num_kv_heads / gqa",
    "requests_x_kv_heads": "requests_per_prefix x num_kv_heads",
    "prefix_len": "prefix_len",
    "requests_per_prefix": "requests_per_prefix",
}


@dataclass(frozen=True)
class CascadeRule:
    """Cascade iff the batch is all decode and every ``feature >= threshold`` holds.

    Mixed batches (chunked prefill beside decode) never cascade: in every measured mixed cell
    the plain path won (its prefill tokens are not FlashDecoding-bound, so a second pass only
    adds work)."""

    backend: str
    terms: tuple[tuple[str, float], ...]  # (feature, threshold), all must hold

    def says_cascade(self, cell: dict[str, Any]) -> bool:
        if not cell["decode_only"]:
            return False
        return all(CASCADE_FEATURES[f](cell) >= t for f, t in self.terms)

    def text(self) -> str:
        if not self.terms:
            return "never cascade"
        conds = " and ".join(f"{FEATURE_TEXT[f]} >= {_num(t)}" for f, t in self.terms)
        return f"cascade iff decode-only batch and {conds}"

    def to_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "rule": self.text(), "decode_only": True,
                "all_of": [{"feature": f, "expr": FEATURE_TEXT[f], "min": t} for f, t in self.terms]}


def _num(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:g}"


def _thresholds(values: Iterable[float]) -> list[float]:
    """Candidate thresholds: geometric midpoints between distinct sorted values, rounded to
    two significant digits (a rule a person can write down), plus one above all."""
    vs = sorted(set(v for v in values if v > 0))
    out = []
    for a, b in zip(vs, vs[1:]):
        m = math.sqrt(a * b)
        digits = 1 - int(math.floor(math.log10(m)))
        out.append(round(m, digits))
    if vs:
        out.append(vs[-1] * 2)
    return out


def _agree(rule: CascadeRule, cells: Sequence[dict[str, Any]]) -> int:
    return sum(rule.says_cascade(c) == c["cascade_wins"] for c in cells)


def _loss(rule: CascadeRule, cells: Sequence[dict[str, Any]]) -> float:
    """Sum over cells of log(time of the path the rule picks / time of the faster path)."""
    total = 0.0
    for c in cells:
        pick = c["cascade_us"] if rule.says_cascade(c) else c["plain_us"]
        total += math.log(pick / min(c["cascade_us"], c["plain_us"]))
    return total


def fit_cascade_rule(backend: str, cells: Sequence[dict[str, Any]], *, max_terms: int = 2,
                     target: float = 0.9) -> CascadeRule:
    """The simplest rule of the family in ``CascadeRule`` that agrees with the measured winner
    on the most cells: one threshold first; two (an AND) only if one reaches less than
    ``target`` and two do better. Ties are broken by the time the rule's mistakes cost, then
    by the order of ``CASCADE_FEATURES`` (most physical first)."""
    best: tuple[tuple[float, ...], CascadeRule] | None = None
    feats = list(CASCADE_FEATURES)
    grids = {f: _thresholds(CASCADE_FEATURES[f](c) for c in cells if c["decode_only"]) for f in feats}
    for k in range(0, max_terms + 1):
        level: tuple[tuple[float, ...], CascadeRule] | None = None
        for combo in combinations(feats, k):
            for ths in _product([grids[f] for f in combo]):
                rule = CascadeRule(backend, tuple(zip(combo, ths)))
                key = (-_agree(rule, cells), _loss(rule, cells), k)
                if level is None or key < level[0]:
                    level = (key, rule)
        if level is None:
            continue
        if best is None or level[0][0] < best[0][0]:
            best = level
        if -best[0][0] >= target * len(cells):
            break
    assert best is not None
    return best[1]


def _product(lists: list[list[float]]) -> Iterable[tuple[float, ...]]:
    if not lists:
        yield ()
        return
    for x in lists[0]:
        for rest in _product(lists[1:]):
            yield (x, *rest)


def leave_one_out(backend: str, cells: Sequence[dict[str, Any]], **kw: Any) -> int:
    """Cells whose winner a rule fitted on all the other cells predicts."""
    hits = 0
    for i, c in enumerate(cells):
        rule = fit_cascade_rule(backend, [x for j, x in enumerate(cells) if j != i], **kw)
        hits += rule.says_cascade(c) == c["cascade_wins"]
    return hits


__all__ = [
    "CASCADE_FEATURES",
    "CascadeRule",
    "VllmChoice",
    "fit_cascade_rule",
    "leave_one_out",
    "vllm_default",
    "vllm_flash_attn_version",
    "vllm_priorities",
]
