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
    # Warm up on a side stream first, as torch's graph docs require (lazy init, workspaces).
    s = torch.cuda.Stream(device)
    s.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()
    torch.cuda.current_stream(device).wait_stream(s)
    torch.cuda.synchronize(device)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    torch.cuda.synchronize(device)
    return g


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

