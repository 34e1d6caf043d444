"""The CUDA-graph mode a serving engine runs a batch in, and the row payload that records it.

vLLM v1 (``CUDAGraphMode``, default ``FULL_AND_PIECEWISE`` since v0.11; read on v0.25.1, the release
docs/spec_decode.md cites) decides per batch between a FULL graph (attention replayed inside the
step's graph) and PIECEWISE (graphed pieces between which attention runs eagerly), from the least
``AttentionCGSupport`` of its attention backends (each backend here declares it as
``Capabilities.cudagraph`` with the vLLM source in ``cudagraph_source``):

- at start-up (``resolve_cudagraph_mode_and_sizes``, the downgrade vllm#49547 / vllm#49550 describe
  for FlashInfer's native decode): with speculative decoding
  (uniform decode query length ``1 + num_spec_tokens`` > 1) a backend below ``UNIFORM_BATCH``
  cannot take FULL decode graphs, and the whole run drops to PIECEWISE, plain decodes included;
  a backend declaring ``NEVER`` runs PIECEWISE too;
- per batch (``CudagraphDispatcher``): a uniform decode batch (every request
  ``uniform_decode_query_len`` tokens) runs FULL; a mixed batch (a prefill beside the decodes)
  runs PIECEWISE under ``FULL_AND_PIECEWISE`` (FULL only under ``cudagraph_mode=FULL`` with an
  ``ALWAYS`` backend); a batch over ``max_cudagraph_capture_size`` tokens (default 512) runs
  without graphs (``NONE``): attention is eager in all but FULL.

Pure data, no torch: readers (recommend, report) apply it to rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence

from pydantic import BaseModel, ConfigDict

LEVELS: tuple[str, ...] = ("NEVER", "UNIFORM_SINGLE_TOKEN_DECODE", "UNIFORM_BATCH", "ALWAYS")
VLLM_RELEASE = "vLLM v0.25.1"
VLLM_MAX_CAPTURE_TOKENS = 512  # vLLM's default max_cudagraph_capture_size
CUDAGRAPH_MODES = ("FULL_AND_PIECEWISE", "FULL", "PIECEWISE", "NONE")
EngineMode = Literal["full", "piecewise", "none"]


def level_rank(level: str) -> int:
    if level not in LEVELS:
        raise ValueError(f"unknown CUDA-graph support level {level!r}; expected one of {', '.join(LEVELS)}")
    return LEVELS.index(level)


@dataclass(frozen=True)
class EngineGraphMode:
    """What vLLM would run a batch under: ``full`` (attention inside the replayed graph),
    ``piecewise`` (attention eager between graphed pieces) or ``none`` (no graph)."""

    mode: EngineMode
    reason: str
    cudagraph_mode: str
    uniform_decode_query_len: int

    @property
    def attention_eager(self) -> bool:
        return self.mode != "full"


def uniform_decode_len(query_lens: Sequence[int], num_spec_tokens: int | None = None) -> int:
    """1 + num_spec_tokens: given, or the verify length of the batch's decodes (its shortest
    requests' query length, the decodes a mixed batch carries beside a longer prefill)."""
    if num_spec_tokens is not None:
        return 1 + int(num_spec_tokens)
    if not query_lens:
        raise ValueError("empty batch")
    return min(query_lens)


def vllm_graph_mode(declared: str, query_lens: Sequence[int], *, num_spec_tokens: int | None = None,
                    cudagraph_mode: str = "FULL_AND_PIECEWISE",
                    max_capture_tokens: int = VLLM_MAX_CAPTURE_TOKENS) -> EngineGraphMode:
    """The graph mode vLLM runs this batch in for a backend declaring ``declared`` (a level name)."""
    if cudagraph_mode not in CUDAGRAPH_MODES:
        raise ValueError(f"unknown cudagraph_mode {cudagraph_mode!r}; expected one of {', '.join(CUDAGRAPH_MODES)}")
    rank = level_rank(declared)
    uq = uniform_decode_len(query_lens, num_spec_tokens)
    mode = cudagraph_mode

    def out(m: EngineMode, why: str) -> EngineGraphMode:
        return EngineGraphMode(m, why, mode, uq)

    # Start-up resolution: what the backend's level lets the run keep.
    if mode in ("FULL_AND_PIECEWISE", "FULL"):
        if rank == 0:
            mode = "PIECEWISE"
        elif uq > 1 and rank < level_rank("UNIFORM_BATCH"):
            mode = "PIECEWISE"
    downgraded = mode != cudagraph_mode
    if mode == "NONE":
        return out("none", "cudagraph_mode NONE")
    tokens = sum(query_lens)
    if tokens > max_capture_tokens:
        return out("none", f"{tokens} tokens > max_cudagraph_capture_size {max_capture_tokens}: no graph")
    if mode == "PIECEWISE":
        why = (f"backend declares {declared}: vLLM drops {cudagraph_mode} to PIECEWISE"
               + (f" with speculative decoding (query {uq} per request needs UNIFORM_BATCH)" if uq > 1 and rank else "")
               if downgraded else "cudagraph_mode PIECEWISE")
        return out("piecewise", why)
    uniform = len(set(query_lens)) == 1 and query_lens[0] == uq
    if uniform:
        return out("full", f"uniform decode batch (query {uq} per request), backend declares {declared}")
    if mode == "FULL" and rank >= level_rank("ALWAYS"):
        return out("full", "mixed batch under cudagraph_mode FULL, backend declares ALWAYS")
    return out("piecewise", f"mixed batch: {mode} runs it piecewise (attention eager)")


class GraphReplay(BaseModel):
    """The check of graph replays with metadata rebuilt and copied in place between them."""

    model_config = ConfigDict(strict=True, extra="forbid")
    stand_in: str  # "cuda_graph" (captured once, replayed) or "eager" (the CPU: the call itself)
    steps: int  # replays checked
    passed: bool | None  # None: not run (``note`` says why)
    message: str = ""
    note: str = ""  # what was changed between replays, or why it did not run
    per_step: list[dict[str, float | int | str | bool | None]] = []


class GraphModes(BaseModel):
    """A row's graph-mode axis (suites with ``graph_modes: true``): the backend's declared level,
    the mode vLLM would run the batch in, the call timed both ways in the same cell, and the
    effective time of the engine's choice."""

    model_config = ConfigDict(strict=True, extra="forbid")
    declared: str
    declared_source: str = ""
    required: str = ""
    engine: EngineMode
    engine_reason: str
    cudagraph_mode: str = "FULL_AND_PIECEWISE"
    full_us: float | None = None  # per call, replayed from a CUDA graph of ``calls`` calls
    eager_us: float | None = None  # per call, launched back to back (launch gaps included)
    calls: int | None = None
    piecewise_overhead_us: float | None = None  # eager_us - full_us
    effective_us: float | None = None  # the engine's mode: full_us, else eager_us
    full_reason: str = ""  # why there is no full_us
    replay: GraphReplay | None = None
