"""CUDA graphs: whether a backend's declared CudaGraphSupport covers a batch (recorded per row),
and capturing a graph of N calls whose replay is checked against the eager output."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from attn_contract import CudaGraphSupport


@dataclass(frozen=True)
class GraphDecision:
    use: bool
    reason: str  # why not ("" when used)
    required: str = ""
    declared: str = ""


def required_graph_support(query_lens: Sequence[int]) -> tuple[CudaGraphSupport, str]:
    """The least CudaGraphSupport level a backend needs to replay this batch, and its kind."""
    if not query_lens:
        raise ValueError("empty batch")
    if all(q == 1 for q in query_lens):
        return CudaGraphSupport.UNIFORM_SINGLE_TOKEN_DECODE, "decode batch (query_len 1)"
    if len(set(query_lens)) == 1:
        return CudaGraphSupport.UNIFORM_BATCH, f"uniform batch (query_len {query_lens[0]})"
    return CudaGraphSupport.ALWAYS, "mixed batch"


def graph_decision(
    declared: CudaGraphSupport,
    query_lens: Sequence[int],
    graph_safe_reason: str | None = None,
    *,
    enabled: bool = True,
    device_type: str = "cuda",
) -> GraphDecision:
    """Whether to time this cell from a CUDA graph, and if not, why not (recorded per row).
    ``graph_safe_reason`` is ``impl.graph_safe(metadata)``: None when the call may be captured."""
    needed, kind = required_graph_support(query_lens)
    declared = CudaGraphSupport(declared)
    common = {"required": needed.name, "declared": declared.name}
    if device_type != "cuda":
        return GraphDecision(False, f"n/a on {device_type}", **common)
    if not enabled:
        return GraphDecision(False, "disabled by --no-cuda-graph", **common)
    if declared == CudaGraphSupport.NEVER:
        return GraphDecision(False, "backend declares NEVER", **common)
    if declared < needed:
        return GraphDecision(False, f"{kind} needs {needed.name}, backend declares {declared.name}", **common)
    if graph_safe_reason:
        return GraphDecision(False, f"backend says not graph-safe: {graph_safe_reason}", **common)
    return GraphDecision(True, "", **common)



def capture_graph(fn: Callable[[], object], calls: int, device: torch.device) -> torch.cuda.CUDAGraph:
    """A CUDA graph of ``calls`` back-to-back calls of ``fn``, warmed up on a side stream first
    as torch's graph docs require (lazy init, workspaces). A capture that fails (a host sync
    inside ``fn``, an op capture does not allow, an error of ``fn``) raises, and leaves the
    process as it found it: see ``_recover``."""
    with torch.cuda.device(device):
        s = torch.cuda.Stream(device)
        s.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(s):
            for _ in range(2):
                fn()
        torch.cuda.current_stream(device).wait_stream(s)
        torch.cuda.synchronize(device)
        before = torch.cuda.current_stream(device)
        g = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(g):
                for _ in range(calls):
                    fn()
        except BaseException:
            _recover(g, before, device)
            raise
        torch.cuda.synchronize(device)
        return g


def _recover(g: torch.cuda.CUDAGraph, before: torch.cuda.Stream, device: torch.device) -> None:
    """Undo what a failed capture leaves behind in this process. When ``capture_end`` raises
    (cudaStreamEndCapture on a capture the failure invalidated), ``torch.cuda.graph`` skips
    the rest of its exit and torch skips the rest of ``capture_end``: the current stream stays
    the graph's capture stream, and the default CUDA generator, registered with every capture
    at its start, stays in capture mode. Every later random op outside a capture then raises
    "Offset increment outside graph capture encountered unexpectedly" (the GPU tests after
    test_capture_failure_falls_back_to_eager_and_says_why did, at their first torch.randn), and
    so does every replay of a graph captured before the failure (its replay advances the same
    generator state). Here: the stream is restored, a capture still open is ended, and a
    trivial capture runs to its end so the generator's own state leaves capture mode (swapping
    in a fresh generator state would leave the earlier graphs' state broken)."""
    torch.cuda.set_stream(before)
    capture_stream = torch.cuda.graph.default_capture_stream
    if capture_stream is not None:
        with torch.cuda.stream(capture_stream):
            if torch.cuda.is_current_stream_capturing():  # fn raised before the capture was ended
                try:
                    g.capture_end()
                except Exception:
                    pass  # ended; an invalidated capture has nothing to keep
    try:
        x = torch.zeros(1, device=device)
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        heal = torch.cuda.CUDAGraph()
        with torch.cuda.graph(heal, stream=side):
            x.add_(1)
        torch.cuda.synchronize(device)
    except Exception:
        pass  # a context broken beyond this (a sticky error) fails the next call on its own
    torch.cuda.set_stream(before)


def replay_matches(g: torch.cuda.CUDAGraph, output: torch.Tensor, device: torch.device) -> str | None:
    """Replay into a NaN-filled output and compare with the eager result: a graph that captured
    the wrong buffers or host state would leave NaNs or different numbers."""
    ref = output.detach().clone()
    output.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize(device)
    got = output.float()
    if torch.isnan(got).any() and not torch.isnan(ref.float()).any():
        return "graph replay left output elements unwritten"
    if not torch.allclose(got, ref.float(), rtol=1e-2, atol=1e-2, equal_nan=True):
        return "graph replay output differs from the eager output"
    return None

