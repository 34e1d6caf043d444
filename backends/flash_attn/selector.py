"""Which FlashAttention generation serves a case: the generations by version number, and
``auto``, which resolves per case like vLLM's ``get_flash_attn_version`` (by GPU, ALiBi, and
whatever the candidates' tables refuse: head size, fp8, softcap, block size)."""

from __future__ import annotations

import math
from typing import Any, Callable

from attn_contract import AlibiLse, AttentionConfig, Availability, Capabilities, HeadSizes, MultipleOf
from backends.flash_attn.common import FAGeneration, LibFeatures, cuda_capability
from backends.flash_attn.fa2 import FA2
from backends.flash_attn.fa3 import FA3
from backends.flash_attn.fa4 import FA4

GENERATIONS: dict[int, type[FAGeneration]] = {g.version: g for g in (FA2, FA3, FA4)}
VERSIONS: tuple[int, ...] = tuple(GENERATIONS)
MODULES: dict[int, str] = {v: g.module for v, g in GENERATIONS.items()}


def generation(version: int) -> type[FAGeneration]:
    try:
        return GENERATIONS[version]
    except KeyError:
        raise ValueError(f"unknown FlashAttention version {version!r}") from None


# By version number: the generations' facts under the names the tests and the cascade backend use.
def documented_features(version: int, installed: bool = False, error: str = "") -> LibFeatures:
    """Documented facts of the builds on the H200 (FA2 2.8.3, tokenspeed FA3, FA4 4.0.0b36)."""
    return generation(version).documented(installed, error)


def detect_features(version: int) -> LibFeatures:
    """Import FA``version`` lazily and read its limits (once per process); never raises."""
    return generation(version).features()


def hardware_reason(version: int, cc: tuple[int, int] | None) -> str | None:
    """Why FA``version`` cannot run on a GPU of capability ``cc`` at all (vLLM's is_fa_version_supported)."""
    return generation(version).hardware_reason(cc)


def availability_from(version: int, feats: LibFeatures, cc: tuple[int, int] | None) -> Availability:
    return generation(version).availability(feats, cc)


def capabilities_for(version: int, cc: tuple[int, int] | None, feats: LibFeatures) -> Capabilities:
    """FA``version``'s declared limits on a GPU of capability ``cc`` with library features ``feats``."""
    return generation(version).capabilities(cc, feats)


def support_reason(version: int, config: AttentionConfig, cc: tuple[int, int] | None, feats: LibFeatures,
                   device: str = "cuda") -> str | None:
    """Why FA``version`` cannot serve ``config`` (None if it can): the table plus rules it cannot hold."""
    return generation(version).support_reason(config, cc, feats, device)


def fa_window(config: AttentionConfig, version: int) -> tuple[Any, Any]:
    """FA ``window_size`` for the config: (left, 0) causal, (left, left) otherwise; unbounded is
    -1 for FA2/FA3 and None for FA4 (which reads a lone -1 as a real window)."""
    return generation(version).window(config)


# ------------------------------------------------------------------ auto
def select_fa_version(config: AttentionConfig | None, cc: tuple[int, int] | None,
                      usable: Callable[[int], str | None] | None = None) -> tuple[int | None, str]:
    """vLLM's get_flash_attn_version, per case: (version or None, why).

    Preference: ALiBi -> FA2 (the only one with it); Hopper -> FA3, then FA4 where FA3 cannot
    serve (e.g. head > 256 or a feature compiled out), then FA2; Blackwell -> FA4, then FA2;
    Ampere/Ada/sm120 -> FA2. ``usable(v)`` says why v cannot serve the case (default: the
    documented limits on ``cc``); the first usable candidate wins."""
    if cc is None:
        return None, "no CUDA device to select a FlashAttention version for"
    if cc[0] < 8:
        return None, f"FlashAttention needs sm80 or newer, this GPU is sm{cc[0]}{cc[1]}"
    if config is not None and config.alibi:
        order, why = [2], "ALiBi: only FA2 has it"
    elif cc[0] == 9:
        order, why = [3, 4, 2], "Hopper: FA3 by default"
    elif cc[0] in (10, 11):
        order, why = [4, 2], f"sm{cc[0]}{cc[1]}: FA4 by default (FA3 is Hopper-only)"
    else:
        order, why = [2], f"sm{cc[0]}{cc[1]}: FA2"
    if config is None:
        return order[0], why
    if usable is None:
        def usable(v: int) -> str | None:
            return hardware_reason(v, cc) or support_reason(v, config, cc, documented_features(v, True))
    rejected: list[str] = []
    for v in order:
        r = usable(v)
        if r is None:
            return v, why if v == order[0] else f"{why}; " + "; ".join(rejected) + f" -> FA{v}"
        rejected.append(f"FA{v} rejected ({r})")
    return None, f"{why}; no version can serve this case: " + "; ".join(rejected)


