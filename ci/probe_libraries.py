"""Print the installed attention libraries' versions and entry-point signatures, and try the
calls the adapters depend on that the API notes mark unverified. Run on the GPU machine:

    python3 ci/probe_libraries.py > probe.txt
"""

import importlib
import inspect
import traceback

import torch


def sig(modname: str, attr: str) -> None:
    try:
        obj = importlib.import_module(modname)
        for part in attr.split("."):
            obj = getattr(obj, part)
        print(f"{modname}.{attr}{inspect.signature(obj)}")
    except Exception as e:
        print(f"{modname}.{attr}: {type(e).__name__}: {e}")


def version(modname: str) -> None:
    try:
        m = importlib.import_module(modname)
        print(f"{modname} {getattr(m, '__version__', '?')} from {getattr(m, '__file__', '?')}")
    except Exception as e:
        print(f"{modname}: import failed: {type(e).__name__}: {e}")


def attempt(name, fn):
    try:
        print(f"ok   {name}: {fn()}")
    except Exception as e:
        print(f"FAIL {name}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")


print(f"torch {torch.__version__} cuda {torch.version.cuda} {torch.cuda.get_device_name()} "
      f"L2={torch.cuda.get_device_properties(0).L2_cache_size}")
for m in ("flash_attn", "flash_attn_interface", "flash_attn.cute", "flashinfer"):
    version(m)
for m, a in [
    ("flash_attn", "flash_attn_varlen_func"), ("flash_attn", "flash_attn_with_kvcache"),
    ("flash_attn_interface", "flash_attn_varlen_func"), ("flash_attn_interface", "flash_attn_with_kvcache"),
    ("flash_attn_interface", "get_scheduler_metadata"),
    ("flash_attn.cute", "flash_attn_varlen_func"),
    ("flashinfer", "BatchDecodeWithPagedKVCacheWrapper.__init__"), ("flashinfer", "BatchDecodeWithPagedKVCacheWrapper.plan"),
    ("flashinfer", "BatchDecodeWithPagedKVCacheWrapper.run"),
    ("flashinfer", "BatchPrefillWithPagedKVCacheWrapper.__init__"), ("flashinfer", "BatchPrefillWithPagedKVCacheWrapper.plan"),
    ("flashinfer", "BatchPrefillWithPagedKVCacheWrapper.run"),
    ("flashinfer", "BatchPrefillWithRaggedKVCacheWrapper.plan"), ("flashinfer", "BatchPrefillWithRaggedKVCacheWrapper.run"),
    ("flashinfer", "MultiLevelCascadeAttentionWrapper.__init__"), ("flashinfer", "MultiLevelCascadeAttentionWrapper.plan"),
    ("flashinfer", "MultiLevelCascadeAttentionWrapper.run"), ("flashinfer", "merge_state"),
]:
    sig(m, a)

dev = "cuda"
Hq, Hk, D, B = 16, 4, 128, 3
lens_q = [1, 7, 40]
lens_k = [50, 77, 300]


def paged(page):
    npg = [(l + page - 1) // page for l in lens_k]
    total = sum(npg) + 2
    kc = torch.randn(total, page, Hk, D, device=dev, dtype=torch.bfloat16)
    vc = torch.randn_like(kc)
    table = torch.zeros(B, max(npg), dtype=torch.int32, device=dev)
    perm = torch.randperm(total).tolist()
    c = 0
    for b, n in enumerate(npg):
        table[b, :n] = torch.tensor(perm[c:c + n], dtype=torch.int32)
        c += n
    return kc, vc, table


cu_q = torch.tensor([0, 1, 8, 48], dtype=torch.int32, device=dev)
seqused = torch.tensor(lens_k, dtype=torch.int32, device=dev)
q = torch.randn(48, Hq, D, device=dev, dtype=torch.bfloat16)


def fa3_paged(page):
    import flash_attn_interface as f
    kc, vc, table = paged(page)
    r = f.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=seqused, page_table=table, cu_seqlens_q=cu_q,
                                  max_seqlen_q=40, causal=True, return_softmax_lse=True)
    return f"{len(r)} values, out {tuple(r[0].shape)}, lse {tuple(r[1].shape)}"


