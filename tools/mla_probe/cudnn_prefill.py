"""Item cudnn_prefill: FlashInfer's cuDNN paged prefill on one Llama-3-8B shape (32/8 heads,
head 128, bf16, page 16, four requests with cached context, bottom-right causal).

Three calls: ``flashinfer.cudnn.cudnn_batch_prefill_with_kv_cache`` with element-unit ragged
offsets (what the harness adapter passes), the same with token-unit offsets where the installed
function has ``batch_offsets_units``, and ``BatchPrefillWithPagedKVCacheWrapper(backend="cudnn")``
with token-unit qo_indptr; the LSE is compared in both bases, so the record says which one the
installed version returns. fa3 paged prefill on the same batch for comparison."""

from __future__ import annotations

import inspect
from typing import Any

import torch

from tools.mla_probe.common import LN2, TOL, Recorder, attention_reference, cuda_time_us, errors, version_of

MiB = 1 << 20
HQ, HK, D, PAGE = 32, 8, 128, 16
Q_LENS, CTX = (512, 1000, 37, 256), (0, 3000, 500, 1234)


class Batch:
    def __init__(self, seed: int = 5):
        gen = torch.Generator().manual_seed(seed)
        self.q_lens = list(Q_LENS)
        self.kv_lens = [c + q for c, q in zip(CTX, Q_LENS)]
        need = [-(-n // PAGE) for n in self.kv_lens]
        pool = sum(need) + 3
        perm = torch.randperm(pool, generator=gen).to(torch.int32)
        self.bt = torch.zeros(len(need), max(need), dtype=torch.int32)
        at = 0
        for b, n in enumerate(need):
            self.bt[b, :n] = perm[at: at + n]
            at += n
        # vLLM's FlashAttention layout, NHD: [pages, 2, page, Hk, D]
        self.cache = torch.randn(pool, 2, PAGE, HK, D, generator=gen).to("cuda", torch.bfloat16)
        self.q = torch.randn(sum(Q_LENS), HQ, D, generator=gen).to("cuda", torch.bfloat16)
        self.qo_indptr = torch.zeros(len(need) + 1, dtype=torch.int32)
        self.qo_indptr[1:] = torch.cumsum(torch.tensor(Q_LENS), 0)
        self.kv_indptr = torch.zeros(len(need) + 1, dtype=torch.int32)
        self.kv_indptr[1:] = torch.cumsum(torch.tensor(need), 0)
        self.kv_indices = torch.cat([self.bt[b, :n] for b, n in enumerate(need)]).cuda()
        self.last_page_len = torch.tensor([n - (p - 1) * PAGE for n, p in zip(self.kv_lens, need)], dtype=torch.int32)
        self.bt = self.bt.cuda()
        outs, lses = [], []
        for b in range(len(need)):
            pages = self.bt[b, : need[b]].long()
            k = self.cache[pages, 0].reshape(-1, HK, D)[: self.kv_lens[b]]
            v = self.cache[pages, 1].reshape(-1, HK, D)[: self.kv_lens[b]]
            o, lse = attention_reference(self.q[self.qo_indptr[b]: self.qo_indptr[b + 1]], k, v, D ** -0.5, True)
            outs.append(o)
            lses.append(lse)
        self.ref_out, self.ref_lse = torch.cat(outs), torch.cat(lses)

    def kv_views(self) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V as [pages, Hk, page, D] strided views of the NHD cache (what cuDNN reads)."""
        return self.cache[:, 0].transpose(1, 2), self.cache[:, 1].transpose(1, 2)

    def lens4(self, lens: list[int]) -> torch.Tensor:
        return torch.tensor(lens, dtype=torch.int32, device="cuda").view(-1, 1, 1, 1)

    def unpad_lse(self, lse: torch.Tensor) -> torch.Tensor:
        """cuDNN's stats [B, max_q, H] (padded per request) -> [tokens, H]."""
        return torch.cat([lse[b, :n] for b, n in enumerate(self.q_lens)])


def _lse_bases(bt: Batch, lse: torch.Tensor | None) -> dict[str, Any]:
    if lse is None:
        return {"lse": "none returned"}
    flat = bt.unpad_lse(lse.view(len(bt.q_lens), max(bt.q_lens), HQ)) if lse.dim() >= 3 else lse
    nat = errors(flat, bt.ref_lse, TOL["bfloat16"], prefix="lse_natural_")
    b2 = errors(flat.float() * LN2, bt.ref_lse, TOL["bfloat16"], prefix="lse_base2_")
    return {**nat, **b2, "lse_shape": list(lse.shape)}


def direct(units: str) -> dict[str, Any]:
    from flashinfer.cudnn import cudnn_batch_prefill_with_kv_cache as fn

    bt = Batch()
    k, v = bt.kv_views()
    ws = torch.zeros(256 * MiB, dtype=torch.uint8, device="cuda")
    qo = bt.qo_indptr.cuda()
    kw: dict[str, Any] = dict(max_token_per_sequence=max(bt.q_lens), max_sequence_kv=max(bt.kv_lens),
                              actual_seq_lens_q=bt.lens4(bt.q_lens), actual_seq_lens_kv=bt.lens4(bt.kv_lens),
                              block_tables=bt.bt, causal=True)
    if units == "elements":
        kw.update(batch_offsets_q=qo * (HQ * D), batch_offsets_o=qo * (HQ * D))
    else:
        if "batch_offsets_units" not in inspect.signature(fn).parameters:
            return {"ok": False, "error": "this flashinfer's cudnn_batch_prefill_with_kv_cache has no batch_offsets_units"}
        kw.update(batch_offsets_q=qo, batch_offsets_units="tokens")
    out = torch.empty(bt.q.shape[0], HQ, D, dtype=torch.bfloat16, device="cuda")
    o, lse = fn(bt.q, k, v, D ** -0.5, ws, return_lse=True, out=out, **kw)
    res = errors(o, bt.ref_out, TOL["bfloat16"])
    res.update(_lse_bases(bt, lse))
    res.update(cuda_time_us(lambda: fn(bt.q, k, v, D ** -0.5, ws, return_lse=False, out=out, **kw)))
    return res


def wrapper(indptr_units: str) -> dict[str, Any]:
    import flashinfer

    bt = Batch()
    k, v = bt.kv_views()
    ws = torch.zeros(256 * MiB, dtype=torch.uint8, device="cuda")
    w = flashinfer.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD", backend="cudnn")
    qo = bt.qo_indptr if indptr_units == "tokens" else bt.qo_indptr * (HQ * D)
    w.plan(qo.cuda(), bt.kv_indptr.cuda(), bt.kv_indices, bt.last_page_len.cuda(), HQ, HK, D, PAGE, causal=True,
           sm_scale=D ** -0.5, q_data_type=torch.bfloat16, seq_lens=bt.lens4(bt.kv_lens),
           seq_lens_q=bt.lens4(bt.q_lens), max_token_per_sequence=max(bt.q_lens),
           max_sequence_kv=max(bt.kv_lens), block_tables=bt.bt)
    out, lse = w.run(bt.q, (k, v), return_lse=True)
    res = errors(out, bt.ref_out, TOL["bfloat16"])
    res.update(_lse_bases(bt, lse))
    return res


def fa3_paged() -> dict[str, Any]:
    import flashinfer

    bt = Batch()
    ws = torch.zeros(256 * MiB, dtype=torch.uint8, device="cuda")
    w = flashinfer.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD", backend="fa3")
    w.plan(bt.qo_indptr, bt.kv_indptr, bt.kv_indices, bt.last_page_len, HQ, HK, D, PAGE, causal=True,
           sm_scale=D ** -0.5, q_data_type=torch.bfloat16)
    out = w.run(bt.q, bt.cache)
    res = errors(out, bt.ref_out, TOL["bfloat16"])
    res.update(cuda_time_us(lambda: w.run(bt.q, bt.cache)))
    return res


def run(rec: Recorder) -> None:
    import flashinfer

    rec.note("flashinfer", version_of(flashinfer))
    try:
        import cudnn

        rec.note("cudnn_frontend", version_of(cudnn))
        rec.note("cudnn_backend_version", int(cudnn.backend_version()))
    except Exception as e:  # without cudnn-frontend FlashInfer downloads cubins instead
        rec.note("cudnn_frontend", f"not importable: {type(e).__name__}: {e}")
    from flashinfer.cudnn import cudnn_batch_prefill_with_kv_cache

    rec.note("signature", str(inspect.signature(cudnn_batch_prefill_with_kv_cache)))
    shape = dict(heads=f"{HQ}/{HK}", head=D, page=PAGE, q_lens=Q_LENS, ctx=CTX)
    rec.attempt("cudnn_direct_element_offsets", shape, lambda: direct("elements"))
    rec.attempt("cudnn_direct_token_offsets", shape, lambda: direct("tokens"))
    rec.attempt("cudnn_wrapper_token_indptr", shape, lambda: wrapper("tokens"))
    rec.attempt("cudnn_wrapper_element_indptr", shape, lambda: wrapper("elements"))
    rec.attempt("fa3_paged_prefill_same_batch", shape, fa3_paged)
