"""Items fa3_fwd and flashmla.

fa3_fwd (module ``fa3_fwd_interface``): MLA decode through ``qv`` as vLLM's FLASH_ATTN_MLA calls
it (q = q_pe, k = kpe, v = ckv, qv = q_nope absorbed), on a padded contiguous cache
(``flash_attn_with_kvcache``), on a packed varlen cache (``flash_attn_varlen_func``), and on the
paged pool (expected refused: the build sets FLASHATTENTION_DISABLE_PAGEDKV); fp8; and the
192/128 prefill through ``flash_attn_varlen_func``.

flashmla (``tokenspeed-flashmla``, module ``flash_mla``): ``get_mla_metadata`` +
``flash_mla_with_kvcache`` on page 64, the 576-wide cache [pages, 64, 1, 576]."""

from __future__ import annotations

from functools import partial

from typing import Any

import torch

from tools.mla_probe.common import TOL, Recorder, attention_reference, cuda_time_us, errors, lengths, version_of
from tools.mla_probe.mla_batch import CKV, KPE, SM_SCALE, make_mla_batch


def _fa3():
    import fa3_fwd_interface

    return fa3_fwd_interface


def fa3_contiguous(heads: int, q_len: int, kv_lens: list[int], time_it: bool) -> dict[str, Any]:
    fa3 = _fa3()
    b = make_mla_batch(heads, q_len, 64, kv_lens, seed=11)
    b.reference()
    ckv_c, kpe_c = b.contiguous()
    q = b.q_pe.view(b.batch, q_len, heads, KPE)
    qv = b.q_nope.view(b.batch, q_len, heads, CKV)
    seqlens = torch.tensor(b.kv_lens, dtype=torch.int32, device="cuda")

    def call(lse: bool = False):
        return fa3.flash_attn_with_kvcache(q, kpe_c, ckv_c, qv=qv, cache_seqlens=seqlens, softmax_scale=SM_SCALE,
                                           causal=True, return_softmax_lse=lse)

    out, lse, *_ = call(True)
    res = errors(out.reshape(-1, heads, CKV), b.ref_out, TOL["bfloat16"])
    res.update(errors(lse.transpose(1, 2).reshape(-1, heads), b.ref_lse, TOL["bfloat16"], prefix="lse_"))
    if time_it:
        t = cuda_time_us(call)
        res.update(t, cache_bytes=b.cache_bytes, tb_per_s=round(b.cache_bytes / (t["median_us"] * 1e-6) / 1e12, 3))
        res["gather_us"] = cuda_time_us(b.contiguous, warmup=1, reps=5)["median_us"]
    return res


def fa3_varlen(heads: int, q_len: int, kv_lens: list[int], num_splits: int, time_it: bool,
               views: bool = False) -> dict[str, Any]:
    """The latent gathered from the paged pool into one packed [tokens, 1, D] cache; ``views``:
    one gather of the 576-wide pool and q, kpe, ckv, q_nope as views (the harness adapter's call)."""
    fa3 = _fa3()
    b = make_mla_batch(heads, q_len, 64, kv_lens, seed=12)
    b.reference()
    slots = b.token_slots()
    if views:
        b = b.as_views()
        pool = b.extras["pool"]

        def gather():
            packed = pool.reshape(-1, CKV + KPE).index_select(0, slots).unsqueeze(1)
            return packed[..., :CKV], packed[..., CKV:]
    else:
        def gather():
            return b.ckv.reshape(-1, 1, CKV)[slots], b.kpe.reshape(-1, 1, KPE)[slots]

    ckv_p, kpe_p = gather()
    cu_q = torch.arange(b.batch + 1, dtype=torch.int32, device="cuda") * q_len
    cu_k = torch.zeros(b.batch + 1, dtype=torch.int32, device="cuda")
    cu_k[1:] = torch.cumsum(torch.tensor(b.kv_lens, device="cuda"), 0)

    def call(lse: bool = False):
        return fa3.flash_attn_varlen_func(b.q_pe, kpe_p, ckv_p, cu_q, cu_k, q_len, max(b.kv_lens), qv=b.q_nope,
                                          softmax_scale=SM_SCALE, causal=True, num_splits=num_splits,
                                          return_attn_probs=lse)

    out, lse = call(True)[:2]
    res = errors(out, b.ref_out, TOL["bfloat16"])
    res.update(errors(lse.transpose(0, 1), b.ref_lse, TOL["bfloat16"], prefix="lse_"))
    if time_it:
        t = cuda_time_us(call)
        res.update(t, cache_bytes=b.cache_bytes, tb_per_s=round(b.cache_bytes / (t["median_us"] * 1e-6) / 1e12, 3))
        res["gather_us"] = cuda_time_us(gather, warmup=1, reps=5)["median_us"]
    return res


