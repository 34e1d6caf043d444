"""FlashInfer backend, host work per batch: the metadata builder plans FlashInfer's wrappers
(JIT-compiled once in the constructor with a one-token dummy plan, then planned once per batch in
``build()``), or, for the trtllm-API and cuDNN decode families and the cuDNN prefill, prepares the
block table, lengths and offsets those one-shot calls take. ``forward()`` (impl.py) only launches
kernels."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from attn_contract import (
    AttentionConfig,
    AttentionMetadataBuilder,
    CommonAttentionMetadata,
    split_decodes_and_prefills,
)

from backends.flashinfer._host import (
    CALL_FORMS,
    DEFAULT_VARIANT,
    GraphWrappers,
    PagedKVCSR,
    resolved_backend,
    paged_kv_csr,
    plan_growing_workspace,
    segment_csr,
    uses_ragged_path,
    verify_batch_reason,
    workspace_size,
)
from backends.flashinfer.decode_kernels import DecodeCall, make_decode_family
from backends.flashinfer.prefill_kernels import PrefillCall, make_prefill_family

# ---------------------------------------------------------------- metadata builder
@dataclass
class FlashInferMetadata:
    num_decodes: int
    num_decode_tokens: int
    num_prefills: int
    num_prefill_tokens: int
    decode: Any | None = None  # planned BatchDecodeWithPagedKVCacheWrapper, or None without decodes
    decode_graph_wrapper: bool = False  # decode planned on a use_cuda_graph=True wrapper (a pure-decode batch)
    decode_q_len_per_req: int = 1  # > 1: a uniform verify batch on the decode wrapper (verify_wrapper=decode)
    prefill: Any | None = None  # planned BatchPrefillWithPagedKVCacheWrapper
    ragged: Any | None = None  # planned BatchPrefillWithRaggedKVCacheWrapper (encoder style)
    plan_ms: dict[str, float] = field(default_factory=dict)
    jit_warmup_ms: float = 0.0
    decode_kernel: str | None = None
    decode_call: DecodeCall | None = None  # a non-wrapper decode family's prepared call
    decode_family: Any | None = None  # its DecodeFamily (decode_kernels.py)
    prefill_backend: str | None = None  # resolved by plan(): fa2 / fa3
    workspace_bytes: int = 0  # float workspace the plans fit in
    workspace_grows: int = 0  # times plan() overflowed it and it was doubled
    call_form: str = "vllm"  # fastest on a mixed batch: one prefill-wrapper call for every request
    prefill_call: PrefillCall | None = None  # the cuDNN prefill's prepared call (prefill_kernels.py)
    prefill_family: Any | None = None


class FlashInferMetadataBuilder(AttentionMetadataBuilder[FlashInferMetadata]):
    """One workspace and one set of wrappers per builder; ``build`` plans them per batch."""

    workspace: torch.Tensor  # the float workspace the wrappers share (_make_wrappers)

    def __init__(self, config: AttentionConfig, variant: dict[str, Any], device: torch.device):
        variant = {**DEFAULT_VARIANT, **(variant or {})}
        super().__init__(config, variant, device)
        self.workspace_grows = 0
        # Pure-decode batches: one use_cuda_graph=True decode wrapper per batch size, as vLLM keeps,
        # and (verify_wrapper=decode) per (batch size, q), which such a wrapper freezes.
        self._graph_decode = GraphWrappers()
        self.decode_family = make_decode_family(variant, config, device)
        self.prefill_family = make_prefill_family(variant, config, device)
        self._make_wrappers(workspace_size(config, device))
        self.jit_warmup_ms = self._warm_up()

    def _make_wrappers(self, nbytes: int) -> None:
        """(Re)create the wrappers on a fresh zeroed float workspace of ``nbytes``."""
        import flashinfer  # lazy: only a GPU run with the library reaches this

        config, variant = self.config, self.variant
        if hasattr(self, "workspace"):
            del self.workspace  # let the old buffer go before allocating the new one
        self.workspace = torch.zeros(nbytes, dtype=torch.uint8, device=self.device)  # must start zeroed
        self._graph_decode.clear()  # built on the old workspace
        backend = variant["prefill_backend"]
        # cutlass is a ragged-wrapper backend only (check_batch_support keeps it to ragged batches);
        # cudnn runs its own call (prefill_kernels.py), every batch on the paged cache: no ragged wrapper.
        paged_backend = "auto" if backend in ("cutlass", "cudnn") else backend
        self.decode_wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
            self.workspace, kv_layout=config.kv_layout, use_tensor_cores=bool(variant["decode_tensor_cores"])
        )
        self.prefill_wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(
            self.workspace, kv_layout=config.kv_layout, backend=paged_backend
        )
        # K/V handed to forward are [tokens, Hk, D]: NHD whatever the cache layout.
        self.ragged_wrapper = (
            flashinfer.BatchPrefillWithRaggedKVCacheWrapper(self.workspace, kv_layout="NHD", backend=backend)
            if not config.causal and not config.is_fp8_kv and backend != "cudnn"
            else None
        )

    # plan() arguments shared by the wrappers. q_data_type must be given: it defaults to fp16.
    def _common_plan_kwargs(self) -> dict[str, Any]:
        cfg = self.config
        return dict(
            sm_scale=cfg.softmax_scale,
            window_left=cfg.window_left,
            logits_soft_cap=cfg.softcap if cfg.softcap else None,
            q_data_type=cfg.torch_dtype,
            kv_data_type=cfg.cache_torch_dtype,
            o_data_type=cfg.torch_dtype,
        )

    def _graph_decode_wrapper(self, batch: int, pages: int, q_len_per_req: int = 1) -> Any:
        """The decode wrapper vLLM runs a pure-decode batch with (its full CUDA graph replays it):
        ``use_cuda_graph=True`` on index buffers of fixed size that ``plan()`` fills in place. The
        plain wrapper's ``plan()`` replaces its index buffers with new tensors, so a graph captured
        on one plan reads freed memory after the next (reports/h100/2026-12-06: 256/256 requests
        wrong on a replay with new metadata, and an illegal memory access). The index buffer holds
        ``pages`` (the block table's size: every page these requests can address; ``GraphWrappers``).

        ``q_len_per_req`` > 1 (verify_wrapper=decode): a uniform verify batch, which flashinfer
        0.6.18 takes on the tensor-core decode with backend fa2 only ("auto" may resolve to fa3 on
        sm90, which rejects it) and freezes per graph wrapper with the batch size (flashinfer#3871)."""
        import flashinfer  # lazy: only a GPU run with the library reaches this

        dev = self.device
        kw: dict[str, Any] = {"use_tensor_cores": bool(self.variant["decode_tensor_cores"])}
        if q_len_per_req > 1:
            kw = {"use_tensor_cores": True, "backend": "fa2"}
        return self._graph_decode.get((batch, q_len_per_req), pages, lambda n: flashinfer.BatchDecodeWithPagedKVCacheWrapper(
            self.workspace, kv_layout=self.config.kv_layout, use_cuda_graph=True, **kw,
            paged_kv_indptr_buffer=torch.zeros(batch + 1, dtype=torch.int32, device=dev),
            paged_kv_indices_buffer=torch.zeros(n, dtype=torch.int32, device=dev),
            paged_kv_last_page_len_buffer=torch.zeros(batch, dtype=torch.int32, device=dev),
        ))

    def _plan_decode(self, csr: PagedKVCSR, wrapper: Any = None, q_len_per_req: int = 1) -> None:
        cfg = self.config
        # Variant ``split_kv_pages`` (the split-kv invariant): 0 = disable_split_kv, N = a fixed
        # split of N pages (fixed_split_size, tensor-core decode only); absent = the heuristic.
        split = self.variant.get("split_kv_pages")
        kw: dict[str, Any] = ({} if split is None else {"disable_split_kv": True} if int(split) == 0
                              else {"fixed_split_size": int(split)})
        if q_len_per_req > 1:  # only then: a q = 1 plan stays the call vLLM makes
            kw["q_len_per_req"] = q_len_per_req
        (wrapper or self.decode_wrapper).plan(
            csr.indptr, csr.indices, csr.last_page_len, cfg.num_heads, cfg.num_kv_heads, cfg.head_size,
            cfg.block_size, pos_encoding_mode="NONE", **self._common_plan_kwargs(), **kw,
        )

    def _plan_prefill(self, qo_indptr: torch.Tensor, csr: PagedKVCSR, causal: bool) -> None:
        cfg = self.config
        self.prefill_wrapper.plan(
            qo_indptr, csr.indptr, csr.indices, csr.last_page_len, cfg.num_heads, cfg.num_kv_heads,
            cfg.head_size, cfg.block_size, causal=causal, pos_encoding_mode="NONE", **self._common_plan_kwargs(),
        )

    def _plan_ragged(self, qo_indptr: torch.Tensor) -> None:
        cfg = self.config
        kw = self._common_plan_kwargs()
        kw["kv_data_type"] = cfg.torch_dtype
        assert self.ragged_wrapper is not None  # planned only where the ragged path exists
        self.ragged_wrapper.plan(
            qo_indptr, qo_indptr, cfg.num_heads, cfg.num_kv_heads, cfg.head_size, causal=False,
            pos_encoding_mode="NONE", **kw,
        )

    def _warm_up(self) -> float:
        """Plan each wrapper once on a one-token batch: FlashInfer JIT-compiles (or loads from
        $FLASHINFER_WORKSPACE_BASE/.cache/flashinfer) the kernel module inside plan(), so this
        keeps compilation out of build()'s timed plan. Returns the milliseconds it took."""
        t0 = time.perf_counter()
        one = torch.tensor([0, 1], dtype=torch.int32)
        csr = PagedKVCSR(indptr=one, indices=torch.zeros(1, dtype=torch.int32, device=self.device),
                         last_page_len=torch.ones(1, dtype=torch.int32))
        if self.decode_family is None and self.variant["verify_wrapper"] == "decode":
            # The fa2 tensor-core module the verify plan uses (not the decode wrapper's "auto"):
            # one request of 2 tokens over two pages (kv_len = page + 1 >= q_len_per_req).
            two = PagedKVCSR(indptr=torch.tensor([0, 2], dtype=torch.int32),
                             indices=torch.zeros(2, dtype=torch.int32, device=self.device),
                             last_page_len=torch.ones(1, dtype=torch.int32))
            self._plan_decode(two, self._graph_decode_wrapper(1, 2, 2), 2)
        elif self.decode_family is None:
            self._plan_decode(csr)
        if self.prefill_family is None:
            self._plan_prefill(one, csr, causal=self.config.causal)
        if self.ragged_wrapper is not None:
            self._plan_ragged(one)
        return (time.perf_counter() - t0) * 1e3

    def build(self, common: CommonAttentionMetadata) -> FlashInferMetadata:
        # A plan that overflows the float workspace is retried on a doubled one (all wrappers
        # re-planned: they share the buffer), never reported as an error of a supported batch.
        md, grows = plan_growing_workspace(lambda: self._build(common), lambda: int(self.workspace.numel()),
                                           self._make_wrappers)
        self.workspace_grows += grows
        md.workspace_bytes = int(self.workspace.numel())
        md.workspace_grows = self.workspace_grows
        return md

    def _build(self, common: CommonAttentionMetadata) -> FlashInferMetadata:
        cfg = self.config
        split = split_decodes_and_prefills(common, decode_threshold=1)
        md = FlashInferMetadata(
            num_decodes=split.num_decodes, num_decode_tokens=split.num_decode_tokens,
            num_prefills=split.num_prefills, num_prefill_tokens=split.num_prefill_tokens,
            jit_warmup_ms=self.jit_warmup_ms,
        )
        md.call_form = str(self.variant.get("call_form", "vllm"))
        if md.call_form not in CALL_FORMS:
            raise ValueError(f"unknown call_form {md.call_form!r}; expected one of {', '.join(CALL_FORMS)}")
        if self.ragged_wrapper is not None and uses_ragged_path(cfg, common.context_lens_cpu):
            t0 = time.perf_counter()
            self._plan_ragged(common.query_start_loc_cpu.to(torch.int32))
            md.plan_ms["ragged"] = (time.perf_counter() - t0) * 1e3
            md.ragged = self.ragged_wrapper
            md.prefill_backend = resolved_backend(self.ragged_wrapper)
            # Everything runs as one ragged prefill; no decode segment.
            md.num_decodes, md.num_decode_tokens = 0, 0
            md.num_prefills, md.num_prefill_tokens = common.num_reqs, common.num_actual_tokens
            return md

        csr = paged_kv_csr(common.block_table, common.seq_lens_cpu, common.block_size)
        if self.variant["verify_wrapper"] == "decode":
            return self._build_verify(common, csr, md)
        nd = split.num_decodes
        if md.call_form == "fastest" and nd and split.num_prefills:
            nd = 0  # every request, decodes included, in the one prefill-wrapper call below
            md.num_prefill_tokens, md.num_decode_tokens = common.num_actual_tokens, 0
        if nd and self.decode_family is not None:
            t0 = time.perf_counter()
            md.decode_call = self.decode_family.plan(common.block_table[:nd], common.seq_lens_cpu[:nd])
            md.plan_ms["decode"] = (time.perf_counter() - t0) * 1e3
            md.decode_family, md.decode_kernel = self.decode_family, self.decode_family.name
        elif nd:
            # vLLM plans a pure-decode batch (the one it replays from a full graph) on a graph
            # wrapper, a mixed batch's decodes on the plain one (piecewise: attention runs eagerly).
            pure = nd == common.num_reqs
            t0 = time.perf_counter()
            wrapper = (self._graph_decode_wrapper(nd, max(int(common.block_table[:nd].numel()), int(csr.indices.numel())))
                       if pure else self.decode_wrapper)
            self._plan_decode(segment_csr(csr, 0, nd), wrapper)
            md.plan_ms["decode"] = (time.perf_counter() - t0) * 1e3
            md.decode, md.decode_graph_wrapper = wrapper, pure
            md.decode_kernel = (
                f"tensor-core ({resolved_backend(wrapper)})" if wrapper.use_tensor_cores else "cuda-core"
            )
        if nd < common.num_reqs and self.prefill_family is not None:
            t0 = time.perf_counter()
            md.prefill_call = self.prefill_family.plan(common.query_start_loc_cpu[nd:], common.seq_lens_cpu[nd:],
                                                       common.block_table[nd:], causal=common.causal)
            md.plan_ms["prefill"] = (time.perf_counter() - t0) * 1e3
            md.prefill_family, md.prefill_backend = self.prefill_family, self.prefill_family.name
        elif nd < common.num_reqs:
            qsl = common.query_start_loc_cpu[nd:].to(torch.int32)
            t0 = time.perf_counter()
            # Bottom-right causal; with causal=False every cached and new key is visible.
            self._plan_prefill(qsl - qsl[0], segment_csr(csr, nd, common.num_reqs), causal=common.causal)
            md.plan_ms["prefill"] = (time.perf_counter() - t0) * 1e3
            md.prefill = self.prefill_wrapper
            md.prefill_backend = resolved_backend(self.prefill_wrapper)
        return md

    def _build_verify(self, common: CommonAttentionMetadata, csr: PagedKVCSR,
                      md: FlashInferMetadata) -> FlashInferMetadata:
        """verify_wrapper=decode: the whole uniform verify batch (every request q > 1 tokens) as
        one decode-wrapper call with q_len_per_req=q, on the graph wrapper of (batch size, q)."""
        reason = verify_batch_reason(common.query_lens_cpu, common.seq_lens_cpu)
        if reason:  # check_batch_support turns such a batch away first
            raise ValueError(reason)
        n = common.num_reqs
        q = int(common.query_lens_cpu[0])
        t0 = time.perf_counter()
        wrapper = self._graph_decode_wrapper(n, max(int(common.block_table.numel()), int(csr.indices.numel())), q)
        self._plan_decode(csr, wrapper, q)
        md.plan_ms["decode"] = (time.perf_counter() - t0) * 1e3
        md.decode, md.decode_graph_wrapper, md.decode_q_len_per_req = wrapper, True, q
        md.decode_kernel = f"tensor-core ({resolved_backend(wrapper)}), q_len_per_req={q}"
        md.num_decodes, md.num_decode_tokens = n, common.num_actual_tokens
        md.num_prefills, md.num_prefill_tokens = 0, 0
        return md


