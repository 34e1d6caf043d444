"""Real serving traces: readers (Azure CSV, Mooncake JSONL), selection, and a deterministic
vLLM-v1-style continuous-batching scheduler model that turns requests into per-step batches."""
from harness.spec.trace.readers import TraceError, TraceRequest, read_trace, select
from harness.spec.trace.scheduler import SchedulerParams, Step, StepRequest, simulate

__all__ = ["TraceError", "TraceRequest", "read_trace", "select",
           "SchedulerParams", "Step", "StepRequest", "simulate"]
