"""Cold-L2 timing: the flush (read or write + drain), the probe that checks the flush really
evicts on this device, and the per-device choice of a verified method."""

from __future__ import annotations

import statistics
from typing import Any

import torch

from harness.timing.device import cycles_per_us, EventSampler, l2_bytes
from harness.timing.options import FLUSH_METHODS

COLD_PROBE_MIN_RATIO = 1.2  # a probe read after the flush must be this much slower than a hot one


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
    sampler = EventSampler(device)
    hold = int(cycles_per_us(device) * 50) if sampler.can_hold else 0

    def read() -> None:
        torch.sum(probe, dim=0, out=sink)  # noqa: F821  (deleted later; the lambda runs before)

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

