"""Broken wrappers of real backends: the same bug classes as tests/mutants/cpu.py, made by
wrapping any backend's builder and impl (config, layer scales, batch metadata, inputs or
outputs changed; the kernel itself untouched). ``make_mutants(Base)`` builds the set for one
backend; the module defines them for flash-attn (FA2 and FA3 variants) and FlashInfer (its
default variant), named e.g. ``mutants.gpu:FlashAttn_TopLeftCausal``.

On the H200, ``harness run suites/conformance-gpu-mutants.yaml --backends "$(python3 tests/mutants/gpu.py)"``
runs all of them (``SPECS``)
and ``python tests/mutants/verdict.py RESULTS`` requires each to be flagged ``mismatch`` on at
least one cell it ran. On the CPU, tests/cell/test_mutants.py wraps torch-math with the same code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Callable

import torch

from attn_contract import AttentionBackend, AttentionImpl, AttentionMetadataBuilder, CommonAttentionMetadata, index_kv


_MOD = "mutants.gpu"  # the import name, also when run as a script (``python tests/mutants/gpu.py``)


def _with_seq_lens(common: CommonAttentionMetadata, seq_lens_cpu: torch.Tensor) -> CommonAttentionMetadata:
    seq = seq_lens_cpu.to(torch.int32)
    return replace(common, seq_lens_cpu=seq, seq_lens=seq.to(common.seq_lens.device), max_seq_len=int(seq.max()))


def _with_table(common: CommonAttentionMetadata, table: torch.Tensor) -> CommonAttentionMetadata:
    return replace(common, block_table=table)


class Bug:
    """One bug: hooks on the config, the layer params, the metadata, and the call."""

    name = "bug"
    doc = ""
    drifts = False  # True: calls after the first use metadata built from ``drift(common)``

    def config(self, cfg):
        return cfg

    def layer(self, layer):
        return layer

    def common(self, common: CommonAttentionMetadata) -> CommonAttentionMetadata:
        return common

    def drift(self, common: CommonAttentionMetadata) -> CommonAttentionMetadata:
        return common

    def run(self, fwd: Callable, query, key, value, kv_cache, common, out, lse_out) -> None:
        fwd(query, key, value, kv_cache, out, lse_out)


class TopLeftCausal(Bug):
    doc = "causal mask aligned top-left: each request sees only its first query_len keys"

    def common(self, c):
        return _with_seq_lens(c, c.query_lens_cpu.clone())


class DropsLastKVToken(Bug):
    doc = "every request with cached context reads one KV token too few"

    def common(self, c):
        ctx = c.context_lens_cpu
        return _with_seq_lens(c, torch.where(ctx > 0, c.seq_lens_cpu - 1, c.seq_lens_cpu))


class PageOffByOne(Bug):
    doc = "last page of each request read from physical page id + 1"

    def common(self, c):
        table = c.block_table.clone()
        n = int(table.max()) + 1
        for r, s in enumerate(c.seq_lens_cpu.tolist()):
            last = (s - 1) // c.block_size
            table[r, last] = (table[r, last] + 1) % n
        return _with_table(c, table)


class SwappedRequests(Bug):
    doc = "requests 0 and 1 read each other's block-table rows"

    def common(self, c):
        table = c.block_table.clone()
        if table.shape[0] > 1:
            table[[0, 1]] = table[[1, 0]]
        return _with_table(c, table)


class MetadataDrift(Bug):
    doc = "first call right; later calls use metadata with every context one token shorter"
    drifts = True

    def drift(self, c):
        return DropsLastKVToken().common(c)


class WindowOffByOne(Bug):
    doc = "sliding window one key too wide"

    def config(self, cfg):
        w = cfg.sliding_window
        return replace(cfg, sliding_window=None if w is None else w + 1)


class IgnoreSoftcap(Bug):
    doc = "logit softcap ignored"

    def config(self, cfg):
        return replace(cfg, softcap=0.0)


class IgnoreCustomScale(Bug):
    doc = "custom softmax scale ignored (1/sqrt(d) used)"

    def config(self, cfg):
        return replace(cfg, scale=None)


class IgnoreKVScale(Bug):
    doc = "fp8 k/v scales ignored"

    def layer(self, layer):
        return replace(layer, k_scale=1.0, v_scale=1.0)


class SwappedKVScale(Bug):
    doc = "k_scale and v_scale swapped"

    def layer(self, layer):
        return replace(layer, k_scale=layer.v_scale, v_scale=layer.k_scale)


class WrongGQAMap(Bug):
    doc = "query head h reads KV head h % Hk instead of h // group"

    def __init__(self, num_heads: int = 0, num_kv_heads: int = 0):
        self.hq, self.hk = num_heads, num_kv_heads

    def run(self, fwd, query, key, value, kv_cache, common, out, lse_out):
        hq, hk = query.shape[1], key.shape[1]
        g = hq // hk
        pos = torch.tensor([(h % hk) * g + h // hk for h in range(hq)], device=query.device)
        inv = torch.empty_like(pos)
        inv[pos] = torch.arange(hq, device=query.device)
        tmp = torch.empty_like(out)
        tmp_lse = torch.empty_like(lse_out) if lse_out is not None else None
        fwd(query[:, inv].contiguous(), key, value, kv_cache, tmp, tmp_lse)
        out.copy_(tmp[:, pos])
        if lse_out is not None:
            lse_out.copy_(tmp_lse[:, pos])


class WrongKVTokens(Bug):
    doc = "8 KV tokens of each request (mid-context) read from the wrong slots"

    def run(self, fwd, query, key, value, kv_cache, common, out, lse_out):
        cache = kv_cache.clone()
        bs = common.block_size
        for r, s in enumerate(common.seq_lens_cpu.tolist()):
            if s < 24:
                continue
            t = torch.arange(s // 2, s // 2 + 8, device=kv_cache.device)
            src = torch.arange(2, 10, device=kv_cache.device)
            blk, off = common.block_table[r, t // bs].long(), t % bs
            sblk, soff = common.block_table[r, src // bs].long(), src % bs
            cache[blk, :, off] = index_kv(kv_cache, sblk, slice(None), soff)
        fwd(query, key, value, cache, out, lse_out)


class UnwrittenTail(Bug):
    doc = "last token's output never written"

    def run(self, fwd, query, key, value, kv_cache, common, out, lse_out):
        keep = out[-1:].clone()
        fwd(query, key, value, kv_cache, out, lse_out)
        out[-1:] = keep


class LseBase2(Bug):
    doc = "LSE returned in base 2"

    def run(self, fwd, query, key, value, kv_cache, common, out, lse_out):
        fwd(query, key, value, kv_cache, out, lse_out)
        if lse_out is not None:
            lse_out.mul_(1.0 / math.log(2.0))


class MixedDecode(Bug):
    doc = "in a batch that also has longer requests, each decode gets another decode's output"

    def run(self, fwd, query, key, value, kv_cache, common, out, lse_out):
        fwd(query, key, value, kv_cache, out, lse_out)
        qsl = common.query_start_loc_cpu.tolist()
        lens = [qsl[i + 1] - qsl[i] for i in range(len(qsl) - 1)]
        dec = [qsl[i] for i, n in enumerate(lens) if n == 1]
        if dec and max(lens) > 1:
            rows = out[dec].clone()
            out[dec] = rows.roll(1, 0) if len(dec) > 1 else torch.zeros_like(rows)


class WritesInputs(Bug):
    doc = "uses its query tensor as scratch after computing"

    def run(self, fwd, query, key, value, kv_cache, common, out, lse_out):
        fwd(query, key, value, kv_cache, out, lse_out)
        query[: max(1, query.shape[0] // 2)].mul_(0.5)


BUGS: list[type[Bug]] = [
    TopLeftCausal, WrongGQAMap, PageOffByOne, IgnoreKVScale, SwappedKVScale, SwappedRequests, UnwrittenTail,
    WindowOffByOne, IgnoreSoftcap, LseBase2, WrongKVTokens, DropsLastKVToken, MixedDecode, IgnoreCustomScale,
    WritesInputs, MetadataDrift,
]


@dataclass
class _Md:
    inner: Any
    common: CommonAttentionMetadata
    later: Any = None
    later_common: CommonAttentionMetadata | None = None
    calls: int = 0


def make_mutant(base: type[AttentionBackend], bug_cls: type[Bug], prefix: str,
                variants: list[dict[str, Any]] | None = None) -> type[AttentionBackend]:
    """A backend that is ``base`` with ``bug_cls``'s bug, through the public interface only."""
    bug = bug_cls()

    class Builder(AttentionMetadataBuilder):
        def __init__(self, config, variant, device):
            super().__init__(config, variant, device)
            inner_cls = base.get_builder_cls()
            self.inner = inner_cls(bug.config(config), variant, device)
            # FlashInfer-style builders keep planned state in shared wrappers: a second builder
            # keeps the drifted plan from overwriting the first.
            self.later = inner_cls(bug.config(config), variant, device) if bug.drifts else None

        def build(self, common):
            c = bug.common(common)
            md = _Md(self.inner.build(c), c)
            if self.later is not None:
                md.later_common = bug.drift(common)
                md.later = self.later.build(md.later_common)
            return md

    class Impl(AttentionImpl):
        def __init__(self, config, variant, device, layer):
            super().__init__(config, variant, device, layer)
            self.inner = base.get_impl_cls()(bug.config(config), variant, device, bug.layer(layer))

        def forward(self, query, key, value, kv_cache, metadata, out, lse_out=None):
            use_later = metadata.later is not None and metadata.calls > 0
            metadata.calls += 1
            inner_md = metadata.later if use_later else metadata.inner
            common = metadata.later_common if use_later else metadata.common

            def fwd(q, k, v, cache, o, lse):
                self.inner.forward(q, k, v, cache, inner_md, o, lse)

            bug.run(fwd, query, key, value, kv_cache, common, out, lse_out)
            return out

        def graph_safe(self, metadata):
            return "mutant: forward has host-side steps"

        def describe_call(self, metadata):
            return {**self.inner.describe_call(metadata.inner), "mutant": bug_cls.__name__}

    name = f"{prefix}_{bug_cls.__name__}"
    attrs = {
        "name": f"mutant-{prefix}-{bug_cls.__name__}", "description": f"{base.name} with a bug: {bug_cls.doc}",
        "__module__": _MOD, "__qualname__": name,
        "get_builder_cls": classmethod(lambda cls: Builder), "get_impl_cls": classmethod(lambda cls: Impl),
    }
    if variants is not None:
        attrs["default_variants"] = classmethod(lambda cls: [dict(v) for v in variants])
    return type(name, (base,), attrs)


