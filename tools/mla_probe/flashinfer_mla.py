"""Item flashinfer_mla: ``flashinfer.mla.BatchMLAPagedAttentionWrapper`` (fa2, fa3) on the
paged latent cache, bf16 and fp8 e4m3 latent, against the fp32 reference; and FlashInfer's
ragged prefill with head_dim_qk 192 / head_dim_vo 128 (vLLM's MLA prefill shape)."""

from __future__ import annotations

from functools import partial

import inspect
from typing import Any

import torch

from tools.mla_probe.common import LN2, TOL, Recorder, attention_reference, cuda_time_us, errors, lengths, version_of
from tools.mla_probe.mla_batch import CKV, KPE, SM_SCALE, MLABatch, make_mla_batch

MiB = 1 << 20


def _wrapper(backend: str):
    from flashinfer.mla import BatchMLAPagedAttentionWrapper

    ws = torch.zeros(256 * MiB, dtype=torch.uint8, device="cuda")
    return BatchMLAPagedAttentionWrapper(ws, backend=backend)


def _plan(w: Any, b: MLABatch, q_dtype: torch.dtype, kv_dtype: torch.dtype, sm_scale: float) -> None:
    qo = torch.arange(b.batch + 1, dtype=torch.int32) * b.q_len
    w.plan(qo, b.kv_indptr, b.kv_indices, torch.tensor(b.kv_lens, dtype=torch.int32), b.heads, CKV, KPE,
           b.page, True, sm_scale, q_dtype, kv_dtype)


def _check(b: MLABatch, out: torch.Tensor, lse2: torch.Tensor | None, tol: float) -> dict[str, Any]:
    res = errors(out, b.ref_out, tol)
    if lse2 is not None:
        res.update(errors(lse2.float() * LN2, b.ref_lse, tol, prefix="lse_"))
    return res


def decode_attempt(backend: str, heads: int, page: int, q_len: int, kv_lens: list[int], time_it: bool,
                   seed: int, views: bool = False) -> dict[str, Any]:
    b = make_mla_batch(heads, q_len, page, kv_lens, seed=seed)
    b.reference()
    if views:
        b = b.as_views()
    w = _wrapper(backend)
    _plan(w, b, torch.bfloat16, torch.bfloat16, SM_SCALE)
    out, lse = w.run(b.q_nope, b.q_pe, b.ckv, b.kpe, return_lse=True)
    res = _check(b, out, lse, TOL["bfloat16"])
    res["resolved_backend"] = str(getattr(w, "_backend", backend))
    if time_it:
        t = cuda_time_us(lambda: w.run(b.q_nope, b.q_pe, b.ckv, b.kpe))
        res.update(t, cache_bytes=b.cache_bytes, tb_per_s=round(b.cache_bytes / (t["median_us"] * 1e-6) / 1e12, 3))
    return res


def fp8_attempt(backend: str, how: str, heads: int, page: int, q_len: int, kv_lens: list[int],
                views: bool = False) -> dict[str, Any]:
    """fp8 e4m3 latent. ``how``: ``scale_kwargs`` passes run(ckv_scale=, kpe_scale=) where the
    installed run() has them; ``fold`` plans kv fp8 with q bf16 and folds the dequant scale into
    sm_scale (logits) and the output (V is ckv); ``fp8_q`` quantizes q too (FA3-style kernels
    want q and kv in one dtype)."""
    b = make_mla_batch(heads, q_len, page, kv_lens, seed=7, fp8=True)
    b.reference()
    if views:
        b = b.as_views()
    w = _wrapper(backend)
    params = inspect.signature(w.run).parameters
    s = b.scale
    if how == "scale_kwargs":
        if "ckv_scale" not in params:
            return {"ok": False, "error": f"run() has no ckv_scale parameter: {list(params)}"}
        _plan(w, b, torch.bfloat16, torch.float8_e4m3fn, SM_SCALE)
        kw = dict(ckv_scale=s, kpe_scale=s)
        try:
            out, lse = w.run(b.q_nope, b.q_pe, b.ckv, b.kpe, return_lse=True, **kw)
        except TypeError:
            t = torch.tensor([s], dtype=torch.float32, device="cuda")
            kw = dict(ckv_scale=t, kpe_scale=t)
            out, lse = w.run(b.q_nope, b.q_pe, b.ckv, b.kpe, return_lse=True, **kw)
        res = _check(b, out, lse, TOL["fp8"])
        res["scale_type"] = type(kw["ckv_scale"]).__name__
        res.update(cuda_time_us(lambda: w.run(b.q_nope, b.q_pe, b.ckv, b.kpe, **kw)))
        return res
    if how == "q_scaled":
        # the harness adapter's form: q multiplied by the scale before the call, output after it
        _plan(w, b, torch.bfloat16, torch.float8_e4m3fn, SM_SCALE)
        qn, qp = b.q_nope * s, b.q_pe * s
        out, lse = w.run(qn, qp, b.ckv, b.kpe, return_lse=True)
        res = _check(b, out.float() * s, lse, TOL["fp8"])
        res.update(cuda_time_us(lambda: w.run(qn, qp, b.ckv, b.kpe)))
        return res
    if how == "fold":
        _plan(w, b, torch.bfloat16, torch.float8_e4m3fn, SM_SCALE * s)
        out, lse = w.run(b.q_nope, b.q_pe, b.ckv, b.kpe, return_lse=True)
        res = _check(b, out.float() * s, lse, TOL["fp8"])
        res.update(cuda_time_us(lambda: w.run(b.q_nope, b.q_pe, b.ckv, b.kpe)))
        return res
    # fp8_q: q quantized with its own scale, kv fp8; both scales folded into sm_scale.
    qs = max(float(b.q_nope.abs().max()), float(b.q_pe.abs().max())) / 448.0
    qn = (b.q_nope.float() / qs).to(torch.float8_e4m3fn)
    qp = (b.q_pe.float() / qs).to(torch.float8_e4m3fn)
    _plan(w, b, torch.float8_e4m3fn, torch.float8_e4m3fn, SM_SCALE * s * qs)
    out, lse = w.run(qn, qp, b.ckv, b.kpe, return_lse=True)
    res = _check(b, out.float() * s, lse, TOL["fp8"])
    res["out_dtype"] = str(out.dtype)
    res.update(cuda_time_us(lambda: w.run(qn, qp, b.ckv, b.kpe)))
    return res


