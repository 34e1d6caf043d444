"""examples/naive_backend.py with the classic bug: the causal mask is never applied. Decode
cells (one query token, the last of its sequence) cannot tell; prefill and mixed cells can.
Needs examples/ on sys.path."""

from __future__ import annotations

from naive_backend import NaiveBackend, NaiveMetadataBuilder


class _NoMaskBuilder(NaiveMetadataBuilder):
    def build(self, common):
        metadata = super().build(common)
        metadata.causal = False  # the bug
        return metadata


class NoCausalMaskBackend(NaiveBackend):
    name = "naive-nomask"

    @classmethod
    def get_builder_cls(cls):
        return _NoMaskBuilder
