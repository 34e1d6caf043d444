"""FlashInfer through the backend interface, wrapped the way vLLM v1's FlashInferBackend does.

- The batch arrives decode-first (``reorder_batch_threshold=1``): the leading single-token
  requests go to the decode family (``BatchDecodeWithPagedKVCacheWrapper`` by default; XQA,
  trtllm-gen or cuDNN decode as variants), the rest (prefill, chunked prefill, speculative
  multi-token queries) to ``BatchPrefillWithPagedKVCacheWrapper``.
- Non-causal batches of pure prefills (no cached context: encoder style) use
  ``BatchPrefillWithRaggedKVCacheWrapper`` on the ``key``/``value`` arguments instead of the cache.
- ``plan()`` is host work (and, on first use of a kernel configuration, JIT compilation): the
  builder compiles in its constructor with a one-token dummy plan, then plans once per batch in
  ``build()``; ``forward()`` only launches kernels.

Modules: _host (constants, reasons, workspace, CSR), families (the kernel-family axis and its
support rules), builder, decode_kernels, impl, backend, standalone (+ its .tmpl source).
"""

from backends.flashinfer._host import (  # noqa: F401  (the package's public names)
    ALIBI_REASON,
    CALL_FORMS,
    CUDA_CORE_DECODE_GROUPS,
    DEFAULT_VARIANT,
    FA3_FP8_REASON,
    GraphWrappers,
    MASK_FILL,
    MAX_WORKSPACE_BYTES,
    NONCAUSAL_WINDOW_REASON,
    SINKS_REASON,
    WORKSPACE_BYTES,
    MiB,
    PagedKVCSR,
    float_workspace_bound,
    hardware_reason,
    is_workspace_overflow,
    paged_kv_csr,
    plan_growing_workspace,
    segment_csr,
    uses_ragged_path,
    verify_batch_reason,
    workspace_size,
)
from backends.flashinfer.backend import FlashInferBackend  # noqa: F401
from backends.flashinfer.builder import FlashInferMetadata, FlashInferMetadataBuilder  # noqa: F401
from backends.flashinfer.families import DECODE_BACKENDS, PREFILL_BACKENDS  # noqa: F401
from backends.flashinfer.impl import FlashInferImpl, run_into  # noqa: F401