def ragged_192_128(backend: str, lens: list[int], heads: int = 16) -> dict[str, Any]:
    import flashinfer

    gen = torch.Generator(device="cpu").manual_seed(3)
    t = sum(lens)
    q = torch.randn(t, heads, 192, generator=gen).to("cuda", torch.bfloat16)
    k = torch.randn(t, heads, 192, generator=gen).to("cuda", torch.bfloat16)
    v = torch.randn(t, heads, 128, generator=gen).to("cuda", torch.bfloat16)
    indptr = torch.zeros(len(lens) + 1, dtype=torch.int32)
    indptr[1:] = torch.cumsum(torch.tensor(lens), 0)
    ws = torch.zeros(256 * MiB, dtype=torch.uint8, device="cuda")
    w = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(ws, "NHD", backend=backend)
    w.plan(indptr, indptr, heads, heads, 192, head_dim_vo=128, causal=True, sm_scale=SM_SCALE,
           q_data_type=torch.bfloat16)
    out, lse = w.run(q, k, v, return_lse=True)
    refs = [attention_reference(q[a:z], k[a:z], v[a:z], SM_SCALE, True) for a, z in zip(indptr[:-1], indptr[1:])]
    res = errors(out, torch.cat([r[0] for r in refs]), TOL["bfloat16"])
    res.update(errors(lse.float() * LN2, torch.cat([r[1] for r in refs]), TOL["bfloat16"], prefix="lse_"))
    res.update(cuda_time_us(lambda: w.run(q, k, v)))
    return res


def run(rec: Recorder) -> None:
    import flashinfer

    rec.note("flashinfer", version_of(flashinfer))
    from flashinfer.mla import BatchMLAPagedAttentionWrapper

    rec.note("run_signature", str(inspect.signature(BatchMLAPagedAttentionWrapper.run)))
    rec.note("plan_signature", str(inspect.signature(BatchMLAPagedAttentionWrapper.plan)))
    gen = torch.Generator().manual_seed(0)
    for backend in ("fa2", "fa3"):
        for heads in (16, 128):
            for page in (1, 16, 64):
                for q_len in (1, 4):
                    # edge lengths: one token, a page minus one, exact pages, a page plus one
                    lens = lengths(8, q_len, 3000, gen, must=(q_len, page - 1 if page > q_len else q_len,
                                                               2 * page, 2 * page + 1))
                    rec.attempt("mla_decode_bf16", dict(backend=backend, heads=heads, page=page, q_len=q_len,
                                                        kv_lens=lens),
                                partial(decode_attempt, backend, heads, page, q_len, lens, False, seed=page + q_len))
    for backend in ("fa2", "fa3"):  # the timing shape of the issue: 64 requests x 8k
        for heads in (16, 128):
            rec.attempt("mla_decode_bf16_timed", dict(backend=backend, heads=heads, page=64, q_len=1,
                                                      kv_lens="64 x 8192"),
                        partial(decode_attempt, backend, heads, 64, 1, [8192] * 64, True, seed=1))
    for backend in ("fa2", "fa3"):
        for how in ("scale_kwargs", "fold", "fp8_q"):
            rec.attempt("mla_decode_fp8", dict(backend=backend, how=how, heads=16, page=64, q_len=1,
                                               kv_lens="16 x 2048"),
                        partial(fp8_attempt, backend, how, 16, 64, 1, [2048] * 16))
    # The adapter's exact inputs: q and the latent as one 576-wide tensor each, cut by views.
    for backend in ("fa2", "fa3"):
        for page in (1, 64):
            for q_len in (1, 4):
                lens = lengths(8, q_len, 3000, gen, must=(q_len, 2 * page + 1))
                rec.attempt("mla_decode_bf16_views", dict(backend=backend, heads=16, page=page, q_len=q_len,
                                                          kv_lens=lens),
                            partial(decode_attempt, backend, 16, page, q_len, lens, False, seed=5, views=True))
        rec.attempt("mla_decode_fp8_views", dict(backend=backend, how="q_scaled", heads=16, page=64, q_len=1,
                                                 kv_lens="16 x 2048"),
                    partial(fp8_attempt, backend, "q_scaled", 16, 64, 1, [2048] * 16, views=True))
    for backend in ("fa2", "fa3"):
        rec.attempt("ragged_prefill_192_128", dict(backend=backend, lens=[1024, 3072], heads=16),
                    partial(ragged_192_128, backend, [1024, 3072]))