def fa3_paged(page: int) -> dict[str, Any]:
    fa3 = _fa3()
    b = make_mla_batch(16, 1, page, [300, 1000], seed=13)
    b.reference()
    out, lse, *_ = fa3.flash_attn_with_kvcache(
        b.q_pe.view(b.batch, 1, 16, KPE), b.kpe.unsqueeze(2), b.ckv.unsqueeze(2), qv=b.q_nope.view(b.batch, 1, 16, CKV),
        cache_seqlens=torch.tensor(b.kv_lens, dtype=torch.int32, device="cuda"), page_table=b.block_table,
        softmax_scale=SM_SCALE, causal=True, return_softmax_lse=True)
    return errors(out.reshape(-1, 16, CKV), b.ref_out, TOL["bfloat16"])


def fa3_fp8() -> dict[str, Any]:
    fa3 = _fa3()
    b = make_mla_batch(16, 1, 64, [1000, 2000], seed=14, fp8=True)
    b.reference()
    ckv_c, kpe_c = b.contiguous()
    qs = max(float(b.q_nope.abs().max()), float(b.q_pe.abs().max())) / 448.0
    q = (b.q_pe.float() / qs).to(torch.float8_e4m3fn).view(b.batch, 1, 16, KPE)
    qv = (b.q_nope.float() / qs).to(torch.float8_e4m3fn).view(b.batch, 1, 16, CKV)
    d = lambda x: torch.full((b.batch, 1), x, dtype=torch.float32, device="cuda")  # noqa: E731  (B, Hk)
    out = fa3.flash_attn_with_kvcache(q, kpe_c, ckv_c, qv=qv, cache_seqlens=torch.tensor(b.kv_lens, dtype=torch.int32,
                                      device="cuda"), softmax_scale=SM_SCALE, causal=True, q_descale=d(qs),
                                      k_descale=d(b.scale), v_descale=d(b.scale))
    return errors(out.reshape(-1, 16, CKV), b.ref_out, TOL["fp8"])


def fa3_prefill_192_128(lens: list[int], heads: int = 16) -> dict[str, Any]:
    fa3 = _fa3()
    gen = torch.Generator(device="cpu").manual_seed(3)
    t = sum(lens)
    q = torch.randn(t, heads, 192, generator=gen).to("cuda", torch.bfloat16)
    k = torch.randn(t, heads, 192, generator=gen).to("cuda", torch.bfloat16)
    v = torch.randn(t, heads, 128, generator=gen).to("cuda", torch.bfloat16)
    cu = torch.zeros(len(lens) + 1, dtype=torch.int32, device="cuda")
    cu[1:] = torch.cumsum(torch.tensor(lens, device="cuda"), 0)

    def call(lse: bool = False):
        return fa3.flash_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens), softmax_scale=SM_SCALE, causal=True,
                                          return_attn_probs=lse)

    out, lse = call(True)[:2]
    refs = [attention_reference(q[a:z], k[a:z], v[a:z], SM_SCALE, True) for a, z in zip(cu[:-1], cu[1:])]
    res = errors(out, torch.cat([r[0] for r in refs]), TOL["bfloat16"])
    res.update(errors(lse.transpose(0, 1), torch.cat([r[1] for r in refs]), TOL["bfloat16"], prefix="lse_"))
    res.update(cuda_time_us(call))
    return res


