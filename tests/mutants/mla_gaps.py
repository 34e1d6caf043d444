"""MLA bugs the first MLA checks let through (issue: "where the checks are thin"), each on
torch-math, each caught by one check added for it (tests/test_mla_gaps.py):

- ``ScaleV3HardCoded``: the expanded (prefill) form ignores the scale it is given and uses
  DeepSeek-V3's; caught by the prefill cells at V2-Lite's and Kimi-K2's scales
  (``cpu-prefill-scales``), since every other expanded cell has V3's;
- ``LastPageLenModulo``: ``last_page_len = seq_len % page_size`` (0 on a page boundary, so the
  kernel reads a page short) on pages above 1; caught by ``cpu-page-boundary``;
- ``FinalKeyDropped``: the expanded form leaves out each request's final key, which only its last
  query row sees under the causal mask; caught by the last-query-row gate (harness/cell/check.py),
  and on ``cpu-prefill[fp8]`` only with the model-dtype tolerance of the expanded form
  (``kernel_kv_dtype``).
On a GPU they load as plugins (``--backends mutants.mla_gaps:FinalKeyDropped``, tests/ on PYTHONPATH)."""

from __future__ import annotations

from dataclasses import replace

import torch

from attn_contract import MLA_ABSORBED, MLA_EXPANDED, MLADims, yarn_get_mscale
from backends.torch_math import MathImpl, TorchMathBackend

# DeepSeek-V3's softmax scale (yarn factor 40, mscale_all_dim 1), what a V3-only kernel bakes in.
V3_SCALE = MLADims(mscale=yarn_get_mscale(40.0, 1.0)).softmax_scale


def _mutant(name: str, impl: type[MathImpl], doc: str) -> type[TorchMathBackend]:
    return type(name, (TorchMathBackend,), {
        "name": f"mutant-{name}", "description": doc, "__doc__": doc, "__module__": __name__,
        "get_impl_cls": classmethod(lambda cls: impl),
    })


class _ScaleV3Impl(MathImpl):
    """Expanded form: DeepSeek-V3's softmax scale, whatever the layer's."""

    def __init__(self, config, *a, **k):
        super().__init__(replace(config, scale=V3_SCALE) if config.attention_kind == MLA_EXPANDED else config, *a, **k)


class _LastPageLenImpl(MathImpl):
    """Absorbed form, pages above 1: a request ending on a page boundary reads one page short."""

    def forward(self, query, key, value, kv_cache, metadata, out, lse_out=None):
        bs = metadata.block_size
        if self.config.attention_kind == MLA_ABSORBED and bs > 1:
            lens = [s - bs if s % bs == 0 and s > bs else s for s in metadata.seq_lens]
            metadata = replace(metadata, seq_lens=lens)
        return super().forward(query, key, value, kv_cache, metadata, out, lse_out)


LONG = 256  # the mutant's "long prompt path": requests of this many keys and 16+ query rows


class _FinalKeyDroppedImpl(MathImpl):
    """Expanded form, long prompts (LONG+ keys, 16+ query rows: a tile-boundary off-by-one of a
    long-prompt path): each such request's last query row attends without the request's final
    key (the only row that sees it, causally); output and LSE consistent with that."""

    def forward(self, query, key, value, kv_cache, metadata, out, lse_out=None):
        super().forward(query, key, value, kv_cache, metadata, out, lse_out)
        if self.config.attention_kind != MLA_EXPANDED:
            return out
        md, scale = metadata, self.config.softmax_scale
        for r, s in enumerate(md.seq_lens):
            hi = md.query_start_loc[r + 1]
            if hi - md.query_start_loc[r] < 16 or s < LONG:
                continue
            k0 = md.kv_start_loc[r]
            k, v = key[k0:k0 + s - 1].float(), value[k0:k0 + s - 1].float()
            scores = torch.einsum("hd,shd->hs", query[hi - 1].float(), k) * scale
            out[hi - 1] = torch.einsum("hs,shd->hd", scores.softmax(-1), v).to(out.dtype)
            if lse_out is not None:
                lse_out[hi - 1] = torch.logsumexp(scores, -1).to(lse_out.dtype)
        return out


ScaleV3HardCoded = _mutant("ScaleV3HardCoded", _ScaleV3Impl, "MLA prefill: DeepSeek-V3's softmax scale hard-coded")
LastPageLenModulo = _mutant("LastPageLenModulo", _LastPageLenImpl,
                            "MLA latent cache: last_page_len = seq_len % page_size (a page short on a boundary)")
FinalKeyDropped = _mutant("FinalKeyDropped", _FinalKeyDroppedImpl, "MLA prefill: each request's final key dropped")
GAP_MUTANTS: list[type[TorchMathBackend]] = [ScaleV3HardCoded, LastPageLenModulo, FinalKeyDropped]
