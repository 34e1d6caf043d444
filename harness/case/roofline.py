"""Device ceilings measured on the device, and where each result sits under them.

Ceilings (measured once per GPU, cached per device name + driver + torch version in
``$ATTN_HARNESS_CACHE_DIR/ceilings.json``, default ``~/.cache/attn-harness/``):
- memory: a large device-to-device copy, bytes read + written per second (the median of
  several); a read-only stream is measured too and recorded, for reference;
- compute: a bf16 8192^3 matmul on random data, 2*n^3 FLOPs per second (median of several).

A result's arithmetic intensity (FLOP/byte) against the ridge point (compute / memory
ceiling) says which ceiling bounds it; its percent of that ceiling is reported. No hard-coded
peak tables: the numbers are what this device does today. On the CPU there are no ceilings.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from harness.records.fileio import atomic_write_text

CACHE_ENV = "ATTN_HARNESS_CACHE_DIR"
CACHE_FILE = "ceilings.json"
COPY_BYTES = 2 << 30  # 2 GiB source: far past any L2
MATMUL_N = 8192


@dataclass(frozen=True)
class Ceilings:
    device: str
    key: str
    mem_bytes_per_s: float  # copy bandwidth (read + write)
    flops_per_s: float  # bf16 matmul throughput
    read_bytes_per_s: float | None = None
    measured_utc: str = ""
    method: str = ""

    @property
    def ridge(self) -> float:
        """FLOP/byte where the compute and memory roofs meet."""
        return self.flops_per_s / self.mem_bytes_per_s


def cache_path() -> Path:
    base = os.environ.get(CACHE_ENV)
    root = Path(base) if base else Path.home() / ".cache" / "attn-harness"
    return root / CACHE_FILE


def device_key(device: torch.device) -> str:
    """name | driver | torch: ceilings are re-measured when any of them changes."""
    from harness.records.env import device_info

    info = device_info(device)
    return f"{info.get('name')}|driver {info.get('driver')}|torch {torch.__version__}"


def _median_event_ms(fn: Any, reps: int) -> float:
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def measure_ceilings(device: torch.device, reps: int = 10) -> Ceilings:
    """Measure copy bandwidth, read bandwidth and bf16 matmul throughput on ``device``."""
    with torch.cuda.device(device):
        src = torch.empty(COPY_BYTES, dtype=torch.uint8, device=device)
        src.random_(0, 255)
        dst = torch.empty_like(src)
        for _ in range(3):
            dst.copy_(src)
        copy_ms = _median_event_ms(lambda: dst.copy_(src), reps)  # noqa: F821  (deleted later; the lambda runs before)
        del dst
        flt = src.view(torch.float32)
        sink = torch.zeros((), dtype=torch.float32, device=device)
        torch.sum(flt, dim=0, out=sink)
        read_ms = _median_event_ms(lambda: torch.sum(flt, dim=0, out=sink), reps)  # noqa: F821  (deleted later; the lambda runs before)
        del src, flt
        g = torch.Generator(device=device).manual_seed(0)
        a = torch.randn(MATMUL_N, MATMUL_N, device=device, dtype=torch.bfloat16, generator=g)
        b = torch.randn(MATMUL_N, MATMUL_N, device=device, dtype=torch.bfloat16, generator=g)
        c = torch.empty_like(a)
        for _ in range(3):
            torch.matmul(a, b, out=c)
        mm_ms = _median_event_ms(lambda: torch.matmul(a, b, out=c), reps)  # noqa: F821  (deleted later; the lambda runs before)
        del a, b, c
        torch.cuda.empty_cache()
    return Ceilings(
        device=torch.cuda.get_device_name(device),
        key=device_key(device),
        mem_bytes_per_s=2 * COPY_BYTES / (copy_ms / 1e3),
        flops_per_s=2 * MATMUL_N**3 / (mm_ms / 1e3),
        read_bytes_per_s=COPY_BYTES / (read_ms / 1e3),
        measured_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        method=(f"copy {COPY_BYTES >> 20} MiB d2d (read+write), sum {COPY_BYTES >> 20} MiB (read), "
                f"bf16 matmul {MATMUL_N}^3; median of {reps} after 3 warm-ups, CUDA events"),
    )


def _read_cache(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _write_cache(path: Path, data: dict[str, Any]) -> None:
    atomic_write_text(path, json.dumps(data, indent=2) + "\n")  # concurrent runs never read half a file


_PROCESS_CACHE: dict[str, tuple[Ceilings | None, str]] = {}


def get_ceilings(device: torch.device, refresh: bool = False) -> tuple[Ceilings | None, str]:
    """(ceilings, "") for a GPU, measured once and cached on disk; (None, reason) otherwise."""
    if device.type != "cuda":
        return None, f"no ceilings on {device.type}"
    try:
        key = device_key(device)
    except Exception as e:
        return None, f"cannot identify the device: {type(e).__name__}: {e}"
    if key in _PROCESS_CACHE and not refresh:
        return _PROCESS_CACHE[key]
    path = cache_path()
    cached = _read_cache(path)
    if key in cached and not refresh:
        try:
            c = Ceilings(**cached[key])
            _PROCESS_CACHE[key] = (c, "")
            return c, ""
        except TypeError:
            pass  # an older format: measure again
    try:
        c = measure_ceilings(device)
    except Exception as e:
        res: tuple[Ceilings | None, str] = (None, f"ceiling measurement failed: {type(e).__name__}: {e}"[:300])
        _PROCESS_CACHE[key] = res
        return res
    cached[key] = asdict(c)
    try:
        _write_cache(path, cached)
    except OSError:
        pass  # an unwritable cache costs a re-measurement next run, nothing else
    _PROCESS_CACHE[key] = (c, "")
    return c, ""


def roofline_metrics(flops: float, nbytes: float, seconds: float | None, ceilings: Ceilings | None,
                     reason: str = "") -> dict[str, Any]:
    """Achieved TFLOP/s and TB/s, intensity, and the share of the bounding ceiling."""
    sec = seconds if seconds is not None and seconds > 0 else None  # None: no usable time
    intensity = flops / nbytes if nbytes else None
    out: dict[str, Any] = {
        "tflops": flops / sec / 1e12 if sec is not None else None,
        "tbps": nbytes / sec / 1e12 if sec is not None else None,
        "intensity": intensity,
    }
    if ceilings is None:
        out["roofline"] = {"reason": reason or "no ceilings"}
        return out
    ridge = ceilings.ridge
    bound = "compute" if intensity is not None and intensity >= ridge else "memory"
    roof: dict[str, Any] = {
        "bound": bound,
        "ridge_flop_per_byte": ridge,
        "ceiling_tbps": ceilings.mem_bytes_per_s / 1e12,
        "ceiling_tflops": ceilings.flops_per_s / 1e12,
        "pct_of_bw": None,
        "pct_of_flops": None,
        "pct_of_ceiling": None,
        "ceilings_key": ceilings.key,
    }
    if sec is not None:
        roof["pct_of_bw"] = 100.0 * (nbytes / sec) / ceilings.mem_bytes_per_s
        roof["pct_of_flops"] = 100.0 * (flops / sec) / ceilings.flops_per_s
        roof["pct_of_ceiling"] = roof["pct_of_flops"] if bound == "compute" else roof["pct_of_bw"]
    out["roofline"] = roof
    return out
