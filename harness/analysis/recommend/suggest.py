"""``recommend --suggest``: a suite with one case per bucket the results do not measure."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from harness.analysis.recommend.export import atomic_write
from harness.analysis.recommend.load import RecommendError
from harness.analysis.recommend.rank import BucketResult
from harness.analysis.recommend.recommendation import Recommendation


def _suggest_case(i: int, res: BucketResult) -> dict[str, Any] | None:
    """A case of the bucket's shape, rebuilt from one of its rows' config and batch statistics
    (same heads, dtypes, page, features, batch kind and size; lengths in the context range)."""
    cfg, b = res.example.config, res.example.batch
    if cfg is None or not b.given:
        return None
    n_dec, n_pre, n_ext = (int(n or 0) for n in (b.num_decode, b.num_prefill, b.num_extend))
    mean = max(1, int(round(b.mean_seq_len or 1)))
    mx = max(mean, int(b.max_seq_len or mean))
    prefix = 0
    case: dict[str, Any] = {
        "name": f"fill-{i:03d}",
        "num_heads": cfg.num_heads, "num_kv_heads": cfg.num_kv_heads, "head_size": cfg.head_size,
        "dtype": cfg.dtype, "kv_cache_dtype": cfg.kv_cache_dtype,
        "block_size": cfg.block_size, "kv_layout": cfg.kv_layout,
        "causal": cfg.causal is not False,
    }
    if cfg.sliding_window:
        case["sliding_window"] = cfg.sliding_window
    if cfg.alibi:
        case["alibi"] = cfg.alibi
    if cfg.sinks:
        case["sinks"] = cfg.sinks
    if cfg.softcap:
        case["softcap"] = float(cfg.softcap)
    if b.prefix_groups is not None and b.prefix_groups > 0:
        call_facts = res.example.call.facts if res.example.call is not None else {}
        lens = list(call_facts.get("prefix_lens") or []) or [res.example.rule_costs.get("min_prefix_len")]
        prefix = int(min(x for x in lens if x)) if any(lens) else 0
        prefix -= prefix % case["block_size"]
        if prefix > 0:
            case["shared_prefix"] = {"length": prefix, "groups": b.prefix_groups}
    own_mean, own_max = max(1, mean - prefix), max(1, mx - prefix)
    low = max(1, min(own_mean, 2 * own_mean - own_max))
    ctx = {"dist": "uniform", "low": max(0, low - 1), "high": max(0, own_max - 1)}
    q_tokens = int(b.num_tokens or 0) - n_dec
    per_q = max(1, q_tokens // max(1, n_pre + n_ext))
    batch = []
    if n_dec:
        batch.append({"kind": "decode", "count": n_dec, "context_len": ctx})
    if n_pre:
        batch.append({"kind": "prefill", "count": n_pre, "query_len": per_q})
    if n_ext:
        batch.append({"kind": "extend", "count": n_ext, "query_len": per_q,
                      "context_len": {"dist": "uniform", "low": 0, "high": max(0, own_max - per_q)}})
    if not batch:
        return None
    case["batch"] = batch
    case["tags"] = [f"bucket: {res.bucket.label}"]
    return case


def suggest_suite(rec: Recommendation, *, include_single: bool = True) -> dict[str, Any] | None:
    """A suite with one case per bucket that has no measurement (and, with ``include_single``,
    per bucket measured with one candidate only); None when nothing is missing. Its backends are
    those of the rows with recorded facts (run.json, else harness/analysis/engine_table.json)."""
    todo = rec.unmeasured + (rec.single_candidate if include_single else [])
    cases = [c for i, res in enumerate(todo) if (c := _suggest_case(i, res)) is not None]
    if not cases:
        return None
    known = set(rec.inputs.facts.known_backends())
    backends = sorted({r.backend for r in rec.inputs.rows if r.backend in known})
    return {
        "suite": "recommend-fill",
        "description": f"Buckets without a measurement on {rec.inputs.gpu} (written by harness recommend --suggest).",
        "backends": backends or None,
        "cases": cases,
    }


def write_suggest(rec: Recommendation, path: str | Path, check: Callable[[Any], None] | None = None) -> int:
    """Write the fill-in suite (validated with the same loader ``harness validate`` uses, and by
    ``check``: the command passes the registry's backend check, which a reader does not import)
    atomically; returns the number of cases (0: nothing missing, nothing written)."""
    import yaml

    from harness.spec import SpecError, parse_suite

    data = suggest_suite(rec)
    if data is None:
        return 0
    if data["backends"] is None:
        del data["backends"]
    # One case a line (flow style): a fill-in suite can hold hundreds of small cases.
    head = {k: v for k, v in data.items() if k != "cases"}
    text = ("# Written by `harness recommend --suggest`: one case per bucket the results do not measure.\n"
            "# Lengths are rebuilt from the bucket's batch statistics (kind, size, mean/max context).\n"
            + yaml.safe_dump(head, sort_keys=False, width=120, default_flow_style=None) + "cases:\n"
            + "".join("- " + yaml.safe_dump(c, sort_keys=False, default_flow_style=True, width=10**6).strip() + "\n"
                      for c in data["cases"]))
    try:  # validate exactly what is written, with the checks `harness validate` applies
        suite = parse_suite(yaml.safe_load(text), str(path))
        if check is not None:
            check(suite)
    except SpecError as e:  # a bug here, not the user's: say so instead of writing a bad suite
        raise RecommendError(f"--suggest: the generated suite does not validate: {e}") from None
    atomic_write(Path(path), text)
    return len(suite.cases)
