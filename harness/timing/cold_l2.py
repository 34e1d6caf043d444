"""Cold-L2 timing: the flush (read or write + drain), the probe that checks the flush really
evicts on this device, and the per-device choice of a verified method.

A flush is verified when a probe read right after it is both clearly slower than a hot read
(``COLD_PROBE_MIN_RATIO``) and about as slow as after a reference flush that streams far more
than the L2 (``MIN_COLDNESS`` of the way from hot to the reference). The second test exists
because the first was not enough: on the H200 (2026-12-06) the read flush of twice the L2 passed
the ratio (1.22) yet left the probe at 15.5 us where the write flush left it at 17.6 us, hot
being 12.6 us; on an H100 (2026-12-07) a read of twice or of eight times the L2 went 65% of the
way to the reference, a write 98% (docs/measurement.md, "Cold is verified"). What a row had just
read survived the read flush in part, which fits a candidate timed alone being faster in cold L2
than one timed in rounds (FlashInfer's tensor-core decode on llama3-70b-tp8[count=128] on the
H200: interleaved 1.016-1.025x sequential; issue 44)."""

from __future__ import annotations

import statistics
from typing import Any

import torch

from harness.timing.device import cycles_per_us, device_index, EventSampler, l2_bytes
from harness.timing.options import FLUSH_METHODS

COLD_PROBE_MIN_RATIO = 1.2  # a probe read after the flush must be this much slower than a hot one
MIN_COLDNESS = 0.9  # ... and at least this far from hot to the reference flush's cold
FLUSH_FACTOR = 2  # cold mode's flush streams this many times the L2
REFERENCE_FACTOR = 8  # the reference flushes stream this many times the L2 (read and write)
# ``auto`` tries these (method, L2 multiple) in order and takes the first verified: read keeps
# write-back out of the timed region; the big write flush is the reference's own, so some
# candidate is complete whenever the reference itself is verified.
AUTO_ORDER: tuple[tuple[str, int], ...] = (("read", FLUSH_FACTOR), ("write", FLUSH_FACTOR), ("write", REFERENCE_FACTOR))


def probe_name(method: str, factor: int = FLUSH_FACTOR) -> str:
    """A probe's key in ``cold_check.probes``: the method, with its L2 multiple where not the default."""
    return method if factor == FLUSH_FACTOR else f"{method}-{factor}x"


