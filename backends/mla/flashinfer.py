"""FlashInfer's MLA kernels on the contract's two MLA forms (attn_contract/mla.py), as SGLang's
flashinfer MLA backend calls them:

- ``mla_absorbed``: ``flashinfer.mla.BatchMLAPagedAttentionWrapper`` over the paged latent
  cache: ``run(q_nope, q_pe, ckv, kpe)`` with q and the cache cut into their 512 / 64 parts as
  strided views (no copy, as SGLang passes ``k_buffer[..., :512]`` / ``[..., 512:]``); any page
  size; causal with bottom-right alignment for multi-token (speculative) queries. An fp8 latent
  (fa2 and fa3) is planned with a bf16 query; its dequantization scale (``layer.k_scale``, one
  for the whole latent) goes to ``run()`` as ``ckv_scale`` / ``kpe_scale``, the one form
  FlashInfer 0.6.18 takes (a scale folded into the query was refused on the H200).
- ``mla_expanded``: ``BatchPrefillWithRaggedKVCacheWrapper`` with ``head_dim_qk`` 192 and
  ``head_dim_vo`` 128 over the packed expanded key/value (SGLang's ragged MLA prefill).

Variant axis ``mla_backend``: the wrappers' ``backend=`` (fa2, fa3; SGLang's ``auto`` is fa3 on
sm90). The LSE is FlashInfer's base 2. vLLM's FLASHINFER_MLA is a different kernel
(``trtllm_batch_decode_with_kv_cache_mla``, compute capability 10.x only), so this backend
declares no vLLM name.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch

from attn_contract import (
    MLA_ABSORBED,
    AttentionConfig,
    AttentionImpl,
    AttentionMetadataBuilder,
    Availability,
    Capabilities,
    CommonAttentionMetadata,
    CudaGraphSupport,
    MultipleOf,
)
from attn_contract.engines import EngineName

from backends.mla.base import MLALibraryBackend
from backends.mla.common import (
    MLA_KINDS,
    cuda_capability,
    describe_form,
    import_reason,
    split_latent,
    split_query,
)
from backends.flashinfer import GraphWrappers, MiB, paged_kv_csr, plan_growing_workspace

MLA_BACKENDS = ("fa2", "fa3")
WORKSPACE_BYTES = 256 * MiB
# fp8 latent: run(ckv_scale=, kpe_scale=) with a bf16 query, on fa2 and fa3 alike. FlashInfer
# 0.6.18 refuses a scale folded into sm_scale ("Exactly one of ckv_scale or ckv_scale_arr is
# required when kv_data_type is FP8") and an fp8 query; the H200 probe of 2026-12-02 passed the
# scale arguments on both backends (rel. err 5.8e-3; reports/h200/2026-12-02/probes/mla-probe).
FP8_CALL = "run(..., ckv_scale=k_scale, kpe_scale=k_scale) with a bf16 query"


@dataclass
class FlashInferMLAMetadata:
    kind: str
    wrapper: Any
    num_tokens: int
    uniform_decode: bool  # every request has one query token (graph-capturable)
    plan_ms: float
    jit_warmup_ms: float
    resolved_backend: str | None
    workspace_bytes: int
    fp8: bool  # fp8 latent: the impl passes layer.k_scale as run()'s ckv_scale / kpe_scale


class FlashInferMLAMetadataBuilder(AttentionMetadataBuilder[FlashInferMLAMetadata]):
    """One workspace and one wrapper of the layer's form; JIT-compiled in the constructor."""

    workspace: torch.Tensor  # the wrapper's float workspace (_make)

    def __init__(self, config: AttentionConfig, variant: dict[str, Any], device: torch.device):
        super().__init__(config, {"mla_backend": "fa3", **(variant or {})}, device)
        # Uniform single-token decode batches (the ones a full graph replays): one
        # use_cuda_graph=True wrapper per batch size, as SGLang's decode graphs use.
        self._graph = GraphWrappers()
        self._make(WORKSPACE_BYTES)
        t0 = time.perf_counter()
        self._warm_up()
        self.jit_warmup_ms = (time.perf_counter() - t0) * 1e3

    def _make(self, nbytes: int) -> None:
        import flashinfer  # lazy: only a GPU run with the library gets here
        from flashinfer.mla import BatchMLAPagedAttentionWrapper

        if hasattr(self, "workspace"):
            del self.workspace  # let the old buffer go before allocating the new one
        self.workspace = torch.zeros(nbytes, dtype=torch.uint8, device=self.device)
        self._graph.clear()  # built on the old workspace
        backend = str(self.variant["mla_backend"])
        if self.config.attention_kind == MLA_ABSORBED:
            self.wrapper = BatchMLAPagedAttentionWrapper(self.workspace, backend=backend)
        else:
            self.wrapper = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(self.workspace, "NHD", backend=backend)

    @property
    def _scale(self) -> float:
        return self.config.softmax_scale

    def _graph_wrapper(self, batch: int, pages: int) -> Any:
        """The wrapper a uniform decode batch is planned on: ``use_cuda_graph=True`` with index
        buffers of fixed size that ``plan()`` fills in place. The plain wrapper's ``plan()``
        replaces them with new tensors, so a graph captured on one plan reads freed memory after
        the next (reports/h100/2026-12-06: 64/64 requests wrong on a replay with new metadata).
        ``pages``: the block table's size (``GraphWrappers``)."""
        from flashinfer.mla import BatchMLAPagedAttentionWrapper

        dev, i32 = self.device, torch.int32
        return self._graph.get(batch, pages, lambda n: BatchMLAPagedAttentionWrapper(
            self.workspace, use_cuda_graph=True, qo_indptr=torch.zeros(batch + 1, dtype=i32, device=dev),
            kv_indptr=torch.zeros(batch + 1, dtype=i32, device=dev), kv_indices=torch.zeros(n, dtype=i32, device=dev),
            kv_len_arr=torch.zeros(batch, dtype=i32, device=dev), backend=str(self.variant["mla_backend"])))

    def _plan_absorbed(self, qo_indptr: torch.Tensor, block_table: torch.Tensor, seq_lens: torch.Tensor,
                       causal: bool, wrapper: Any = None) -> None:
        cfg, dims = self.config, self.config.mla
        csr = paged_kv_csr(block_table, seq_lens, cfg.block_size)
        (wrapper or self.wrapper).plan(qo_indptr.to(torch.int32), csr.indptr, csr.indices, seq_lens.to(torch.int32),
                          cfg.num_heads, dims.kv_lora_rank, dims.qk_rope_head_dim, cfg.block_size, causal,
                          self._scale, cfg.torch_dtype, cfg.cache_torch_dtype)

    def _plan_expanded(self, qo_indptr: torch.Tensor, kv_indptr: torch.Tensor, causal: bool) -> None:
        cfg = self.config
        self.wrapper.plan(qo_indptr.to(torch.int32), kv_indptr.to(torch.int32), cfg.num_heads, cfg.num_kv_heads,
                          cfg.head_size, head_dim_vo=cfg.value_head_size, causal=causal, sm_scale=self._scale,
                          q_data_type=cfg.torch_dtype, kv_data_type=cfg.torch_dtype)

    def _warm_up(self) -> None:
        """Plan once on a one-token batch: FlashInfer JIT-compiles (or loads) the module inside
        plan(), which keeps compilation out of build()'s timed plan."""
        one = torch.tensor([0, 1], dtype=torch.int32)
        if self.config.attention_kind == MLA_ABSORBED:
            self._plan_absorbed(one, torch.zeros(1, 1, dtype=torch.int32, device=self.device),
                                torch.ones(1, dtype=torch.int32), self.config.causal)
        else:
            self._plan_expanded(one, one, self.config.causal)

    def build(self, common: CommonAttentionMetadata) -> FlashInferMLAMetadata:
        cfg = self.config
        t0 = time.perf_counter()
        uniform = bool((common.query_lens_cpu == 1).all())

        def plan() -> Any:  # the planned wrapper; re-run on a regrown workspace's new wrappers
            if cfg.attention_kind != MLA_ABSORBED:
                self._plan_expanded(common.query_start_loc_cpu, common.kv_start_loc_cpu, common.causal)
                return self.wrapper
            w = self._graph_wrapper(common.num_reqs, int(common.block_table.numel())) if uniform else self.wrapper
            self._plan_absorbed(common.query_start_loc_cpu, common.block_table, common.seq_lens_cpu, common.causal, w)
            return w

        wrapper, _ = plan_growing_workspace(plan, lambda: int(self.workspace.numel()), self._make)
        plan_ms = (time.perf_counter() - t0) * 1e3
        return FlashInferMLAMetadata(
            kind=cfg.attention_kind, wrapper=wrapper, num_tokens=common.num_actual_tokens,
            uniform_decode=uniform, plan_ms=plan_ms, jit_warmup_ms=self.jit_warmup_ms,
            resolved_backend=str(getattr(wrapper, "_backend", self.variant["mla_backend"])),
            workspace_bytes=int(self.workspace.numel()),
            fp8=cfg.is_fp8_kv and cfg.attention_kind == MLA_ABSORBED)


