"""Environment fingerprint for the run header: device, driver, library versions, git, command."""

from __future__ import annotations

import datetime as _dt
import functools
import platform
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from harness.records.header import RunHeader



def git_sha() -> str:
    root = Path(__file__).resolve().parents[2]
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=5)
        if sha.returncode != 0:
            return "unknown"
        return sha.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _driver_version(idx: int) -> str | None:
    """The driver version: nvidia-ml-py (pip install 'attn-harness[gpu]') where installed, else
    nvidia-smi (a process start)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        v = pynvml.nvmlSystemGetDriverVersion()
        return v.decode() if isinstance(v, bytes) else str(v)
    except Exception:  # not installed, or no driver: the fallback says what it can
        pass
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader", f"--id={idx}"],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


@functools.lru_cache(maxsize=None)  # nvidia-smi is slow; the answer does not change within a run
def device_info(device: torch.device) -> dict[str, Any]:
    import torch  # here: records/ is read without torch (the readers never need it)

    if device.type == "cuda":
        idx = device.index if device.index is not None else torch.cuda.current_device()
        p = torch.cuda.get_device_properties(idx)
        info = {
            "type": "cuda",
            "name": p.name,
            "capability": f"{p.major}.{p.minor}",
            "sm_count": p.multi_processor_count,
            "memory_gib": round(p.total_memory / 2**30, 1),
            "l2_bytes": getattr(p, "L2_cache_size", None),
            "cuda_runtime": torch.version.cuda,
        }
        info["driver"] = _driver_version(idx)
        return info
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"type": "cpu", "name": cpu, "threads": torch.get_num_threads()}


def run_header(device: torch.device, backend_versions: dict[str, dict[str, str]], argv: list[str],
               extra: dict[str, Any] | None = None) -> RunHeader:
    """run.json as a run starts: the environment, plus ``extra`` (what is run), typed."""
    import torch

    from harness.records.formats import RUN_SCHEMA_VERSION
    from harness.records.header import RunHeader

    return RunHeader.model_validate({
        "tool": "attn-harness",
        "schema_version": RUN_SCHEMA_VERSION,
        "time_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(argv),
        "git_sha": git_sha(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": torch.__version__,
        "device": dict(device_info(device)),
        "backends": backend_versions,
        **(extra or {}),
    })
