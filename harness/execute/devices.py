"""``--devices``: the worker slots of a run, one per entry (docs/scale-out.md)."""

from __future__ import annotations

import torch


def parse_devices(spec: str) -> list[str]:
    """``"0,1"`` -> ``["cuda:0", "cuda:1"]``; ``"cpu,cpu"`` -> two CPU workers; ``cuda:N`` as is.
    Raises ValueError with a one-line reason."""
    out = []
    for item in (x.strip() for x in spec.split(",")):
        if not item:
            continue
        if item.isdigit():
            item = f"cuda:{item}"
        if item == "cuda":
            item = "cuda:0"
        if item != "cpu" and not (item.startswith("cuda:") and item[5:].isdigit()):
            raise ValueError(f"--devices: {item!r} is not cpu, N or cuda:N")
        if item.startswith("cuda"):
            if not torch.cuda.is_available():
                raise ValueError(f"--devices: {item} requested but torch sees no CUDA device")
            if int(item[5:]) >= torch.cuda.device_count():
                raise ValueError(f"--devices: {item} does not exist ({torch.cuda.device_count()} CUDA devices)")
        if item.startswith("cuda") and item in out:
            raise ValueError(f"--devices: {item} given twice; two workers on one GPU would time each other's contention")
        out.append(item)
    if not out:
        raise ValueError("--devices: no device given")
    return out
