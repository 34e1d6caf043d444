"""A deliberately slowed build: FlashInfer with one extra small kernel launch per forward (an
in-place add on a one-element tensor, after the attention kernel). The numbers are untouched;
the time grows by one launch, about a microsecond of GPU time inside a replayed CUDA graph:
several percent on the smallest decode cells (16-25 us), well under the noise on large ones.
What the GPU gate must catch on the rows it slowed and nowhere else (docs/ci.md, issue 44).

It has its own name (a plugin may not take a built-in's): compare its rows with a baseline's
``flashinfer`` rows with ``harness compare --match-backend flashinfer-extra-launch=flashinfer``.
Use with tests/ on PYTHONPATH: ``--backends flash-attn,mutants.slowed:FlashInferExtraLaunch,sdpa,torch-math``."""

from __future__ import annotations

from typing import Any

import torch

from backends.flashinfer import FlashInferBackend  # imports no GPU library
from backends.flashinfer.impl import FlashInferImpl


class ExtraLaunchImpl(FlashInferImpl):
    def __init__(self, config, variant, device, layer):
        super().__init__(config, variant, device, layer)
        self.tick = torch.zeros(1, dtype=torch.int32, device=device)  # made here, outside any graph capture

    def forward(self, query, key, value, kv_cache, metadata, out, lse_out=None):
        super().forward(query, key, value, kv_cache, metadata, out, lse_out)
        self.tick.add_(1)  # the extra launch: one tiny kernel, numbers unchanged
        return out

    def describe_call(self, metadata: Any) -> dict[str, Any]:
        return {**super().describe_call(metadata), "mutant": "extra kernel launch per forward"}


class FlashInferExtraLaunch(FlashInferBackend):
    name = "flashinfer-extra-launch"
    description = "FlashInfer with one extra small kernel launch per forward (a deliberately slowed build)"

    @classmethod
    def get_impl_cls(cls) -> type[FlashInferImpl]:
        return ExtraLaunchImpl
