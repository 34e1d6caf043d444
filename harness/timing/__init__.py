"""Timing a forward call the same way for every backend (method: docs/measurement.md).

GPU: after a warm-up, each sample is one CUDA-graph replay (N back-to-back calls, divided by N)
when the backend's declared CudaGraphSupport covers the batch, else N eager calls; CUDA events
bracket the work, and a spin kernel queued ahead of them holds the stream until the host has
enqueued everything, so host launch cost stays out of the kernel time (it is reported apart as
``host_enqueue_us``). Cold mode reads a buffer twice the L2 size before every sample (outside
the events) and runs one call per sample; a probe checks once per device which flush method
really evicts on this device, cold mode uses a verified one, and every cold row says which
method ran and whether it was verified (``cold_l2``, ``cold_check``).
Before every timed sample an untimed warm-up (``warm_calls``) puts the GPU in the state the
row's own previous sample would leave: hot, a copy of the sample's work, so the sample reads its
own data from L2 in any sampling order; cold, one call before the flush (code, not data).
CPU: the same loop on the wall clock, no graphs, no flush.

Sampling stops when the options' stopping criterion says so (``stopping``): by default the
relative half-width of the median's confidence interval under a target, or the sample cap, or
the time budget; the row records the criterion (``stop_criterion``) and why (``stop_reason``).

One module a job:
    options   TimingOptions and the device defaults
    stats     the median's CI and the per-row summary
    stopping  StoppingCriterion, the registered criteria, stop_reason/describe_stop
    graphs    CUDA-graph eligibility (GraphDecision), capture and replay check
    device    SM clock, L2 size, spin-kernel calibration, the CUDA-event sampler
    cold_l2   L2Flusher, the flush probe and the per-device flush choice
    loop      time_callable: warm-up, calls per sample, the sampling loop, the timing record;
              time_interleaved: several calls sampled in rounds
    clocks    the clock regimes (burst, sustained): NVML reader, throttle rule
    sustained the sustained regime's sampling: a queue kept full, samples once the state settled
    interleave  sample_rounds: candidates sampled A B C A B C in complete rounds, one stop per
              case; ranked from those rounds
"""

from harness.timing.cold_l2 import COLD_PROBE_MIN_RATIO, L2Flusher, cold_l2_label, select_flush, verify_cold_l2
from harness.timing.device import l2_bytes, sm_clock_mhz
from harness.timing.graphs import GraphDecision, graph_decision, required_graph_support
from harness.timing.clocks import REGIMES, ClockRead, ClockReader, nvml_reader
from harness.timing.interleave import rank_from_rounds, round_ratios, sample_rounds
from harness.timing.loop import calls_per_sample, time_callable, time_interleaved
from harness.timing.options import FLUSH_METHODS, MODES, TimingOptions
from harness.timing.stats import median_ci, median_ci_ranks, rel_ci_half_width, summarize
from harness.timing.stopping import (
    MIN_SAMPLES_ON_TIMEOUT,
    STOP_MAX_SAMPLES,
    STOP_NOISE,
    STOP_TIME,
    STOPPING_CRITERIA,
    NoiseCriterion,
    SampleCountCriterion,
    StoppingCriterion,
    TimeBudgetCriterion,
    criterion_for,
    describe_stop,
    register_criterion,
    stop_reason,
)

__all__ = [
    "REGIMES", "ClockRead", "ClockReader", "nvml_reader", "rank_from_rounds", "round_ratios", "sample_rounds",
    "time_interleaved",
    "COLD_PROBE_MIN_RATIO", "FLUSH_METHODS", "MIN_SAMPLES_ON_TIMEOUT", "MODES", "STOPPING_CRITERIA",
    "STOP_MAX_SAMPLES", "STOP_NOISE", "STOP_TIME", "GraphDecision", "L2Flusher", "NoiseCriterion",
    "SampleCountCriterion", "StoppingCriterion", "TimeBudgetCriterion", "TimingOptions", "calls_per_sample",
    "cold_l2_label", "criterion_for", "describe_stop", "graph_decision", "l2_bytes", "median_ci",
    "median_ci_ranks", "register_criterion", "rel_ci_half_width", "required_graph_support", "select_flush",
    "sm_clock_mhz", "stop_reason", "summarize", "time_callable", "verify_cold_l2",
]
