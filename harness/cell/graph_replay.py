"""The graph-mode axis of a cell (suites with ``graph_modes: true``, docs/spec_decode.md).

Two things an engine does with a CUDA graph that a single timed replay of one batch does not:

1. **Replay with metadata updated in place.** vLLM captures one graph per padded batch size and
   replays it for many steps; between steps the builder rebuilds the metadata and copies it into
   the buffers the graph captured. Here the cell's own batch is the capture shape (the largest:
   every request group keeps its longest context), and each replay step is a new batch of the
   same requests and query lengths with shorter contexts (the longest of each group kept, so
   buffers keep their shapes) and new drafts (new q/k/v): the cell's builder rebuilds the
   metadata, ``refresh_in_place`` copies every tensor of it into the captured metadata's
   tensors (and sets the host fields), the new inputs are copied into the captured inputs and KV
   cache, the graph is replayed and its output compared per request with the new batch's
   reference. A backend whose plan is baked at capture (host state, a tensor the rebuild
   replaced instead of filling) replays the capture step's answer and fails. On a CPU, which
   cannot capture, the eager call on the same (in-place updated) metadata object stands for the
   replay: the same logic, and a backend that snapshots its plan on the first call is caught.
2. **The two timings an engine's mode chooses between**: the same call replayed from a graph
   (FULL) and launched eagerly back to back (PIECEWISE: attention runs eagerly between graphed
   pieces, paying its launches), in the same cell, so the piecewise overhead is measured.
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import Any, Callable

import torch

from attn_contract import decode_first_order
from harness.case.reference import reference_attention
from harness.case.workload import Batch, generate
from harness.cell.check import check_output, tolerance_for
from harness.records.graph_modes import GraphModes, GraphReplay, vllm_graph_mode
from harness.records.results import Recheck
from harness.spec.suite_model import Explicit

REPLAY_STEPS = 2
REPLAY_FRACTIONS = (0.5, 0.8)  # shorter contexts of the replay steps, as a fraction of the capture's
MODE_CALLS = 10  # most calls per timed graph / eager burst
MODE_REPS = 5
BURST_US = 2000.0  # a burst of about this long: fewer calls for a slow call (sdpa's padded batches)


class NotInPlace(Exception):
    """The rebuilt metadata cannot be copied into the captured one (a shape or type changed)."""


def refresh_in_place(dst: Any, src: Any, path: str = "metadata") -> None:
    """Copy ``src``'s values into ``dst`` without replacing any tensor ``dst`` holds: tensors
    are ``copy_``-ed (same shape and dtype required), dataclass fields, lists and dicts walked,
    host scalars set (a CUDA graph baked them at capture: a kernel that needs them to change is
    what the replay check catches). Other objects (a library's planned wrapper) are left alone:
    ``dst`` and ``src`` are the same object when the builder re-plans it."""
    if isinstance(dst, torch.Tensor):
        if not isinstance(src, torch.Tensor) or src.shape != dst.shape or src.dtype != dst.dtype:
            got = f"{tuple(src.shape)} {src.dtype}" if isinstance(src, torch.Tensor) else type(src).__name__
            raise NotInPlace(f"{path}: captured {tuple(dst.shape)} {dst.dtype}, rebuilt {got}")
        if src.data_ptr() != dst.data_ptr():
            dst.copy_(src)
        return
    if dst is src:
        return
    if dataclasses.is_dataclass(dst) and not isinstance(dst, type):
        if type(src) is not type(dst):
            raise NotInPlace(f"{path}: captured {type(dst).__name__}, rebuilt {type(src).__name__}")
        for f in dataclasses.fields(dst):
            a, b = getattr(dst, f.name), getattr(src, f.name)
            if _is_value(a) and _is_value(b):
                object.__setattr__(dst, f.name, b)
            else:
                refresh_in_place(a, b, f"{path}.{f.name}")
        return
    if isinstance(dst, list) and isinstance(src, list):
        if len(dst) != len(src):
            raise NotInPlace(f"{path}: captured {len(dst)} entries, rebuilt {len(src)}")
        for i, (a, b) in enumerate(zip(dst, src)):
            if _is_value(a) and _is_value(b):
                dst[i] = b
            else:
                refresh_in_place(a, b, f"{path}[{i}]")
        return
    if isinstance(dst, dict) and isinstance(src, dict):
        if set(dst) != set(src):
            raise NotInPlace(f"{path}: captured keys {sorted(map(str, dst))}, rebuilt {sorted(map(str, src))}")
        for k in dst:
            if _is_value(dst[k]) and _is_value(src[k]):
                dst[k] = src[k]
            else:
                refresh_in_place(dst[k], src[k], f"{path}[{k!r}]")
        return
    if _is_value(dst) and _is_value(src):
        return  # a host value of a container the caller sets
    if type(src) is not type(dst):
        raise NotInPlace(f"{path}: captured {type(dst).__name__}, rebuilt {type(src).__name__}")
    # Same type, another object (e.g. a library object the builder made anew): its state cannot be
    # copied generically; the replay shows whether the captured one still serves.


def own_tensors(obj: Any) -> Any:
    """A copy of a dataclass whose tensor fields are cloned (nothing else copied)."""
    return dataclasses.replace(obj, **{f.name: getattr(obj, f.name).clone() for f in dataclasses.fields(obj)
                                       if f.init and isinstance(getattr(obj, f.name), torch.Tensor)})


def _is_value(x: Any) -> bool:
    return x is None or isinstance(x, (bool, int, float, str, tuple, torch.dtype, torch.device))


# ---------------------------------------------------------------- replay batches
def replay_case(batch: Batch, step: int) -> Any:
    """The case of replay step ``step`` (``batch``: the cell's, in any order: the case's groups are
    read in batch order from its layout): the same requests and query lengths, each group's longest
    context kept (the capture shape) and the others shortened, a new seed (new drafts and KV)."""
    case, layout = batch.case, batch.layout
    assert layout is not None, "a generated batch carries its layout"
    frac = REPLAY_FRACTIONS[step % len(REPLAY_FRACTIONS)]
    groups = []
    start = 0
    for g in case.batch:
        ctx = list(layout.context_lens[start:start + g.count])
        q = list(layout.query_lens[start:start + g.count])
        start += g.count
        longest = max(range(len(ctx)), key=ctx.__getitem__)
        new_ctx = [c if i == longest else max(1, int(c * frac)) for i, c in enumerate(ctx)]
        if g.kind == "prefill":
            new = g.model_copy(update={"query_len": Explicit(dist="list", values=q)})
        else:
            new = g.model_copy(update={"query_len": Explicit(dist="list", values=q),
                                       "context_len": Explicit(dist="list", values=new_ctx)})
        groups.append(new)
    return case.model_copy(update={"batch": groups, "seed": (case.seed + 7919 * (step + 1)) % (2**31)})


_CACHE: dict[tuple, tuple[Batch, torch.Tensor]] = {}


def replay_batch(batch: Batch, step: int, device: torch.device) -> tuple[Batch, torch.Tensor]:
    """Replay step ``step``'s batch and its reference output, made once per case and shared by
    the case's cells (only the latest case is kept)."""
    key = (batch.case.name, batch.case.seed, step, str(device))
    if key not in _CACHE:
        if _CACHE and next(iter(_CACHE))[:2] != key[:2]:
            _CACHE.clear()
        b = generate(replay_case(batch, step), device)
        _CACHE[key] = (b, reference_attention(b)[0])
    return _CACHE[key]


def _view(batch: Batch, threshold: int | None) -> tuple[Batch, torch.Tensor | None]:
    if threshold is None:
        return batch, None
    view, index = batch.reordered(decode_first_order(batch.query_lens, threshold))
    return view, index


# ---------------------------------------------------------------- the replay check
def check_replays(prepared: Any, capture: Callable[[], Callable[[], None]], stand_in: str,
                  steps: int = REPLAY_STEPS) -> GraphReplay:
    """``capture()`` returns the replay (a captured graph's, or on a CPU the eager call); it is
    replayed after each step's metadata and inputs were copied into the captured ones, and every
    request checked."""
    cfg, dev = prepared.config, prepared.device
    view0 = prepared.view
    # The cell's metadata may hold the case's own tensors (its block table, shared by every cell
    # of the case): rebuild it on copies first, so the in-place updates touch this cell only, and
    # capture on the rebuilt one.
    prepared.metadata = prepared.builder.build(own_tensors(prepared.common))
    try:
        replay = capture()
    except Exception as e:  # the backend's capture promise broke: recorded, the row stays as checked
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        return GraphReplay(stand_in=stand_in, steps=0, passed=None,
                           note=f"capture failed: {type(e).__name__}: {str(e)[:200]}")
    per_step: list[dict[str, Any]] = []
    failed = ""
    for s in range(steps):
        batch, ref_out = replay_batch(view0, s, dev)
        view, index = _view(batch, prepared.caps.reorder_batch_threshold)
        if view.query.shape != view0.query.shape or view.key.shape != view0.key.shape:
            return GraphReplay(stand_in=stand_in, steps=s, passed=None, per_step=per_step,
                               note=f"step {s + 1}: the rebuilt inputs changed shape; not replayable in place")
        kv = prepared.backend.materialize_kv_cache(view.kv_cache, cfg.kv_layout)
        if kv.shape[0] > prepared.kv_cache.shape[0] or kv.shape[1:] != prepared.kv_cache.shape[1:]:
            return GraphReplay(stand_in=stand_in, steps=s, passed=None, per_step=per_step,
                               note=f"step {s + 1}: its KV cache {tuple(kv.shape)} does not fit the captured "
                                    f"{tuple(prepared.kv_cache.shape)}")
        md = prepared.builder.build(view.common_metadata())
        try:
            refresh_in_place(prepared.metadata, md)
        except NotInPlace as e:
            return GraphReplay(stand_in=stand_in, steps=s, passed=None, per_step=per_step,
                               note=f"step {s + 1}: metadata not replayable in place: {e}")
        v0 = prepared.view
        v0.query.copy_(view.query)
        v0.key.copy_(view.key)
        v0.value.copy_(view.value)
        prepared.kv_cache[: kv.shape[0]].copy_(kv)
        prepared.out.fill_(float("nan"))
        replay()
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        if index is not None:
            ref_out = ref_out[index]
        order = decode_first_order(batch.query_lens, prepared.caps.reorder_batch_threshold) \
            if prepared.caps.reorder_batch_threshold is not None else None
        chk = check_output(prepared.out, ref_out, tolerance_for(cfg.dtype, cfg.kv_cache_dtype),
                           query_start_loc=view.query_start_loc, kinds=view.kinds, seq_lens=view.seq_lens,
                           request_ids=order)
        per_step.append({"step": s + 1, "passed": chk.passed, "rel_l2_err": chk.rel_l2_err,
                         "num_failed_requests": chk.num_failed_requests,
                         "context_lens": ",".join(map(str, batch.context_lens[:8]))})
        if not chk.passed and not failed:
            failed = f"graph replay step {s + 1} (metadata updated in place): {chk.message}"
    return GraphReplay(stand_in=stand_in, steps=steps, passed=not failed, message=failed, per_step=per_step,
                       note=(f"{steps} replays of one {'captured graph' if stand_in == 'cuda_graph' else 'call'}; "
                             f"contexts x{'/'.join(map(str, REPLAY_FRACTIONS))} (each group's longest kept), "
                             "new drafts and KV each step"))


# ---------------------------------------------------------------- the two timings
def _events_us(work: Callable[[], None], calls: int, device: torch.device, reps: int) -> float:
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        work()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / calls)
    return statistics.median(times)


