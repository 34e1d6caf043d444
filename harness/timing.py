"""Timing a forward call the same way for every backend (method: docs/measurement.md).

GPU: after a warm-up, each sample is one CUDA-graph replay (N back-to-back calls, divided by N)
when the backend's declared CudaGraphSupport covers the batch, else N eager calls; CUDA events
bracket the work, and a spin kernel queued ahead of them holds the stream until the host has
enqueued everything, so host launch cost stays out of the kernel time (it is reported apart as
``host_enqueue_us``). Cold mode reads a buffer twice the L2 size before every sample (outside
the events) and runs one call per sample; a probe checks once per device which flush method
really evicts on this device, cold mode uses a verified one, and every cold row says which
method ran and whether it was verified (``cold_l2``, ``cold_check``).
CPU: the same loop on the wall clock, no graphs, no flush.

Sampling stops by a pure rule (``stop_reason``): the relative half-width of the median's
confidence interval under a target, or the sample cap, or the time budget.
"""

from __future__ import annotations

import bisect
import math
import statistics
import subprocess
import time
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from typing import Any, Callable, Sequence

import torch

from attn_contract import CudaGraphSupport

MODES = ("hot", "cold")
FLUSH_METHODS = ("auto", "read", "write")  # auto: the method the probe verifies here (read preferred)
COLD_PROBE_MIN_RATIO = 1.2  # a probe read after the flush must be this much slower than a hot one


@dataclass
class TimingOptions:
    warmup: int = 3
    min_samples: int = 10
    max_samples: int = 500
    target_rel_noise: float = 0.01  # relative half-width of the median's CI
    max_time_s: float = 2.0  # sampling budget per cell (warm-up and capture not included)
    mode: str = "hot"  # "hot" (L2 as the previous call left it) or "cold" (flushed per sample)
    cuda_graph: bool = True  # use CUDA graphs where the backend allows them
    confidence: float = 0.95
    min_sample_us: float = 200.0  # hot mode batches calls per sample until a sample lasts this long
    max_calls_per_sample: int = 64
    hide_launch: bool = True  # hold the stream with a spin kernel while the host enqueues
    max_hold_ms: float = 50.0
    flush_method: str = "auto"  # cold mode: "auto" (probe both, use a verified one), "read" or "write"
    keep_raw: bool = False  # raw per-sample times in the row (off: keep rows small)

    @classmethod
    def for_device(cls, device: torch.device, **overrides: Any) -> "TimingOptions":
        """Defaults for the device (CPU: looser, shorter), then ``overrides`` (None = keep)."""
        if device.type == "cpu":
            base = cls(warmup=1, min_samples=3, max_samples=20, target_rel_noise=0.05, max_time_s=0.5)
        else:
            base = cls()
        given = {k: v for k, v in overrides.items() if v is not None}
        opts = replace(base, **given)
        # One bound given alone moves the other default out of its way.
        if "min_samples" in given and "max_samples" not in given and opts.max_samples < opts.min_samples:
            opts.max_samples = opts.min_samples
        if "max_samples" in given and "min_samples" not in given and opts.min_samples > opts.max_samples:
            opts.min_samples = opts.max_samples
        opts.validate()
        return opts

    def validate(self) -> None:
        """Raise ValueError with one clear message for settings that cannot work."""
        if self.mode not in MODES:
            raise ValueError(f"timing mode {self.mode!r}: expected one of {', '.join(MODES)}")
        if self.flush_method not in FLUSH_METHODS:
            raise ValueError(f"flush method {self.flush_method!r}: expected one of {', '.join(FLUSH_METHODS)}")
        if not 0 < self.target_rel_noise < 1:
            raise ValueError(f"target noise {self.target_rel_noise}: expected a fraction in (0, 1), e.g. 0.01 for 1%")
        if self.min_samples < 1:
            raise ValueError(f"min samples {self.min_samples}: must be at least 1")
        if self.max_samples < self.min_samples:
            raise ValueError(f"max samples {self.max_samples} is below min samples {self.min_samples}")
        if not self.max_time_s > 0:
            raise ValueError(f"max time {self.max_time_s}: must be positive seconds")
        if self.warmup < 0:
            raise ValueError(f"warm-up {self.warmup}: must not be negative")
        if not 0 < self.confidence < 1:
            raise ValueError(f"confidence {self.confidence}: expected a fraction in (0, 1)")
        if self.max_calls_per_sample < 1:
            raise ValueError("max_calls_per_sample must be at least 1")


