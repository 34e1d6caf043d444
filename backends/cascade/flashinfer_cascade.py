"""Cascade attention through FlashInfer's ``MultiLevelCascadeAttentionWrapper`` with two levels:

- level 0, the shared prefixes: one "request" per prefix group, whose queries are all the
  group's query tokens (``qo_indptr`` = group boundaries) and whose pages are the group's
  prefix blocks (full pages, ``last_page_len = page_size``); planned non-causal;
- level 1, each request's own pages after the prefix blocks (``last_page_len`` from the
  suffix length); planned with the layer's ``causal`` (the wrapper applies ``causal`` to the
  last level only).

``plan()`` runs in the metadata builder (host work), ``run(q, paged_kv_cache)`` in forward.
``run`` returns only ``out``; for the conformance check the LSE is rebuilt from the same
planned per-level wrappers (run with ``return_lse=True`` and merged with
``flashinfer.merge_state_in_place``, base 2, exactly what ``run`` does internally), so the
timed path stays the public ``run``. Signatures: reports/h200/library-probe.txt (0.6.18.post1).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import torch

from attn_contract import (
    AttentionConfig,
    AttentionMetadataBuilder,
    Availability,
    Capabilities,
    CommonAttentionMetadata,
    HeadSizes,
    group_layout,
)
from backends.cascade.base import GPU_BATCH_NOTE, CascadeBackend, CascadeImpl
from backends.flashinfer import FlashInferBackend, plan_growing_workspace, workspace_size

LN2 = math.log(2.0)  # FlashInfer LSEs are base 2: lse_e = lse_2 * ln 2


@dataclass(frozen=True)
class LevelCSR:
    """One level's FlashInfer page metadata: ``qo_indptr``, ``kv_indptr`` and ``last_page_len``
    on the host (plan() reads them there), ``indices`` on the block table's device."""

    qo_indptr: torch.Tensor
    kv_indptr: torch.Tensor
    indices: torch.Tensor
    last_page_len: torch.Tensor


