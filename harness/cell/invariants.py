"""Metamorphic checks: properties a correct kernel has whatever the reference says,
each reported as its own check with a status.

- ``batch-invariance``: each request run alone gives the output it got inside the batch
  (``bitwise`` in the detail when it is exactly equal, as a deterministic kernel's should be);
- ``page-permutation``: moving the batch's pages to other physical blocks (and the block table
  with them) changes nothing;
- ``decode-vs-prefill``: a decode of a prefill's last token over the same KV equals the
  prefill's last output row;
- ``split-kv``: the backend run with its KV split forced off and forced to many splits (the
  variant knob it declares in ``Capabilities.split_kv``) gives the same output: catches a wrong
  merge of the split partials; ``unsupported`` when the backend declares no knob;
- ``cascade-vs-plain``: a cascade backend equals its plain counterpart (declared in
  ``Capabilities.plain_counterpart``, a registry name) on the same shared-prefix batch;
  ``unsupported`` for a backend that declares none.

Outside bitwise equality, two outputs "agree" when every request's relative L2 difference is
within ``harness.cell.check.rel_l2_limit`` (the tolerance a correct kernel gets against the
reference). ``check_invariants(backend, variant, batch, device)`` returns one ``InvariantResult`` per
invariant: ``invariant``, ``status`` (pass / mismatch / error / unsupported), ``detail``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from attn_contract import AttentionBackend, Status
from harness.cell.check import rel_l2_limit
from harness.records.results import InvariantResult
from harness.registry import resolve
from harness.cell.prepare import CellUnsupported, prepare_cell
from harness.case.workload import Batch


def _run(backend: type[AttentionBackend], variant: dict[str, Any], batch: Batch, device: torch.device) -> torch.Tensor:
    """The backend's output for ``batch``, in the batch's token order."""
    cell = prepare_cell(backend, variant, batch, device)
    cell.forward()
    out = cell.out
    if cell.token_index is not None:
        back = torch.empty_like(out)
        back[cell.token_index] = out
        out = back
    return out


def sub_batch(batch: Batch, reqs: list[int]) -> Batch:
    """The batch restricted to ``reqs`` (same KV cache and pages)."""
    qsl = batch.query_start_loc
    tok = torch.cat([torch.arange(qsl[i], qsl[i + 1], device=batch.device) for i in reqs])
    idx = torch.tensor(reqs, device=batch.device)
    rows = batch.key_rows(reqs, tok)  # MLA's expanded key/value hold every token of a request
    return replace(
        batch, kinds=[batch.kinds[i] for i in reqs], query_lens=[batch.query_lens[i] for i in reqs],
        seq_lens=[batch.seq_lens[i] for i in reqs], query=batch.query[tok], key=batch.key[rows], value=batch.value[rows],
        k_logical=[batch.k_logical[i] for i in reqs], v_logical=[batch.v_logical[i] for i in reqs],
        block_table=batch.block_table[idx], slot_mapping=batch.slot_mapping[tok],
        prefix_group_of_req=tuple(batch.prefix_group_of_req[i] for i in reqs) if batch.prefix_group_of_req else (),
        prefix_group_lens=batch.prefix_group_lens if batch.prefix_group_of_req else (),
    )


def permuted_pages(batch: Batch, seed: int = 1) -> Batch:
    """The same batch with every physical block moved by a random permutation."""
    nb = batch.kv_cache.shape[0]
    perm = torch.randperm(nb, generator=torch.Generator().manual_seed(seed)).to(batch.device)
    cache = torch.empty_like(batch.kv_cache)
    cache[perm] = batch.kv_cache
    bs = batch.config.block_size
    slots = perm[batch.slot_mapping // bs] * bs + batch.slot_mapping % bs
    return replace(batch, kv_cache=cache, block_table=perm[batch.block_table.long()].to(torch.int32), slot_mapping=slots)


def agree(a: torch.Tensor, b: torch.Tensor, batch: Batch, reqs: list[int] | None = None) -> tuple[bool, str]:
    """(same within tolerance, detail) of two outputs of ``batch``'s token layout."""
    if torch.equal(a, b):
        return True, "bitwise"
    qsl = batch.query_start_loc
    worst, worst_req = 0.0, -1
    for i in reqs if reqs is not None else range(batch.num_reqs):
        x, y = a[qsl[i]:qsl[i + 1]].double(), b[qsl[i]:qsl[i + 1]].double()
        if not (torch.isfinite(x).all() and torch.isfinite(y).all()):
            return False, f"request {i}: non-finite output"
        rel = float((x - y).norm()) / max(float(y.norm()), 1e-30)
        lim = rel_l2_limit(batch.config.dtype, batch.config.kv_cache_dtype, batch.seq_lens[i])
        if rel / lim > worst:
            worst, worst_req = rel / lim, i
        if rel > lim:
            return False, f"request {i} ({batch.kinds[i]}): rel L2 difference {rel:.3g} > {lim:.3g}"
    return True, f"not bitwise; worst request {worst_req} at {worst:.2f} of the limit"


