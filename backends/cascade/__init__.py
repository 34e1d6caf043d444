"""Cascade (shared-prefix) attention backends: a prefix pass over each group's shared blocks, a
suffix pass over each request's own blocks and the exact LSE merge (docs/cascade.md).

``base.py`` holds what the family shares (``CascadeBackend``: the capabilities every cascade
backend declares alike, the batch preconditions, the suffix block table); one module per
backend: ``torch_cascade`` (the algorithm in torch, CPU and GPU), ``flash_attn_cascade``
(FlashAttention 3/4 paged passes), ``flashinfer_cascade`` (FlashInfer's two-level wrapper)."""
