#!/usr/bin/env python3
"""Standalone reproducer: flash-attn [fa_version=4] on 'page-sizes[block_size=128]' (mismatch in the harness).

Harness verdict: 4/5 requests fail (decode 3/4, extend 1/1): req 0 (decode, q=1, kv=2): 512 NaN outputs; 100.00% of elements outside atol=0.02, rtol=0.02 (max abs err 0); req 1 (decode, q=1, kv=201): 512 NaN outputs; 100.00% of elements outside atol=0.02, rtol=0.02 (max abs err 0); req 3 (decode, q=1, kv=41): 512 NaN outputs; 100.00% of elements outside atol=0.02, rtol=0.02 (max abs err 0); +1 more
Shrunk by `harness repro --shrink` from 'page-sizes[block_size=128]' (batch 5 requests).

Written by `harness repro` (attn-harness); needs only torch and the library it calls.
Exit 1: some request mismatches the fp64 reference; 0: all pass.
"""
import math
import sys

import torch

SEED = 21
DEVICE = 'cuda'
DTYPE = torch.bfloat16
CACHE_DTYPE = torch.bfloat16
FP8 = False
NUM_HEADS, NUM_KV_HEADS, HEAD_SIZE = 1, 1, 64
BLOCK_SIZE = 128
KV_LAYOUT = 'NHD'
QUERY_LENS = [1]
SEQ_LENS = [2]  # cached context + new tokens
SCALE = 0.125
CAUSAL = True  # bottom-right aligned
WINDOW_LEFT = -1  # keys left of the diagonal a query sees; -1: all
SOFTCAP = 0.0
K_SCALE, V_SCALE = 1.0, 1.0  # real value = stored value * scale
MAGNITUDE = 1.0  # q and k are N(0, 1) * MAGNITUDE
ADVERSARIAL = True  # NaN in every cache slot no request owns
REL_L2_BASE = 0.01171875  # 3 u(dtype) + 2^-4 with an fp8 KV cache
ALIBI_SLOPES = None
SINKS = None

# ---- inputs, drawn from SEED: a paged KV cache behind a shuffled block table
g = torch.Generator().manual_seed(SEED)
n = len(QUERY_LENS)
QSL = [0]
for ql in QUERY_LENS:
    QSL.append(QSL[-1] + ql)