def time_modes(fn: Callable[[], None], graph: Any, calls: int, device: torch.device,
               reps: int = MODE_REPS) -> tuple[float, float | None]:
    """(eager per-call us, graph-replay per-call us or None): the same ``calls`` calls launched
    back to back (launch gaps included, as attention runs between piecewise graphs) and replayed
    from ``graph`` (captured on ``calls`` calls)."""

    def eager() -> None:
        for _ in range(calls):
            fn()

    eager()
    torch.cuda.synchronize(device)
    eager_us = _events_us(eager, calls, device, reps)
    full_us = None
    if graph is not None:
        graph.replay()
        torch.cuda.synchronize(device)
        full_us = _events_us(graph.replay, calls, device, reps)
    return eager_us, full_us


# ---------------------------------------------------------------- the stage
def graph_mode_stage(prepared: Any, draft: Any, time_it: bool) -> GraphModes:
    """The row's ``graph_modes``: vLLM's mode for this batch from the declared level, both timings
    on a GPU (``time_it``), and the in-place replay check (CUDA graph on a GPU, the eager call on
    a CPU). A failed replay check adds a recheck and marks the row a mismatch."""
    from harness.timing.graphs import capture_graph  # only here: the capture the timed rows use

    caps = prepared.caps
    declared = caps.cudagraph.name
    qlens = list(prepared.view.query_lens)
    engine = vllm_graph_mode(declared, qlens)
    decision = prepared.graph_decision()
    gm = GraphModes(declared=declared, declared_source=caps.cudagraph_source,
                    required=decision.required, engine=engine.mode, engine_reason=engine.reason,
                    cudagraph_mode=engine.cudagraph_mode)
    dev = prepared.device
    graph = None
    if dev.type == "cuda":
        calls, reps = MODE_CALLS, MODE_REPS
        if time_it:  # one call's time sizes the bursts: ~2 ms each, 2..10 calls, fewer bursts past 1 ms
            prepared.timed_call()
            one_us = _events_us(prepared.timed_call, 1, dev, 1)
            calls = max(2, min(MODE_CALLS, int(BURST_US / max(one_us, 1.0))))
            reps = MODE_REPS if one_us < 1000.0 else 3
        if decision.use:
            try:
                graph = capture_graph(prepared.timed_call, calls, dev)
            except Exception as e:  # a backend that cannot capture: no full time, its reason kept
                torch.cuda.synchronize(dev)
                gm.full_reason = f"capture failed: {type(e).__name__}: {str(e)[:200]}"
        else:
            gm.full_reason = decision.reason
        if time_it:
            eager_us, full_us = time_modes(prepared.timed_call, graph, calls, dev, reps)
            gm.eager_us, gm.full_us, gm.calls = eager_us, full_us, calls
            if full_us is not None:
                gm.piecewise_overhead_us = eager_us - full_us
            # The engine's mode: a full graph this cell could not capture leaves no effective time.
            gm.effective_us = (full_us if engine.mode == "full" else eager_us)
        if graph is not None:
            del graph  # its memory back before the replay check captures its own
            gm.replay = check_replays(prepared, lambda: capture_graph(prepared.timed_call, 1, dev).replay,
                                      "cuda_graph")
        else:
            gm.replay = GraphReplay(stand_in="cuda_graph", steps=0, passed=None,
                                    note=f"not replayed: {gm.full_reason or decision.reason}")
    else:
        gm.replay = check_replays(prepared, lambda: prepared.timed_call, "eager")
    if gm.replay is not None and gm.replay.passed is False:
        assert draft.check is not None
        draft.check.rechecks = [*(draft.check.rechecks or []),
                                Recheck(when="graph replay, metadata in place", passed=False,
                                        message=gm.replay.message, rel_l2_err=None, num_failed_requests=None)]
        draft.mismatch(gm.replay.message)
    return gm


