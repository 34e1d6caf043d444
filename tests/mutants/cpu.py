"""Deliberately broken CPU backends: torch-math with exactly one bug each, loaded through the
public plugin API (``--backends mutants.cpu:TopLeftCausal`` with tests/ on PYTHONPATH).

The mutation test (tests/cell/test_mutants.py) runs suites/conformance-cpu.yaml on every class in
``MUTANTS`` and requires each to be flagged ``mismatch`` on at least one cell, while the real
CPU backends pass everything: a conformance suite that lets one of these through has a blind
spot. Each bug is one a real kernel or adapter has had (or could plausibly have).
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch

from attn_contract import AlibiLse, SplitKV, index_kv, merge_attn_states
from backends._paged import TORCH_MATH_CALL, HostLoopMetadata, dequantize
from backends.cascade.torch_cascade import TorchCascadeBackend, TorchCascadeImpl
from backends.torch_math import MathImpl, TorchMathBackend


def _mutant(name: str, impl: type[MathImpl], doc: str) -> type[TorchMathBackend]:
    """A torch-math backend class whose impl is ``impl``."""
    return type(name, (TorchMathBackend,), {
        "name": f"mutant-{name}", "description": doc, "__doc__": doc, "__module__": __name__,
        "get_impl_cls": classmethod(lambda cls: impl),
    })


def _md(md: HostLoopMetadata, **changes) -> HostLoopMetadata:
    return replace(md, **changes)


class _MaskedMathImpl(MathImpl):
    """torch-math with a hook on the visibility mask (per request, [q, s] booleans)."""

    def keep(self, keep: torch.Tensor, q_len: int, s_len: int) -> torch.Tensor:
        return keep

    def alibi_bias(self, slopes: torch.Tensor, diag: torch.Tensor, j: torch.Tensor, causal: bool) -> torch.Tensor:
        """[H, q, s] added to the logits: the reference's relative form."""
        return -slopes.float().view(-1, 1, 1) * (diag - j).abs().float()

    def attend(self, sc: torch.Tensor, v: torch.Tensor, sinks: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Masked logits [H, q, s] and values [H, s, D] -> (out [H, q, D], lse [H, q])."""
        full = sc if sinks is None else torch.cat([sc, sinks.float().view(-1, 1, 1).expand(-1, sc.shape[1], 1)], -1)
        lse = torch.logsumexp(full, -1)
        safe = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))
        return torch.exp(sc - safe.unsqueeze(-1)) @ v, lse

    def forward(self, query, key, value, kv_cache, metadata, out, lse_out=None):
        # Per-request loop (the mutants are small-batch tests; speed does not matter here).
        cfg, layer, md = self.config, self.layer, metadata
        qsl = md.query_start_loc
        g = cfg.num_heads // cfg.num_kv_heads
        for r, s in enumerate(md.seq_lens):
            lo, hi = qsl[r], qsl[r + 1]
            q_len = hi - lo
            t = torch.arange(s)
            blocks = md.block_table[r, t // md.block_size].long()
            k, v = dequantize(index_kv(kv_cache, blocks, 0, t % md.block_size), index_kv(kv_cache, blocks, 1, t % md.block_size),
                              layer, torch.float32)
            k = k.repeat_interleave(g, 1).transpose(0, 1)
            v = v.repeat_interleave(g, 1).transpose(0, 1)
            q = query[lo:hi].float().transpose(0, 1)
            sc = q @ k.transpose(1, 2) * cfg.softmax_scale
            if cfg.softcap:
                sc = cfg.softcap * torch.tanh(sc / cfg.softcap)
            diag = torch.arange(q_len).unsqueeze(1) + (s - q_len)
            j = torch.arange(s).unsqueeze(0)
            keep = torch.ones(q_len, s, dtype=torch.bool)
            if md.causal:
                keep &= j <= diag
            if cfg.sliding_window is not None:
                keep &= diag - j < cfg.sliding_window
                if not md.causal:
                    keep &= j - diag < cfg.sliding_window
            if layer.alibi_slopes is not None:
                sc = sc + self.alibi_bias(layer.alibi_slopes, diag, j, md.causal)
            keep = self.keep(keep, q_len, s)
            sc = sc.masked_fill(~keep, float("-inf"))
            o, lse = self.attend(sc, v, layer.sinks)
            out[lo:hi] = o.transpose(0, 1).to(out.dtype)
            if lse_out is not None:
                lse_out[lo:hi] = lse.transpose(0, 1)
        return out


# ------------------------------------------------------------------ masks
class _TopLeftImpl(_MaskedMathImpl):
    def keep(self, keep, q_len, s_len):
        i = torch.arange(q_len).unsqueeze(1)
        j = torch.arange(s_len).unsqueeze(0)
        return keep & (j <= i) if self.config.causal else keep


class _WindowOffByOneImpl(MathImpl):
    def __init__(self, config, *a, **k):
        w = config.sliding_window
        super().__init__(replace(config, sliding_window=None if w is None else w + 1), *a, **k)


class _DropLastContextImpl(_MaskedMathImpl):
    def keep(self, keep, q_len, s_len):
        ctx = s_len - q_len
        if ctx > 0:
            keep = keep.clone()
            keep[:, ctx - 1] = False
        return keep


# ------------------------------------------------------------------ config / layer params
class _IgnoreSoftcapImpl(MathImpl):
    def __init__(self, config, *a, **k):
        super().__init__(replace(config, softcap=0.0), *a, **k)


class _IgnoreCustomScaleImpl(MathImpl):
    def __init__(self, config, *a, **k):
        super().__init__(replace(config, scale=None), *a, **k)


class _IgnoreKVScaleImpl(MathImpl):
    def __init__(self, config, variant, device, layer):
        super().__init__(config, variant, device, replace(layer, k_scale=1.0, v_scale=1.0))


class _SwappedKVScaleImpl(MathImpl):
    def __init__(self, config, variant, device, layer):
        super().__init__(config, variant, device, replace(layer, k_scale=layer.v_scale, v_scale=layer.k_scale))


class _IgnoreSinksImpl(MathImpl):
    def __init__(self, config, variant, device, layer):
        super().__init__(config, variant, device, replace(layer, sinks=None))


# ------------------------------------------------------------------ metadata / indexing
class _WrongGQAMapImpl(MathImpl):
    """Query head h reads KV head h % Hk instead of h // group (interleaved instead of blocked)."""

    def forward(self, query, key, value, kv_cache, metadata, out, lse_out=None):
        hq, hk = self.config.num_heads, self.config.num_kv_heads
        g = hq // hk
        # torch-math maps head p to KV head p // g; put query head h at p = (h % hk) * g + h // hk.
        pos = torch.tensor([(h % hk) * g + h // hk for h in range(hq)])
        inv = torch.empty_like(pos)
        inv[pos] = torch.arange(hq)
        tmp = torch.empty_like(out)
        tmp_lse = torch.empty_like(lse_out) if lse_out is not None else None
        super().forward(query[:, inv], key, value, kv_cache, metadata, tmp, tmp_lse)
        out.copy_(tmp[:, pos])
        if lse_out is not None:
            lse_out.copy_(tmp_lse[:, pos])
        return out


class _PageOffByOneImpl(MathImpl):
    """Reads physical page id + 1 for every request's last page."""

    def forward(self, query, key, value, kv_cache, metadata, out, lse_out=None):
        table = metadata.block_table.clone()
        for r, s in enumerate(metadata.seq_lens):
            last = (s - 1) // metadata.block_size
            table[r, last] = (table[r, last] + 1) % kv_cache.shape[0]
        return super().forward(query, key, value, kv_cache, _md(metadata, block_table=table), out, lse_out)


class _SwappedRequestsImpl(MathImpl):
    """Requests 0 and 1 read each other's block-table rows (a batch-index mix-up)."""

    def forward(self, query, key, value, kv_cache, metadata, out, lse_out=None):
        table = metadata.block_table.clone()
        if table.shape[0] > 1:
            table[[0, 1]] = table[[1, 0]]
        return super().forward(query, key, value, kv_cache, _md(metadata, block_table=table), out, lse_out)


class _WrongKVTokensImpl(MathImpl):
    """Reads 8 KV tokens of each request (the middle of its context) from the wrong slots."""

    def forward(self, query, key, value, kv_cache, metadata, out, lse_out=None):
        cache = kv_cache.clone()  # its own copy: this mutant must not also write into its inputs
        bs = metadata.block_size
        for r, s in enumerate(metadata.seq_lens):
            if s < 24:
                continue
            t = torch.arange(s // 2, s // 2 + 8)
            src = torch.arange(2, 10)
            blk, off = metadata.block_table[r, t // bs].long(), t % bs
            sblk, soff = metadata.block_table[r, src // bs].long(), src % bs
            cache[blk, :, off] = index_kv(kv_cache, sblk, slice(None), soff)
        return super().forward(query, key, value, cache, metadata, out, lse_out)


class _UnwrittenTailImpl(MathImpl):
    """Never writes the output of the batch's last token (an off-by-one in the store loop)."""

    def forward(self, query, key, value, kv_cache, metadata, out, lse_out=None):
        keep = out[-1:].clone()
        super().forward(query, key, value, kv_cache, metadata, out, lse_out)
        out[-1:] = keep
        return out


class _LseBase2Impl(MathImpl):
    def forward(self, query, key, value, kv_cache, metadata, out, lse_out=None):
        super().forward(query, key, value, kv_cache, metadata, out, lse_out)
        if lse_out is not None:
            lse_out.mul_(1.0 / math.log(2.0))
        return out


class _MixedDecodeImpl(MathImpl):
    """In a batch that also has longer requests, each decode gets the next decode's output."""

    def forward(self, query, key, value, kv_cache, metadata, out, lse_out=None):
        super().forward(query, key, value, kv_cache, metadata, out, lse_out)
        qsl = metadata.query_start_loc
        lens = [qsl[i + 1] - qsl[i] for i in range(len(qsl) - 1)]
        dec = [qsl[i] for i, n in enumerate(lens) if n == 1]
        if dec and max(lens) > 1:
            rows = out[dec].clone()
            out[dec] = rows.roll(1, 0) if len(dec) > 1 else torch.zeros_like(rows)
        return out


class _WritesInputsImpl(MathImpl):
    """Correct output, but uses the query tensor as scratch space afterwards."""

    def forward(self, query, key, value, kv_cache, metadata, out, lse_out=None):
        super().forward(query, key, value, kv_cache, metadata, out, lse_out)
        query[: max(1, query.shape[0] // 2)].mul_(0.5)
        return out


class _MetadataDriftImpl(MathImpl):
    """The first call is right; it then 'advances' the cached seq_lens in place (a stale plan)."""

    def forward(self, query, key, value, kv_cache, metadata, out, lse_out=None):
        super().forward(query, key, value, kv_cache, metadata, out, lse_out)
        metadata.seq_lens[:] = [max(q, s - 1) for q, s in zip(
            [metadata.query_start_loc[i + 1] - metadata.query_start_loc[i] for i in range(len(metadata.seq_lens))],
            metadata.seq_lens)]
        return out


class _CausalAlwaysImpl(MathImpl):
    def forward(self, query, key, value, kv_cache, metadata, out, lse_out=None):
        return super().forward(query, key, value, kv_cache, _md(metadata, causal=True), out, lse_out)


TopLeftCausal = _mutant("TopLeftCausal", _TopLeftImpl, "causal mask aligned top-left instead of bottom-right")
WrongGQAMap = _mutant("WrongGQAMap", _WrongGQAMapImpl, "query head h reads KV head h % Hk")
PageOffByOne = _mutant("PageOffByOne", _PageOffByOneImpl, "last page read from physical id + 1")
IgnoreKVScale = _mutant("IgnoreKVScale", _IgnoreKVScaleImpl, "fp8 k/v scales ignored")
SwappedKVScale = _mutant("SwappedKVScale", _SwappedKVScaleImpl, "k_scale and v_scale swapped")
SwappedRequests = _mutant("SwappedRequests", _SwappedRequestsImpl, "requests 0 and 1 read each other's pages")
# Its bug in the standalone reproducer (`harness repro`): the torch call on a block table whose
# rows 0 and 1 are swapped, so the script fails as the harness's check did.
SwappedRequests.standalone_call = classmethod(lambda cls, config, variant, call=None: (
    "block_table = block_table[[1, 0, *range(2, block_table.shape[0])]] if block_table.shape[0] > 1 else block_table"
    "  # the bug: requests 0 and 1 read each other's pages\n" + TORCH_MATH_CALL))
UnwrittenTail = _mutant("UnwrittenTail", _UnwrittenTailImpl, "last token's output never written")
WindowOffByOne = _mutant("WindowOffByOne", _WindowOffByOneImpl, "sliding window one key too wide")
IgnoreSoftcap = _mutant("IgnoreSoftcap", _IgnoreSoftcapImpl, "logit softcap ignored")
LseBase2 = _mutant("LseBase2", _LseBase2Impl, "LSE returned in base 2")
# The other lie: a natural-log LSE declared as base 2 (Capabilities.lse_base); the harness
# converts by the declaration, so the check sees lse * ln 2.
LseDeclaredBase2 = type("LseDeclaredBase2", (TorchMathBackend,), {
    "name": "mutant-LseDeclaredBase2", "description": "natural-log LSE declared as base 2",
    "__module__": __name__,
    "capabilities": classmethod(lambda cls, variant=None: replace(TorchMathBackend.capabilities(variant), lse_base=2)),
})
WrongKVTokens = _mutant("WrongKVTokens", _WrongKVTokensImpl, "8 KV tokens per request read from wrong slots")
DropLastContext = _mutant("DropLastContext", _DropLastContextImpl, "last cached context token masked out")
MixedDecode = _mutant("MixedDecode", _MixedDecodeImpl, "decode outputs mixed up when the batch has prefills")
IgnoreCustomScale = _mutant("IgnoreCustomScale", _IgnoreCustomScaleImpl, "custom softmax scale ignored (1/sqrt(d) used)")
WritesInputs = _mutant("WritesInputs", _WritesInputsImpl, "scribbles on its query tensor after computing")
MetadataDrift = _mutant("MetadataDrift", _MetadataDriftImpl, "metadata changes after the first call")
IgnoreSinks = _mutant("IgnoreSinks", _IgnoreSinksImpl, "attention sinks ignored")
CausalAlways = _mutant("CausalAlways", _CausalAlwaysImpl, "non-causal requests run causal")


class _AlibiKeyIndexImpl(_MaskedMathImpl):
    """FA2's causal ALiBi (alibi.h): ``+slope * j``, the relative bias minus the row constant
    ``slope * (i + s - q)``. Outputs equal the reference's; the LSE is larger by that constant."""

    def alibi_bias(self, slopes, diag, j, causal):
        if not causal:
            return super().alibi_bias(slopes, diag, j, causal)
        return slopes.float().view(-1, 1, 1) * j.float().expand(diag.shape[0], -1)


def _alibi_key_index(name: str, convention: AlibiLse, doc: str) -> type[TorchMathBackend]:
    cls = _mutant(name, _AlibiKeyIndexImpl, doc)
    base = TorchMathBackend.capabilities
    cls.capabilities = classmethod(lambda c, variant=None: replace(base(variant), alibi_lse=convention))
    return cls


# Not in MUTANTS (conformance-cpu has no ALiBi case): tests/case/test_alibi_lse.py runs them.
AlibiKeyIndexDeclared = _alibi_key_index(
    "AlibiKeyIndexDeclared", AlibiLse.KEY_INDEX_CAUSAL,
    "FA2-style causal ALiBi (+slope*j) that declares it: a correct backend, must pass")
AlibiKeyIndexUndeclared = _alibi_key_index(
    "AlibiKeyIndexUndeclared", AlibiLse.RELATIVE,
    "FA2-style causal ALiBi (+slope*j) claiming the relative form: LSE off by a row constant")

class _SplitKVImpl(_MaskedMathImpl):
    """Flash-decoding in torch: the keys cut into ``num_splits`` chunks, each attended on its
    own, the partials merged by their LSEs (attn_contract.merge_attn_states, exact)."""

    def merge(self, o1, l1, o2, l2):
        return merge_attn_states(o1, l1, o2, l2)

    def attend(self, sc, v, sinks):
        n = max(1, int(self.variant.get("num_splits", 1)))
        if n == 1 or sc.shape[-1] < 2:
            return super().attend(sc, v, sinks)
        bounds = torch.linspace(0, sc.shape[-1], n + 1).round().long().tolist()
        o = lse = None
        for a, b in zip(bounds[:-1], bounds[1:]):
            if b <= a:
                continue
            # Sinks belong to exactly one partial (the first).
            oc, lc = super().attend(sc[..., a:b], v[:, a:b], sinks if o is None else None)
            if o is None:
                o, lse = oc, lc
            else:
                o, lse = (t.transpose(0, 1) for t in self.merge(o.transpose(0, 1), lse.transpose(0, 1),
                                                               oc.transpose(0, 1), lc.transpose(0, 1)))
        return o, lse


class _SplitKVBadMergeImpl(_SplitKVImpl):
    """Merges split partials with equal weights (ignores the LSEs): right only unsplit."""

    def merge(self, o1, l1, o2, l2):
        return (o1 + o2) / 2, torch.logaddexp(l1, l2)


def _split_kv(name: str, impl: type[MathImpl], doc: str) -> type[TorchMathBackend]:
    cls = _mutant(name, impl, doc)
    base = TorchMathBackend.capabilities
    cls.capabilities = classmethod(lambda c, variant=None: replace(base(variant), split_kv=SplitKV("num_splits", 1, 4)))
    return cls


# The split-KV invariant's CPU subjects (tests/cell/test_invariants.py): a correct split merge and a broken one.
SplitKVMath = _split_kv("SplitKVMath", _SplitKVImpl, "torch-math with split-KV merged by LSE (correct)")
SplitKVBadMerge = _split_kv("SplitKVBadMerge", _SplitKVBadMergeImpl, "split-KV partials averaged, LSEs ignored")

class _CascadeDropsPrefixImpl(TorchCascadeImpl):
    """Cascade that forgets to merge in the shared prefix: each request sees its suffix only."""

    def forward(self, query, key, value, kv_cache, metadata, out, lse_out=None):
        return MathImpl(self.config, {}, self.device, self.layer).forward(
            query, key, value, kv_cache, metadata.suffix, out, lse_out)


# The cascade-vs-plain invariant's CPU subject (tests/cell/test_invariants.py).
CascadeDropsPrefix = type("CascadeDropsPrefix", (TorchCascadeBackend,), {
    "name": "mutant-CascadeDropsPrefix", "description": _CascadeDropsPrefixImpl.__doc__, "__module__": __name__,
    "get_impl_cls": classmethod(lambda cls: _CascadeDropsPrefixImpl),
})

MUTANTS: list[type[TorchMathBackend]] = [
    TopLeftCausal, WrongGQAMap, PageOffByOne, IgnoreKVScale, SwappedKVScale, SwappedRequests, UnwrittenTail,
    WindowOffByOne, IgnoreSoftcap, LseBase2, WrongKVTokens, DropLastContext, MixedDecode, IgnoreCustomScale,
    WritesInputs, MetadataDrift, IgnoreSinks, CausalAlways, LseDeclaredBase2,
]
