"""Deliberately broken MLA backends: torch-math with exactly one MLA bug each (the ones the
issue lists, each one a real adapter could make). tests/cell/test_mla.py runs the CPU cells of
suites/mla.yaml on every class in ``MLA_MUTANTS`` and requires each to be flagged ``mismatch``
on at least one cell while torch-math and sdpa pass them all; on a GPU they load as plugins
(``--backends mutants.mla:MscaleDropped`` with tests/ on PYTHONPATH)."""

from __future__ import annotations

from dataclasses import replace

import torch

from attn_contract import MLA_ABSORBED
from backends.torch_math import MathImpl, TorchMathBackend


def _mutant(name: str, impl: type[MathImpl], doc: str) -> type[TorchMathBackend]:
    """A torch-math backend class whose impl is ``impl``."""
    return type(name, (TorchMathBackend,), {
        "name": f"mutant-{name}", "description": doc, "__doc__": doc, "__module__": __name__,
        "get_impl_cls": classmethod(lambda cls: impl),
    })


def _nope(config) -> int:
    """Width of the query's non-rope (latent / nope) part in this form."""
    return config.mla.kv_lora_rank if config.attention_kind == MLA_ABSORBED else config.mla.qk_nope_head_dim


class _RopeLatentSwappedImpl(MathImpl):
    """Reads the query as [rope | latent] while the keys are [latent | rope] (concatenation order)."""

    def forward(self, query, key, value, kv_cache, metadata, out, lse_out=None):
        if self.config.mla is not None:
            n = _nope(self.config)
            query = torch.cat([query[..., n:], query[..., :n]], -1)
        return super().forward(query, key, value, kv_cache, metadata, out, lse_out)


class _VWrongSliceImpl(MathImpl):
    """Absorbed form: the values are the latent's LAST kv_lora_rank entries (kpe included),
    not its first (ckv)."""

    def gather(self, kv_cache, key, value, pc):
        k, v = super().gather(kv_cache, key, value, pc)
        if self.config.attention_kind == MLA_ABSORBED:
            v = k[..., k.shape[-1] - v.shape[-1]:]
        return k, v


class _Scale576Impl(MathImpl):
    """Softmax scale from the absorbed head (576 ** -0.5) instead of qk_nope + qk_rope (192)."""

    def __init__(self, config, *a, **k):
        super().__init__(replace(config, scale=config.head_size ** -0.5) if config.mla else config, *a, **k)


class _LatentPageOffByOneImpl(MathImpl):
    """Reads physical page id + 1 for every request's last latent page."""

    def forward(self, query, key, value, kv_cache, metadata, out, lse_out=None):
        table = metadata.block_table.clone()
        for r, s in enumerate(metadata.seq_lens):
            last = (s - 1) // metadata.block_size
            table[r, last] = (table[r, last] + 1) % kv_cache.shape[0]
        return super().forward(query, key, value, kv_cache, replace(metadata, block_table=table), out, lse_out)


class _MscaleDroppedImpl(MathImpl):
    """The yarn mscale ** 2 left out of the softmax scale."""

    def __init__(self, config, *a, **k):
        mla = config.mla
        super().__init__(replace(config, mla=replace(mla, mscale=1.0)) if mla else config, *a, **k)


RopeLatentSwapped = _mutant("RopeLatentSwapped", _RopeLatentSwappedImpl, "MLA query read as [rope | latent]")
VWrongSlice = _mutant("VWrongSlice", _VWrongSliceImpl, "MLA absorbed values from latent[-512:] instead of [:512]")
Scale576 = _mutant("Scale576", _Scale576Impl, "MLA softmax scale from 576 instead of 192")
LatentPageOffByOne = _mutant("LatentPageOffByOne", _LatentPageOffByOneImpl, "MLA latent cache: last page read from id + 1")
MscaleDropped = _mutant("MscaleDropped", _MscaleDroppedImpl, "MLA yarn mscale**2 dropped from the softmax scale")
MLA_MUTANTS: list[type[TorchMathBackend]] = [RopeLatentSwapped, VWrongSlice, Scale576, LatentPageOffByOne,
                                             MscaleDropped]