pages = [-(-s // BLOCK_SIZE) for s in SEQ_LENS]
num_blocks = sum(pages) + 2  # two spare pages no request owns
perm = torch.randperm(num_blocks, generator=g).tolist()
block_table = torch.zeros(n, max(pages), dtype=torch.int32)
for i, p in enumerate(pages):
    block_table[i, :p] = torch.tensor(perm[sum(pages[:i]):sum(pages[:i]) + p])


def stored(x, scale):
    """What the cache holds: model-dtype values, divided by the scale and cast for fp8."""
    x = x.to(DTYPE).float()
    if FP8:
        fmax = torch.finfo(CACHE_DTYPE).max
        return (x / scale).clamp(-fmax, fmax).to(CACHE_DTYPE)
    return x.to(CACHE_DTYPE)


k_stored = [stored(torch.randn(s, NUM_KV_HEADS, HEAD_SIZE, generator=g) * MAGNITUDE, K_SCALE) for s in SEQ_LENS]
v_stored = [stored(torch.randn(s, NUM_KV_HEADS, HEAD_SIZE, generator=g), V_SCALE) for s in SEQ_LENS]
q = (torch.randn(QSL[-1], NUM_HEADS, HEAD_SIZE, generator=g) * MAGNITUDE).to(DTYPE)
kv_cache = stored(torch.randn(num_blocks, 2, BLOCK_SIZE, NUM_KV_HEADS, HEAD_SIZE, generator=g), K_SCALE)
if ADVERSARIAL:
    kv_cache.fill_(float("nan"))  # slots no request owns (spare pages, last-page tails): never read
for i, s in enumerate(SEQ_LENS):
    t = torch.arange(s)
    blk, off = block_table[i, t // BLOCK_SIZE].long(), t % BLOCK_SIZE
    kv_cache[blk, 0, off] = k_stored[i]
    kv_cache[blk, 1, off] = v_stored[i]
if KV_LAYOUT == "HND":  # same logical shape, heads before tokens in memory
    kv_cache = kv_cache.permute(0, 1, 3, 2, 4).contiguous().permute(0, 1, 3, 2, 4)
q, kv_cache, block_table = q.to(DEVICE), kv_cache.to(DEVICE), block_table.to(DEVICE)
seq_lens = torch.tensor(SEQ_LENS, dtype=torch.int32, device=DEVICE)
query_start_loc = torch.tensor(QSL, dtype=torch.int32, device=DEVICE)
ALIBI_SLOPES = ALIBI_SLOPES.to(DEVICE) if ALIBI_SLOPES is not None else None
SINKS = SINKS.to(DEVICE) if SINKS is not None else None


def visible(i):
    """Request i's mask [query_len, seq_len]: bottom-right causal, sliding window."""
    ql, s = QUERY_LENS[i], SEQ_LENS[i]
    diag = torch.arange(ql).unsqueeze(1) + (s - ql)  # a query row's own key position
    j = torch.arange(s).unsqueeze(0)
    keep = torch.ones(ql, s, dtype=torch.bool)
    if CAUSAL:
        keep &= j <= diag
    if WINDOW_LEFT >= 0:
        keep &= diag - j <= WINDOW_LEFT
        if not CAUSAL:
            keep &= j - diag <= WINDOW_LEFT
    return keep

# ---- the library call, as the harness's flash-attn adapter makes it
from flash_attn.cute import flash_attn_varlen_func  # FA4

q_all = q
NUM_SPLITS = 1 if torch.cuda.get_device_capability()[0] == 9 else 0  # sm90: no split-KV

key_cache, value_cache = kv_cache.unbind(1)  # each (num_blocks, BLOCK_SIZE, NUM_KV_HEADS, HEAD_SIZE)
out = torch.empty_like(q)
nd = next((i for i, ql in enumerate(QUERY_LENS) if ql > 1), n)  # leading decodes (query_len 1)
for seg_kind, lo, hi in (("decode", 0, nd), ("prefill", nd, n)):
    if hi <= lo:
        continue
    qs = q_all[QSL[lo]:QSL[hi]]
    seg_qsl = query_start_loc[lo:hi + 1] - QSL[lo]
    seg_seq = seq_lens[lo:hi]
    seg_table = block_table[lo:hi, :-(-max(SEQ_LENS[lo:hi]) // BLOCK_SIZE)].contiguous()
    seg_max_q, seg_max_k = max(QUERY_LENS[lo:hi]), max(SEQ_LENS[lo:hi])
    o, _ = flash_attn_varlen_func(
        qs, key_cache, value_cache, cu_seqlens_q=seg_qsl, max_seqlen_q=seg_max_q, seqused_k=seg_seq,
        page_table=seg_table, softmax_scale=SCALE, causal=CAUSAL, window_size=(None, None),
        learnable_sink=SINKS, softcap=SOFTCAP, num_splits=NUM_SPLITS, return_lse=False)
    out[QSL[lo]:QSL[hi]] = o


# ---- reference: fp64 softmax over the stored (dequantized) K/V, never read from the cache
def reference(i):
    k = (k_stored[i].double() * K_SCALE).repeat_interleave(NUM_HEADS // NUM_KV_HEADS, 1).transpose(0, 1)
    v = (v_stored[i].double() * V_SCALE).repeat_interleave(NUM_HEADS // NUM_KV_HEADS, 1).transpose(0, 1)
    qi = q[QSL[i]:QSL[i + 1]].cpu().double().transpose(0, 1)  # [H, ql, D]
    scores = qi @ k.transpose(1, 2) * SCALE
    if SOFTCAP:
        scores = SOFTCAP * torch.tanh(scores / SOFTCAP)
    ql, s = QUERY_LENS[i], SEQ_LENS[i]
    if ALIBI_SLOPES is not None:
        dist = (torch.arange(ql).unsqueeze(1) + (s - ql) - torch.arange(s).unsqueeze(0)).abs().double()
        scores = scores - ALIBI_SLOPES.cpu().double().view(-1, 1, 1) * dist
    scores = scores.masked_fill(~visible(i), float("-inf"))
    if SINKS is not None:
        scores = torch.cat([scores, SINKS.cpu().double().view(-1, 1, 1).expand(-1, ql, 1)], -1)
    p = torch.softmax(scores, -1).nan_to_num(0.0)  # a row that sees no key gives 0
    return (p[..., :s] @ v).transpose(0, 1)  # [ql, H, D]


# ---- comparison, per request: the harness's limit (harness/check.py)
#   rel L2 = ||out - ref|| / ||ref|| <= 3 u(dtype) + 2^-4 [fp8 KV] + 2^-20 sqrt(seq_len)
failed = 0
for i in range(n):
    o = out[QSL[i]:QSL[i + 1]].cpu().double()
    r = reference(i)
    bad = int((~torch.isfinite(o)).sum())
    err = float((torch.nan_to_num(o, 0.0, 0.0, 0.0) - r).norm()) / max(float(r.norm()), 1e-30)
    limit = REL_L2_BASE + 2.0**-20 * math.sqrt(max(1, SEQ_LENS[i]))
    ok = bad == 0 and err <= limit
    failed += not ok
    print(f"request {i}: q={QUERY_LENS[i]} kv={SEQ_LENS[i]} rel L2 {err:.3g} (limit {limit:.3g})"
          f"{f', {bad} NaN/Inf outputs' if bad else ''} -> {'pass' if ok else 'MISMATCH'}")
print(f"{failed}/{n} requests mismatch" if failed else f"all {n} requests pass")
sys.exit(1 if failed else 0)
