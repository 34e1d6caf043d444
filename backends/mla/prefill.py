"""MLA's expanded-form prefill the way vLLM's MLACommonImpl computes it (``_forward_prefill``
with ``_compute_prefill_context``), in fp32 torch: each request's new tokens attend causally to
themselves, then to its cached context in chunks (every new token sees all of a chunk), and
the partial results are merged by their LSEs (``attn_contract.merge_attn_states``, exact).
torch-math runs MLA prefill through it, so the LSE merges are checked against the reference's
one-pass attention on every expanded-form cell."""

from __future__ import annotations

import torch

from attn_contract import merge_attn_states


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
            causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """q [n, H, D], k [m, H, D], v [m, H, Dv] (fp32) -> out [n, H, Dv], lse [n, H]; causal is
    bottom-right aligned (query i sees keys up to i + m - n)."""
    s = torch.einsum("nhd,mhd->hnm", q, k) * scale
    if causal:
        n, m = q.shape[0], k.shape[0]
        i = torch.arange(n, device=q.device).unsqueeze(1) + (m - n)
        s = s.masked_fill(torch.arange(m, device=q.device).unsqueeze(0) > i, float("-inf"))
    lse = torch.logsumexp(s, -1)  # [H, n]
    p = torch.exp(s - torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse)).unsqueeze(-1))
    return torch.einsum("hnm,mhv->nhv", p, v), lse.transpose(0, 1)


SCORE_ELEMS = 1 << 25  # fp32 scores per step (128 MiB; a few copies live at once)


def chunked_prefill(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, query_start_loc: list[int],
                    kv_start_loc: list[int], seq_lens: list[int], scale: float, causal: bool, chunk: int,
                    out: torch.Tensor, lse_out: torch.Tensor | None) -> None:
    """Every request of an expanded-form batch (attn_contract/mla.py): new tokens first, then the
    context chunks of ``chunk`` keys each, merged into ``out`` (and ``lse_out``). Long prompts
    go in blocks of query rows so no step holds more than ``SCORE_ELEMS`` scores."""
    heads = query.shape[1]
    for r, s in enumerate(seq_lens):
        lo, hi = query_start_loc[r], query_start_loc[r + 1]
        n = hi - lo
        if n == 0:
            continue
        k0 = kv_start_loc[r]
        ctx = s - n
        rows = max(1, SCORE_ELEMS // (heads * max(chunk, n)))
        for a in range(0, n, rows):
            b = min(n, a + rows)
            q = query[lo + a: lo + b].float()
            # Rows a..b-1 of the new tokens see new keys up to their own position (causal).
            new_hi = k0 + ctx + (b if causal else n)
            o, lse = _attend(q, key[k0 + ctx: new_hi].float(), value[k0 + ctx: new_hi].float(), scale, causal)
            for c in range(0, ctx, chunk):
                e = min(ctx, c + chunk)
                oc, lc = _attend(q, key[k0 + c: k0 + e].float(), value[k0 + c: k0 + e].float(), scale, False)
                o, lse = merge_attn_states(oc, lc, o, lse)
            out[lo + a: lo + b] = o.to(out.dtype)
            if lse_out is not None:
                lse_out[lo + a: lo + b] = lse
