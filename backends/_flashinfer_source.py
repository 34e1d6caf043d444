"""The FlashInfer backend's library call as standalone source (``AttentionBackend.standalone_call``,
names agreed with harness/repro.py): what its builder plans and its impl runs, per call form.
Kept apart from backends/flashinfer.py so that file stays one backend's logic."""

from __future__ import annotations


def standalone_source(workspace_mib: int, tensor_cores: bool, prefill_backend: str, call_form: str) -> str:
    """Paged decode + paged prefill wrappers on one workspace; ``call_form`` fastest sends a batch
    that mixes decodes and prefills through the prefill wrapper alone, in one run()."""
    return f"""import flashinfer

workspace = torch.zeros({workspace_mib} << 20, dtype=torch.uint8, device=DEVICE)  # float workspace, zeroed
decode = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace, kv_layout=KV_LAYOUT,
                                                       use_tensor_cores={tensor_cores})
prefill = flashinfer.BatchPrefillWithPagedKVCacheWrapper(workspace, kv_layout=KV_LAYOUT, backend={prefill_backend!r})
plan_kw = dict(sm_scale=SCALE, window_left=WINDOW_LEFT, logits_soft_cap=SOFTCAP or None,
               q_data_type=DTYPE, kv_data_type=CACHE_DTYPE, o_data_type=DTYPE)


def csr(lo, hi):
    \"\"\"FlashInfer's page metadata of requests lo:hi: indptr and last_page_len on the host.\"\"\"
    pages = [-(-s // BLOCK_SIZE) for s in SEQ_LENS[lo:hi]]
    indptr = torch.tensor([0] + [sum(pages[:i + 1]) for i in range(len(pages))], dtype=torch.int32)
    indices = torch.cat([block_table[lo + i, :p] for i, p in enumerate(pages)]).to(torch.int32)
    last = torch.tensor([s - (p - 1) * BLOCK_SIZE for s, p in zip(SEQ_LENS[lo:hi], pages)], dtype=torch.int32)
    return indptr, indices, last


CALL_FORM = {call_form!r}  # vllm: decode wrapper + prefill wrapper; fastest: a mixed batch in one prefill run()
nd = next((i for i, ql in enumerate(QUERY_LENS) if ql > 1), n)  # leading decodes (query_len 1)
if CALL_FORM == "fastest" and 0 < nd < n:
    nd = 0
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
"""