class FlashInferMLAImpl(AttentionImpl[FlashInferMLAMetadata]):
    def forward(self, query, key, value, kv_cache, metadata, out, lse_out=None):
        md, cfg = metadata, self.config
        o = out if out.is_contiguous() else torch.empty(out.shape, dtype=out.dtype, device=out.device)
        lse = None
        if lse_out is not None:
            lse = lse_out if lse_out.is_contiguous() else torch.empty(lse_out.shape, dtype=torch.float32,
                                                                      device=out.device)
        if md.kind == MLA_ABSORBED:
            q_nope, q_pe = split_query(query, cfg.mla.kv_lora_rank)
            ckv, kpe = split_latent(kv_cache, cfg.mla.kv_lora_rank)
            scales = {}
            if md.fp8:
                s = float(self.layer.k_scale)
                scales = {"ckv_scale": s, "kpe_scale": s}
            md.wrapper.run(q_nope, q_pe, ckv, kpe, out=o, lse=lse, return_lse=lse is not None, **scales)
        else:
            md.wrapper.run(query, key, value, out=o, lse=lse, return_lse=lse is not None)
        if o is not out:
            out.copy_(o)
        if lse is not None and lse is not lse_out:
            lse_out.copy_(lse)
        return out

    def graph_safe(self, metadata: FlashInferMLAMetadata) -> str | None:
        if metadata.kind == MLA_ABSORBED and metadata.uniform_decode:
            return None
        return ("FlashInfer's MLA/ragged plan is batch-specific; only uniform single-token decode batches are "
                "graph-capturable")

    def describe_call(self, metadata: FlashInferMLAMetadata) -> dict[str, Any]:
        md = metadata
        fn = ("flashinfer.mla.BatchMLAPagedAttentionWrapper.run (q_nope/q_pe and ckv/kpe as views)"
              if md.kind == MLA_ABSORBED else
              "flashinfer.BatchPrefillWithRaggedKVCacheWrapper.run (head_dim_qk 192, head_dim_vo 128)")
        return {**describe_form(self.config), "function": fn, "num_tokens": md.num_tokens,
                "mla_backend_requested": self.variant.get("mla_backend"), "mla_backend_resolved": md.resolved_backend,
                "plan_ms": round(md.plan_ms, 3), "jit_warmup_ms": round(md.jit_warmup_ms, 1),
                "workspace_mib": md.workspace_bytes // MiB,
                "fp8_latent": FP8_CALL if md.fp8 else None,
                "return_lse": "checked call only (timed calls: no)"}


