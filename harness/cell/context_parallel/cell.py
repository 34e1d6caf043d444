"""One context-parallel cell (a case with ``context_parallel:``) as a normal result row.

Per TP slice of the heads, each of the ``degree`` ranks runs the backend on its shard
(shard.rank_batch) with its LSE, converted from the backend's declared base to natural log; the
partials are merged by the case's combine (and, for the ``cp-combine`` invariant, by the other
one) on simulated ranks (threads) or on ``torch.distributed`` ranks (worker.py, one process per
rank); the merged output and LSE are checked against the reference on the full KV with
``harness.cell.check.check_output``, request by request, at the usual tolerances.

Invariants recorded in ``check.invariants`` (a broken one makes the row ``mismatch``):
``cp-combine`` (ag_rs and a2a agree) and ``cp-degree`` (the same output as one rank holding
the whole KV).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import torch

from attn_contract import AttentionBackend, Status, lse_to_natural
from harness.cell.accounting import Stopwatch, breakdown
from harness.cell.check import check_output, tolerance_for
from harness.cell.context_parallel.combine import combine_rank
from harness.cell.context_parallel.ranks import run_simulated
from harness.cell.context_parallel.shard import rank_batch, tp_batch
from harness.cell.invariants import agree
from harness.cell.prepare import CellTrace, CellUnsupported, base_row, prepare_cell, short_error
from harness.plan.cells import backend_spec
from harness.records.results import BatchSummary, Call, Host, InvariantResult, RowLayout
from harness.case.workload import Batch

OTHER = {"ag_rs": "a2a", "a2a": "ag_rs"}
DISTRIBUTED_TIMEOUT_S = 300.0


def cp_unsupported_reason(backend: type[AttentionBackend], variant: dict[str, Any], case: Any) -> str | None:
    """What the CP mode does not cover for this backend and case (the reason of an
    ``unsupported`` row), or None."""
    caps = backend.capabilities(variant)
    if not caps.returns_lse:
        return "context parallel merges the ranks' partials by their LSE; this backend returns none (returns_lse=False)"
    if case.sliding_window is not None or case.alibi:
        return ("context parallel: a shard's keys are renumbered, so a window or an ALiBi distance relative to"
                " the shard's own positions would be wrong; not covered")
    if case.sinks:
        return "context parallel: each rank's call would count the sink once more; not covered"
    if case.shared_prefix is not None:
        return "context parallel: shared-prefix (cascade) batches are not sharded"
    return None


def rank_partial(backend: type[AttentionBackend], variant: dict[str, Any], batch: Batch, degree: int, rank: int,
                 sharding: str, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
    """Rank ``rank``'s partial: output [T, H, D] (NaN on rows it has no key for), natural-log
    LSE [T, H] (-inf there), and what it did (host costs, the call, shard sizes)."""
    cfg = batch.config
    rb = rank_batch(batch, degree, rank, sharding)
    out = torch.full((batch.num_tokens, cfg.num_heads, cfg.head_size), float("nan"), dtype=cfg.torch_dtype,
                     device=device)
    lse = torch.full((batch.num_tokens, cfg.num_heads), float("-inf"), device=device)
    info: dict[str, Any] = {"rank": rank, "kv_tokens": rb.kv_tokens, "empty_shards": rb.empty_shards,
                            "empty_rows": rb.empty_rows, "build_ms": 0.0, "first_call_ms": 0.0, "call": {}}
    if rb.batch is None:
        return out, lse, info
    trace = CellTrace(Stopwatch(device))
    cell = prepare_cell(backend, variant, rb.batch, device, trace)
    cell.forward(lse=cell.lse)
    info["first_call_ms"] = trace.stopwatch.lap("first_call")
    info["build_ms"] = trace.host.get("build_ms", 0.0)
    info["call"] = dict(cell.impl.describe_call(cell.metadata) or {})
    o, l = cell.out, cell.lse
    assert l is not None  # cp_unsupported_reason admits only backends that return the LSE
    if cell.token_index is not None:
        o2, l2 = torch.empty_like(o), torch.empty_like(l)
        o2[cell.token_index], l2[cell.token_index] = o, l
        o, l = o2, l2
    rows = rb.rows.to(device)
    out[rows] = o
    lse[rows] = lse_to_natural(l, cell.caps.lse_base).float()  # explicit: the declared base
    return out, lse, info


def simulated_forward(backend: type[AttentionBackend], variant: dict[str, Any], batch: Batch, degree: int,
                      sharding: str, tp_size: int, combines: list[str], device: torch.device,
                      ) -> tuple[dict[str, tuple[torch.Tensor, torch.Tensor]], list[dict[str, Any]]]:
    """Every combine's merged (output, LSE) over the full heads, ranks as threads; rank infos."""
    merged: dict[str, list] = {c: [] for c in combines}
    infos = []
    for t in range(tp_size):
        part = tp_batch(batch, tp_size, t)
        partials = [rank_partial(backend, variant, part, degree, r, sharding, device) for r in range(degree)]
        infos += [{**p[2], "tp_rank": t} for p in partials]
        for name in combines:
            res = run_simulated(degree, lambda comm: combine_rank(partials[comm.rank][0], partials[comm.rank][1],  # noqa: B023  (called at once, in this iteration)
                                                                  comm, name))  # noqa: B023  (called at once, in this iteration)
            merged[name].append(res[0])
    return {c: (torch.cat([o for o, _ in v], 1), torch.cat([l for _, l in v], 1)) for c, v in merged.items()}, infos