def fa3_fp8():
    import flash_attn_interface as f
    kc, vc, table = paged(16)
    d = torch.ones(B, Hk, device=dev)
    r = f.flash_attn_with_kvcache(q.to(torch.float8_e4m3fn), kc.to(torch.float8_e4m3fn), vc.to(torch.float8_e4m3fn),
                                  cache_seqlens=seqused, page_table=table, cu_seqlens_q=cu_q, max_seqlen_q=40,
                                  causal=True, q_descale=d, k_descale=d, v_descale=d, return_softmax_lse=True)
    return f"out dtype {r[0].dtype}"


def fa3_sched():
    import flash_attn_interface as f
    kc, vc, table = paged(16)
    md = f.get_scheduler_metadata(B, 40, 300, Hq, Hk, D, seqused, qkv_dtype=torch.bfloat16, cu_seqlens_q=cu_q,
                                  page_size=16, causal=True)
    r = f.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=seqused, page_table=table, cu_seqlens_q=cu_q,
                                  max_seqlen_q=40, causal=True, scheduler_metadata=md)
    return f"metadata {tuple(md.shape)} {md.dtype}"


def fa3_sinks():
    import flash_attn_interface as f
    kc, vc, table = paged(16)
    s = torch.randn(Hq, device=dev, dtype=torch.bfloat16)
    r = f.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=seqused, page_table=table, cu_seqlens_q=cu_q,
                                  max_seqlen_q=40, causal=True, sinks=s)
    return "sinks accepted"


def fa4_paged(page):
    from flash_attn.cute import flash_attn_varlen_func
    kc, vc, table = paged(page)
    out, lse = flash_attn_varlen_func(q, kc, vc, cu_seqlens_q=cu_q, max_seqlen_q=40, seqused_k=seqused,
                                      page_table=table, causal=True, return_lse=True)
    return f"out {tuple(out.shape)}, lse {tuple(lse.shape)}"


def fa4_hd(d):
    from flash_attn.cute import flash_attn_varlen_func
    qq = torch.randn(48, Hq, d, device=dev, dtype=torch.bfloat16)
    kk = torch.randn(427, Hk, d, device=dev, dtype=torch.bfloat16)
    cu_k = torch.tensor([0, 50, 127, 427], dtype=torch.int32, device=dev)
    out, lse = flash_attn_varlen_func(qq, kk, kk, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=40,
                                      max_seqlen_k=300, causal=True)
    return f"head {d} ok"


def fa2_paged(page):
    from flash_attn import flash_attn_varlen_func
    kc, vc, table = paged(page)
    cu_k = torch.tensor([0, 50, 127, 427], dtype=torch.int32, device=dev)
    r = flash_attn_varlen_func(q, kc, vc, cu_q, cu_k, 40, 300, causal=True, block_table=table, return_attn_probs=True)
    return f"{len(r)} values, lse {tuple(r[1].shape)}"


def fi_pages(page, tc):
    import flashinfer
    kc, vc, table = paged(page)
    ws = torch.zeros(128 << 20, dtype=torch.uint8, device=dev)
    w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_tensor_cores=tc)
    npg = [(l + page - 1) // page for l in lens_k]
    indptr = torch.tensor([0, npg[0], npg[0] + npg[1], sum(npg)], dtype=torch.int32, device=dev)
    idx = torch.cat([table[b, :n] for b, n in enumerate(npg)])
    last = torch.tensor([(l - 1) % page + 1 for l in lens_k], dtype=torch.int32, device=dev)
    w.plan(indptr, idx, last, Hq, Hk, D, page, q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)
    o, l = w.run(q[:3], (kc, vc), return_lse=True)
    return f"out {tuple(o.shape)} lse {tuple(l.shape)}"


for p in (1, 16, 64, 128, 256):
    attempt(f"fa3 paged varlen-q page {p}", lambda p=p: fa3_paged(p))
attempt("fa3 fp8 paged", fa3_fp8)
attempt("fa3 scheduler metadata", fa3_sched)
attempt("fa3 sinks", fa3_sinks)
for p in (16, 64, 128, 256):
    attempt(f"fa4 paged varlen-q page {p}", lambda p=p: fa4_paged(p))
for d in (64, 256):
    attempt(f"fa4 head {d}", lambda d=d: fa4_hd(d))
for p in (16, 256):
    attempt(f"fa2 varlen block_table page {p}", lambda p=p: fa2_paged(p))
for p in (1, 16, 32, 64, 128, 256, 512):
    attempt(f"flashinfer decode page {p} tc=False", lambda p=p: fi_pages(p, False))
attempt("flashinfer decode page 16 tc=True", lambda: fi_pages(16, True))