def installed_usable(config: AttentionConfig, cc: tuple[int, int] | None, device: str) -> Callable[[int], str | None]:
    """``usable`` for select_fa_version from the libraries installed here."""
    def usable(v: int) -> str | None:
        feats = detect_features(v)
        avail = availability_from(v, feats, cc)
        return avail.reason if not avail.available else support_reason(v, config, cc, feats, device)
    return usable


def resolve_version(variant: dict[str, Any] | None, config: AttentionConfig | None = None,
                    cc: tuple[int, int] | None = None, device: str = "cuda") -> tuple[int | None, str]:
    """The FA version a variant runs for ``config`` on this machine, and why."""
    v = (variant or {}).get("fa_version", "auto")
    if str(v) != "auto":
        try:
            n = int(v)
        except (TypeError, ValueError):
            n = -1
        if n not in VERSIONS:
            return None, f"unknown fa_version {v!r}; expected auto, 2, 3 or 4"
        return n, "explicit"
    cc = cc if cc is not None else cuda_capability()
    if config is None:
        return select_fa_version(None, cc)
    return select_fa_version(config, cc, installed_usable(config, cc, device))


def union_caps(caps: list[Capabilities], note: str) -> Capabilities:
    """What ``auto`` may serve: the union of its candidates (check_support does the real work)."""
    blocks: tuple[int | MultipleOf, ...] = (MultipleOf(1),) if any(MultipleOf(1) in c.block_sizes for c in caps) \
        else tuple(dict.fromkeys(b for c in caps for b in c.block_sizes))
    hs = [c.head_sizes for c in caps]
    if all(not h.values for h in hs):
        heads = HeadSizes(min=min(h.min for h in hs), max=max(h.max for h in hs),
                          multiple_of=math.gcd(*(h.multiple_of for h in hs)))
    else:
        heads = HeadSizes(values=tuple(sorted({v for h in hs for v in (h.values or range(h.min, h.max + 1, h.multiple_of))})))
    return Capabilities(
        dtypes=frozenset().union(*(c.dtypes for c in caps)),
        kv_cache_dtypes=frozenset().union(*(c.kv_cache_dtypes for c in caps)),
        head_sizes=heads, block_sizes=blocks,
        kv_layouts=frozenset().union(*(c.kv_layouts for c in caps)),
        sliding_window=any(c.sliding_window for c in caps), softcap=any(c.softcap for c in caps),
        alibi=any(c.alibi for c in caps), sinks=any(c.sinks for c in caps), returns_lse=True,
        # ALiBi cells resolve to the generation that has it, so its LSE convention applies.
        alibi_lse=next((c.alibi_lse for c in caps if c.alibi), AlibiLse.RELATIVE),
        # auto may resolve to a generation without the knob (FA4 on sm90): only a shared one holds.
        split_kv=caps[0].split_kv if all(c.split_kv == caps[0].split_kv for c in caps) else None,
        cudagraph=min(c.cudagraph for c in caps), reorder_batch_threshold=1, notes=(note,),
    )
