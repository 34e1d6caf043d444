"""``harness recommend``: measured backend selection per shape bucket, for serving engines.

From result rows of one GPU (one or many runs) this module:

- groups rows into shape buckets (heads / KV heads / head size, dtype / KV dtype, page size and
  KV layout, features, batch kind, batch-size range, context range);
- ranks, in each bucket, the backend+variant candidates that passed the check on every case of
  the bucket, by the geometric mean of their median times over the bucket's cases;
- gives the winner's margin over the runner-up with an interval built from the rows' own
  median confidence intervals, and calls it a tie when that interval reaches 0 (the CIs
  overlap) or the margin is under the tie band;
- compares with vLLM's default choice (``harness.selection_rules.vllm_default``) and with the
  cascade decision rules (vLLM's and one fitted to the measured cells);
- lists the buckets without a measurement and writes a suite that fills them.

How the margin interval is computed: each timed row carries a distribution-free confidence
interval of its median, ``[ci_low_us, ci_high_us]`` (``harness.timing``; coverage is recorded
as ``ci_coverage``, about 95%). Repeated runs of one case are merged into the median of their
medians with the envelope of their intervals (so run-to-run drift counts as noise). For one
case the runner-up/winner ratio lies in ``[ru_low / w_high, ru_high / w_low]`` (interval
arithmetic: if both intervals hold, the ratio is inside); over several cases the bounds are
averaged geometrically like the point estimate. This is conservative and not a formal test.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from attn_contract.status import FAILED, Status
from harness.results import read_header, read_rows
from harness.selection_rules import (
    VLLM_BACKENDS,
    CascadeRule,
    VllmChoice,
    fit_cascade_rule,
    harness_candidates,
    leave_one_out,
    vllm_default,
)

POLICY_FORMAT = "attn-harness.policy/1"
DEFAULT_TIE = 0.03
RAN_OK = Status.PASS
CASCADE_SUFFIX = "-cascade"  # a cascade backend is named after its plain backend (harness/report.py too)

BATCH_BINS: tuple[tuple[int, int | None, str], ...] = (
    (1, 1, "1"), (2, 8, "2-8"), (9, 32, "9-32"), (33, 128, "33-128"), (129, 512, "129-512"), (513, None, "513+"),
)
CONTEXT_BINS: tuple[tuple[int, int | None, str], ...] = (
    (0, 1024, "<=1k"), (1024, 4096, "1k-4k"), (4096, 16384, "4k-16k"), (16384, 65536, "16k-64k"), (65536, None, ">64k"),
)
"""Batch size: requests, inclusive ranges. Context: mean KV length per request (prefix
included), ranges (low, high]. Coarse on purpose: a policy needs few, stable buckets."""


class RecommendError(ValueError):
    """Input that cannot give a recommendation (mixed GPUs, no rows): one clear message."""


# ---------------------------------------------------------------- loading


@dataclass
class Inputs:
    rows: list[dict[str, Any]]
    sources: list[str]
    gpu: str
    capability: str | None
    notes: list[str] = field(default_factory=list)
    call_form: str = "vllm"  # which call form the verdicts rank (harness/callform_gap.py)


def load_inputs(paths: Sequence[str | Path], call_form: str = "vllm") -> Inputs:
    """Rows of every results folder / .jsonl, refusing runs of different GPUs."""
    rows: list[dict[str, Any]] = []
    headers: list[tuple[str, dict[str, Any]]] = []
    for p in paths:
        p = Path(p)
        try:
            got = read_rows(p)
        except FileNotFoundError as e:  # already names the path
            raise RecommendError(str(e)) from None
        except (ValueError, OSError, UnicodeDecodeError) as e:
            raise RecommendError(f"{p}: {e}") from None
        headers.append((str(p), read_header(p)))
        rows.extend(r.model_dump() for r in got)
    if not rows:
        raise RecommendError(f"{', '.join(map(str, paths))}: no result rows")
    return inputs_of(rows, headers, call_form)


def inputs_of(rows: list[dict[str, Any]], headers: Sequence[tuple[str, dict[str, Any]]], call_form: str = "vllm") -> Inputs:
    """Rows with the GPU their run headers name; refuses headers of different GPUs."""
    gpus: dict[str, list[str]] = defaultdict(list)
    caps: set[str] = set()
    notes: list[str] = []
    for src, header in headers:
        dev = header.get("device") or {}
        name = dev.get("name") or (dev.get("type") if dev.get("type") == "cpu" else None)
        if name:
            gpus[str(name)].append(src)
        else:
            notes.append(f"{src}: no run.json device; assumed to be the same GPU as the others")
        if dev.get("capability"):
            caps.add(str(dev["capability"]))
    if len(gpus) > 1:
        detail = "; ".join(f"{g}: {', '.join(srcs)}" for g, srcs in sorted(gpus.items()))
        raise RecommendError(f"results come from different GPUs ({detail}); recommend ranks one GPU at a time")
    from harness.callform_gap import form_note, only_call_form  # serving verdicts rank one call form

    notes.append(form_note(call_form, rows))
    if rows and not (rows := only_call_form(rows, call_form)):
        raise RecommendError(f"--call-form {call_form}: no result rows of that call form")
    return Inputs(rows, [src for src, _ in headers], next(iter(gpus), "unknown"),
                  next(iter(caps)) if len(caps) == 1 else None, notes, call_form)


_NESTED = ("config", "batch", "timing", "call", "variant", "check", "metrics", "host", "case_params")


def rows_from_frame(df: Any) -> list[dict[str, Any]]:
    """Result rows back from a frame of rows flattened with dots (``pd.json_normalize``, the
    report's frame): nested dicts again, missing values dropped, whole floats back to ints
    (pandas turns an int column holding NaN into floats)."""

    def clean(v: Any) -> Any:
        if isinstance(v, float):
            if math.isnan(v):
                return None
            return int(v) if v.is_integer() else v
        return v

    out = []
    for rec in df.to_dict("records"):
        row: dict[str, Any] = {}
        for key, v in rec.items():
            v = clean(v)
            if v is None:
                continue
            head, dot, rest = str(key).partition(".")
            if dot and head in _NESTED:
                node = row.setdefault(head, {})
                parts = rest.split(".")
                for part in parts[:-1]:
                    node = node.setdefault(part, {})
                node[parts[-1]] = v
            elif not dot and key in ("suite", "case", "backend", "variant_label", "status", "reason"):
                row[key] = v
        row.setdefault("variant_label", "")
        out.append(row)
    return out


# ---------------------------------------------------------------- buckets


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


# ---------------------------------------------------------------- ranking


@dataclass
class Timed:
    median: float
    low: float
    high: float
    runs: int


@dataclass
class Candidate:
    backend: str
    variant: dict[str, Any]
    variant_label: str
    times: dict[str, Timed]  # case id -> merged timing
    excluded: str = ""  # why it is not ranked ("" = ranked)
    rule_says_cascade: dict[str, bool] = field(default_factory=dict)  # case id -> vLLM's cascade rule (cascade rows)

    name_override: str = ""

    @property
    def name(self) -> str:
        return self.name_override or candidate_name(self.backend, self.variant_label)


@dataclass
class Ratio:
    """runner / reference, point and interval, geometric mean over the shared cases."""

    point: float
    low: float
    high: float
    cases: int

    @property
    def pct(self) -> float:
        return (self.point - 1) * 100


def ratio(a: Candidate, b: Candidate) -> Ratio | None:
    """How much slower ``a`` is than ``b`` (a/b), over the cases both ran."""
    shared = sorted(set(a.times) & set(b.times))
    if not shared:
        return None
    lp = [math.log(a.times[c].median / b.times[c].median) for c in shared]
    ll = [math.log(a.times[c].low / b.times[c].high) for c in shared]
    lh = [math.log(a.times[c].high / b.times[c].low) for c in shared]
    n = len(shared)
    return Ratio(math.exp(sum(lp) / n), math.exp(sum(ll) / n), math.exp(sum(lh) / n), n)


def tie_kind(r: Ratio, tie: float) -> str:
    """'' when the faster one clearly wins; 'noise' when the interval reaches 1; 'band' when
    the margin is under the tie band."""
    if r.low <= 1.0:
        return "noise"
    if r.point - 1 < tie:
        return "band"
    return ""


@dataclass
class BucketResult:
    bucket: Bucket
    ranked: list[Candidate]  # fastest first
    excluded: list[Candidate]
    cases: list[str]
    ratios: dict[str, Ratio]  # candidate name -> vs winner
    tie: str  # '' / 'noise' / 'band' (winner vs runner-up)
    tied_with: list[str]
    example: dict[str, Any]  # one row of the bucket (config + batch), for --suggest

    @property
    def winner(self) -> Candidate | None:
        return self.ranked[0] if self.ranked else None

    @property
    def runner_up(self) -> Candidate | None:
        return self.ranked[1] if len(self.ranked) > 1 else None


def _case_id(row: dict[str, Any]) -> str:
    return f"{row.get('suite')}/{row.get('case')}"


def _merge(ts: list[tuple[float, float, float]]) -> Timed:
    med = statistics.median(t[0] for t in ts)
    return Timed(med, min(t[1] for t in ts), max(t[2] for t in ts), len(ts))


def _timing(row: dict[str, Any]) -> tuple[float, float, float] | None:
    t = row.get("timing") or {}
    med = t.get("median_us")
    if not isinstance(med, (int, float)) or not med > 0:
        return None
    lo = t.get("ci_low_us") if isinstance(t.get("ci_low_us"), (int, float)) and t["ci_low_us"] > 0 else med
    hi = t.get("ci_high_us") if isinstance(t.get("ci_high_us"), (int, float)) else med
    return float(med), float(min(lo, med)), float(max(hi, med))


def case_batches(rows: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Batch statistics per case, from whichever row of the case has them (unsupported rows
    carry none; the same case run by another backend does)."""
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        if r.get("batch") and _case_id(r) not in out:
            out[_case_id(r)] = r["batch"]
    return out


def rank(rows: Sequence[dict[str, Any]], tie: float = DEFAULT_TIE) -> tuple[list[BucketResult], list[str]]:
    """Every bucket the rows describe, ranked. Also returns the cases no row described well
    enough to bucket (no backend ran them)."""
    batches = case_batches(rows)
    per_bucket: dict[Bucket, list[dict[str, Any]]] = defaultdict(list)
    unbucketed: set[str] = set()
    for r in rows:
        b = bucket_of(r.get("config") or {}, r.get("batch") or batches.get(_case_id(r)) or {})
        if b is None:
            unbucketed.add(_case_id(r))
        else:
            per_bucket[b].append(r)
    return [_rank_bucket(b, rs, tie) for b, rs in sorted(per_bucket.items())], sorted(unbucketed)


def rank_rows(rows: Sequence[dict[str, Any]], tie: float = DEFAULT_TIE) -> BucketResult:
    """Rank a given set of rows as one group, by the rules of a bucket (``harness run``'s verdict
    per case group); its ``bucket`` is that of the first row that has one."""
    batches = case_batches(rows)
    bucket = next((b for r in rows if (b := bucket_of(r.get("config") or {}, r.get("batch")
                                                      or batches.get(_case_id(r)) or {})) is not None), None)
    return _rank_bucket(bucket, list(rows), tie)  # type: ignore[arg-type]


def _rank_bucket(bucket: Bucket, rows: list[dict[str, Any]], tie: float) -> BucketResult:
    by_cand: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_cand[(r["backend"], r.get("variant_label", ""))].append(r)
    cands: list[Candidate] = []
    for (backend, vl), rs in sorted(by_cand.items()):
        per_case: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
        failed = [r for r in rs if r["status"] in FAILED]
        not_run = [r for r in rs if r["status"] not in FAILED and r["status"] != RAN_OK]
        untimed = 0
        for r in rs:
            if r["status"] == RAN_OK:
                t = _timing(r)
                if t is None:
                    untimed += 1
                else:
                    per_case[_case_id(r)].append(t)
        c = Candidate(backend, rs[0].get("variant") or {}, vl, {k: _merge(v) for k, v in per_case.items()},
                      rule_says_cascade={_case_id(r): bool(r["call"]["rule_says_cascade"]) for r in rs
                                         if "rule_says_cascade" in (r.get("call") or {})})
        if failed:
            c.excluded = f"failed the check ({failed[0]['status']}) on {len({_case_id(r) for r in failed})} case(s)"
        elif not_run:
            c.excluded = f"{not_run[0]['status']} on {len({_case_id(r) for r in not_run})} case(s): {not_run[0].get('reason', '')}"
        elif not c.times:
            c.excluded = "not timed"
        cands.append(c)
    ok = [c for c in cands if not c.excluded]
    cases = sorted({k for c in ok for k in c.times})
    for c in ok:
        if set(c.times) != set(cases):
            c.excluded = f"timed on {len(c.times)} of the bucket's {len(cases)} cases"
    full = [c for c in ok if not c.excluded]
    if not full and ok:  # nobody covers every case: rank on the cases all of them share
        shared = set.intersection(*(set(c.times) for c in ok))
        for c in ok:
            c.excluded = ""
            c.times = {k: v for k, v in c.times.items() if k in shared}
        full = [c for c in ok if c.times]
        cases = sorted(shared)

    def score(c: Candidate) -> float:
        return sum(math.log(t.median) for t in c.times.values()) / len(c.times)

    ranked = sorted(full, key=lambda c: (score(c), c.name))
    ratios: dict[str, Ratio] = {}
    tied: list[str] = []
    kind = ""
    if ranked:
        w = ranked[0]
        for c in ranked[1:]:
            r = ratio(c, w)
            if r is not None:
                ratios[c.name] = r
                if tie_kind(r, tie):
                    tied.append(c.name)
        if len(ranked) > 1 and ranked[1].name in ratios:
            kind = tie_kind(ratios[ranked[1].name], tie)
    example = next((r for r in rows if r.get("batch")), rows[0])
    return BucketResult(bucket, ranked, [c for c in cands if c.excluded], cases, ratios, kind, tied,
                        {"config": example.get("config") or {}, "batch": example.get("batch") or {},
                         "call": example.get("call") or {}, "case": _case_id(example)})


# ---------------------------------------------------------------- vLLM


VLLM_NOT_EXPRESSIBLE = [
    "One attention backend per process: vLLM's selector picks it once per layer configuration at start-up "
    "(`--attention-backend` / `VLLM_ATTENTION_BACKEND`, FA version via `--attention-config "
    "'{\"flash_attn_version\": N}'`, older releases `VLLM_FLASH_ATTN_VERSION`). It cannot switch backend "
    "per batch (decode vs prefill, batch size, context length), so a per-bucket policy only applies as "
    "one setting per deployment: see the single-setting line.",
    "FlashInfer's decode kernel and prefill backend: vLLM decodes with tensor cores and lets FlashInfer pick "
    "its prefill kernel; the harness variants decode_tensor_cores=False and prefill_backend=fa2/fa3 have no "
    "vLLM switch.",
    "Cascade attention cannot be forced: vLLM 0.2x decides per batch with its built-in rule "
    "(`--disable-cascade-attn` turns it off); vLLM 0.33 removed cascade attention.",
    "KV layout is global (`VLLM_KV_CACHE_LAYOUT`); the page size is global (`--block-size`) and each "
    "backend only accepts its kernel block sizes (FA: multiple of 16; FlashInfer on Hopper: 16, 32, 64).",
    "torch-math and sdpa are harness baselines, not vLLM decoder backends.",
]


def vllm_setting(c: Candidate) -> dict[str, Any] | None:
    """The vLLM settings that run candidate ``c``, with what they cannot express; None when
    vLLM has no setting for it."""
    if c.backend.endswith(CASCADE_SUFFIX):
        base = c.backend[: -len(CASCADE_SUFFIX)]
        fixed = VLLM_BACKENDS[base][2] if base in VLLM_BACKENDS else {}
        plain = Candidate(base, {**fixed, **c.variant}, c.variant_label, c.times)
        s = vllm_setting(plain)
        if s is None:
            return None
        return {**s, "exact": False,
                "caveat": "cascade cannot be forced in vLLM: 0.2x applies its own per-batch rule (on by default), "
                          "0.33 removed cascade attention"}
    if c.backend not in VLLM_BACKENDS:
        return None
    vllm_name, version_axis, fixed = VLLM_BACKENDS[c.backend]
    v = c.variant.get(version_axis) if version_axis else None
    if version_axis and (v is None or str(v) == "auto"):
        return None
    v = int(v) if v is not None else None
    exact = all(str(c.variant.get(k, want)) == str(want) for k, want in fixed.items())
    cli = f"--attention-backend {vllm_name}" + (f" --attention-config '{{\"flash_attn_version\": {v}}}'" if v else "")
    env = {"VLLM_ATTENTION_BACKEND": vllm_name, **({"VLLM_FLASH_ATTN_VERSION": str(v)} if v else {})}
    out: dict[str, Any] = {"attention_backend": vllm_name, "flash_attn_version": v, "exact": exact, "cli": cli, "env": env}
    if not exact:
        out["caveat"] = f"vLLM cannot select {c.backend} variant {c.variant_label} (it runs {variant_label_of(fixed)})"
    return out


def variant_label_of(variant: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(variant.items()))


def _find(res: BucketResult, backend: str, want: dict[str, Any]) -> Candidate | None:
    for c in res.ranked + res.excluded:
        if c.backend == backend and all(str(c.variant.get(k)) == str(v) for k, v in want.items()):
            return c
    return None


def _same_times(a: Candidate, b: Candidate, cases: list[str]) -> bool:
    """``a`` is ``b`` on every case (the default's composite picked the winner's rows)."""
    return set(a.times) == set(cases) and all(a.times[k] is b.times.get(k) for k in cases)


def _vllm_pick(choice: VllmChoice, res: BucketResult) -> Candidate | None:
    """The candidate that runs what vLLM would run. With shared prefixes vLLM 0.2x also
    applies its cascade rule per batch: then the default is, case by case, the cascade row
    where that rule says cascade and the plain row elsewhere."""
    for backend, want in harness_candidates(choice):
        plain = _find(res, backend, want)
        if plain is None:
            continue
        casc = _find(res, backend + CASCADE_SUFFIX, {k: v for k, v in want.items() if k == "fa_version"})
        if casc is None or casc.excluded or plain.excluded or not casc.rule_says_cascade:
            return plain
        shared = set(plain.times) & set(casc.times)
        if not any(casc.rule_says_cascade.get(k) for k in shared):
            return plain
        times = {k: casc.times[k] if casc.rule_says_cascade.get(k) else plain.times[k] for k in shared}
        return Candidate(plain.backend, plain.variant, plain.variant_label, times,
                         rule_says_cascade={k: casc.rule_says_cascade.get(k, False) for k in shared},
                         name_override=f"{plain.name} + vLLM cascade rule")
    return None


@dataclass
class DefaultCost:
    bucket: Bucket
    choice: VllmChoice
    candidate: str | None
    status: str  # 'winner' / 'tied' / 'slower' / 'not measured' / 'excluded: ...'
    cost: Ratio | None  # default / winner
    pick: Candidate | None = None


def default_costs(results: list[BucketResult], capability: str | None, tie: float) -> list[DefaultCost]:
    out = []
    if not capability:
        return out
    for res in results:
        if not res.ranked:
            continue
        b = res.bucket
        cfg = res.example["config"]
        choice = vllm_default(capability, num_heads=b.num_heads, num_kv_heads=b.num_kv_heads, head_size=b.head_size,
                              dtype=b.dtype, kv_cache_dtype=b.kv_cache_dtype, block_size=b.block_size,
                              alibi=bool(cfg.get("alibi")), sinks=bool(cfg.get("sinks")),
                              causal=cfg.get("causal") is not False)
        pick = _vllm_pick(choice, res)
        if pick is None:
            out.append(DefaultCost(b, choice, None, "not measured", None))
        elif pick.excluded:
            out.append(DefaultCost(b, choice, pick.name, f"excluded: {pick.excluded}", None))
        elif pick is res.winner or _same_times(pick, res.winner, res.cases):
            out.append(DefaultCost(b, choice, pick.name, "winner", Ratio(1.0, 1.0, 1.0, len(res.cases)), pick))
        else:
            r = ratio(pick, res.winner)
            status = "tied" if r is not None and tie_kind(r, tie) else "slower"
            out.append(DefaultCost(b, choice, pick.name, status, r, pick))
    return out


def single_setting(results: list[BucketResult]) -> list[dict[str, Any]]:
    """For each vLLM setting, its cost against the per-bucket winner over the buckets where it
    was measured: what one deployment-wide setting gives up. Best first."""
    acc: dict[str, dict[str, Any]] = {}
    for res in results:
        if not res.ranked:
            continue
        for c in res.ranked:
            s = vllm_setting(c)
            if s is None or not s["exact"]:
                continue
            key = s["cli"]
            r = ratio(c, res.winner) if c is not res.winner else Ratio(1.0, 1.0, 1.0, len(res.cases))
            if r is None:
                continue
            a = acc.setdefault(key, {"setting": s, "logs": [], "worst": (0.0, ""), "wins": 0})
            a["logs"].append(math.log(r.point))
            a["wins"] += c is res.winner
            if r.pct > a["worst"][0]:
                a["worst"] = (r.pct, res.bucket.label)
    out = []
    for key, a in acc.items():
        out.append({"cli": key, "attention_backend": a["setting"]["attention_backend"],
                    "flash_attn_version": a["setting"]["flash_attn_version"], "buckets": len(a["logs"]),
                    "wins": a["wins"], "geomean_cost_pct": (math.exp(sum(a["logs"]) / len(a["logs"])) - 1) * 100,
                    "worst_cost_pct": a["worst"][0], "worst_bucket": a["worst"][1]})
    return sorted(out, key=lambda d: (-d["buckets"], d["geomean_cost_pct"]))


# ---------------------------------------------------------------- cascade


def cascade_cells(rows: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Measured cascade-vs-plain cells per cascade backend (+FA version), first row of each
    cell kept (as ``reports/h200/2026-11-29/cascade-rule.md`` counts them), with the features
    the rules read."""
    from harness.cascade import rule_agreement

    by_key = {}
    for r in rows:
        by_key.setdefault((r["case"], r["backend"], r.get("variant_label", "")), r)
    seen = set()
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in rule_agreement(rows):
        vl = ",".join(f"{k}={v}" for k, v in sorted((e["variant"] or {}).items()))
        key = (e["case"], e["backend"], vl)
        if key in seen or e["rule_right"] is None:
            continue
        seen.add(key)
        r = by_key[key]
        costs = (r.get("call") or {}).get("rule_costs") or {}
        cfg, b = r.get("config") or {}, r.get("batch") or {}
        if not costs.get("min_prefix_len") or not costs.get("requests_per_prefix"):
            continue
        name = e["backend"] + (f" fa{e['variant']['fa_version']}" if "fa_version" in (e["variant"] or {}) else "")
        out[name].append({
            "case": e["case"], "prefix_len": costs["min_prefix_len"], "requests_per_prefix": costs["requests_per_prefix"],
            "num_kv_heads": cfg["num_kv_heads"], "gqa": cfg["num_heads"] // cfg["num_kv_heads"],
            "decode_only": not (b.get("num_prefill") or b.get("num_extend")),
            "cascade_us": e["cascade_us"], "plain_us": e["plain_us"], "cascade_wins": e["measured_winner"] == "cascade",
            "vllm_says_cascade": bool(e["rule_says_cascade"]),
        })
    return dict(out)


@dataclass
class CascadeFit:
    backend: str
    cells: list[dict[str, Any]]
    rule: CascadeRule
    fitted_agree: int
    loo_agree: int
    vllm_agree: int
    fitted_cost_pct: float  # geometric-mean time lost against always picking the faster path
    vllm_cost_pct: float


def _lost(picks: list[bool], cells: list[dict[str, Any]]) -> float:
    logs = [math.log((c["cascade_us"] if p else c["plain_us"]) / min(c["cascade_us"], c["plain_us"]))
            for p, c in zip(picks, cells)]
    return (math.exp(sum(logs) / len(logs)) - 1) * 100 if logs else 0.0


def fit_cascade(rows: Sequence[dict[str, Any]]) -> list[CascadeFit]:
    fits = []
    for name, cells in sorted(cascade_cells(rows).items()):
        rule = fit_cascade_rule(name, cells)
        fitted = [rule.says_cascade(c) for c in cells]
        vllm = [c["vllm_says_cascade"] for c in cells]
        fits.append(CascadeFit(
            name, cells, rule,
            sum(p == c["cascade_wins"] for p, c in zip(fitted, cells)), leave_one_out(name, cells),
            sum(p == c["cascade_wins"] for p, c in zip(vllm, cells)), _lost(fitted, cells), _lost(vllm, cells)))
    return fits


# ---------------------------------------------------------------- everything


@dataclass
class Recommendation:
    inputs: Inputs
    tie: float
    buckets: list[BucketResult]
    unbucketed: list[str]
    defaults: list[DefaultCost]
    single: list[dict[str, Any]]
    cascade: list[CascadeFit]

    @property
    def measured(self) -> list[BucketResult]:
        return [b for b in self.buckets if b.ranked]

    @property
    def unmeasured(self) -> list[BucketResult]:
        return [b for b in self.buckets if not b.ranked]

    @property
    def single_candidate(self) -> list[BucketResult]:
        return [b for b in self.buckets if len(b.ranked) == 1]


def recommend(paths: Sequence[str | Path], tie: float = DEFAULT_TIE, call_form: str = "vllm") -> Recommendation:
    inputs = load_inputs(paths, call_form)
    return recommend_rows(inputs, tie)


def recommend_rows(inputs: Inputs, tie: float = DEFAULT_TIE) -> Recommendation:
    if not 0 <= tie < 1:
        raise RecommendError(f"--tie {tie}: expected a fraction in [0, 1), e.g. 3%")
    buckets, unbucketed = rank(inputs.rows, tie)
    return Recommendation(inputs, tie, buckets, unbucketed, default_costs(buckets, inputs.capability, tie),
                          single_setting(buckets), fit_cascade(inputs.rows))


# ---------------------------------------------------------------- outputs


def _pct(x: float | None, spec: str = "+.1f") -> str:
    return "" if x is None else f"{x:{spec}}%"


def _ratio_text(r: Ratio | None) -> str:
    if r is None:
        return ""
    return f"{r.pct:+.1f}% [{(r.low - 1) * 100:+.1f}, {(r.high - 1) * 100:+.1f}]"


def _esc(s: str) -> str:
    return s.replace("|", "\\|")


def _md(records: list[dict[str, Any]]) -> str:
    """Records (one dict a row, same keys) as a markdown table."""
    if not records:
        return ""
    cols = list(records[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(_esc(str(r[c])) for c in cols) + " |" for r in records]
    return "\n".join(lines) + "\n"


def winners_records(rec: Recommendation) -> list[dict[str, Any]]:
    out = []
    for res in rec.measured:
        w, ru = res.winner, res.runner_up
        r = res.ratios.get(ru.name) if ru else None
        verdict = ("tie (noise)" if res.tie == "noise" else f"tie (< {rec.tie * 100:g}%)" if res.tie == "band"
                   else "clear" if ru else "only candidate")
        if res.tied_with and len(res.tied_with) > 1:
            verdict += f", {len(res.tied_with)} tied"
        out.append({"bucket": res.bucket.label, "winner": w.name,
                    "median us": f"{statistics.median(t.median for t in w.times.values()):.1f}",
                    "runner-up": ru.name if ru else "-", "margin [interval]": _ratio_text(r), "verdict": verdict,
                    "cases": len(res.cases), "call form": str(w.variant.get("call_form", "-"))})
    return out


def winners_table(rec: Recommendation) -> str:
    return _md(winners_records(rec))


def defaults_summary(rec: Recommendation) -> dict[str, Any]:
    """How often vLLM's default is the winner, a tie, slower, or unmeasured, and what it costs
    (geometric mean and worst over the buckets where it was measured)."""
    counts: dict[str, int] = defaultdict(int)
    logs = []
    worst = (0.0, "")
    for d in rec.defaults:
        counts[d.status.split(":")[0]] += 1
        if d.cost is not None:
            logs.append(math.log(d.cost.point))
            if d.cost.pct > worst[0]:
                worst = (d.cost.pct, d.bucket.label)
    return {"buckets": len(rec.defaults), **counts,
            "geomean_cost_pct": (math.exp(sum(logs) / len(logs)) - 1) * 100 if logs else None,
            "worst_cost_pct": worst[0], "worst_bucket": worst[1]}


def defaults_table(rec: Recommendation) -> str:
    if not rec.defaults:
        return "GPU capability unknown (no run.json): vLLM's default cannot be evaluated.\n"
    sm = defaults_summary(rec)
    head = (f"Over {sm['buckets']} measured buckets the default is the winner in {sm.get('winner', 0)}, tied in "
            f"{sm.get('tied', 0)}, slower in {sm.get('slower', 0)}, not measured in {sm.get('not measured', 0)}"
            f" (excluded by the check in {sm.get('excluded', 0)}). Cost where measured: geometric mean "
            f"{_pct(sm['geomean_cost_pct'])}, worst {_pct(sm['worst_cost_pct'])} ({sm['worst_bucket'] or '-'}).\n\n")
    return head + _md(defaults_records(rec))


def defaults_records(rec: Recommendation) -> list[dict[str, Any]]:
    winners = {r.bucket: r.winner.name for r in rec.measured}
    out = []
    for d in rec.defaults:
        cost = _ratio_text(d.cost) if d.status in ("slower", "tied") else ("0" if d.status == "winner" else "")
        out.append({"bucket": d.bucket.label, "vLLM default": f"{d.choice.label} = {d.candidate or '-'}",
                    "measured winner": winners[d.bucket], "default is": d.status,
                    "cost of the default [interval]": cost})
    return out


def cascade_records(rec: Recommendation) -> list[dict[str, Any]]:
    out = []
    for f in rec.cascade:
        n = len(f.cells)
        out.append({"cascade backend": f.backend, "cells": n,
                    "vLLM rule agrees": f"{f.vllm_agree}/{n} ({f.vllm_agree / n:.0%})",
                    "time lost (vLLM rule)": f"{f.vllm_cost_pct:.1f}%", "fitted rule": f.rule.text(),
                    "agrees": f"{f.fitted_agree}/{n} ({f.fitted_agree / n:.0%})",
                    "leave-one-out": f"{f.loo_agree}/{n} ({f.loo_agree / n:.0%})",
                    "time lost (fitted)": f"{f.fitted_cost_pct:.1f}%"})
    return out


def cascade_table(rec: Recommendation) -> str:
    if not rec.cascade:
        return "No cascade cells (rows with `call.rule_says_cascade` and a timed plain counterpart).\n"
    return _md(cascade_records(rec))


def coverage_text(rec: Recommendation) -> str:
    un, one = rec.unmeasured, rec.single_candidate
    out = [f"{len(rec.measured)} of {len(rec.buckets)} buckets measured; {len(un)} without a timed passing row"
           f" ({len(one)} more with a single candidate, no comparison)."]
    if rec.unbucketed:
        out.append(f"{len(rec.unbucketed)} case(s) ran on no backend, so their batch is unknown: "
                   + ", ".join(rec.unbucketed[:5]) + (" ..." if len(rec.unbucketed) > 5 else ""))
    if un:
        # Grouped by layer shape so the list stays short; each group names its missing cells.
        groups: dict[str, list[str]] = defaultdict(list)
        whys: dict[str, set[str]] = defaultdict(set)
        for res in un:
            b = res.bucket
            key = f"{b.num_heads}/{b.num_kv_heads}x{b.head_size} {b.dtype}/{b.kv_cache_dtype} {b.features}"
            groups[key].append(f"page {b.block_size} {b.kv_layout} {b.kind} b={b.batch} ctx={b.context}")
            whys[key].add("not timed" if any(c.excluded == "not timed" for c in res.excluded) else
                          "no candidate passed" if res.excluded else "no rows")
        out += ["", "| layer shape | buckets without a measurement | why |", "|---|---|---|"]
        for key, cells in groups.items():
            out.append(f"| {_esc(key)} | {len(cells)}: {_esc('; '.join(cells))} | {', '.join(sorted(whys[key]))} |")
    return "\n".join(out) + "\n"


def to_markdown(rec: Recommendation, command: str = "") -> str:
    inp = rec.inputs
    parts = [
        "# Measured backend recommendation", "",
        f"GPU: {inp.gpu} (capability {inp.capability or 'unknown'}); {len(inp.rows)} rows from "
        f"{len(inp.sources)} result(s). Tie band {rec.tie * 100:g}%.", "",
    ]
    if command:
        parts += ["```bash", command, "```", ""]
    parts += [f"- {n}" for n in inp.notes]
    parts += [
        "## Winner per bucket", "",
        "Ranked: backend+variant that passed the check on every case of the bucket, by the geometric mean of the "
        "median times. Margin: how much slower the runner-up is; interval from the rows' median CIs "
        "(interval arithmetic, geometric mean over cases). Tie: the interval reaches 0 (noise) or the margin is "
        "under the tie band.", "", winners_table(rec),
        "## vLLM's default choice against the measurement", "",
        "`harness.selection_rules.vllm_default`: the backend vLLM would pick with no `--attention-backend`, "
        "mapped to the harness candidate that runs it. Cost: how much slower the default is than the winner.", "",
        defaults_table(rec),
        "## One setting for a whole deployment (vLLM)", "",
        "Each setting vLLM can express exactly, against the per-bucket winner, over the buckets where it was "
        "measured (plain attention: what vLLM 0.33 runs; vLLM 0.2x adds its cascade rule on shared-prefix "
        "batches, which the default table above accounts for).", "",
        _single_table(rec), "", "What vLLM cannot express:", "",
        *[f"- {t}" for t in VLLM_NOT_EXPRESSIBLE], "",
        "## Cascade decision rule", "",
        "Per cascade backend: the cells where both the cascade and the plain backend passed and were timed. "
        "Agreement: the rule picks the measured faster path. Time lost: geometric mean over the cells of "
        "(time of the picked path / time of the faster path) - 1. Leave-one-out: each cell predicted by the rule "
        "fitted to the others.", "", cascade_table(rec),
        "## Coverage", "", coverage_text(rec),
    ]
    return "\n".join(parts)


def _single_table(rec: Recommendation) -> str:
    if not rec.single:
        return "No bucket was measured with a candidate vLLM can select."
    lines = ["| vLLM setting | buckets measured | wins | geomean cost vs winner | worst cost (bucket) |",
             "|---|---|---|---|---|"]
    for s in rec.single:
        lines.append(f"| `{s['cli']}` | {s['buckets']} | {s['wins']} | {s['geomean_cost_pct']:+.1f}% | "
                     f"{s['worst_cost_pct']:+.1f}% ({_esc(s['worst_bucket'])}) |")
    return "\n".join(lines)


def _ratio_json(r: Ratio | None) -> dict[str, Any] | None:
    if r is None:
        return None
    return {"pct": round(r.pct, 3), "low_pct": round((r.low - 1) * 100, 3), "high_pct": round((r.high - 1) * 100, 3),
            "cases": r.cases}


def policy(rec: Recommendation) -> dict[str, Any]:
    """The plain JSON policy: ordered rules, first match wins; each names the backend and
    variant to use, the margin and whether it is a tie (then any of ``tied_with`` is as good)."""
    rules = []
    for res in rec.measured:
        w, ru = res.winner, res.runner_up
        rules.append({
            "bucket": res.bucket.label,
            "when": res.bucket.predicate(),
            "use": {"backend": w.backend, "variant": w.variant},
            "median_us": round(statistics.median(t.median for t in w.times.values()), 3),
            "runner_up": {"backend": ru.backend, "variant": ru.variant} if ru else None,
            "margin": _ratio_json(res.ratios.get(ru.name)) if ru else None,
            "tie": res.tie or None,
            "tied_with": res.tied_with,
            "cases": len(res.cases),
        })
    return {
        "format": POLICY_FORMAT,
        "gpu": rec.inputs.gpu, "capability": rec.inputs.capability,
        "tie_band": rec.tie, "call_form": rec.inputs.call_form,
        "match": "first rule whose `when` holds: equal fields; num_reqs min <= n <= max (max null: no bound); "
                 "mean_seq_len gt < mean KV length per request <= le; features: the layer's non-default features "
                 "(window=W, softcap=X, alibi, sinks, non-causal, shared-prefix), all must match",
        "rules": rules,
        "cascade": [{**f.rule.to_dict(), "cells": len(f.cells), "agreement": f.fitted_agree,
                     "leave_one_out": f.loo_agree, "vllm_rule_agreement": f.vllm_agree} for f in rec.cascade],
        "unmeasured": [res.bucket.label for res in rec.unmeasured],
        "sources": rec.inputs.sources,
    }


def vllm_export(rec: Recommendation) -> dict[str, Any]:
    """Per bucket: the vLLM setting of the winner, or of the best tied candidate vLLM can
    express (preferring the default, which needs no flag); and the single best setting."""
    default_of = {d.bucket: d for d in rec.defaults}
    out = []
    for res in rec.measured:
        w = res.winner
        pool = [w] + [c for c in res.ranked if c.name in res.tied_with]
        d = default_of.get(res.bucket)
        choice = None
        if d is not None and d.pick is not None and d.status in ("winner", "tied"):
            choice = d.pick  # the default is as good: no flag needed
        if choice is None:
            choice = next((c for c in pool if (vllm_setting(c) or {}).get("exact")), None)
        fallback = choice is None
        if fallback:  # nothing vLLM can select ties with the winner: its fastest exact setting, at a cost
            choice = next((c for c in res.ranked if (vllm_setting(c) or {}).get("exact")), None)
        s = vllm_setting(choice) if choice else None
        if s is not None and choice.name_override:
            s = {**s, "note": "with vLLM 0.2x's own per-batch cascade rule (on by default; vLLM 0.33 has no cascade)"}
        entry = {"bucket": res.bucket.label, "measured_winner": w.name,
                 "vllm": s, "runs": choice.name if choice else None,
                 "cost_vs_winner": (None if choice is None or choice is w or _same_times(choice, w, res.cases)
                                    else _ratio_json(ratio(choice, w))),
                 "default": {"backend": d.choice.backend, "fa_version": d.choice.fa_version,
                             "skipped": d.choice.rejected} if d else None,
                 "default_status": d.status if d else None,
                 "default_cost": _ratio_json(d.cost) if d else None}
        if fallback:
            entry["not_expressible"] = (f"vLLM cannot select the winner {w.name}"
                                        + (f"; closest setting runs {choice.name}" if choice else "; no measured setting"))
        out.append(entry)
    return {"format": "attn-harness.vllm/1", "gpu": rec.inputs.gpu, "capability": rec.inputs.capability,
            "call_form": rec.inputs.call_form,
            "buckets": out, "single_setting": rec.single[0] if rec.single else None,
            "all_settings": rec.single, "cannot_express": VLLM_NOT_EXPRESSIBLE,
            "cascade": [{"backend": f.backend, "vllm_rule_agreement": f"{f.vllm_agree}/{len(f.cells)}",
                         "measured_rule": f.rule.text()} for f in rec.cascade]}


# ---------------------------------------------------------------- --suggest


def _suggest_case(i: int, res: BucketResult) -> dict[str, Any] | None:
    """A case of the bucket's shape, rebuilt from one of its rows' config and batch statistics
    (same heads, dtypes, page, features, batch kind and size; lengths in the context range)."""
    cfg, b, call = res.example["config"], res.example["batch"], res.example["call"]
    if not cfg or not b:
        return None
    n_dec, n_pre, n_ext = (int(b.get(k) or 0) for k in ("num_decode", "num_prefill", "num_extend"))
    mean = max(1, int(round(b.get("mean_seq_len") or 1)))
    mx = max(mean, int(b.get("max_seq_len") or mean))
    prefix = 0
    case: dict[str, Any] = {
        "name": f"fill-{i:03d}",
        "num_heads": int(cfg["num_heads"]), "num_kv_heads": int(cfg["num_kv_heads"]), "head_size": int(cfg["head_size"]),
        "dtype": cfg.get("dtype", "bfloat16"), "kv_cache_dtype": cfg.get("kv_cache_dtype", "auto"),
        "block_size": int(cfg.get("block_size", 16)), "kv_layout": cfg.get("kv_layout", "NHD"),
        "causal": cfg.get("causal", True) is not False,
    }
    for k in ("sliding_window", "alibi", "sinks"):
        if cfg.get(k):
            case[k] = cfg[k]
    if cfg.get("softcap"):
        case["softcap"] = float(cfg["softcap"])
    if (b.get("prefix_groups") or 0) > 0:
        lens = call.get("prefix_lens") or [(call.get("rule_costs") or {}).get("min_prefix_len")]
        prefix = int(min(x for x in lens if x)) if any(lens) else 0
        prefix -= prefix % case["block_size"]
        if prefix > 0:
            case["shared_prefix"] = {"length": prefix, "groups": int(b["prefix_groups"])}
    own_mean, own_max = max(1, mean - prefix), max(1, mx - prefix)
    low = max(1, min(own_mean, 2 * own_mean - own_max))
    ctx = {"dist": "uniform", "low": max(0, low - 1), "high": max(0, own_max - 1)}
    q_tokens = int(b.get("num_tokens") or 0) - n_dec
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
    per bucket measured with one candidate only); None when nothing is missing."""
    from harness import registry

    todo = rec.unmeasured + (rec.single_candidate if include_single else [])
    cases = [c for i, res in enumerate(todo) if (c := _suggest_case(i, res)) is not None]
    if not cases:
        return None
    known = set(registry.known_backends())
    backends = sorted({r["backend"] for r in rec.inputs.rows if r["backend"] in known})
    return {
        "suite": "recommend-fill",
        "description": f"Buckets without a measurement on {rec.inputs.gpu} (written by harness recommend --suggest).",
        "backends": backends or None,
        "cases": cases,
    }


def write_suggest(rec: Recommendation, path: str | Path) -> int:
    """Write the fill-in suite (validated with the same loader ``harness validate`` uses)
    atomically; returns the number of cases (0: nothing missing, nothing written)."""
    import yaml

    from harness.spec import SpecError, parse_suite
    from harness.suite_check import check_suite_backends

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
        check_suite_backends(suite)
    except SpecError as e:  # a bug here, not the user's: say so instead of writing a bad suite
        raise RecommendError(f"--suggest: the generated suite does not validate: {e}") from None
    _atomic_write(Path(path), text)
    return len(suite.cases)


def compact_json(obj: dict[str, Any]) -> str:
    """JSON with one top-level key a line and one list entry (a rule, a bucket) a line: small
    enough to commit, and a diff shows which rule changed."""
    keys = list(obj)
    lines = ["{"]
    for i, k in enumerate(keys):
        v, sep = obj[k], "," if i < len(keys) - 1 else ""
        if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            inner = ",\n".join("  " + json.dumps(x, allow_nan=False) for x in v)
            lines.append(f" {json.dumps(k)}: [\n{inner}\n ]{sep}")
        else:
            lines.append(f" {json.dumps(k)}: {json.dumps(v, allow_nan=False)}{sep}")
    return "\n".join(lines + ["}"]) + "\n"


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_outputs(rec: Recommendation, out_dir: str | Path, command: str = "") -> list[Path]:
    """recommend.md, policy.json and vllm.json into ``out_dir``; everything is computed before
    the first file is written, and each file is written atomically."""
    out = Path(out_dir)
    texts = {
        "recommend.md": to_markdown(rec, command),
        "policy.json": compact_json(policy(rec)),
        "vllm.json": compact_json(vllm_export(rec)),
    }
    paths = []
    for name, text in texts.items():
        _atomic_write(out / name, text)
        paths.append(out / name)
    return paths


__all__ = [
    "Bucket",
    "Recommendation",
    "RecommendError",
    "load_inputs",
    "policy",
    "rank",
    "recommend",
    "recommend_rows",
    "suggest_suite",
    "to_markdown",
    "vllm_export",
    "write_outputs",
    "write_suggest",
]
