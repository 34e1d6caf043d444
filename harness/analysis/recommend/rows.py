"""Every read of a result row's fields that recommend (and the engine and call-form views)
makes, in one place: when a payload's shape changes, only this module does.

Rows are ``harness.records.results.ResultRow``; a payload may be a typed model or a plain dict."""

from __future__ import annotations

from typing import Any

from attn_contract.status import Status
from harness.records.results import ResultRow


def _get(payload: Any, key: str, default: Any = None) -> Any:
    """A field of a payload, typed model (extras included) or dict alike."""
    if payload is None:
        return default
    if isinstance(payload, dict):
        return payload.get(key, default)
    v = getattr(payload, key, None)
    if v is None:
        v = (getattr(payload, "__pydantic_extra__", None) or {}).get(key)
    return default if v is None else v


def _has(payload: Any, key: str) -> bool:
    if payload is None:
        return False
    if isinstance(payload, dict):
        return key in payload
    return key in (getattr(payload, "__pydantic_extra__", None) or {}) or getattr(payload, key, None) is not None


def _plain(payload: Any) -> dict[str, Any]:
    if payload is None:
        return {}
    if isinstance(payload, dict):
        return payload
    return payload.model_dump()


def case_id(row: ResultRow) -> str:
    return f"{row.suite}/{row.case}"


def status(row: ResultRow) -> Status:
    return row.status


def variant(row: ResultRow) -> dict[str, Any]:
    return _plain(row.variant)


def config(row: ResultRow) -> dict[str, Any]:
    """The layer's configuration (heads, dtypes, page, features) as a dict."""
    return _plain(row.config)


def batch(row: ResultRow) -> dict[str, Any]:
    """The batch statistics (num_reqs, num_decode, mean_seq_len, ...) as a dict; {} when none."""
    return _plain(row.batch)


def model(row: ResultRow) -> str | None:
    """The model shape a case came from (``model:`` / ``--model``), or None."""
    m = _get(row.case_params, "model")
    return str(m) if m else None


def timing(row: ResultRow) -> tuple[float, float, float] | None:
    """(median, CI low, CI high) in microseconds, the CI clipped to contain the median; None
    when the row has no positive median."""
    t = row.timing
    med = _get(t, "median_us")
    if not isinstance(med, (int, float)) or not med > 0:
        return None
    lo, hi = _get(t, "ci_low_us"), _get(t, "ci_high_us")
    lo = lo if isinstance(lo, (int, float)) and lo > 0 else med
    hi = hi if isinstance(hi, (int, float)) else med
    return float(med), float(min(lo, med)), float(max(hi, med))


def has_rule_verdict(row: ResultRow) -> bool:
    """A cascade row: the runner recorded vLLM's cascade rule's verdict on its batch."""
    return _has(row.call, "rule_says_cascade")


def rule_says_cascade(row: ResultRow) -> bool:
    return bool(_get(row.call, "rule_says_cascade"))


def rule_costs(row: ResultRow) -> dict[str, Any]:
    """The cascade rule's inputs (min_prefix_len, requests_per_prefix, ...)."""
    return _plain(_get(row.call, "rule_costs"))


def prefix_lens(row: ResultRow) -> list[Any]:
    return list(_get(row.call, "prefix_lens") or [])


def not_applied(row: ResultRow) -> dict[str, Any]:
    """Variant axes that could not change this row's result (it stands for every value)."""
    return _plain(_get(row.variant_axes, "not_applied"))


__all__ = ["batch", "case_id", "config", "has_rule_verdict", "model", "not_applied", "prefix_lens", "rule_costs",
           "rule_says_cascade", "status", "timing", "variant"]
