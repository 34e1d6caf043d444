"""The golden result: attention per request over the logical (unpaged) K/V, in fp32 or fp64.

Conventions (the ones FA2/3/4, FlashInfer and vLLM use; each is listed here):
- causal is bottom-right aligned: query i of a request with q queries and s keys sees key j
  iff j <= i + (s - q);
- a sliding window W lets a query see the W most recent keys, itself included
  (FA ``window_size=(W-1, 0)``); without causal it is symmetric, (W-1, W-1);
- softcap: logit = cap * tanh(scale * q.k / cap);
- ALiBi: logit -= slope_h * |i + s - q - j| (not multiplied by the scale); a backend whose LSE
  uses another bias with the same outputs declares it (``Capabilities.alibi_lse``) and is judged
  against ``reference_lse_for`` (the reference LSE moved by the per-row constant);
- sinks: one extra logit per head, natural-log units, unscaled, with no value vector;
- GQA: query head h reads KV head h // (Hq / Hk);
- LSE is natural log; a row that sees no key has output 0 and LSE -inf.
"""

from __future__ import annotations

import torch

from attn_contract import AlibiLse
from harness.case.workload import Batch

_CHUNK_ELEMS = 1 << 26  # scores per chunk (256 MB in fp32): bounds memory for long prefills


def visible_mask(
    q_len: int, s_len: int, causal: bool, sliding_window: int | None, device: torch.device, q_lo: int = 0, q_hi: int | None = None
) -> torch.Tensor:
    """Boolean [q_hi - q_lo, s_len]: which keys each query row sees (bottom-right aligned)."""
    q_hi = q_len if q_hi is None else q_hi
    i = torch.arange(q_lo, q_hi, device=device).unsqueeze(1) + (s_len - q_len)  # diagonal position
    j = torch.arange(s_len, device=device).unsqueeze(0)
    mask = torch.ones((q_hi - q_lo, s_len), dtype=torch.bool, device=device)
    if causal:
        mask &= j <= i
    if sliding_window is not None:
        left = sliding_window - 1
        mask &= j >= i - left
        if not causal:
            mask &= j <= i + left
    return mask


def attention_one_request(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    scale: float,
    causal: bool,
    sliding_window: int | None = None,
    softcap: float = 0.0,
    alibi_slopes: torch.Tensor | None = None,
    sinks: torch.Tensor | None = None,
    compute_dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, torch.Tensor]:
    """q [q, Hq, D], k/v [s, Hk, D] (real values) -> (out [q, Hq, D], lse [q, Hq]) in compute_dtype."""
    q_len, hq, d = q.shape
    s_len, hk, _ = k.shape
    group = hq // hk
    dv = v.shape[-1]
    qh = q.to(compute_dtype).transpose(0, 1)  # [Hq, q, D]
    # GQA without repeating K/V: query head h reads KV head h // group, so the group's heads
    # stack into the rows of one matmul per KV head (the K/V copies cost more than the math).
    kh = k.to(compute_dtype).transpose(0, 1)  # [Hk, s, D]
    vh = v.to(compute_dtype).transpose(0, 1)
    out = torch.zeros((hq, q_len, dv), dtype=compute_dtype, device=q.device)
    lse = torch.full((hq, q_len), float("-inf"), dtype=compute_dtype, device=q.device)
    rows = max(1, _CHUNK_ELEMS // max(1, hq * s_len))
    for lo in range(0, q_len, rows):
        hi = min(q_len, lo + rows)
        r = hi - lo
        qg = qh[:, lo:hi].reshape(hk, group * r, d)
        scores = (torch.matmul(qg, kh.transpose(1, 2)) * scale).view(hq, r, s_len)  # [Hq, r, s]
        if softcap:
            scores = softcap * torch.tanh(scores / softcap)
        mask = visible_mask(q_len, s_len, causal, sliding_window, q.device, lo, hi)
        if alibi_slopes is not None:
            i = torch.arange(lo, hi, device=q.device).unsqueeze(1) + (s_len - q_len)
            j = torch.arange(s_len, device=q.device).unsqueeze(0)
            dist = (i - j).abs().to(compute_dtype)
            scores = scores - alibi_slopes.to(compute_dtype).view(hq, 1, 1) * dist
        scores = scores.masked_fill(~mask, float("-inf"))
        if sinks is not None:
            sink_col = sinks.to(compute_dtype).view(hq, 1, 1).expand(hq, r, 1)
            full = torch.cat([scores, sink_col], dim=-1)
        else:
            full = scores
        row_lse = torch.logsumexp(full, dim=-1)  # [Hq, r]; -inf for rows that see nothing
        safe = torch.where(torch.isfinite(row_lse), row_lse, torch.zeros_like(row_lse))
        p = torch.exp(scores - safe.unsqueeze(-1))  # masked entries give exp(-inf) = 0
        out[:, lo:hi] = torch.matmul(p.reshape(hk, group * r, s_len), vh).view(hq, r, dv)
        lse[:, lo:hi] = row_lse
    return out.transpose(0, 1), lse.transpose(0, 1)


def reference_attention(batch: Batch, compute_dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(out [num_tokens, Hq, D], lse [num_tokens, Hq]) for the whole batch, in batch order.

    fp64 on the CPU (cheap there and exact enough to judge fp32 backends), fp32 on a GPU with
    TF32 disabled for the duration of the call.
    """
    cfg = batch.config
    if compute_dtype is None:
        compute_dtype = torch.float64 if batch.device.type == "cpu" else torch.float32
    outs, lses = [], []
    qsl = batch.query_start_loc
    prev_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        for i in range(batch.num_reqs):
            k, v = batch.dequantized_kv(i)
            o, l = attention_one_request(
                batch.query[qsl[i] : qsl[i + 1]],
                k,
                v,
                scale=cfg.softmax_scale,
                causal=cfg.causal,
                sliding_window=cfg.sliding_window,
                softcap=cfg.softcap,
                alibi_slopes=batch.layer.alibi_slopes,
                sinks=batch.layer.sinks,
                compute_dtype=compute_dtype,
            )
            outs.append(o)
            lses.append(l)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev_tf32
    return torch.cat(outs), torch.cat(lses)


def alibi_lse_shift(batch: Batch, convention: AlibiLse) -> torch.Tensor | None:
    """[num_tokens, Hq] to add to the reference LSE for a backend whose ALiBi LSE follows
    ``convention``, or None when it equals the reference's.

    ``key_index_causal`` (FA2): with causal masking and no window the kernel's logit is
    ``scale q.k + slope * j`` = the reference's plus ``slope * (i + s - q)``, the diagonal key
    position of query row i, so its LSE is larger by exactly that (up to ~slope * context).
    """
    cfg = batch.config
    slopes = batch.layer.alibi_slopes
    if (slopes is None or convention != AlibiLse.KEY_INDEX_CAUSAL or not cfg.causal
            or cfg.sliding_window is not None):
        return None
    pos = torch.cat([torch.arange(s - q, s, device=batch.device)
                     for q, s in zip(batch.query_lens, batch.seq_lens)])  # i + s - q per token
    return pos.to(torch.float64).unsqueeze(1) * slopes.to(batch.device, torch.float64).unsqueeze(0)


def reference_lse_for(batch: Batch, ref_lse: torch.Tensor, convention: AlibiLse) -> torch.Tensor:
    """The reference LSE as a backend declaring ``convention`` should return it (batch order)."""
    shift = alibi_lse_shift(batch, convention)
    return ref_lse if shift is None else ref_lse + shift.to(ref_lse.dtype)
