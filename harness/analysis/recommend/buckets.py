"""Shape buckets: heads / KV heads / head size, dtype / KV dtype, page size and KV layout,
features, batch kind, batch-size range, context range."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.records.parts import BatchSummary, LayerFields, RowConfig

BATCH_BINS: tuple[tuple[int, int | None, str], ...] = (
    (1, 1, "1"), (2, 8, "2-8"), (9, 32, "9-32"), (33, 128, "33-128"), (129, 512, "129-512"), (513, None, "513+"),
)
CONTEXT_BINS: tuple[tuple[int, int | None, str], ...] = (
    (0, 1024, "<=1k"), (1024, 4096, "1k-4k"), (4096, 16384, "4k-16k"), (16384, 65536, "16k-64k"), (65536, None, ">64k"),
)
"""Batch size: requests, inclusive ranges. Context: mean KV length per request (prefix
included), ranges (low, high]. Coarse on purpose: a policy needs few, stable buckets."""


def _bin(x: float, bins: tuple[tuple[int, int | None, str], ...], inclusive_low: bool) -> tuple[str, int, int | None]:
    for lo, hi, label in bins:
        above = x >= lo if inclusive_low else x > lo
        if above and (hi is None or x <= hi):
            return label, lo, hi
    return bins[0][2], bins[0][0], bins[0][1]


@dataclass(frozen=True, order=True)
class Bucket:
    """A layer (``RowConfig.layer_key``: the values of the row's ``LayerFields``), its features,
    and the batch's kind, size range and context range."""

    layer: tuple[Any, ...]
    features: str
    kind: str
    batch: str
    context: str

    @property
    def layer_fields(self) -> dict[str, Any]:
        """The layer's fields by name (``num_heads``, ..., ``kv_layout``)."""
        return LayerFields.named(self.layer)

    @property
    def label(self) -> str:
        ly = self.layer_fields
        return (f"{ly['num_heads']}/{ly['num_kv_heads']}x{ly['head_size']} {ly['dtype']}/{ly['kv_cache_dtype']} "
                f"page {ly['block_size']} {ly['kv_layout']} {self.features} {self.kind} "
                f"b={self.batch} ctx={self.context}")

    def predicate(self) -> dict[str, Any]:
        """The bucket as conditions an engine can test on a layer and a batch."""
        b = next(x for x in BATCH_BINS if x[2] == self.batch)
        c = next(x for x in CONTEXT_BINS if x[2] == self.context)
        return {
            **self.layer_fields, "features": [] if self.features == "-" else self.features.split(","),
            "batch_kind": self.kind,
            "num_reqs": {"min": b[0], "max": b[1]},
            "mean_seq_len": {"gt": c[0], "le": c[1]},
        }


def bucket_of(cfg: RowConfig | None, batch: BatchSummary | None) -> Bucket | None:
    """The bucket of a layer and a batch (the shape, its features, the batch's kind, size and
    context range); None without a layer or a batch size."""
    if cfg is None or batch is None or batch.num_reqs is None:
        return None
    ctx = batch.mean_seq_len or 0.0
    return Bucket(cfg.layer_key(), cfg.features(batch), batch.kind, _bin(batch.num_reqs, BATCH_BINS, True)[0],
                  _bin(float(ctx), CONTEXT_BINS, False)[0])
