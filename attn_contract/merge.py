"""The exact merge of two partial attentions by their log-sum-exps (what cascade backends use).

Cascade splits each request's keys into a shared prefix and its own suffix, attends to each
separately and merges the two results here; the merge is exact, not an approximation.
"""

from __future__ import annotations

import math

import torch

LSE_BASES = ("e", 2)


def lse_to_natural(lse: torch.Tensor, base: str | int) -> torch.Tensor:
    """A backend's LSE in its declared ``base`` ("e" or 2) as a natural-log LSE (a new tensor for
    base 2, ``lse`` itself for "e"): ``lse_e = lse_2 * ln 2``. Infinities stay infinite."""
    if base == "e":
        return lse
    if base == 2:
        return lse * math.log(2.0)
    raise ValueError(f"unknown LSE base {base!r} (known: {LSE_BASES})")


def merge_attn_states(
    prefix_out: torch.Tensor,
    prefix_lse: torch.Tensor,
    suffix_out: torch.Tensor,
    suffix_lse: torch.Tensor,
    out: torch.Tensor | None = None,
    out_lse: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge two partial attentions over disjoint key sets A (prefix) and B (suffix).

    ``*_out`` are ``[T, H, D]``, each already normalized over its own keys; ``*_lse`` are
    ``[T, H]`` natural-log LSEs (views of other layouts are fine). With a = lse_A, b = lse_B::

        m   = max(a, b)
        w_a = exp(a - m),  w_b = exp(b - m)
        o   = (w_a o_A + w_b o_B) / (w_a + w_b)
        lse = m + log(w_a + w_b)

    which equals attention over A u B exactly (softmax over a union of disjoint sets).
    Empty rows: an infinite LSE counts as weight 0; +inf is read as -inf (FA2 reports +inf for
    rows that see no key, as vLLM's merge assumes). When both sides are empty the output is 0
    and the LSE -inf. A side with weight 0 contributes nothing even if its output is garbage;
    a NaN LSE or a NaN output with non-zero weight propagates (never hidden).

    Computes in float32 (float64 if an input is float64). Writes into ``out`` / ``out_lse``
    when given (cast to their dtype) and returns them; otherwise returns new tensors in the
    compute dtype.
    """
    dt = torch.promote_types(torch.promote_types(prefix_out.dtype, suffix_out.dtype), torch.float32)
    inf = float("inf")
    a = prefix_lse.to(dt)
    b = suffix_lse.to(dt)
    a = a.masked_fill(a == inf, -inf)
    b = b.masked_fill(b == inf, -inf)
    m = torch.maximum(a, b)
    # m is -inf only when both sides are empty; 0 keeps exp() finite there (weights become 0).
    m = m.masked_fill(m == -inf, 0.0)
    wa = torch.exp(a - m)
    wb = torch.exp(b - m)
    denom = wa + wb
    lse = m + torch.log(denom)  # log(0) = -inf for an empty row
    inv = torch.where(denom > 0, 1.0 / denom, torch.zeros_like(denom))
    fa = (wa * inv).unsqueeze(-1)
    fb = (wb * inv).unsqueeze(-1)
    zero = torch.zeros((), dtype=dt, device=prefix_out.device)
    # "!= 0" (not "> 0") so that a NaN weight propagates instead of dropping its side.
    merged = torch.where(fa != 0, prefix_out.to(dt) * fa, zero) + torch.where(fb != 0, suffix_out.to(dt) * fb, zero)
    if out is not None:
        out.copy_(merged)
        merged = out
    if out_lse is not None:
        out_lse.copy_(lse)
        lse = out_lse
    return merged, lse