def run_fa3(rec: Recorder) -> None:
    fa3 = _fa3()
    rec.note("fa3_fwd_file", getattr(fa3, "__file__", "?"))
    try:
        import fa3_fwd_config

        rec.note("fa3_fwd_build_flags", fa3_fwd_config.CONFIG.get("build_flags"))
    except Exception as e:  # the config module is informational only
        rec.note("fa3_fwd_build_flags", f"{type(e).__name__}: {e}")
    gen = torch.Generator().manual_seed(1)
    for heads in (16, 128):
        for q_len in (1, 4):
            lens = lengths(8, q_len, 3000, gen, must=(q_len, 63, 128, 129))
            rec.attempt("fa3_mla_contiguous", dict(heads=heads, q_len=q_len, kv_lens=lens),
                        partial(fa3_contiguous, heads, q_len, lens, False))
            rec.attempt("fa3_mla_varlen", dict(heads=heads, q_len=q_len, kv_lens=lens, num_splits=0),
                        partial(fa3_varlen, heads, q_len, lens, 0, False))
            rec.attempt("fa3_mla_varlen_views", dict(heads=heads, q_len=q_len, kv_lens=lens, num_splits=0),
                        partial(fa3_varlen, heads, q_len, lens, 0, False, views=True))
    for heads in (16, 128):
        rec.attempt("fa3_mla_contiguous_timed", dict(heads=heads, q_len=1, kv_lens="64 x 8192"),
                    partial(fa3_contiguous, heads, 1, [8192] * 64, True))
        for splits in (0, 1):
            rec.attempt("fa3_mla_varlen_timed", dict(heads=heads, q_len=1, kv_lens="64 x 8192", num_splits=splits),
                        partial(fa3_varlen, heads, 1, [8192] * 64, splits, True))
    for page in (1, 16, 64):
        rec.attempt("fa3_mla_paged", dict(page=page), partial(fa3_paged, page))
    rec.attempt("fa3_mla_fp8_contiguous", dict(heads=16), fa3_fp8)
    rec.attempt("fa3_prefill_192_128", dict(lens=[1024, 3072], heads=16), partial(fa3_prefill_192_128, [1024, 3072]))


def flashmla_attempt(heads: int, q_len: int, kv_lens: list[int], time_it: bool) -> dict[str, Any]:
    import flash_mla

    b = make_mla_batch(heads, q_len, 64, kv_lens, seed=21)
    b.reference()
    cache = torch.cat([b.ckv, b.kpe], dim=-1).unsqueeze(2).contiguous()  # [pages, 64, 1, 576]
    q = torch.cat([b.q_nope, b.q_pe], dim=-1).view(b.batch, q_len, heads, CKV + KPE)
    seqlens = torch.tensor(b.kv_lens, dtype=torch.int32, device="cuda")
    meta, _ = flash_mla.get_mla_metadata()

    def call():
        return flash_mla.flash_mla_with_kvcache(q, cache, b.block_table, seqlens, CKV, meta, softmax_scale=SM_SCALE,
                                                causal=True)

    out, lse = call()
    res = errors(out.reshape(-1, heads, CKV), b.ref_out, TOL["bfloat16"])
    res.update(errors(lse.transpose(1, 2).reshape(-1, heads), b.ref_lse, TOL["bfloat16"], prefix="lse_"))
    if time_it:
        t = cuda_time_us(call)
        res.update(t, cache_bytes=b.cache_bytes, tb_per_s=round(b.cache_bytes / (t["median_us"] * 1e-6) / 1e12, 3))
    return res


def run_flashmla(rec: Recorder) -> None:
    rec.note("torch", torch.__version__)
    r = rec.attempt("import_flash_mla", {}, lambda: {"version": version_of(__import__("flash_mla"))})
    if not r.get("ok"):
        return
    gen = torch.Generator().manual_seed(2)
    for heads in (16, 64, 128):
        for q_len in (1, 4):
            lens = lengths(8, q_len, 3000, gen, must=(q_len, 63, 128, 129))
            rec.attempt("flashmla_decode_bf16", dict(heads=heads, q_len=q_len, page=64, kv_lens=lens),
                        partial(flashmla_attempt, heads, q_len, lens, False))
    for heads in (16, 128):
        rec.attempt("flashmla_decode_bf16_timed", dict(heads=heads, q_len=1, page=64, kv_lens="64 x 8192"),
                    partial(flashmla_attempt, heads, 1, [8192] * 64, True))
