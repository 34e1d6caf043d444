"""Deliberately broken FlexAttention backends (one bug each), for the mutation test in
tests/backends/test_flex_attention.py: conformance-cpu.yaml must flag each `mismatch`."""

from __future__ import annotations

from dataclasses import replace

from backends.flex_attention import FlexAttentionBackend, FlexImpl, FlexMetadataBuilder


class _TopLeftBuilder(FlexMetadataBuilder):
    def query_offset(self, seq_len: int, query_len: int) -> int:
        return 0  # causal aligned top-left: a chunked prefill's rows miss their context


class FlexTopLeftCausal(FlexAttentionBackend):
    """flex-attention with the causal diagonal aligned top-left instead of bottom-right."""

    name = "mutant-FlexTopLeftCausal"

    @classmethod
    def get_builder_cls(cls):
        return _TopLeftBuilder


class _NoSoftcapImpl(FlexImpl):
    def __init__(self, config, variant, device, layer):
        super().__init__(replace(config, softcap=0.0), variant, device, layer)  # the score_mod is dropped


class FlexNoSoftcap(FlexAttentionBackend):
    """flex-attention that builds no softcap score_mod."""

    name = "mutant-FlexNoSoftcap"

    @classmethod
    def get_impl_cls(cls):
        return _NoSoftcapImpl


FLEX_MUTANTS = [FlexTopLeftCausal, FlexNoSoftcap]
