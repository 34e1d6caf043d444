"""Item flex_split: compiled FlexAttention on a decode batch whose packed K/V passes 2**31
elements (64 requests x 36864 keys x 8 KV heads x 128 = 2.42e9), as the harness's flex-attention
backend packs a batch (B=1, one document per request). First split into calls the way the
backend splits it (``backends.flex_attention.pack_segments`` / ``max_call_keys``, imported from
this checkout; halves if that import fails), then as one call: on the H200 (torch 2.11) a
single call of 2.56e9 elements gave wrong output and one of 2.72e9 an illegal memory access, so
the single call runs last. Each request is compared with an fp32 reference."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch

from tools.mla_probe.common import TOL, Recorder, attention_reference, cuda_time_us

HQ, HK, D = 32, 8, 128
REQS, KEYS = 64, 36864
BLOCK = 128


def _flex():
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    return torch.compile(flex_attention, dynamic=False), create_block_mask


def _split_groups() -> tuple[list[list[int]], str]:
    try:
        from backends.flex_attention import GPU_SCORE_ELEMS, max_call_keys, pack_segments

        cfg = SimpleNamespace(num_kv_heads=HK, head_size=D)
        segs = [(r, 0, 1, KEYS) for r in range(REQS)]
        calls = pack_segments(segs, [1] * REQS, [KEYS] * REQS, HQ, GPU_SCORE_ELEMS,
                              max_call_keys(cfg, torch.device("cuda")))
        return [[s[0] for s in c] for c in calls], "backends.flex_attention.pack_segments"
    except Exception as e:  # the probe stays runnable on a checkout mid-merge
        return [list(range(REQS // 2)), list(range(REQS // 2, REQS))], f"halves ({type(e).__name__}: {e})"


class Data:
    def __init__(self):
        gen = torch.Generator(device="cuda").manual_seed(9)
        self.q = torch.randn(REQS, HQ, D, generator=gen, device="cuda", dtype=torch.bfloat16)
        self.k = torch.randn(REQS * KEYS, HK, D, generator=gen, device="cuda", dtype=torch.bfloat16)
        self.v = torch.randn(REQS * KEYS, HK, D, generator=gen, device="cuda", dtype=torch.bfloat16)
        refs = [attention_reference(self.q[r: r + 1], self.k[r * KEYS:(r + 1) * KEYS],
                                    self.v[r * KEYS:(r + 1) * KEYS], D ** -0.5, False)[0] for r in range(REQS)]
        self.ref = torch.cat(refs)  # [REQS, HQ, D]


def _call(data: Data, reqs: list[int], flex, create_block_mask) -> tuple[Any, dict[str, Any]]:
    """One packed call over ``reqs``: returns a zero-argument runner and the call's sizes."""
    n = len(reqs)
    q_pad = -(-n // BLOCK) * BLOCK
    idx = torch.tensor(reqs, device="cuda")
    q = torch.zeros(1, HQ, q_pad, D, dtype=torch.bfloat16, device="cuda")
    q[0, :, :n] = data.q[idx].transpose(0, 1)
    rows = (idx.unsqueeze(1) * KEYS + torch.arange(KEYS, device="cuda")).reshape(-1)
    k = data.k[rows].transpose(0, 1).unsqueeze(0)  # [1, Hk, n*KEYS, D] (a gather, like the backend's)
    v = data.v[rows].transpose(0, 1).unsqueeze(0)
    q_doc = torch.full((q_pad,), -1, dtype=torch.int32, device="cuda")
    q_doc[:n] = torch.arange(n, dtype=torch.int32, device="cuda")
    kv_doc = torch.arange(n, dtype=torch.int32, device="cuda").repeat_interleave(KEYS)

    def mask_mod(b, h, qi, ki):
        return q_doc[qi] == kv_doc[ki]

    bm = create_block_mask(mask_mod, 1, None, q_pad, n * KEYS, device="cuda", BLOCK_SIZE=BLOCK)

    def run():
        return flex(q, k, v, block_mask=bm, scale=D ** -0.5, enable_gqa=True)

    sizes = {"requests": n, "packed_kv_elements": n * KEYS * HK * D, "over_2_31": n * KEYS * HK * D >= 2 ** 31}
    return (lambda: run()[0, :, :n].transpose(0, 1)), sizes


def split_calls() -> dict[str, Any]:
    flex, cbm = _flex()
    data = Data()
    groups, how = _split_groups()
    runners = [(g, _call(data, g, flex, cbm)) for g in groups]
    out = torch.empty_like(data.ref)
    for g, (fn, _) in runners:
        out[torch.tensor(g, device="cuda")] = fn().float()
    bad = [r for r in range(REQS) if float((out[r] - data.ref[r]).norm() / data.ref[r].norm()) > TOL["bfloat16"]]
    res: dict[str, Any] = {"split_by": how, "calls": [s for _, (_, s) in runners], "bad_requests": len(bad),
                           "passed": not bad,
                           "rel_err": float(f"{float((out - data.ref).norm() / data.ref.norm()):.3e}")}
    res.update(cuda_time_us(lambda: [fn() for _, (fn, _) in runners], warmup=1, reps=5))
    return res


def single_call() -> dict[str, Any]:
    flex, cbm = _flex()
    data = Data()
    fn, sizes = _call(data, list(range(REQS)), flex, cbm)
    out = fn().float()
    torch.cuda.synchronize()
    bad = [r for r in range(REQS) if not bool(torch.isfinite(out[r]).all())
           or float((out[r] - data.ref[r]).norm() / data.ref[r].norm()) > TOL["bfloat16"]]
    return {**sizes, "bad_requests": len(bad), "passed": not bad,
            "rel_err": float(f"{float(torch.nan_to_num(out - data.ref, nan=1e30).norm() / data.ref.norm()):.3e}")}


def run(rec: Recorder) -> None:
    rec.note("torch", torch.__version__)
    shape = dict(heads=f"{HQ}/{HK}", head=D, requests=REQS, keys_each=KEYS, packed_kv_elements=REQS * KEYS * HK * D)
    rec.attempt("flex_split_calls", shape, split_calls)
    torch.cuda.empty_cache()
    rec.attempt("flex_single_call_past_2_31", shape, single_call)