def make_mutants(base: type[AttentionBackend], prefix: str,
                 variants: list[dict[str, Any]] | None = None) -> list[type[AttentionBackend]]:
    return [make_mutant(base, b, prefix, variants) for b in BUGS]


def _register(classes: list[type[AttentionBackend]]) -> list[str]:
    for c in classes:
        globals()[c.__qualname__] = c
    return [f"{_MOD}:{c.__qualname__}" for c in classes]


from backends.flash_attn import FlashAttentionBackend  # noqa: E402  (imports no GPU library)
from backends.flashinfer import FlashInferBackend  # noqa: E402
from backends.torch_math import TorchMathBackend  # noqa: E402

# FA2 runs softcap/ALiBi, FA3 fp8 e4m3: between them every bug has cells to show in.
FA_MUTANTS = make_mutants(FlashAttentionBackend, "FlashAttn", [{"fa_version": 2}, {"fa_version": 3}])
FI_MUTANTS = make_mutants(FlashInferBackend, "FlashInfer", [{"decode_tensor_cores": True, "prefill_backend": "auto"}])
# The same wrappers around torch-math: what tests/cell/test_mutants.py runs on the CPU.
MATH_MUTANTS = make_mutants(TorchMathBackend, "Math")
SPECS = _register(FA_MUTANTS) + _register(FI_MUTANTS)
MATH_SPECS = _register(MATH_MUTANTS)

if __name__ == "__main__":
    print(",".join(SPECS))
