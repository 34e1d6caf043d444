"""Ranking one bucket: candidates (backend + variant) that passed the check on every case, by
the geometric mean of their medians; the margin over the runner-up with its interval; ties."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from attn_contract.status import FAILED, NOT_RUN, Status
from harness.analysis.recommend.buckets import Bucket, bucket_of
from harness.records.results import BatchSummary, ResultRow, backend_label

DEFAULT_TIE = 0.03
RAN_OK = Status.PASS


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
    # The rows' attention kind ("mha", "mla_absorbed", "mla_expanded"): an engine may pick the
    # kernel of each MLA form apart (vLLM's MLA prefill), so the setting depends on it.
    attention_kind: str = "mha"

    @property
    def name(self) -> str:
        return self.name_override or backend_label(self.backend, self.variant_label)


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
    example: ResultRow  # one row of the bucket (config + batch), for --suggest

    @property
    def winner(self) -> Candidate | None:
        return self.ranked[0] if self.ranked else None

    @property
    def top(self) -> Candidate:
        """The winner of a measured bucket (one with ranked candidates: ``Recommendation.measured``)."""
        if not self.ranked:
            raise ValueError(f"bucket {self.bucket}: no ranked candidate")
        return self.ranked[0]

    @property
    def runner_up(self) -> Candidate | None:
        return self.ranked[1] if len(self.ranked) > 1 else None


def merge_timed(ts: list[tuple[float, float, float]]) -> Timed:
    med = statistics.median(t[0] for t in ts)
    return Timed(med, min(t[1] for t in ts), max(t[2] for t in ts), len(ts))


def case_batches(rows: Iterable[ResultRow]) -> dict[str, BatchSummary]:
    """Batch statistics per case, from whichever row of the case has them (unsupported rows
    carry none; the same case run by another backend does)."""
    out: dict[str, BatchSummary] = {}
    for r in rows:
        if r.batch.given and r.case_id not in out:
            out[r.case_id] = r.batch
    return out


def batch_of(row: ResultRow, batches: dict[str, BatchSummary]) -> BatchSummary | None:
    """The row's batch, borrowed from another row of the case when it has none; None: no row has one."""
    return row.batch if row.batch.given else batches.get(row.case_id)


def row_bucket(row: ResultRow, batches: dict[str, BatchSummary]) -> Bucket | None:
    """The row's bucket; its batch borrowed from another row of the case when it has none."""
    return bucket_of(row.config, batch_of(row, batches))


def rank(rows: Sequence[ResultRow], tie: float = DEFAULT_TIE) -> tuple[list[BucketResult], list[str]]:
    """Every bucket the rows describe, ranked. Also returns the cases no row described well
    enough to bucket (no backend ran them)."""
    batches = case_batches(rows)
    per_bucket: dict[Bucket, list[ResultRow]] = defaultdict(list)
    unbucketed: set[str] = set()
    for r in rows:
        b = row_bucket(r, batches)
        if b is None:
            unbucketed.add(r.case_id)
        else:
            per_bucket[b].append(r)
    return [rank_bucket(b, rs, tie) for b, rs in sorted(per_bucket.items())], sorted(unbucketed)


def rank_rows(rows: Sequence[ResultRow], tie: float = DEFAULT_TIE) -> BucketResult:
    """Rank a given set of rows as one group, by the rules of a bucket (``harness run``'s verdict
    per case group); its ``bucket`` is that of the first row that has one."""
    batches = case_batches(rows)
    bucket = next((b for r in rows if (b := row_bucket(r, batches)) is not None), None)
    return rank_bucket(bucket, list(rows), tie)  # type: ignore[arg-type]


def _candidate(backend: str, vl: str, rs: list[ResultRow]) -> Candidate:
    per_case: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    failed = [r for r in rs if r.status in FAILED]
    not_run = [r for r in rs if r.status not in FAILED and r.status != RAN_OK]
    for r in rs:
        if r.status == RAN_OK and (t := r.interval_us) is not None:
            per_case[r.case_id].append(t)
    first = rs[0].config
    c = Candidate(backend, rs[0].variant, vl, {k: merge_timed(v) for k, v in per_case.items()},
                  rule_says_cascade={r.case_id: bool(r.call.rule_says_cascade) for r in rs
                                     if r.call is not None and r.call.rule_says_cascade is not None},
                  attention_kind=first.kind_of_attention if first is not None else "mha")
    if failed:
        c.excluded = f"failed the check ({failed[0].status}) on {len({r.case_id for r in failed})} case(s)"
    elif not_run:
        c.excluded = f"{not_run[0].status} on {len({r.case_id for r in not_run})} case(s): {not_run[0].reason}"
    elif not c.times:
        c.excluded = "not timed"
    return c


def rank_bucket(bucket: Bucket, rows: list[ResultRow], tie: float) -> BucketResult:
    """Rank the candidates of one bucket's rows. A case no candidate ran (every row of it
    ``skipped`` or ``unsupported``: too large for this machine, no library anywhere, a shape no
    backend here takes) says nothing about any of them and leaves the bucket first; a candidate
    that did not run where another one ran is still excluded, and a case where one failed stays."""
    ran = {r.case_id for r in rows if r.status not in NOT_RUN}
    by_cand: dict[tuple[str, str], list[ResultRow]] = defaultdict(list)
    for r in rows:
        if r.case_id in ran:
            by_cand[(r.backend, r.variant_label)].append(r)
    cands = [_candidate(backend, vl, rs) for (backend, vl), rs in sorted(by_cand.items())]
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
            cw = ratio(c, w)
            if cw is not None:
                ratios[c.name] = cw
                if tie_kind(cw, tie):
                    tied.append(c.name)
        if len(ranked) > 1 and ranked[1].name in ratios:
            kind = tie_kind(ratios[ranked[1].name], tie)
    example = next((r for r in rows if r.batch.given), rows[0])
    return BucketResult(bucket, ranked, [c for c in cands if c.excluded], cases, ratios, kind, tied, example)