# ---------------------------------------------------------------------------- statistics
@lru_cache(maxsize=8192)
def median_ci_ranks(n: int, confidence: float = 0.95) -> tuple[int, int, float]:
    """0-based order-statistic indices (lo, hi) of a distribution-free CI of the median, and
    its exact coverage.

    With B ~ Binomial(n, 1/2), the interval [x_(l), x_(n+1-l)] (1-based) covers the true median
    with probability 1 - 2 P(B <= l-1); l is the largest rank keeping that >= ``confidence``.
    When even [min, max] falls short (n < 6 at 95%), that is returned with its lower coverage.
    """
    if n < 1:
        raise ValueError("no samples")
    half_alpha = (1.0 - confidence) / 2
    log_half_n = n * math.log(0.5)
    lgn = math.lgamma(n + 1)
    cum = 0.0
    k = -1  # largest k with P(B <= k) <= alpha/2
    cum_at_k = 0.0
    for j in range(0, n // 2 + 1):
        cum += math.exp(lgn - math.lgamma(j + 1) - math.lgamma(n - j + 1) + log_half_n)
        if cum > half_alpha:
            break
        k, cum_at_k = j, cum
    if k < 0:
        return 0, n - 1, max(0.0, 1.0 - 2.0 * math.exp(log_half_n))
    return k, n - 1 - k, 1.0 - 2.0 * cum_at_k


def median_ci(samples: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """Distribution-free confidence interval of the median (order statistics)."""
    s = sorted(samples)
    lo, hi, _ = median_ci_ranks(len(s), confidence)
    return s[lo], s[hi]


def rel_ci_half_width(samples: Sequence[float], confidence: float = 0.95) -> float:
    """Half the width of the median's CI over the median: the noise the stopping rule targets."""
    s = sorted(samples)
    lo, hi, _ = median_ci_ranks(len(s), confidence)
    med = statistics.median(s)
    return (s[hi] - s[lo]) / (2 * abs(med)) if med else 0.0


def summarize(samples_us: Sequence[float], confidence: float = 0.95) -> dict[str, Any]:
    """Median, min, max, mean, stdev, quartiles/IQR (linear interpolation, numpy's default) and
    the median's CI of per-call times in microseconds."""
    us = sorted(float(x) for x in samples_us)
    if not us:
        raise ValueError("no samples")
    n = len(us)
    lo, hi, coverage = median_ci_ranks(n, confidence)
    med = statistics.median(us)
    q1, _, q3 = statistics.quantiles(us, n=4, method="inclusive") if n >= 2 else (us[0], us[0], us[0])
    return {
        "median_us": med,
        "min_us": us[0],
        "max_us": us[-1],
        "mean_us": statistics.fmean(us),
        "stdev_us": statistics.stdev(us) if n > 1 else 0.0,
        "q1_us": q1,
        "q3_us": q3,
        "iqr_us": q3 - q1,
        "ci_low_us": us[lo],
        "ci_high_us": us[hi],
        "ci_coverage": coverage,
        "rel_ci_half_width": (us[hi] - us[lo]) / (2 * med) if med else 0.0,
        "samples": n,
    }


# ---------------------------------------------------------------------------- stopping rule
STOP_NOISE = "noise_target"
STOP_MAX_SAMPLES = "max_samples"
STOP_TIME = "time_budget"
MIN_SAMPLES_ON_TIMEOUT = 3  # the time budget never leaves fewer samples than this


def stop_reason(samples: Sequence[float], elapsed_s: float, opts: TimingOptions) -> str | None:
    """Why sampling should stop now, or None to take another sample. Pure: the loop feeds it
    the samples so far and the seconds spent sampling.

    Order: the sample cap; the noise target once ``min_samples`` are in and the median's CI
    reaches its confidence; the time budget (which may stop below ``min_samples``, but never
    below 3 samples, or ``min_samples`` if that is smaller).
    """
    n = len(samples)
    if n >= opts.max_samples:
        return STOP_MAX_SAMPLES
    # The noise target counts only once the CI reaches its confidence (n >= 6 at 95%).
    if (n >= opts.min_samples and median_ci_ranks(n, opts.confidence)[2] >= opts.confidence
            and rel_ci_half_width(samples, opts.confidence) <= opts.target_rel_noise):
        return STOP_NOISE
    if elapsed_s >= opts.max_time_s and n >= min(MIN_SAMPLES_ON_TIMEOUT, opts.min_samples):
        return STOP_TIME
    return None


def describe_stop(reason: str, summary: dict[str, Any], opts: TimingOptions) -> str:
    noise = summary["rel_ci_half_width"]
    n = summary["samples"]
    if reason == STOP_NOISE:
        return f"noise {noise:.2%} <= target {opts.target_rel_noise:.2%} after {n} samples"
    if reason == STOP_MAX_SAMPLES:
        return f"sample cap {opts.max_samples} reached; noise {noise:.2%} (target {opts.target_rel_noise:.2%})"
    extra = f", below min samples {opts.min_samples}" if n < opts.min_samples else ""
    return (f"time budget {opts.max_time_s:g} s spent after {n} samples{extra}; "
            f"noise {noise:.2%} (target {opts.target_rel_noise:.2%})")


# ---------------------------------------------------------------------------- CUDA graph eligibility
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


def calls_per_sample(est_call_us: float, opts: TimingOptions) -> int:
    """Hot mode: enough back-to-back calls that a sample lasts ``min_sample_us`` (event
    resolution and launch gaps amortized). Cold mode: one call, right after the flush."""
    if opts.mode == "cold":
        return 1
    if not est_call_us > 0:
        return opts.max_calls_per_sample
    return max(1, min(opts.max_calls_per_sample, math.ceil(opts.min_sample_us / est_call_us)))


# ---------------------------------------------------------------------------- device helpers
def _short(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0] if lines else ''}"[:300]


def _nvidia_smi_id(device: torch.device) -> str:
    idx = device.index if device.index is not None else torch.cuda.current_device()
    p = torch.cuda.get_device_properties(idx)
    bus = getattr(p, "pci_bus_id", None)
    if bus is None:
        return str(idx)
    # The PCI address names the same GPU whatever CUDA_VISIBLE_DEVICES does to indices.
    return f"{getattr(p, 'pci_domain_id', 0):08X}:{bus:02X}:{getattr(p, 'pci_device_id', 0):02X}.0"


def sm_clock_mhz(device: torch.device) -> tuple[float | None, str]:
    """Current SM clock in MHz and where it came from (NVML via torch, else nvidia-smi)."""
    try:
        return float(torch.cuda.clock_rate(device)), "nvml"
    except Exception:
        pass
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm", "--format=csv,noheader,nounits",
                              f"--id={_nvidia_smi_id(device)}"], capture_output=True, text=True, timeout=10)
        return float(out.stdout.strip().splitlines()[0]), "nvidia-smi"
    except Exception as e:
        return None, f"unavailable ({_short(e)})"