def distributed_forward(backend_spec: str, variant: dict[str, Any], case: Any, combines: list[str],
                        device: torch.device) -> tuple[dict[str, tuple[torch.Tensor, torch.Tensor]], list[dict[str, Any]]]:
    """The same on ``degree`` processes (harness/cell/context_parallel/worker.py): gloo on CPU, NCCL
    with one GPU per rank. Raises RuntimeError with a rank's stderr when one fails."""
    import socket

    cp = case.context_parallel
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory(prefix="harness-cp-") as tmp:
        job = {"case": case.model_dump(mode="json"), "backend": backend_spec, "variant": variant,
               "combines": combines, "device": device.type, "out": tmp}
        (Path(tmp) / "job.json").write_text(json.dumps(job))
        env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(cp.degree),
               "OMP_NUM_THREADS": "1"}
        procs = [subprocess.Popen([sys.executable, "-m", "harness.cell.context_parallel.worker", str(Path(tmp) / "job.json")],
                                  env={**env, "RANK": str(r)}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                 for r in range(cp.degree)]
        deadline = time.monotonic() + DISTRIBUTED_TIMEOUT_S
        errs = []
        for r, p in enumerate(procs):
            try:
                _, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                raise RuntimeError(f"distributed CP rank {r} timed out after {DISTRIBUTED_TIMEOUT_S:.0f} s") from None
            if p.returncode:
                errs.append(f"rank {r} exit {p.returncode}: {err.decode(errors='replace').strip().splitlines()[-1:]}")
        if errs:
            raise RuntimeError("; ".join(errs))
        res = torch.load(Path(tmp) / "result.pt", map_location=device)
        infos = [i for r in range(cp.degree) for i in json.loads((Path(tmp) / f"info{r}.json").read_text())]
    return {c: (res[c][0], res[c][1]) for c in combines}, infos


def run_cp_cell(cell: Any, case_data: Any, suite: Any, opts: Any) -> Any:
    """The row of one CP cell (called by ``harness.cell.run.run_cell`` for cases with ``context_parallel``)."""

    draft = base_row(cell, suite, opts)
    batch = case_data.batch
    cfg, case, cp = batch.config, cell.case, cell.case.context_parallel
    draft.batch = BatchSummary.model_validate(batch.summary())
    draft.layout = RowLayout.model_validate(case_data.layout.as_dict())
    sw = Stopwatch(opts.device)
    reason = cp_unsupported_reason(cell.backend, cell.variant, case)
    if reason:
        draft.mark(Status.UNSUPPORTED, reason)
        return draft.finish(opts.check)
    if cp.ranks == "distributed" and opts.device.type == "cuda" and torch.cuda.device_count() < cp.degree:
        draft.mark(Status.SKIPPED, f"distributed CP ranks need {cp.degree} GPUs (one per rank), this machine has "
                                   f"{torch.cuda.device_count()}")
        return draft.finish(opts.check)

    combines = [cp.combine, OTHER.get(cp.combine, "ag_rs")]
    try:
        try:
            if cp.ranks == "distributed":
                merged, infos = distributed_forward(backend_spec(cell.backend), cell.variant, case, combines, opts.device)
            else:
                merged, infos = simulated_forward(cell.backend, cell.variant, batch, cp.degree, cp.sharding, cp.tp_size,
                                                  combines, opts.device)
        except CellUnsupported as e:
            draft.mark(Status.UNSUPPORTED, str(e))
            return draft.finish(opts.check)
        sw.lap("first_call")
        first: dict[str, Any] = next((i["call"] for i in infos if i["call"]), {})
        draft.call = Call.model_validate({**first, "context_parallel": {
            "degree": cp.degree, "combine": cp.combine, "sharding": cp.sharding, "ranks": cp.ranks,
            "tp_size": cp.tp_size, "lse_base": str(cell.backend.capabilities(cell.variant).lse_base),
            "empty_shards": sum(i["empty_shards"] for i in infos), "empty_rows": sum(i["empty_rows"] for i in infos),
            "rank_kv_tokens": [i["kv_tokens"] for i in infos]}})
        host = {"build_ms": sum(i["build_ms"] for i in infos), "first_call_ms": sum(i["first_call_ms"] for i in infos)}
        if opts.check and case_data.ref_out is not None:
            out, lse = merged[cp.combine]
            tol = tolerance_for(cfg.dtype, cfg.kv_cache_dtype)
            result = check_output(out.to(cfg.torch_dtype), case_data.ref_out, tol, lse, case_data.ref_lse,
                                  query_start_loc=batch.query_start_loc, kinds=batch.kinds, seq_lens=batch.seq_lens)
            draft.check = result
            if not result.passed:
                draft.mark(Status.MISMATCH, result.message)
            inv = []
            o_main = out.to(cfg.torch_dtype)
            ok, detail = agree(o_main, merged[combines[1]][0].to(cfg.torch_dtype), batch)
            inv.append(InvariantResult(invariant="cp-combine", status=Status.PASS if ok else Status.MISMATCH,
                                       detail=f"{cp.combine} vs {combines[1]}: {detail}"))
            one, _ = simulated_forward(cell.backend, cell.variant, batch, 1, cp.sharding, cp.tp_size, [cp.combine],
                                       opts.device)
            ok, detail = agree(o_main, one[cp.combine][0].to(cfg.torch_dtype), batch)
            inv.append(InvariantResult(invariant="cp-degree", status=Status.PASS if ok else Status.MISMATCH,
                                       detail=f"degree {cp.degree} vs 1: {detail}"))
            result.invariants = inv
            broken = [r for r in inv if r.status != Status.PASS]
            if broken:
                draft.mismatch(f"invariant {broken[0].invariant}: {broken[0].detail}")
            sw.lap("check")
        if opts.time:
            draft.timing_skipped = "context-parallel cell: checked, not timed (its ranks run one after another)"
    except Exception as e:  # a backend or a rank that fails costs only this cell
        draft.call = None
        draft.mark(Status.ERROR, f"context parallel: {short_error(e)}")
        draft.traceback = traceback.format_exc(limit=8)
        host = {}
    draft.host = Host.model_validate({**host, **breakdown(sw, case_data)})
    return draft.finish(opts.check)