def cascade_levels(common: CommonAttentionMetadata) -> tuple[LevelCSR, LevelCSR]:
    """The two levels' CSR page metadata of a batch that passed ``cascade_batch_reason``
    (contiguous groups, every request grouped, prefixes of whole blocks)."""
    lay = group_layout(common)
    bs = common.block_size
    dev = common.block_table.device
    qsl = common.query_start_loc_cpu.to(torch.int32)
    i32 = torch.int32
    # Level 0: one entry per group over its shared prefix pages.
    firsts = [m[0] for m in lay.members]
    qo0 = torch.tensor([int(qsl[f]) for f in firsts] + [int(qsl[-1])], dtype=i32)
    nbs = [p // bs for p in lay.prefix_lens]
    kv0 = torch.tensor([0] + list(torch.tensor(nbs).cumsum(0).tolist()), dtype=i32)
    idx0 = torch.cat([common.block_table[f, :nb] for f, nb in zip(firsts, nbs)]).to(i32)
    last0 = torch.full((len(firsts),), bs, dtype=i32)
    # Level 1: each request's own pages, after its group's prefix pages.
    seq = common.seq_lens_cpu.tolist()
    skip = [p // bs for p in lay.prefix_len_of_req]
    suffix = [s - p for s, p in zip(seq, lay.prefix_len_of_req)]
    pages = [-(-s // bs) for s in suffix]
    kv1 = torch.tensor([0] + list(torch.tensor(pages).cumsum(0).tolist()), dtype=i32)
    width = common.block_table.shape[1]
    cols = torch.arange(width, device=dev).view(1, -1)
    lo = torch.tensor(skip, device=dev).view(-1, 1)
    hi = lo + torch.tensor(pages, device=dev).view(-1, 1)
    idx1 = common.block_table[(cols >= lo) & (cols < hi)].to(i32)  # row-major: request order
    last1 = torch.tensor([s - (n - 1) * bs for s, n in zip(suffix, pages)], dtype=i32)
    return LevelCSR(qo0, kv0, idx0, last0), LevelCSR(qsl, kv1, idx1, last1)


@dataclass
class FICascadeMetadata:
    wrapper: Any  # planned flashinfer.MultiLevelCascadeAttentionWrapper
    num_groups: int
    prefix_lens: list[int]
    plan_ms: float = 0.0
    jit_warmup_ms: float = 0.0
    resolved_backend: str | None = None
    workspace_bytes: int = 0  # float workspace the plan fits in
    workspace_grows: int = 0  # times plan() overflowed it and it was doubled


def resolved_backend(wrapper: Any) -> str | None:
    subs = getattr(wrapper, "_batch_prefill_wrappers", None) or []
    for attr in ("resolved_backend", "_backend"):
        value = getattr(subs[-1], attr, None) if subs else None
        if value is not None:
            return str(value)
    return None


class FICascadeMetadataBuilder(AttentionMetadataBuilder[FICascadeMetadata]):
    """One workspace and one two-level wrapper per builder; ``build`` plans it per batch."""

    def __init__(self, config: AttentionConfig, variant: dict[str, Any], device: torch.device):
        super().__init__(config, variant, device)
        self.workspace_grows = 0
        # Sized like the plain FlashInfer backend's (each level plans its split-KV into the same
        # buffer, one at a time) and doubled on overflow: a fixed 128 MB overflowed in plan().
        self._make_wrapper(workspace_size(config, torch.device(device)))
        self.jit_warmup_ms = self._warm_up()

    def _make_wrapper(self, nbytes: int) -> None:
        import flashinfer  # lazy: only a GPU run with the library gets here

        self.__dict__.pop("workspace", None)  # let the old buffer go before allocating the new one
        self.workspace = torch.zeros(nbytes, dtype=torch.uint8, device=self.device)  # must start zeroed
        self.wrapper = flashinfer.MultiLevelCascadeAttentionWrapper(2, self.workspace, kv_layout=self.config.kv_layout)

    def _plan_growing(self, levels: tuple[LevelCSR, LevelCSR], causal: bool) -> None:
        _, grows = plan_growing_workspace(lambda: self._plan(levels, causal), lambda: int(self.workspace.numel()),
                                          self._make_wrapper)
        self.workspace_grows += grows

    def _plan(self, levels: tuple[LevelCSR, LevelCSR], causal: bool) -> None:
        cfg = self.config
        self.wrapper.plan(
            [lv.qo_indptr for lv in levels],
            [lv.kv_indptr for lv in levels],
            [lv.indices for lv in levels],
            [lv.last_page_len for lv in levels],
            cfg.num_heads,
            cfg.num_kv_heads,
            cfg.head_size,
            cfg.block_size,
            causal=causal,
            pos_encoding_mode="NONE",
            sm_scale=cfg.softmax_scale,
            q_data_type=cfg.torch_dtype,  # defaults to fp16 otherwise
            kv_data_type=cfg.cache_torch_dtype,
        )

    def _warm_up(self) -> float:
        """Plan a one-token, one-page batch so plan()'s JIT compile (or cache load) happens here,
        not in build()'s timed plan."""
        t0 = time.perf_counter()
        one = torch.tensor([0, 1], dtype=torch.int32)
        page = torch.zeros(1, dtype=torch.int32, device=self.device)
        lv = LevelCSR(one, one, page, torch.ones(1, dtype=torch.int32))
        self._plan_growing((lv, lv), causal=self.config.causal)
        return (time.perf_counter() - t0) * 1e3

    def build(self, common: CommonAttentionMetadata) -> FICascadeMetadata:
        t0 = time.perf_counter()
        levels = cascade_levels(common)
        self._plan_growing(levels, causal=common.causal)
        plan_ms = (time.perf_counter() - t0) * 1e3
        lay = group_layout(common)
        return FICascadeMetadata(
            wrapper=self.wrapper,
            num_groups=len(lay.members),
            prefix_lens=sorted(set(lay.prefix_lens)),
            plan_ms=plan_ms,
            jit_warmup_ms=self.jit_warmup_ms,
            resolved_backend=resolved_backend(self.wrapper),
            workspace_bytes=int(self.workspace.numel()),
            workspace_grows=self.workspace_grows,
        )


class FICascadeImpl(CascadeImpl[FICascadeMetadata]):
    def _cache(self, kv_cache: torch.Tensor) -> torch.Tensor:
        # Logical (blocks, 2, page, Hk, D); HND memory is (blocks, 2, Hk, page, D), the shape
        # FlashInfer's HND layout expects, so the permute is a view of contiguous memory.
        return kv_cache if self.config.kv_layout == "NHD" else kv_cache.permute(0, 1, 3, 2, 4)

    def forward(self, query, key, value, kv_cache, metadata, out, lse_out=None):
        cache = self._cache(kv_cache)
        out.copy_(metadata.wrapper.run(query, cache))  # run() has no out= argument
        if lse_out is not None:
            lse_out.copy_(self._lse(query, cache, metadata))
        return out

    def _lse(self, query: torch.Tensor, cache: torch.Tensor, md: FICascadeMetadata) -> torch.Tensor:
        """Natural-log LSE of the merged levels, from the same planned per-level wrappers."""
        import flashinfer

        subs = getattr(md.wrapper, "_batch_prefill_wrappers", None)
        if not subs:
            raise RuntimeError(
                "this flashinfer's MultiLevelCascadeAttentionWrapper has no _batch_prefill_wrappers; "
                "the LSE cannot be recovered (run() returns only out)"
            )
        o, lse = subs[-1].run(query, cache, return_lse=True)
        for w in subs[:-1]:
            o_i, lse_i = w.run(query, cache, return_lse=True)
            flashinfer.merge_state_in_place(o, lse, o_i, lse_i)
        return lse * LN2

    def graph_safe(self, metadata: FICascadeMetadata) -> str | None:
        return "the cascade wrapper is planned without use_cuda_graph (batch-specific host plan)"

    def describe_passes(self, metadata: FICascadeMetadata) -> dict[str, Any]:
        md = metadata
        return {
            "path": "flashinfer MultiLevelCascadeAttentionWrapper: level 0 shared prefix per group (non-causal), "
                    "level 1 per-request pages (causal), merge_state in place",
            "num_groups": md.num_groups,
            "prefix_lens": md.prefix_lens,
            "kv_layout": self.config.kv_layout,
            "prefill_backend_resolved": md.resolved_backend,
            "plan_ms": round(md.plan_ms, 3),
            "jit_warmup_ms": round(md.jit_warmup_ms, 1),
            "workspace_mib": md.workspace_bytes // (1 << 20),
            "workspace_grows": md.workspace_grows,
        }


class FlashInferCascadeBackend(CascadeBackend, library_of=FlashInferBackend):
    name = "flashinfer-cascade"
    plain_counterpart = "flashinfer"
    description = "FlashInfer MultiLevelCascadeAttentionWrapper, 2 levels: shared prefix per group + unique pages"
    builder_cls = FICascadeMetadataBuilder
    impl_cls = FICascadeImpl

    @classmethod
    def availability(cls, variant=None) -> Availability:
        # The plain backend knows how FlashInfer installs fail; its "auto" prefill asks the least.
        base = FlashInferBackend.availability({"prefill_backend": "auto"})
        if not base.available:
            return base
        import flashinfer

        if not hasattr(flashinfer, "MultiLevelCascadeAttentionWrapper"):
            return Availability.no("this flashinfer has no MultiLevelCascadeAttentionWrapper", **base.versions)
        return base

    @classmethod
    def capabilities(cls, variant=None) -> Capabilities:
        # run(q, paged_kv_cache) takes no k_scale/v_scale: no fp8 cache (the family's "auto" only).
        return cls.cascade_capabilities(
            head_sizes=HeadSizes(values=(64, 128, 256)),
            kv_layouts=frozenset({"NHD", "HND"}),
            notes=(
                GPU_BATCH_NOTE,
                "LSE rebuilt for the check from the wrapper's per-level wrappers; timed path is run() + a copy into out",
                "sub-wrappers use backend auto (fa3 on sm90 for head 64/128/256); plan() JIT-compiles on first use",
            ),
        )
