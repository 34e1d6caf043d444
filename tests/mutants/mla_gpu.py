"""MLA bugs wrapped around the real MLA library backends (flashinfer-mla, flash-attn-mla,
flashmla), the kernels untouched: the same wrapper as tests/mutants/gpu.py (``make_mutant``),
with the MLA bugs an adapter could make in its own code: the query read as [rope | latent], the
softmax scale from the 576-wide absorbed head, the yarn mscale dropped, a latent page off by one.
(Values taken from the wrong slice of the latent is a bug inside a kernel's call; the CPU mutant
in tests/mutants/mla.py covers it.)

On a GPU, with tests/ on PYTHONPATH:

    harness run suites/mla.yaml --case 'cpu-*' --case 'pages*' --no-time --out RESULTS \\
        --backends "torch-math,flashinfer-mla,flash-attn-mla,flashmla,$(python3 tests/mutants/mla_gpu.py)"
    python3 tests/mutants/verdict.py RESULTS

(``pages[block_size=64]`` is the cell FlashMLA takes: page 64, one query length.)

On the CPU, tests/test_mla_backends.py wraps torch-math with the same bugs (``MATH_MLA_MUTANTS``).
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

if __package__ in (None, ""):  # run as a script: make ``mutants`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from attn_contract import MLA_ABSORBED, AttentionBackend
from mutants.gpu import Bug, PageOffByOne, make_mutant

_MOD = "mutants.mla_gpu"


class RopeLatentSwapped(Bug):
    doc = "MLA query read as [rope | latent] while the keys are [latent | rope]"
    rope = 64  # qk_rope_head_dim of the suite's geometry (DeepSeek: 64)

    def run(self, fwd, query, key, value, kv_cache, common, out, lse_out):
        nope = query.shape[-1] - self.rope  # 512 absorbed, 128 expanded
        fwd(torch.cat([query[..., nope:], query[..., :nope]], -1), key, value, kv_cache, out, lse_out)


class Scale576(Bug):
    doc = "MLA softmax scale from the absorbed head (576 ** -0.5) instead of qk_nope + qk_rope (192)"

    def config(self, cfg):
        return replace(cfg, scale=cfg.head_size ** -0.5) if cfg.attention_kind == MLA_ABSORBED else cfg


class MscaleDropped(Bug):
    doc = "MLA yarn mscale ** 2 left out of the softmax scale"

    def config(self, cfg):
        return replace(cfg, mla=replace(cfg.mla, mscale=1.0)) if cfg.mla is not None else cfg


class LatentPageOffByOne(PageOffByOne):
    doc = "MLA latent cache: each request's last page read from physical page id + 1 (absorbed form)"


MLA_BUGS = [RopeLatentSwapped, Scale576, MscaleDropped, LatentPageOffByOne]


def make_mla_mutants(base: type[AttentionBackend], prefix: str,
                     variants: list[dict[str, Any]] | None = None) -> list[type[AttentionBackend]]:
    out = []
    for bug in MLA_BUGS:
        cls = make_mutant(base, bug, prefix, variants)
        cls.__module__ = _MOD
        globals()[cls.__qualname__] = cls
        out.append(cls)
    return out


from backends.mla.flash_attn import FlashAttnMLABackend  # noqa: E402  (imports no GPU library)
from backends.mla.flashinfer import FlashInferMLABackend  # noqa: E402
from backends.mla.flashmla import FlashMLABackend  # noqa: E402
from backends.torch_math import TorchMathBackend  # noqa: E402

# FlashInfer MLA on both its kernel families (fa3 and fa2; the cells' fp8 latent runs through each).
GPU_MLA_MUTANTS = (make_mla_mutants(FlashInferMLABackend, "FlashInferMLA", [{"mla_backend": "fa3"}])
                   + make_mla_mutants(FlashInferMLABackend, "FlashInferMLAFa2", [{"mla_backend": "fa2"}])
                   + make_mla_mutants(FlashAttnMLABackend, "FlashAttnMLA", [{"fa_build": "fa3-fwd"}])
                   + make_mla_mutants(FlashMLABackend, "FlashMLA"))
MATH_MLA_MUTANTS = make_mla_mutants(TorchMathBackend, "MathMLA")
SPECS = [f"{_MOD}:{c.__qualname__}" for c in GPU_MLA_MUTANTS]

if __name__ == "__main__":
    print(",".join(SPECS))