class FlashInferMLABackend(MLALibraryBackend):
    name = "flashinfer-mla"
    description = ("FlashInfer MLA: BatchMLAPagedAttentionWrapper on the paged latent cache (absorbed) and the ragged "
                   "prefill wrapper at 192/128 (expanded), as SGLang's flashinfer MLA backend calls them")
    tested_versions = {"flashinfer-python": ">=0.6.18,<0.7"}
    library_modules = ("flashinfer",)
    variant_axes = {"mla_backend": MLA_BACKENDS}
    engine_names = {
        "sglang": EngineName("flashinfer", attention_kinds=MLA_KINDS, runs={"mla_backend": "fa3"},
                             caveat="SGLang plans the MLA wrapper with backend='auto' (fa3 on sm90) on a page-1 "
                                    "cache and prefills without cached context through the ragged wrapper"),
    }

    @classmethod
    def availability(cls, variant: dict[str, Any] | None = None) -> Availability:
        reason = import_reason("flashinfer", "pip install flashinfer-python")
        if reason:
            return Availability.no(reason)
        import flashinfer

        version = str(getattr(flashinfer, "__version__", "unknown"))
        cap = cuda_capability()
        if cap is None:
            return Availability.no("no CUDA device (FlashInfer runs on NVIDIA GPUs)", flashinfer=version)
        reason = arch_reason(cap, str((variant or {}).get("mla_backend", "fa3")))
        return Availability.no(reason, flashinfer=version) if reason else Availability.ok(flashinfer=version)

    @classmethod
    def capabilities(cls, variant: dict[str, Any] | None = None) -> Capabilities:
        backend = str((variant or {}).get("mla_backend", "fa3"))
        return cls.mla_capabilities(
            dtypes=frozenset({"float16", "bfloat16"}),
            kv_cache_dtypes=frozenset({"auto", "fp8_e4m3"}),  # fp8: absorbed form, bf16 query (check_support)
            block_sizes=(MultipleOf(1),), lse_base=2, cudagraph=CudaGraphSupport.UNIFORM_SINGLE_TOKEN_DECODE,
            cudagraph_source="SGLang's flashinfer MLA wrapper call, planned per batch (vLLM's FLASHINFER_MLA is the trtllm-gen kernel, UNIFORM_BATCH)",
            notes=(f"mla_backend={backend}: absorbed form on BatchMLAPagedAttentionWrapper, any page size; expanded "
                   "form on the ragged prefill wrapper (192/128)",
                   "fp8 latent: " + FP8_CALL,
                   "plan() JIT-compiles per (backend, dtypes, head dims) on first use; the builder warms up"),
        )

    @classmethod
    def mla_support_reason(cls, config: AttentionConfig, variant: dict[str, Any]) -> str | None:
        if config.kv_cache_dtype == "fp8_e4m3" and config.dtype != "bfloat16" and config.attention_kind == MLA_ABSORBED:
            return "fp8 latent: planned with a bf16 query only (the probed combination)"
        return None

    @classmethod
    def workspace_bytes(cls, config: AttentionConfig, variant: dict[str, Any]) -> int:
        """The float workspace plus the wrapper's 8 MiB int workspace (flashinfer/mla.py)."""
        return WORKSPACE_BYTES + 8 * MiB

    @classmethod
    def get_builder_cls(cls) -> type[FlashInferMLAMetadataBuilder]:
        return FlashInferMLAMetadataBuilder

    @classmethod
    def get_impl_cls(cls) -> type[FlashInferMLAImpl]:
        return FlashInferMLAImpl


def arch_reason(capability: tuple[int, int], mla_backend: str) -> str | None:
    """The GPU the variant needs, as FlashInfer 0.6.18 checks it (None if this one has it)."""
    major, minor = capability
    if (major, minor) < (8, 0):
        return f"FlashInfer's MLA kernels need compute capability >= 8.0; this GPU is sm{major}{minor}"
    if mla_backend == "fa3" and major != 9:
        return f"mla_backend=fa3: FlashInfer's fa3 MLA kernels are Hopper (sm90a) only; this GPU is sm{major}{minor}"
    if mla_backend not in MLA_BACKENDS:
        return f"unknown mla_backend {mla_backend!r}; expected one of {', '.join(MLA_BACKENDS)}"
    return None
