#!/usr/bin/env python3
"""Standalone reproducer: flashinfer [decode_tensor_cores=True,prefill_backend=fa2] on 'fp8[num_heads=4,kv_cache_dtype=fp8_e5m2,block_size=16]' (mismatch in the harness).

Harness verdict: 4/8 requests fail (decode 2/6, extend 2/2): req 1 (decode, q=1, kv=194): rel L2 0.132 > 0.0742; LSE max abs err 0.149 > 0.1; req 0 (decode, q=1, kv=202): rel L2 0.113 > 0.0742; LSE max abs err 0.139 > 0.1; req 6 (extend, q=214, kv=554): rel L2 0.0932 > 0.0742; LSE max abs err 0.14 > 0.1; +1 more; known FlashInfer bug: masked logits are filled with a finite -5e4 before k_scale * sm_scale = 8.48e-06 is applied, i.e. -0.424 after scaling, so masked keys leak into the softmax (docs/backends/flashinfer.md)
Shrunk by `harness repro --shrink` from 'fp8[num_heads=4,kv_cache_dtype=fp8_e5m2,block_size=16]' (batch 8 requests).

Written by `harness repro` (attn-harness); needs only torch and the library it calls.
Exit 1: some request mismatches the fp64 reference; 0: all pass.
"""
import math
import sys

import torch

SEED = 11
DEVICE = 'cuda'
DTYPE = torch.bfloat16
CACHE_DTYPE = torch.float8_e5m2
FP8 = True
NUM_HEADS, NUM_KV_HEADS, HEAD_SIZE = 1, 1, 128
BLOCK_SIZE = 16
KV_LAYOUT = 'NHD'
QUERY_LENS = [1]
SEQ_LENS = [2]  # cached context + new tokens
SCALE = 0.08838834764831843
CAUSAL = True  # bottom-right aligned
WINDOW_LEFT = -1  # keys left of the diagonal a query sees; -1: all
SOFTCAP = 0.0
K_SCALE, V_SCALE = 9.591238839285714e-05, 9.591238839285714e-05  # real value = stored value * scale
MAGNITUDE = 1.0  # q and k are N(0, 1) * MAGNITUDE
ADVERSARIAL = False  # NaN in every cache slot no request owns
REL_L2_BASE = 0.07421875  # 3 u(dtype) + 2^-4 with an fp8 KV cache
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

# ---- the library call, as the harness's flashinfer adapter makes it
import flashinfer

workspace = torch.zeros(256 << 20, dtype=torch.uint8, device=DEVICE)  # float workspace, zeroed
decode = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace, kv_layout=KV_LAYOUT,
                                                       use_tensor_cores=True)
prefill = flashinfer.BatchPrefillWithPagedKVCacheWrapper(workspace, kv_layout=KV_LAYOUT, backend='fa2')
plan_kw = dict(sm_scale=SCALE, window_left=WINDOW_LEFT, logits_soft_cap=SOFTCAP or None,
               q_data_type=DTYPE, kv_data_type=CACHE_DTYPE, o_data_type=DTYPE)


def csr(lo, hi):
    """FlashInfer's page metadata of requests lo:hi: indptr and last_page_len on the host."""
    pages = [-(-s // BLOCK_SIZE) for s in SEQ_LENS[lo:hi]]
    indptr = torch.tensor([0] + [sum(pages[:i + 1]) for i in range(len(pages))], dtype=torch.int32)
    indices = torch.cat([block_table[lo + i, :p] for i, p in enumerate(pages)]).to(torch.int32)
    last = torch.tensor([s - (p - 1) * BLOCK_SIZE for s, p in zip(SEQ_LENS[lo:hi], pages)], dtype=torch.int32)
    return indptr, indices, last


nd = next((i for i, ql in enumerate(QUERY_LENS) if ql > 1), n)  # leading decodes (query_len 1)
if nd:
    decode.plan(*csr(0, nd), NUM_HEADS, NUM_KV_HEADS, HEAD_SIZE, BLOCK_SIZE, pos_encoding_mode="NONE", **plan_kw)
if nd < n:
    qo_indptr = torch.tensor([x - QSL[nd] for x in QSL[nd:]], dtype=torch.int32)
    prefill.plan(qo_indptr, *csr(nd, n), NUM_HEADS, NUM_KV_HEADS, HEAD_SIZE, BLOCK_SIZE, causal=CAUSAL,
                 pos_encoding_mode="NONE", **plan_kw)
# HND memory is (blocks, 2, Hk, page, D): the shape FlashInfer's HND layout expects (a view).
cache = kv_cache if KV_LAYOUT == "NHD" else kv_cache.permute(0, 1, 3, 2, 4)
ks, vs = (K_SCALE, V_SCALE) if FP8 else (None, None)  # FlashInfer folds k_scale into sm_scale, v_scale into out
out = torch.empty_like(q)
if nd:
    decode.run(q[:QSL[nd]], cache, k_scale=ks, v_scale=vs, out=out[:QSL[nd]], lse=None, return_lse=False)
if nd < n:
    prefill.run(q[QSL[nd]:], cache, k_scale=ks, v_scale=vs, out=out[QSL[nd]:], lse=None, return_lse=False)


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