def l2_bytes(device: torch.device) -> int:
    idx = device.index if device.index is not None else torch.cuda.current_device()
    return int(getattr(torch.cuda.get_device_properties(idx), "L2_cache_size", 0) or 0)


class L2Flusher:
    """Evicts the L2 by streaming a buffer twice its size (read: sum it; write: zero it).

    Read is preferred: a write flush leaves the L2 full of dirty lines whose write-back would
    land inside the next timed call. So the write flush here is followed by a drain: a read
    pass over the first L2-size of the same buffer (already written back to DRAM by the second
    half's writes), which evicts the second half's dirty lines and so makes their write-back
    happen now, outside the timed region; what it leaves in the L2 are clean lines of the flush
    buffer, which cost the timed call nothing to evict. The drain cannot bring the evicted data
    back, so it cannot make the flush less cold; the probe times the whole sequence. Then a
    synchronize: the hold and the start event are enqueued only once the flush and the drain
    have finished on the device (stream order already guarantees it; the synchronize also
    keeps the flush's host wait out of the sample's host-enqueue measurement)."""

    def __init__(self, device: torch.device, method: str = "read"):
        if method not in ("read", "write"):
            raise ValueError(f"flush method {method!r}: expected read or write (auto is resolved by select_flush)")
        l2 = l2_bytes(device)
        self.device = device
        self.nbytes = max(2 * l2, 64 << 20) if l2 else 256 << 20
        self.method = method
        self.buf = torch.zeros(self.nbytes // 4, dtype=torch.float32, device=device)
        self.drain = self.buf[: max(1, (l2 or self.nbytes // 2) // 4)]
        self.sink = torch.zeros((), dtype=torch.float32, device=device)
        self.count = 0

    def flush(self) -> None:
        if self.method == "read":
            torch.sum(self.buf, dim=0, out=self.sink)
        else:
            self.buf.zero_()
            torch.sum(self.drain, dim=0, out=self.sink)  # write dirty lines back now (see above)
            torch.cuda.synchronize(self.device)
        self.count += 1

    def describe(self) -> str:
        if self.method == "write":
            return (f"write {self.nbytes / 2**20:.0f} MiB + read-drain {self.drain.numel() * 4 / 2**20:.0f} MiB "
                    "+ synchronize before each sample")
        return f"{self.method} {self.nbytes / 2**20:.0f} MiB before each sample"


class _EventSampler:
    """One timed sample: [flush] [hold] start-event work end-event; GPU ms of the work, and
    whether the hold (a spin kernel) outlasted the host enqueue, i.e. launch cost was hidden."""

    def __init__(self, device: torch.device):
        self.device = device
        self.e_hold = torch.cuda.Event(enable_timing=True)
        self.e0 = torch.cuda.Event(enable_timing=True)
        self.e1 = torch.cuda.Event(enable_timing=True)
        self.can_hold = hasattr(torch.cuda, "_sleep")

    def sample(self, work: Callable[[], None], hold_cycles: int, flusher: L2Flusher | None = None
               ) -> tuple[float, bool | None, float | None, float]:
        """(gpu seconds, launch hidden?, SM MHz during the hold, host enqueue seconds)."""
        if flusher is not None:
            flusher.flush()
        hold = hold_cycles > 0 and self.can_hold
        t0 = time.perf_counter()
        if hold:
            self.e_hold.record()
            torch.cuda._sleep(hold_cycles)
        self.e0.record()
        work()
        self.e1.record()
        host_s = time.perf_counter() - t0
        self.e1.synchronize()
        gpu_s = self.e0.elapsed_time(self.e1) / 1e3
        if not hold:
            return gpu_s, None, None, host_s
        hold_s = self.e_hold.elapsed_time(self.e0) / 1e3
        mhz = hold_cycles / (hold_s * 1e6) if hold_s > 0 else None
        return gpu_s, host_s <= hold_s, mhz, host_s


_CYCLES_PER_US: dict[int, float] = {}


def _cycles_per_us(device: torch.device) -> float:
    """SM cycles per microsecond from a timed spin kernel (cached per device)."""
    idx = device.index if device.index is not None else torch.cuda.current_device()
    if idx not in _CYCLES_PER_US:
        torch.cuda._sleep(1000)
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        cycles = 5_000_000
        a.record()
        torch.cuda._sleep(cycles)
        b.record()
        b.synchronize()
        _CYCLES_PER_US[idx] = cycles / (a.elapsed_time(b) * 1e3)
    return _CYCLES_PER_US[idx]


_COLD_CHECK: dict[tuple[int, str], dict[str, Any]] = {}


def verify_cold_l2(device: torch.device, method: str = "read", reps: int = 15) -> dict[str, Any]:
    """Check that the flush really evicts (cf. flashinfer#4468, where a 'cold' mode measured a
    warm L2): time a read of a probe of half the L2 right after reading it (hot) and right after
    a flush (cold). Cold must be clearly slower. Cached per device and method."""
    idx = device.index if device.index is not None else torch.cuda.current_device()
    key = (idx, method)
    if key in _COLD_CHECK:
        return _COLD_CHECK[key]
    l2 = l2_bytes(device)
    if not l2:
        _COLD_CHECK[key] = {"method": method, "verified": False, "reason": "L2 size unknown: cannot size the probe"}
        return _COLD_CHECK[key]
    flusher = L2Flusher(device, method)
    probe = torch.ones(l2 // 2 // 4, dtype=torch.float32, device=device)
    sink = torch.zeros((), dtype=torch.float32, device=device)
    sampler = _EventSampler(device)
    hold = int(_cycles_per_us(device) * 50) if sampler.can_hold else 0

    def read() -> None:
        torch.sum(probe, dim=0, out=sink)

    hot, cold = [], []
    for _ in range(reps):
        read()  # leaves the probe in L2
        hot.append(sampler.sample(read, hold)[0])
        cold.append(sampler.sample(read, hold, flusher)[0])
    h, c = statistics.median(hot), statistics.median(cold)
    ratio = c / h if h > 0 else 0.0
    res = {
        "method": method,
        "flush": flusher.describe(),
        "verified": ratio >= COLD_PROBE_MIN_RATIO,
        "probe_mib": round(probe.numel() * 4 / 2**20, 1),
        "hot_us": h * 1e6,
        "cold_us": c * 1e6,
        "ratio": ratio,
        "min_ratio": COLD_PROBE_MIN_RATIO,
        "hot_tbps": probe.numel() * 4 / h / 1e12 if h > 0 else None,
        "cold_tbps": probe.numel() * 4 / c / 1e12 if c > 0 else None,
    }
    if not res["verified"]:
        res["reason"] = (f"probe read after the flush ({c * 1e6:.2f} us) is not {COLD_PROBE_MIN_RATIO}x slower "
                         f"than a hot read ({h * 1e6:.2f} us): the flush may not evict the L2")
    del flusher, probe
    _COLD_CHECK[key] = res
    return res


_FLUSH_CHOICE: dict[tuple[int, str], dict[str, Any]] = {}


def select_flush(device: torch.device, requested: str = "auto") -> dict[str, Any]:
    """The flush method cold mode uses on this device, and whether the probe verified it
    (cached per device and request). ``auto`` probes both methods and takes read if it
    verifies (it keeps write-back out of the timed region), else write (with its drain), else
    the one with the larger probe ratio, marked not verified. An explicit method is used as
    asked, with its own probe result. Never silent: the result goes into every cold row."""
    if requested not in FLUSH_METHODS:
        raise ValueError(f"flush method {requested!r}: expected one of {', '.join(FLUSH_METHODS)}")
    idx = device.index if device.index is not None else torch.cuda.current_device()
    key = (idx, requested)
    if key in _FLUSH_CHOICE:
        return _FLUSH_CHOICE[key]
    methods = ("read", "write") if requested == "auto" else (requested,)
    probes = {m: verify_cold_l2(device, m) for m in methods}
    verified = [m for m in methods if probes[m]["verified"]]
    if requested != "auto":
        method = requested
        why = "asked for"
    elif verified:
        method = verified[0]
        why = ("read verified" if method == "read" else
               f"read flush not verified (ratio {probes['read'].get('ratio', 0):.2f}), write flush verified")
    else:
        method = max(methods, key=lambda m: probes[m].get("ratio", 0.0))
        why = "neither flush verified; using the one with the larger probe ratio"
    chosen = probes[method]
    res = {
        "method": method,
        "requested": requested,
        "verified": bool(chosen["verified"]),
        "selection": why,
        **{k: v for k, v in chosen.items() if k != "verified"},
        "probes": probes,
    }
    if not res["verified"]:
        res["reason"] = f"cold NOT verified: {chosen.get('reason', 'probe failed')}"
    _FLUSH_CHOICE[key] = res
    return res


def cold_l2_label(check: dict[str, Any]) -> str:
    """One line for a cold row: the flush method and whether the probe verified it."""
    ratio = check.get("ratio")
    r = f", probe ratio {ratio:.2f} >= {check.get('min_ratio', COLD_PROBE_MIN_RATIO)}" if ratio else ""
    if check["verified"]:
        return f"verified ({check['method']} flush{r})"
    r = f", probe ratio {ratio:.2f} < {check.get('min_ratio', COLD_PROBE_MIN_RATIO)}" if ratio else ""
    return f"not verified ({check['method']} flush{r}; {check.get('selection', '')})"


def _capture_graph(fn: Callable[[], object], calls: int, device: torch.device) -> torch.cuda.CUDAGraph:
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


def _replay_matches(g: torch.cuda.CUDAGraph, output: torch.Tensor, device: torch.device) -> str | None:
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


# ---------------------------------------------------------------------------- the timing loop
def time_callable(
    fn: Callable[[], object],
    device: torch.device,
    opts: TimingOptions,
    *,
    graph: GraphDecision | None = None,
    output: torch.Tensor | None = None,
) -> dict[str, Any]:
    """Time ``fn`` (which launches one forward) and return per-call statistics in microseconds
    plus how they were measured. ``graph`` says whether a CUDA graph may be used (see
    ``graph_decision``); ``output`` (the tensor ``fn`` writes) lets a replay be checked."""
    opts.validate()
    if device.type != "cuda":
        return _time_cpu(fn, opts)
    with torch.cuda.device(device):
        return _time_cuda(fn, device, opts, graph or GraphDecision(False, "no graph decision given"), output)


def _loop(take: Callable[[], float | None], opts: TimingOptions) -> tuple[list[float], str, float]:
    samples: list[float] = []
    sorted_s: list[float] = []
    start = time.perf_counter()
    while True:
        x = take()
        if x is None:  # sample rejected (launch not hidden yet); the clock keeps running
            if time.perf_counter() - start > opts.max_time_s and samples:
                return samples, STOP_TIME, time.perf_counter() - start
            continue
        samples.append(x)
        bisect.insort(sorted_s, x)
        elapsed = time.perf_counter() - start
        reason = stop_reason(sorted_s, elapsed, opts)
        if reason:
            return samples, reason, elapsed


def _finish(samples_s: list[float], reason: str, elapsed: float, opts: TimingOptions) -> dict[str, Any]:
    us = [x * 1e6 for x in samples_s]
    out = summarize(us, opts.confidence)
    out["stop_reason"] = reason
    out["stop"] = describe_stop(reason, out, opts)
    out["target_rel_noise"] = opts.target_rel_noise
    out["sampling_s"] = elapsed
    if opts.keep_raw:
        out["raw_us"] = us
    return out


def _time_cpu(fn: Callable[[], object], opts: TimingOptions) -> dict[str, Any]:
    for _ in range(opts.warmup):
        fn()

    def take() -> float:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    samples, reason, elapsed = _loop(take, opts)
    out = _finish(samples, reason, elapsed, opts)
    out.update(
        method="wall_clock",
        mode=opts.mode,
        l2="n/a on CPU",
        cuda_graph={"used": False, "reason": "n/a on CPU"},
        calls_per_sample=1,
        sm_clock_mhz=None,
        options=asdict(opts),
    )
    return out


def _time_cuda(fn: Callable[[], object], device: torch.device, opts: TimingOptions, decision: GraphDecision,
               output: torch.Tensor | None) -> dict[str, Any]:
    cold = opts.mode == "cold"
    sampler = _EventSampler(device)
    for _ in range(opts.warmup):
        fn()
    torch.cuda.synchronize(device)

    # Host cost of enqueueing one call (the GPU is idle, so nothing waits on it).
    host = []
    for _ in range(3):
        t0 = time.perf_counter()
        fn()
        host.append(time.perf_counter() - t0)
        torch.cuda.synchronize(device)
    host_call_s = statistics.median(host)
    cyc_per_us = _cycles_per_us(device) if (opts.hide_launch and sampler.can_hold) else 0.0

    def hold_for(host_s: float) -> int:
        us = min(opts.max_hold_ms * 1e3, 2.0 * host_s * 1e6 + 20.0)
        return int(us * cyc_per_us)

    # Rough GPU time of one call picks how many calls a sample holds.
    est = statistics.median(sampler.sample(fn, hold_for(host_call_s))[0] for _ in range(3))
    k = calls_per_sample(est * 1e6, opts)

    graph_info: dict[str, Any] = {"used": False, "reason": decision.reason, "required": decision.required,
                                  "declared": decision.declared}
    work: Callable[[], None]
    enqueue_s = host_call_s * k
    if decision.use:
        try:
            g = _capture_graph(fn, k, device)
            bad = _replay_matches(g, output, device) if output is not None else None
            if bad:
                graph_info["reason"] = f"{bad}: timed eagerly"
            else:
                graph_info.update(used=True, reason="", calls_per_replay=k)
                work = g.replay
                t0 = time.perf_counter()
                g.replay()
                enqueue_s = time.perf_counter() - t0
                torch.cuda.synchronize(device)
        except Exception as e:  # capture is the backend's promise; a broken one costs only the graph
            try:
                torch.cuda.synchronize(device)
            except Exception:
                pass
            graph_info["reason"] = f"capture failed: {_short(e)}; timed eagerly"
    if not graph_info["used"]:
        def work() -> None:
            for _ in range(k):
                fn()

    cold_check = select_flush(device, opts.flush_method) if cold else None
    flusher = L2Flusher(device, cold_check["method"]) if cold_check else None
    clock_before = sm_clock_mhz(device)
    state = {"hold": hold_for(enqueue_s), "raises": 0, "hidden": 0, "unhidden": 0}
    clocks: list[float] = []
    max_hold = int(opts.max_hold_ms * 1e3 * cyc_per_us)

    def take() -> float | None:
        gpu_s, hidden, mhz, host_s = sampler.sample(work, state["hold"], flusher)
        if mhz:
            clocks.append(mhz)
        if hidden is False and state["raises"] < 3 and state["hold"] < max_hold:
            # Host enqueue outlasted the hold: lengthen it and retake the sample.
            state["raises"] += 1
            state["hold"] = hold_for(host_s * 2)
            return None
        if hidden:
            state["hidden"] += 1
        else:  # not held, or held too briefly (e.g. the forward waits on the GPU itself)
            state["unhidden"] += 1
        return gpu_s / k

    samples, reason, elapsed = _loop(take, opts)
    clock_after = sm_clock_mhz(device)
    out = _finish(samples, reason, elapsed, opts)
    n_hold = state["hidden"] + state["unhidden"]
    q = max(1, len(clocks) // 4)
    during_first = statistics.median(clocks[:q]) if clocks else None
    during_last = statistics.median(clocks[-q:]) if clocks else None
    throttled = None
    if during_first and during_last:
        throttled = during_last < 0.95 * during_first
    elif clock_before[0] and clock_after[0]:
        throttled = clock_after[0] < 0.95 * clock_before[0]
    out.update(
        method="cuda_event",
        mode=opts.mode,
        l2=flusher.describe() if flusher else "hot (not flushed)",
        cuda_graph=graph_info,
        calls_per_sample=k,
        launch={
            "hidden_frac": state["hidden"] / n_hold if n_hold else None,
            "hold_us": state["hold"] / cyc_per_us if cyc_per_us else 0.0,
            "note": "" if cyc_per_us else "no spin kernel (torch.cuda._sleep): launch not hidden",
        },
        host_enqueue_us=host_call_s * 1e6,
        sm_clock_mhz={
            "before": clock_before[0],
            "after": clock_after[0],
            "source": clock_before[1],
            "during_first": during_first,
            "during_last": during_last,
            "throttled": throttled,
        },
        options=asdict(opts),
    )
    if flusher is not None:
        if flusher.count < len(samples):
            raise RuntimeError(f"cold mode: {flusher.count} flushes for {len(samples)} samples")
        out["cold_check"] = cold_check
        out["cold_l2"] = cold_l2_label(cold_check)  # e.g. "verified (write flush, ...)" / "not verified (...)"
    return out