class L2Flusher:
    """Evicts the L2 by streaming a buffer ``factor`` times its size (read: sum it; write: zero it).

    Read is preferred: a write flush leaves the L2 full of dirty lines whose write-back would
    land inside the next timed call. So the write flush here is followed by a drain: a read
    pass over the first L2-size of the same buffer (already written back to DRAM by the later
    writes), which evicts the last writes' dirty lines and so makes their write-back happen
    now, outside the timed region; what it leaves in the L2 are clean lines of the flush
    buffer, which cost the timed call nothing to evict. The drain cannot bring the evicted data
    back, so it cannot make the flush less cold; the probe times the whole sequence. Then a
    synchronize: the hold and the start event are enqueued only once the flush and the drain
    have finished on the device (stream order already guarantees it; the synchronize also
    keeps the flush's host wait out of the sample's host-enqueue measurement)."""

    def __init__(self, device: torch.device, method: str = "read", factor: int = FLUSH_FACTOR):
        if method not in ("read", "write"):
            raise ValueError(f"flush method {method!r}: expected read or write (auto is resolved by select_flush)")
        if factor < 2:
            raise ValueError(f"flush factor {factor}: a flush must stream at least twice the L2")
        l2 = l2_bytes(device)
        self.device = device
        self.factor = factor
        self.nbytes = max(factor * l2, 64 << 20) if l2 else 128 * factor << 20
        self.method = method
        self.buf = torch.zeros(self.nbytes // 4, dtype=torch.float32, device=device)
        self.drain = self.buf[: max(1, (l2 or self.nbytes // factor) // 4)]
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


def judge_probe(hot_us: float, cold_us: float, reference_us: float | None) -> dict[str, Any]:
    """Whether a flush that took a probe read from ``hot_us`` to ``cold_us`` evicts: the ratio
    (``COLD_PROBE_MIN_RATIO``) and how far it went towards the reference flush's cold
    (``MIN_COLDNESS``; unknown reference: the ratio alone). Pure: tests feed it numbers."""
    ratio = cold_us / hot_us if hot_us > 0 else 0.0
    out: dict[str, Any] = {"ratio": ratio, "min_ratio": COLD_PROBE_MIN_RATIO, "reference_us": reference_us,
                           "coldness": None, "min_coldness": MIN_COLDNESS}
    reasons = []
    if ratio < COLD_PROBE_MIN_RATIO:
        reasons.append(f"probe read after the flush ({cold_us:.2f} us) is not {COLD_PROBE_MIN_RATIO}x slower "
                       f"than a hot read ({hot_us:.2f} us): the flush may not evict the L2")
    if reference_us is not None and reference_us > hot_us:
        coldness = (cold_us - hot_us) / (reference_us - hot_us)
        out["coldness"] = coldness
        if coldness < MIN_COLDNESS:
            reasons.append(f"incomplete: the probe read {cold_us:.2f} us after it against {reference_us:.2f} us after "
                           f"the reference flush (hot {hot_us:.2f} us): {coldness:.0%} of the way, under "
                           f"{MIN_COLDNESS:.0%}; data read just before it survives in the L2")
    out["verified"] = not reasons
    if reasons:
        out["reason"] = "; ".join(reasons)
    return out


_MEASURED: dict[tuple[int, str, int], dict[str, Any]] = {}


def _measure(device: torch.device, method: str, factor: int, reps: int = 15) -> dict[str, Any]:
    """Time a read of a probe of half the L2 right after reading it (hot) and right after the
    flush (cold). Cached per device, method and factor."""
    key = (device_index(device), method, factor)
    if key in _MEASURED:
        return _MEASURED[key]
    l2 = l2_bytes(device)
    flusher = L2Flusher(device, method, factor)
    probe = torch.ones(l2 // 2 // 4, dtype=torch.float32, device=device)
    sink = torch.zeros((), dtype=torch.float32, device=device)
    sampler = EventSampler(device)
    hold = int(cycles_per_us(device) * 50) if sampler.can_hold else 0

    def read() -> None:
        torch.sum(probe, dim=0, out=sink)  # noqa: F821  (deleted below; read runs before that)

    hot, cold = [], []
    for _ in range(reps):
        read()  # leaves the probe in L2
        hot.append(sampler.sample(read, hold)[0])
        cold.append(sampler.sample(read, hold, flusher)[0])
    h, c = statistics.median(hot), statistics.median(cold)
    res = {
        "method": method,
        "l2_factor": factor,
        "flush": flusher.describe(),
        "probe_mib": round(probe.numel() * 4 / 2**20, 1),
        "hot_us": h * 1e6,
        "cold_us": c * 1e6,
        "hot_tbps": probe.numel() * 4 / h / 1e12 if h > 0 else None,
        "cold_tbps": probe.numel() * 4 / c / 1e12 if c > 0 else None,
    }
    del flusher, probe
    if factor > FLUSH_FACTOR:
        torch.cuda.empty_cache()  # a reference buffer is several L2s: give it back before the cells allocate
    _MEASURED[key] = res
    return res


def reference_cold_us(device: torch.device) -> tuple[float, str]:
    """The probe's time after the coldest reference flush (read and write of ``REFERENCE_FACTOR``
    L2s), and which one."""
    refs = {probe_name(m, REFERENCE_FACTOR): _measure(device, m, REFERENCE_FACTOR) for m in ("read", "write")}
    name = max(refs, key=lambda n: refs[n]["cold_us"])
    return refs[name]["cold_us"], name


_COLD_CHECK: dict[tuple[int, str, int], dict[str, Any]] = {}


def verify_cold_l2(device: torch.device, method: str = "read", factor: int = FLUSH_FACTOR) -> dict[str, Any]:
    """Check that the flush really evicts (cf. flashinfer#4468, where a 'cold' mode measured a
    warm L2), against the ratio and the reference flushes (``judge_probe``). Cached per device,
    method and factor."""
    key = (device_index(device), method, factor)
    if key in _COLD_CHECK:
        return _COLD_CHECK[key]
    if not l2_bytes(device):
        _COLD_CHECK[key] = {"method": method, "l2_factor": factor, "verified": False,
                            "reason": "L2 size unknown: cannot size the probe"}
        return _COLD_CHECK[key]
    m = _measure(device, method, factor)
    ref, _ = reference_cold_us(device)
    res = {**m, **judge_probe(m["hot_us"], m["cold_us"], ref)}
    _COLD_CHECK[key] = res
    return res


_FLUSH_CHOICE: dict[tuple[int, str], dict[str, Any]] = {}


def choose_flush(probes: dict[str, dict[str, Any]], requested: str) -> tuple[str, str]:
    """Which probe (key of ``probes``) cold mode uses, and why. ``auto``: the first of
    ``AUTO_ORDER`` that is verified, else the one that went furthest towards the reference
    (the largest ratio where no coldness is known), marked not verified by its probe. An
    explicit method: that method at ``FLUSH_FACTOR``. Pure: tests feed it probe dicts."""
    if requested != "auto":
        return probe_name(requested), "asked for"
    order = [probe_name(m, f) for m, f in AUTO_ORDER if probe_name(m, f) in probes]
    passed: list[str] = []
    for name in order:
        p = probes[name]
        if p.get("verified"):
            why = f"{name} verified" if not passed else f"{'; '.join(passed)}; {name} verified"
            return name, why
        c = p.get("coldness")
        passed.append(f"{name} not verified (" + (f"{c:.0%} of the reference's cold" if c is not None
                                                  else f"ratio {p.get('ratio', 0):.2f}") + ")")

    def score(n: str) -> float:
        p = probes[n]
        return p["coldness"] if p.get("coldness") is not None else p.get("ratio", 0.0)

    best = max(order, key=score)
    return best, f"none verified ({'; '.join(passed)}); using {best}, the coldest"


def select_flush(device: torch.device, requested: str = "auto") -> dict[str, Any]:
    """The flush cold mode uses on this device, and whether the probe verified it (cached per
    device and request). ``auto`` probes ``AUTO_ORDER`` and takes the first verified (see
    ``choose_flush``). An explicit method is used as asked, with its own probe result. Never
    silent: the result, with every probe made (the reference flushes' included), goes into
    every cold row."""
    if requested not in FLUSH_METHODS:
        raise ValueError(f"flush method {requested!r}: expected one of {', '.join(FLUSH_METHODS)}")
    key = (device_index(device), requested)
    if key in _FLUSH_CHOICE:
        return _FLUSH_CHOICE[key]
    wanted = AUTO_ORDER if requested == "auto" else ((requested, FLUSH_FACTOR),)
    probes = {probe_name(m, f): verify_cold_l2(device, m, f) for m, f in wanted}
    if l2_bytes(device):
        for m in ("read", "write"):  # the references, so every row shows what the flush was judged against
            probes.setdefault(probe_name(m, REFERENCE_FACTOR), verify_cold_l2(device, m, REFERENCE_FACTOR))
    name, why = choose_flush(probes, requested)
    chosen = probes[name]
    res = {
        **{k: v for k, v in chosen.items() if k != "verified"},
        "method": chosen.get("method", requested),
        "l2_factor": chosen.get("l2_factor", FLUSH_FACTOR),
        "requested": requested,
        "verified": bool(chosen.get("verified")),
        "selection": why,
        "probes": probes,
    }
    if not res["verified"]:
        res["reason"] = f"cold NOT verified: {chosen.get('reason', 'probe failed')}"
    _FLUSH_CHOICE[key] = res
    return res


def cold_l2_label(check: dict[str, Any]) -> str:
    """One line for a cold row: the flush method and whether the probe verified it."""
    ratio, coldness = check.get("ratio"), check.get("coldness")
    what = f"{check['method']} flush" + (f" of {check['l2_factor']}x the L2" if check.get("l2_factor", FLUSH_FACTOR)
                                         != FLUSH_FACTOR else "")
    c = f", {coldness:.0%} of the reference's cold" if coldness is not None else ""
    if check["verified"]:
        r = f", probe ratio {ratio:.2f} >= {check.get('min_ratio', COLD_PROBE_MIN_RATIO)}" if ratio else ""
        return f"verified ({what}{r}{c})"
    r = f", probe ratio {ratio:.2f}" + (f" < {check.get('min_ratio', COLD_PROBE_MIN_RATIO)}"
                                        if ratio < check.get("min_ratio", COLD_PROBE_MIN_RATIO) else "") if ratio else ""
    return f"not verified ({what}{r}{c}; {check.get('selection', '')})"
