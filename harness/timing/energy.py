"""Energy per call from the GPU's own counter (NVML ``nvmlDeviceGetTotalEnergyConsumption``:
millijoules since the driver loaded, Volta and newer).

The counter is read around the timing loop itself (``method: "timed_loop"``, device
synchronised before each read): J/call = dE / every call the loop made, mean power = dE / the
loop's span. No extra GPU time. The counter's unit is 1 mJ, but the driver refreshes it at a
coarse interval (on A100/H100 the board power behind it is sampled in ~100 ms periods, arXiv
2312.02741 "Part-time Power Measurements"), so a loop shorter than
``TimingOptions.energy_window_s`` cannot be resolved: only then, and in cold mode (the L2
flushes between samples draw power too), the timed work (graph replay or the eager calls of
one sample) runs back to back after timing for at least that long (``method: "window"``, hot
L2 steady state). ``busy_frac`` is the share of the span the timed calls kept the GPU busy:
the rest (launch-hiding spin kernels, gaps between samples) is in dE too, so J/call from the
loop is an upper bound by at most that share. nvidia-ml-py (``pynvml``) is used when installed,
else the driver's ``libnvidia-ml.so.1`` through ctypes; without either, or on the CPU, the row
says why there is no figure.
"""

from __future__ import annotations

import ctypes
import functools
import math
import time
from typing import Any, Callable

import torch

NVML_SUCCESS = 0
# Off unless asked for: 0.1 s windows (the old default) gave J/call that did not repeat between
# two identical runs and mean powers above the board's limit (docs/measurement.md §12), while costing 0.1 s per cell.
DISABLED = "off (--energy-window 0, the default): pass --energy-window SECONDS, e.g. 1 (docs/measurement.md: Energy)"
NVML_CLOCK_SM = 1
NVML_FI_DEV_POWER_INSTANT = 186  # nvml.h


class _Value(ctypes.Union):
    _fields_ = [("dVal", ctypes.c_double), ("uiVal", ctypes.c_uint), ("ulVal", ctypes.c_ulong),
                ("ullVal", ctypes.c_ulonglong), ("sllVal", ctypes.c_longlong), ("siVal", ctypes.c_int),
                ("usVal", ctypes.c_ushort)]


class _FieldValue(ctypes.Structure):
    """nvml.h's nvmlFieldValue_t (the ctypes path's nvmlDeviceGetFieldValues)."""

    _fields_ = [("fieldId", ctypes.c_uint32), ("scopeId", ctypes.c_uint32), ("timestamp", ctypes.c_int64),
                ("latencyUsec", ctypes.c_int64), ("valueType", ctypes.c_int), ("nvmlReturn", ctypes.c_int),
                ("value", _Value)]


_VALUE_FIELDS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}  # nvmlValueType_t


