"""Backends that really fail, each in one way a real kernel library can, for the robustness
tests: a segfault in native code, a raised exception, a hang, NaN output, a sticky CUDA error
message, an out-of-bounds gather (a real device-side assert on a GPU), a correct but slow one (to interrupt runs midway) and one that drops a Ctrl-C. All implement the interface
in full on top of torch-math, so every cell the harness asks for is a genuine call.

Use: ``harness run SUITE --backends torch-math,plugins.crashy:SegfaultBackend`` with tests/
on PYTHONPATH."""

from __future__ import annotations

import ctypes
import time

import torch

from attn_contract import AttentionImpl
from backends.torch_math import MathImpl, TorchMathBackend


class _SegfaultImpl(MathImpl):
    def forward(self, query, key, value, kv_cache, metadata, out, lse_out=None):
        ctypes.string_at(0)  # reads address 0: SIGSEGV, as a bad pointer in a native kernel would
        return out


class _RaisingImpl(MathImpl):
    def forward(self, query, key, value, kv_cache, metadata, out, lse_out=None):
        raise RuntimeError("deliberate failure in forward (crashy plugin)")


class _HangingImpl(MathImpl):
    def forward(self, query, key, value, kv_cache, metadata, out, lse_out=None):
        time.sleep(3600)  # a deadlocked kernel or a spin on a flag that never flips
        return out


class _NaNImpl(MathImpl):
    def forward(self, query, key, value, kv_cache, metadata, out, lse_out=None):
        super().forward(query, key, value, kv_cache, metadata, out, lse_out)
        out[0].fill_(float("nan"))  # computed NaN (written), not an unwritten element
        return out


class _StickyCudaErrorImpl(MathImpl):
    def forward(self, query, key, value, kv_cache, metadata, out, lse_out=None):
        # The exact error torch raises after an out-of-bounds kernel access; after it the CUDA
        # context is unusable and the harness must replace the worker.
        raise RuntimeError("CUDA error: an illegal memory access was encountered")


class _DeviceAssertImpl(MathImpl):
    def forward(self, query, key, value, kv_cache, metadata, out, lse_out=None):
        # An out-of-bounds gather: on a GPU a real device-side assert (sticky: the context is
        # dead afterwards), on the CPU a plain IndexError.
        idx = torch.tensor([out.shape[0] + 1000], device=out.device)
        out.copy_(out[idx].expand_as(out))
        if out.is_cuda:
            torch.cuda.synchronize(out.device)
        return out


class _SlowImpl(MathImpl):
    def forward(self, query, key, value, kv_cache, metadata, out, lse_out=None):
        time.sleep(0.25)
        return super().forward(query, key, value, kv_cache, metadata, out, lse_out)


class _SwallowingImpl(MathImpl):
    def forward(self, query, key, value, kv_cache, metadata, out, lse_out=None):
        # A library whose native code catches whatever its Python callback raised and carries on
        # (how a Ctrl-C got lost during torch's import on the CI box): a KeyboardInterrupt raised
        # while it "runs" is dropped.
        deadline = time.monotonic() + 0.5
        while (left := deadline - time.monotonic()) > 0:
            try:
                time.sleep(left)
            except KeyboardInterrupt:
                pass
        return super().forward(query, key, value, kv_cache, metadata, out, lse_out)


def _backend(name: str, impl: type[AttentionImpl], doc: str) -> type[TorchMathBackend]:
    cls = type(name.title().replace("-", "") + "Backend", (TorchMathBackend,), {
        "name": name,
        "description": doc,
        "get_impl_cls": classmethod(lambda cls: impl),
        "__module__": __name__,
        "__doc__": doc,
    })
    return cls


SegfaultBackend = _backend("crash-segv", _SegfaultImpl, "segfaults in forward")
RaisingBackend = _backend("crash-raise", _RaisingImpl, "raises in forward")
HangingBackend = _backend("crash-hang", _HangingImpl, "never returns from forward")
NaNBackend = _backend("crash-nan", _NaNImpl, "writes NaN into the output")
StickyCudaErrorBackend = _backend("crash-sticky", _StickyCudaErrorImpl, "fails like an illegal memory access")
DeviceAssertBackend = _backend("crash-device-assert", _DeviceAssertImpl, "out-of-bounds gather")
SlowBackend = _backend("slow-math", _SlowImpl, "torch-math, 0.25 s per call")
SwallowingBackend = _backend("swallow-math", _SwallowingImpl, "torch-math, 0.5 s per call that drops a Ctrl-C")
# Pickle finds classes by qualified name: make them match the module attributes.
for _name in ("SegfaultBackend", "RaisingBackend", "HangingBackend", "NaNBackend", "StickyCudaErrorBackend",
              "DeviceAssertBackend", "SlowBackend", "SwallowingBackend"):
    globals()[_name].__qualname__ = _name
    globals()[_name].__name__ = _name
