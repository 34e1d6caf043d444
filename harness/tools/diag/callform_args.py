"""``harness diag callform``'s argument ladder: the adapter's vllm-form call of a FlashAttention
generation (recorded as it reaches the library) against the plain call, one argument at a time.

The adapter's call is recorded by wrapping the generation's library entry points for one
``timed_call`` (the exact positional and keyword arguments it passes). Every argument whose value
differs from the plain call's (the query layout with ``cu_seqlens_q``/``max_seqlen_q`` as one
factor: a batched query takes neither) makes one line: the vllm-form call with that argument as
the plain call has it (or left out where the plain call does not pass it). The argument whose
reversal removes the most of the vllm form's excess over the plain call is named responsible,
when that excess is beyond the noise (the two medians' 95% CIs apart); ``pack_gqa`` forced
either way on the vllm call adds two lines where the function takes it.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable

import torch

QUERY = "query layout (varlen q + cu_seqlens_q, max_seqlen_q)"
Q_KEYS = ("cu_seqlens_q", "max_seqlen_q")
VLLM = "vllm form (the adapter's call, recorded)"
PLAIN_LINE = "plain call"


def record_call(prep: Any) -> tuple[Callable[..., Any], tuple, dict[str, Any]] | str:
    """(function, args, kwargs) of the one library call the cell's ``timed_call`` makes, or why
    not (no entry points to wrap, or not exactly one call)."""
    fns = getattr(getattr(prep.impl, "generation", None), "fn", None)
    if not isinstance(fns, dict) or not fns:
        return "the adapter exposes no library entry points to record"
    seen: list[tuple[Callable[..., Any], tuple, dict[str, Any]]] = []
    saved = dict(fns)

    def wrap(f: Callable[..., Any]) -> Callable[..., Any]:
        def rec(*a: Any, **kw: Any) -> Any:
            seen.append((f, a, dict(kw)))
            return f(*a, **kw)
        return rec

    try:
        fns.update({k: wrap(f) for k, f in saved.items()})
        prep.timed_call()
        torch.cuda.synchronize()
    finally:
        fns.clear()
        fns.update(saved)
    if len(seen) != 1:
        return f"the vllm form made {len(seen)} library calls on this batch (the ladder needs one)"
    return seen[0]


def same(a: Any, b: Any) -> bool:
    """Whether two argument values are the same (tensors: shape, dtype and contents)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        return a.shape == b.shape and a.dtype == b.dtype and (a.data_ptr() == b.data_ptr() or torch.equal(a, b))
    try:
        return bool(a == b)
    except Exception:
        return False


def differing(plain: tuple[tuple, dict[str, Any]], vllm: tuple[tuple, dict[str, Any]]) -> list[str]:
    """The factors in which the vllm-form call differs from the plain one: the query layout (one
    factor with cu_seqlens_q/max_seqlen_q), other positional arguments (``arg N``), keywords."""
    (pa, pk), (va, vk) = plain, vllm
    out = []
    if not same(pa[0], va[0]) and pa[0].shape != va[0].shape:
        out.append(QUERY)
    out += [f"arg {i}" for i in range(1, min(len(pa), len(va))) if not same(pa[i], va[i])]
    for k in sorted(set(pk) | set(vk)):
        if k in Q_KEYS and QUERY in out:
            continue
        if k not in pk or k not in vk or not same(pk[k], vk[k]):
            out.append(k)
    return out


def reverted(factor: str, plain: tuple[tuple, dict[str, Any]], vllm: tuple[tuple, dict[str, Any]]
             ) -> tuple[tuple, dict[str, Any]]:
    """The vllm-form call with ``factor`` as the plain call has it (left out where it lacks it)."""
    (pa, pk), (va, vk) = plain, vllm
    args, kw = list(va), dict(vk)
    if factor == QUERY:
        args[0] = pa[0]
        for k in Q_KEYS:
            kw.pop(k, None)
            if k in pk:
                kw[k] = pk[k]
        out = kw.get("out")
        if isinstance(out, torch.Tensor) and out.shape != pa[0].shape and out.numel() == pa[0].numel():
            kw["out"] = out.view(pa[0].shape)  # out= follows the query's layout
    elif factor.startswith("arg "):
        args[int(factor.split()[1])] = pa[int(factor.split()[1])]
    elif factor in pk:
        kw[factor] = pk[factor]
    else:
        kw.pop(factor, None)
    return tuple(args), kw


def ladder(f: Callable[..., Any], plain: tuple[tuple, dict[str, Any]], vllm: tuple[tuple, dict[str, Any]]
           ) -> dict[str, Callable[[], Any]]:
    """The lines to time: plain, the vllm form, the vllm form with each differing argument
    reverted, and pack_gqa forced on the vllm call (where the function takes it)."""
    lines: dict[str, Callable[[], Any]] = {
        PLAIN_LINE: lambda: f(*plain[0], **plain[1]),
        VLLM: lambda: f(*vllm[0], **vllm[1]),
    }
    for factor in differing(plain, vllm):
        a, kw = reverted(factor, plain, vllm)
        lines[f"vllm form, {factor} as in the plain call"] = functools.partial(f, *a, **kw)
    try:
        takes_pack = "pack_gqa" in inspect.signature(f).parameters
    except (TypeError, ValueError):
        takes_pack = False
    if takes_pack:
        for value in (True, False):
            kw = {**vllm[1], "pack_gqa": value}
            lines[f"vllm form, pack_gqa={value}"] = functools.partial(f, *vllm[0], **kw)
    return lines


def responsible(lines: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Which reverted argument removes the most of the vllm form's excess over the plain call,
    with its share; or why none is named (no excess beyond the noise, a line missing)."""
    p, v = lines.get(PLAIN_LINE, {}), lines.get(VLLM, {})
    if "median_us" not in p or "median_us" not in v:
        return {"argument": None, "why": "the plain call or the vllm form was not timed"}
    gap = v["median_us"] - p["median_us"]
    (pl, ph), (vl, vh) = p.get("ci95_us") or [None, None], v.get("ci95_us") or [None, None]
    beyond = None not in (pl, ph, vl, vh) and (vl > ph or vh < pl)
    out: dict[str, Any] = {"gap_us": gap, "gap_pct": gap / p["median_us"], "beyond_noise": beyond}
    if not beyond or gap <= 0:
        return {**out, "argument": None,
                "why": f"the vllm form is {gap / p['median_us']:+.1%} from the plain call, "
                       + ("within the noise (their 95% CIs overlap)" if not beyond else "not slower")}
    shares = {k.removeprefix("vllm form, ").removesuffix(" as in the plain call"):
              (v["median_us"] - line["median_us"]) / gap
              for k, line in lines.items() if k.endswith("as in the plain call") and "median_us" in line}
    if not shares:
        return {**out, "argument": None, "why": "no argument differs, or none was timed"}
    best = max(shares, key=lambda k: shares[k])
    return {**out, "argument": best, "share": shares[best], "shares": shares,
            "why": f"with {best} as in the plain call the vllm form loses {shares[best]:.0%} of its "
                   f"{gap / p['median_us']:+.1%} over the plain call"}


__all__ = ["PLAIN_LINE", "QUERY", "VLLM", "differing", "ladder", "record_call", "responsible", "reverted", "same"]
