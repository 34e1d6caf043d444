"""Device probes and the event sampler: SM clock, L2 size, spin-kernel cycles per microsecond,
and one CUDA-event-timed sample with the launch held behind a spin kernel."""

from __future__ import annotations

import subprocess
import time
from typing import Callable, Protocol

import torch



class Flusher(Protocol):
    """What a sample needs of an L2 flusher (harness/timing/cold_l2.py's ``L2Flusher``, which
    imports this module: a protocol here keeps the two apart)."""

    def flush(self) -> None: ...


def short_reason(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0] if lines else ''}"[:300]


def device_index(device: torch.device) -> int:
    """The CUDA index of ``device`` (``cuda`` alone: the current device)."""
    return device.index if device.index is not None else torch.cuda.current_device()


def _nvidia_smi_id(device: torch.device) -> str:
    idx = device_index(device)
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
    except Exception:  # torch reads it through pynvml, which may not be installed
        pass
    # The driver's NVML directly: nvidia-smi below costs a process start, twice per timed cell.
    from harness.timing.energy import nvml_sm_clock_mhz

    mhz = nvml_sm_clock_mhz(device)
    if mhz is not None:
        return mhz, "nvml (libnvidia-ml)"
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm", "--format=csv,noheader,nounits",
                              f"--id={_nvidia_smi_id(device)}"], capture_output=True, text=True, timeout=10)
        return float(out.stdout.strip().splitlines()[0]), "nvidia-smi"
    except Exception as e:
        return None, f"unavailable ({short_reason(e)})"


def l2_bytes(device: torch.device) -> int:
    idx = device_index(device)
    return int(getattr(torch.cuda.get_device_properties(idx), "L2_cache_size", 0) or 0)



class EventSampler:
    """One timed sample: [flush] [hold] start-event work end-event; GPU ms of the work, and
    whether the hold (a spin kernel) outlasted the host enqueue, i.e. launch cost was hidden."""

    def __init__(self, device: torch.device):
        self.device = device
        self.e_hold = torch.cuda.Event(enable_timing=True)
        self.e0 = torch.cuda.Event(enable_timing=True)
        self.e1 = torch.cuda.Event(enable_timing=True)
        self.can_hold = hasattr(torch.cuda, "_sleep")

    def sample(self, work: Callable[[], object], hold_cycles: int,
               flusher: Flusher | None = None) -> tuple[float, bool | None, float | None, float]:
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


def cycles_per_us(device: torch.device) -> float:
    """SM cycles per microsecond from a timed spin kernel (cached per device)."""
    idx = device_index(device)
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
