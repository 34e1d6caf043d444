"""A backend that runs out of memory: torch-math whose forward raises a real
``torch.OutOfMemoryError`` (what a CUDA allocation that does not fit raises) while
``ATTN_HARNESS_OOM`` says so:

- ``always``: every forward;
- a file path: only the first forward of the process tree (the file is created then), so a
  retried cell succeeds;
- unset: never (exactly torch-math).

Use: ``ATTN_HARNESS_OOM=always harness run SUITE --backends plugins.oom:OomTorchMath`` with tests/
on PYTHONPATH. Its twin ``plugins.oom:BrokenTorchMath`` raises a plain RuntimeError instead (a real
error, which must stay a correctness regression)."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from backends.torch_math import MathImpl, TorchMathBackend

OOM_ENV = "ATTN_HARNESS_OOM"


def _should_fail() -> bool:
    how = os.environ.get(OOM_ENV, "")
    if how == "always":
        return True
    if how:
        try:
            Path(how).touch(exist_ok=False)  # the first forward anywhere creates it and fails
        except FileExistsError:
            return False
        return True
    return False


class OomImpl(MathImpl):
    def forward(self, query, key, value, kv_cache, metadata, out, lse_out=None):
        if _should_fail():
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 3.95 GiB (test backend plugins.oom)")
        return super().forward(query, key, value, kv_cache, metadata, out, lse_out)


class BrokenImpl(MathImpl):
    def forward(self, query, key, value, kv_cache, metadata, out, lse_out=None):
        if _should_fail():
            raise RuntimeError("index out of range in the test backend plugins.oom")
        return super().forward(query, key, value, kv_cache, metadata, out, lse_out)


class OomTorchMath(TorchMathBackend):
    name = "oom-torch-math"
    description = f"torch-math that raises torch.OutOfMemoryError while ${OOM_ENV} says so (resource-error tests)"

    @classmethod
    def get_impl_cls(cls):
        return OomImpl


class BrokenTorchMath(TorchMathBackend):
    name = "broken-torch-math"
    description = f"torch-math that raises a RuntimeError while ${OOM_ENV} says so (resource-error tests)"

    @classmethod
    def get_impl_cls(cls):
        return BrokenImpl
