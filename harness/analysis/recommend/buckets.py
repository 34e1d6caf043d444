"""Shape buckets: heads / KV heads / head size, dtype / KV dtype, page size and KV layout,
features, batch kind, batch-size range, context range."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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


def batch_kind(batch: dict[str, Any]) -> str:
    kinds = [k for k, n in (("decode", "num_decode"), ("prefill", "num_prefill"), ("extend", "num_extend"))
             if (batch.get(n) or 0) > 0]
    return kinds[0] if len(kinds) == 1 else ("mixed" if kinds else "?")


def features(cfg: dict[str, Any], batch: dict[str, Any]) -> str:
    f = []
    if (cfg.get("attention_kind") or "mha") != "mha":  # MLA's absorbed / expanded form
        f.append(str(cfg["attention_kind"]))
    if cfg.get("sliding_window"):
        f.append(f"window={cfg['sliding_window']}")
    if cfg.get("softcap"):
        f.append(f"softcap={cfg['softcap']:g}")
    if cfg.get("alibi"):
        f.append("alibi")
    if cfg.get("sinks"):
        f.append("sinks")
    if cfg.get("causal") is False:
        f.append("non-causal")
    if (batch.get("prefix_groups") or 0) > 0:
        f.append("shared-prefix")
    return ",".join(f) or "-"


@dataclass(frozen=True, order=True)
class Bucket:
    num_heads: int
    num_kv_heads: int
    head_size: int
    dtype: str
    kv_cache_dtype: str
    block_size: int
    kv_layout: str
    features: str
    kind: str
    batch: str
    context: str

    @property
    def label(self) -> str:
        return (f"{self.num_heads}/{self.num_kv_heads}x{self.head_size} {self.dtype}/{self.kv_cache_dtype} "
                f"page {self.block_size} {self.kv_layout} {self.features} {self.kind} "
                f"b={self.batch} ctx={self.context}")

    def predicate(self) -> dict[str, Any]:
        """The bucket as conditions an engine can test on a layer and a batch."""
        b = next(x for x in BATCH_BINS if x[2] == self.batch)
        c = next(x for x in CONTEXT_BINS if x[2] == self.context)
        return {
            "num_heads": self.num_heads, "num_kv_heads": self.num_kv_heads, "head_size": self.head_size,
            "dtype": self.dtype, "kv_cache_dtype": self.kv_cache_dtype, "block_size": self.block_size,
            "kv_layout": self.kv_layout, "features": [] if self.features == "-" else self.features.split(","),
            "batch_kind": self.kind,
            "num_reqs": {"min": b[0], "max": b[1]},
            "mean_seq_len": {"gt": c[0], "le": c[1]},
        }


def bucket_of(cfg: dict[str, Any], batch: dict[str, Any]) -> Bucket | None:
    if not cfg or not batch or batch.get("num_reqs") is None:
        return None
    ctx = batch.get("mean_seq_len") or 0.0
    return Bucket(int(cfg["num_heads"]), int(cfg["num_kv_heads"]), int(cfg["head_size"]), str(cfg.get("dtype")),
                  str(cfg.get("kv_cache_dtype", "auto")), int(cfg.get("block_size", 0)), str(cfg.get("kv_layout", "NHD")),
                  features(cfg, batch), batch_kind(batch), _bin(int(batch["num_reqs"]), BATCH_BINS, True)[0],
                  _bin(float(ctx), CONTEXT_BINS, False)[0])


def candidate_name(backend: str, variant_label: str) -> str:
    return f"{backend} [{variant_label}]" if variant_label else backend