class _Nvml:
    """The NVML calls we need (handle, clocks, power, energy), through pynvml or ctypes."""

    def __init__(self) -> None:
        try:
            import pynvml

            pynvml.nvmlInit()
            self._py = pynvml
            self.source = "pynvml"
            return
        except Exception:
            self._py = None
        self._lib = ctypes.CDLL("libnvidia-ml.so.1")
        rc = self._lib.nvmlInit_v2()
        if rc != NVML_SUCCESS:
            raise OSError(f"nvmlInit_v2 returned {rc}")
        self.source = "libnvidia-ml.so.1 (ctypes)"

    def handle(self, device: torch.device) -> Any:
        """The NVML handle of a torch device, matched by UUID (torch and NVML may order devices
        differently, e.g. under CUDA_VISIBLE_DEVICES), else by PCI bus id."""
        props = torch.cuda.get_device_properties(device)
        uuid = str(getattr(props, "uuid", "") or "")
        keys = []
        if uuid:
            keys.append(("uuid", uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"))
        if hasattr(props, "pci_bus_id"):
            keys.append(("pci", f"{getattr(props, 'pci_domain_id', 0):08X}:{props.pci_bus_id:02X}:"
                                f"{getattr(props, 'pci_device_id', 0):02X}.0"))
        for kind, key in keys:
            try:
                if self._py is not None:
                    fn = self._py.nvmlDeviceGetHandleByUUID if kind == "uuid" else self._py.nvmlDeviceGetHandleByPciBusId
                    return fn(key)
                h = ctypes.c_void_p()
                fn = self._lib.nvmlDeviceGetHandleByUUID if kind == "uuid" else self._lib.nvmlDeviceGetHandleByPciBusId_v2
                if fn(key.encode(), ctypes.byref(h)) == NVML_SUCCESS:
                    return h
            except Exception:
                continue
        raise LookupError(f"no NVML device with UUID/PCI id of {device} ({', '.join(k for _, k in keys) or 'no ids'})")

    def sm_clock_mhz(self, handle: Any) -> int:
        if self._py is not None:
            return int(self._py.nvmlDeviceGetClockInfo(handle, NVML_CLOCK_SM))
        c = ctypes.c_uint()
        rc = self._lib.nvmlDeviceGetClockInfo(handle, NVML_CLOCK_SM, ctypes.byref(c))
        if rc != NVML_SUCCESS:
            raise OSError(f"nvmlDeviceGetClockInfo returned {rc}")
        return int(c.value)

    def _uint(self, name: str, handle: Any, *args: int) -> int:
        """One NVML query returning an unsigned int (through pynvml's function of that name, or
        the driver's C function with an out pointer last)."""
        if self._py is not None:
            return int(getattr(self._py, name)(handle, *args))
        c = ctypes.c_uint()
        rc = getattr(self._lib, name)(handle, *args, ctypes.byref(c))
        if rc != NVML_SUCCESS:
            raise OSError(f"{name} returned {rc}")
        return int(c.value)

    def power_mw(self, handle: Any) -> int:
        """Board power in milliwatts (the driver's averaging window: about 1 s on Hopper)."""
        return self._uint("nvmlDeviceGetPowerUsage", handle)

    def power_instant_mw(self, handle: Any) -> int:
        """Instantaneous board power in milliwatts (field NVML_FI_DEV_POWER_INSTANT, newer drivers
        only; raises where the driver or GPU does not answer it). Unlike ``power_mw`` it shows a
        new load's power at once, not a second later."""
        if self._py is not None:
            v = self._py.nvmlDeviceGetFieldValues(handle, [NVML_FI_DEV_POWER_INSTANT])[0]
        else:
            v = (_FieldValue * 1)()
            v[0].fieldId = NVML_FI_DEV_POWER_INSTANT
            rc = self._lib.nvmlDeviceGetFieldValues(handle, ctypes.c_int(1), ctypes.byref(v))
            if rc != NVML_SUCCESS:
                raise OSError(f"nvmlDeviceGetFieldValues returned {rc}")
            v = v[0]
        if v.nvmlReturn != NVML_SUCCESS:
            raise OSError(f"NVML_FI_DEV_POWER_INSTANT: return code {v.nvmlReturn}")
        return int(getattr(v.value, _VALUE_FIELDS.get(int(v.valueType), "uiVal")))

    def clock_event_reasons(self, handle: Any) -> int:
        """NVML's bitmask of why the clocks are below their maximum now (``nvmlClocksEventReasons``:
        idle, power cap, thermal, ...); the older name (``...ThrottleReasons``) where the driver
        has only that."""
        names = ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons")
        if self._py is not None:
            fn = next((getattr(self._py, n) for n in names if hasattr(self._py, n)), None)
            if fn is None:
                raise OSError("pynvml has no clock-event reasons query")
            return int(fn(handle))
        c = ctypes.c_ulonglong()
        for n in names:
            fn = getattr(self._lib, n, None)
            if fn is not None:
                rc = fn(handle, ctypes.byref(c))
                if rc != NVML_SUCCESS:
                    raise OSError(f"{n} returned {rc}")
                return int(c.value)
        raise OSError("the driver's NVML has no clock-event reasons query")

    def max_sm_clock_mhz(self, handle: Any) -> int:
        return self._uint("nvmlDeviceGetMaxClockInfo", handle, NVML_CLOCK_SM)

    def power_limit_mw(self, handle: Any) -> int:
        return self._uint("nvmlDeviceGetEnforcedPowerLimit", handle)

    def energy_mj(self, handle: Any) -> int:
        if self._py is not None:
            return int(self._py.nvmlDeviceGetTotalEnergyConsumption(handle))
        e = ctypes.c_ulonglong()
        rc = self._lib.nvmlDeviceGetTotalEnergyConsumption(handle, ctypes.byref(e))
        if rc != NVML_SUCCESS:
            raise OSError(f"nvmlDeviceGetTotalEnergyConsumption returned {rc} (not supported on this GPU?)")
        return int(e.value)


@functools.lru_cache(maxsize=None)
def nvml_handle(device_key: str) -> tuple[Any, Any] | tuple[None, str]:
    """(NVML session, handle) of a CUDA device, or (None, why not); probed once per device."""
    try:
        nvml = _Nvml()
        return nvml, nvml.handle(torch.device(device_key))
    except Exception as e:  # no NVML, a container without the library: say so
        return None, f"{type(e).__name__}: {str(e)[:200]}"


def nvml_sm_clock_mhz(device: torch.device) -> float | None:
    """The SM clock through NVML (no nvidia-smi process per call), or None."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    nvml, handle = nvml_handle(f"cuda:{index}")
    if nvml is None:
        return None
    try:
        return float(nvml.sm_clock_mhz(handle))
    except Exception:
        return None


@functools.lru_cache(maxsize=None)
def _meter(device_key: str) -> tuple[Callable[[], int] | None, str]:
    """(read millijoules, source) for a CUDA device, or (None, why not); probed once."""
    nvml, handle = nvml_handle(device_key)
    if nvml is None:
        return None, f"NVML energy counter unavailable: {handle}"
    try:
        nvml.energy_mj(handle)
    except Exception as e:  # an old GPU or a driver without the counter: say so
        return None, f"NVML energy counter unavailable: {type(e).__name__}: {str(e)[:200]}"
    return (lambda: nvml.energy_mj(handle)), nvml.source


def energy_meter(device: torch.device) -> tuple[Callable[[], int] | None, str]:
    if device.type != "cuda":
        return None, f"no energy counter on {device.type} (NVML reports GPUs only)"
    index = device.index if device.index is not None else torch.cuda.current_device()
    return _meter(f"cuda:{index}")


def measure_energy(work: Callable[[], None], calls_per_work: int, call_s: float, device: torch.device,
                   window_s: float) -> dict[str, Any]:
    """Run ``work`` (``calls_per_work`` forwards, ~``call_s`` each) back to back for at least
    ``window_s`` and report energy per call and mean power, or why not."""
    if window_s <= 0:
        return {"available": False, "reason": DISABLED}
    read, source = energy_meter(device)
    if read is None:
        return {"available": False, "reason": source}
    reps = max(1, math.ceil(window_s / max(call_s * calls_per_work, 1e-7)))
    torch.cuda.synchronize(device)
    e0, t0 = read(), time.perf_counter()
    for _ in range(reps):
        work()
    torch.cuda.synchronize(device)
    e1, t1 = read(), time.perf_counter()
    return _record("window", source, e0, e1, t1 - t0, reps * calls_per_work, "")


def loop_energy(e0_mj: int, e1_mj: int, span_s: float, calls: int, busy_s: float, source: str) -> dict[str, Any]:
    """Energy per call from counter reads around the timing loop (``span_s`` long, ``calls``
    forwards, ``busy_s`` of them on the GPU)."""
    out = _record("timed_loop", source, e0_mj, e1_mj, span_s, calls, " of timing")
    out["busy_frac"] = min(1.0, busy_s / span_s) if span_s > 0 else None
    return out


def _record(method: str, source: str, e0_mj: int, e1_mj: int, span_s: float, calls: int, where: str) -> dict[str, Any]:
    """The row's energy record from two counter reads ``span_s`` apart around ``calls`` forwards."""
    joules = (e1_mj - e0_mj) / 1e3
    out = {"available": True, "method": method, "source": source, "calls": calls, "window_s": span_s,
           "energy_j": joules, "j_per_call": joules / calls if calls else None,
           "mean_w": joules / span_s if span_s > 0 else None}
    if e1_mj <= e0_mj or not calls:
        out.update(available=False, reason=f"the counter did not advance in {span_s * 1e3:.0f} ms{where}")
    return out