def check_invariants(backend: type[AttentionBackend], variant: dict[str, Any], batch: Batch,
                     device: torch.device) -> list[InvariantResult]:
    results: list[InvariantResult] = []

    def record(name: str, fn) -> None:
        try:
            ok, detail = fn()
            status = Status.PASS if ok else Status.MISMATCH
        except CellUnsupported as e:
            status, detail = Status.UNSUPPORTED, str(e)
        except Exception as e:  # a backend failing an invariant's batch costs only that invariant
            status, detail = Status.ERROR, f"{type(e).__name__}: {str(e).strip()[:200]}"
        results.append(InvariantResult(invariant=name, status=status, detail=detail))

    full: dict[str, torch.Tensor] = {}

    def base() -> torch.Tensor:
        if "out" not in full:
            full["out"] = _run(backend, variant, batch, device)
        return full["out"]

    def batch_invariance():
        out = base()
        qsl = batch.query_start_loc
        bitwise = True
        for i in range(batch.num_reqs):
            alone = _run(backend, variant, sub_batch(batch, [i]), device)
            mine = out[qsl[i]:qsl[i + 1]]
            if torch.equal(alone, mine):
                continue
            bitwise = False
            one = sub_batch(batch, [i])
            ok, detail = agree(mine, alone, one)
            if not ok:
                return False, f"request {i} alone vs in the batch: {detail}"
        return True, "bitwise" if bitwise else "within tolerance, not bitwise"

    def page_permutation():
        return agree(_run(backend, variant, permuted_pages(batch), device), base(), batch)

    def decode_vs_prefill():
        pre = [i for i, k in enumerate(batch.kinds) if k in ("prefill", "extend") and batch.query_lens[i] > 1]
        if not pre:
            return True, "no prefill in the batch: nothing to compare"
        i = pre[0]
        last = batch.query_start_loc[i + 1] - 1
        one = sub_batch(batch, [i])
        # The new token's K/V; MLA's expanded form passes all of the request's (attn_contract/mla.py).
        rows = batch.key_rows([i], torch.arange(last, last + 1, device=batch.device))
        dec = replace(one, kinds=["decode"], query_lens=[1], query=batch.query[last:last + 1],
                      key=batch.key[rows], value=batch.value[rows], slot_mapping=batch.slot_mapping[last:last + 1])
        got = _run(backend, variant, dec, device)
        return agree(got, base()[last:last + 1], dec)

    caps = backend.capabilities(variant)

    def split_kv():
        knob = caps.split_kv
        if knob is None:
            raise CellUnsupported("the backend declares no split-KV knob (Capabilities.split_kv)")
        one = _run(backend, {**variant, knob.key: knob.one}, batch, device)
        many = _run(backend, {**variant, knob.key: knob.many}, batch, device)
        ok, detail = agree(many, one, batch)
        return ok, f"{knob.key}={knob.many} vs {knob.key}={knob.one}: {detail}"

    def cascade_vs_plain():
        if caps.plain_counterpart is None:
            raise CellUnsupported("no plain counterpart declared (Capabilities.plain_counterpart)")
        plain = _run(resolve(caps.plain_counterpart), {}, batch, device)
        ok, detail = agree(base(), plain, batch)
        return ok, f"vs {caps.plain_counterpart}: {detail}"

    record("batch-invariance", batch_invariance)
    record("page-permutation", page_permutation)
    record("decode-vs-prefill", decode_vs_prefill)
    record("split-kv", split_kv)
    record("cascade-vs-plain", cascade_vs_plain)
    return results
