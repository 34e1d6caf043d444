"""The names both sides of a standalone library call agree on (no torch import).

``AttentionBackend.standalone_call`` returns Python source that reads these names at module
level; ``harness repro`` (the script's inputs section) and ``harness crosscheck`` (bound from
the row's own batch) define every one of them. Spelled here once so that neither side keeps
its own list. The call-form axis (``CALL_FORM_AXIS``) is the one variant axis the harness core
reads by name: which library call a row times (docs/measurement.md §10).
"""

from __future__ import annotations

# Tensors on DEVICE: q [num_tokens, NUM_HEADS, HEAD_SIZE]; kv_cache (num_blocks, 2, BLOCK_SIZE,
# NUM_KV_HEADS, HEAD_SIZE) in KV_LAYOUT memory order; block_table, seq_lens, query_start_loc int32.
STANDALONE_TENSORS: tuple[str, ...] = ("q", "kv_cache", "block_table", "seq_lens", "query_start_loc")
# Host values: the batch's lengths, their prefix sums, the request count and the request mask.
STANDALONE_HOST: tuple[str, ...] = ("QUERY_LENS", "SEQ_LENS", "QSL", "n", "visible")
# Constants of the case and its layer (ALIBI_SLOPES / SINKS: float32 [NUM_HEADS] on DEVICE or None).
STANDALONE_CONSTANTS: tuple[str, ...] = (
    "DEVICE", "DTYPE", "CACHE_DTYPE", "FP8", "NUM_HEADS", "NUM_KV_HEADS", "HEAD_SIZE", "BLOCK_SIZE",
    "KV_LAYOUT", "SCALE", "CAUSAL", "WINDOW_LEFT", "SOFTCAP", "K_SCALE", "V_SCALE", "ALIBI_SLOPES", "SINKS")
STANDALONE_NAMES: tuple[str, ...] = STANDALONE_TENSORS + STANDALONE_HOST + STANDALONE_CONSTANTS

# The call-form variant axis: "vllm" calls the library as vLLM's impl does, "fastest" makes the
# library's fastest documented call for the batch.
CALL_FORM_AXIS = "call_form"
CALL_FORM_VLLM = "vllm"
CALL_FORM_FASTEST = "fastest"
CALL_FORMS: tuple[str, ...] = (CALL_FORM_VLLM, CALL_FORM_FASTEST)
