"""Candidates of one case sampled in interleaved rounds (A B C A B C ...), so a drift of the clock,
power or temperature over the sampling falls on all of them alike, and ranked from those rounds.

Sampled one after another, two identical candidates differ by whatever the GPU's state did
between their turns: a clock falling under load makes the later one look slower (a false
margin; tests/test_timing_interleave.py shows it on a drifting stand-in). In rounds, every
candidate sees the same drift; each candidate's per-round ratio to the others is free of it.

Each candidate is a ``Candidate``: its ``take`` (one timed sample in seconds, or None for a
sample it rejected, as ``harness.timing.loop``'s takes do), its host-bound test and its
``warm``: the untimed call of its own work that runs right before every timed sample in hot
mode, so the sample reads its own data from L2 whatever ran before it (the previous candidate
of the round, or its own previous sample). Without it a hot sample in rounds started with L2
as the previous candidate left it: FlashInfer's and FA3/FA4's small decode rows were 4-10%
slower interleaved than sequential on an H100 (issue 44; docs/measurement.md, "Hot means hot").

Rounds are complete and the case stops together: every round takes one sample of every
candidate (a round in which one candidate could not get a sample is dropped for all of them),
and there is one stopping decision per case. Each candidate's own stopping criterion is asked
after every round, as if it were alone (its own samples, its own sampling seconds, its
host-bound test); a candidate whose rule is met keeps its place in the rounds until every
candidate's rule is met. So no row mixes samples taken with company and samples taken alone
(before, a candidate left the rounds at its own stop and the one that needed more samples went
on alone: its level depended on when the others stopped). The samples a candidate takes after
its own rule was met are the case's overtime; once they cost ``max_time_s`` seconds the case
stops and the candidates still short of their rule stop with ``time_budget``. That bounds what
a noisy fast row can cost a slow one: sampling everyone until the last one stops, unbounded,
would have cost 32 s of sampling instead of 7.5 s on the H200's decode suite of 2026-12-02
(sdpa's 150 ms samples going on while a FlashInfer variant needed 58); on the interleaved
H200 runs of reports/h200/2026-12-02/s4/clock-decode the complete rounds add 0.7-1.1 s to
3.4-3.9 s of sampling (docs/measurement.md). A take that raises drops its candidate
(``Rounds.errors``); the others go on.
``harness.timing.loop.time_interleaved`` drives whole timing runs this way.
"""

from __future__ import annotations

import bisect
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from harness.timing.options import TimingOptions
from harness.timing.stopping import STOP_TIME, ask, criterion_for

SAMPLING_INTERLEAVED = "interleaved"
SAMPLING_SEQUENTIAL = "sequential"
MAX_REJECTS_PER_ROUND = 8  # a candidate rejecting this many samples in a row gives up the round
MAX_DROPPED_ROUNDS = 8  # this many rounds in a row without a sample from every candidate: the case stops

Take = Callable[[], "float | None"]

# Why a case's rounds ended (``Rounds.stop``).
CASE_ALL_MET = "every candidate's rule met"
CASE_OVERTIME = "overtime budget"
CASE_DROPPED = "rounds dropped"


@dataclass(frozen=True)
class Candidate:
    """One candidate of a case: its timed sample, its host-bound test (None: never host-bound)
    and the untimed warm-up of its own work before every timed sample (None: none, e.g. cold
    mode, where the flush must come right before the timed call)."""

    take: Take
    host_bound: Callable[[], bool] | None = None
    warm: Callable[[], object] | None = None


def as_candidate(c: Candidate | Take) -> Candidate:
    return c if isinstance(c, Candidate) else Candidate(c)


def take_sample(c: Candidate, clock: Callable[[], float] = time.perf_counter,
                tries: int = MAX_REJECTS_PER_ROUND) -> tuple[float | None, float]:
    """One sample of ``c``: its warm-up then its timed take, retaken up to ``tries`` times while
    the take rejects it (the warm-up before every try). (seconds or None, seconds it cost)."""
    spent = 0.0
    for _ in range(tries):
        t0 = clock()
        if c.warm is not None:
            c.warm()
        x = c.take()
        spent += clock() - t0
        if x is not None:
            return x, spent
    return None, spent


@dataclass
class Rounds:
    """Per candidate: its samples (seconds, one per complete round), the reason its own rule
    gave and after how many samples (``met_after``; absent where the case stopped it first),
    and the seconds its own samples took. ``rounds``: the complete rounds (every candidate's
    sample count); ``overtime_s``: seconds spent on candidates whose rule was already met;
    ``dropped``: rounds dropped because a candidate got no sample; ``stop``: why the case
    stopped (``CASE_*``)."""

    samples: dict[str, list[float]] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)
    elapsed: dict[str, float] = field(default_factory=dict)
    rounds: int = 0
    errors: dict[str, BaseException] = field(default_factory=dict)
    met_after: dict[str, int] = field(default_factory=dict)
    overtime_s: float = 0.0
    dropped: int = 0
    stop: str = ""


def sample_rounds(cands: Mapping[str, Candidate | Take], opts: TimingOptions,
                  clock: Callable[[], float] = time.perf_counter) -> Rounds:
    """Sample every candidate once per round (warm-up, then the timed take) until every
    candidate's own stopping rule has been met, or the overtime reaches ``opts.max_time_s``
    (see the module's docstring). Every candidate that did not raise ends with ``rounds`` samples."""
    criterion = criterion_for(opts)
    live = {k: as_candidate(v) for k, v in cands.items()}
    out = Rounds({k: [] for k in live}, {}, {k: 0.0 for k in live})
    sorted_s: dict[str, list[float]] = {k: [] for k in live}
    dropped_in_a_row = 0
    while live:
        got: dict[str, float | None] = {}
        for name, c in list(live.items()):
            try:
                x, spent = take_sample(c, clock)
            except Exception as e:  # this candidate's failure, not the others'
                out.errors[name] = e
                del live[name]
                continue
            out.elapsed[name] += spent
            if name in out.met_after:
                out.overtime_s += spent
            got[name] = x
        if not live:
            break
        if all(got[n] is not None for n in live):
            out.rounds += 1
            dropped_in_a_row = 0
            for n in live:
                x = got[n]
                assert x is not None  # checked just above
                out.samples[n].append(x)
                bisect.insort(sorted_s[n], x)
        else:  # a candidate gave up the round: nobody keeps its samples, so the rounds stay complete
            out.dropped += 1
            dropped_in_a_row += 1
        for n, c in live.items():
            if n in out.met_after or not sorted_s[n]:
                continue
            reason = ask(criterion, sorted_s[n], out.elapsed[n], c.host_bound is not None and c.host_bound())
            if reason:
                out.reasons[n] = reason
                out.met_after[n] = len(sorted_s[n])
        unmet = [n for n in live if n not in out.met_after]
        if not unmet:
            out.stop = CASE_ALL_MET
        elif out.overtime_s >= opts.max_time_s:
            out.stop = CASE_OVERTIME
        elif dropped_in_a_row >= MAX_DROPPED_ROUNDS:
            out.stop = CASE_DROPPED
        else:
            continue
        for n in unmet:
            out.reasons[n] = STOP_TIME
        break
    if out.rounds == 0:  # nothing to summarize: each candidate left gets this as its error
        for n in live:
            out.errors[n] = RuntimeError(f"interleaved sampling: no complete round ({out.dropped} dropped: a "
                                         f"candidate rejected {MAX_REJECTS_PER_ROUND} samples in a row each time)")
    return out


def stop_sentence(reason: str, met_after: int | None, rounds: int, case_stop: str, summary: dict[str, Any],
                  opts: TimingOptions) -> str | None:
    """The row's ``stop`` sentence where the rounds, not its own rule, set its sample count;
    None where its rule was met in the last round (the criterion's own sentence is right)."""
    n, noise = summary["samples"], summary["rel_ci_half_width"]
    target = f"(target {opts.target_rel_noise:.2%})"
    if met_after is not None and met_after >= n:
        return None
    if met_after is not None:
        return (f"own rule ({reason}) met after {met_after} samples; sampled on with its case to {rounds} complete "
                f"rounds; noise {noise:.2%} over {n} samples {target}")
    why = (f"overtime budget {opts.max_time_s:g} s spent on candidates already done" if case_stop == CASE_OVERTIME
           else f"{MAX_DROPPED_ROUNDS} rounds in a row dropped (a candidate kept rejecting samples)")
    return f"the case's rounds stopped: {why}; {n} samples, noise {noise:.2%} {target}"


def round_ratios(rounds: Rounds, a: str, b: str) -> list[float]:
    """a's time over b's, round by round."""
    return [x / y for x, y in zip(rounds.samples[a], rounds.samples[b]) if y > 0]


def rank_from_rounds(rounds: Rounds) -> list[tuple[str, float]]:
    """Candidates fastest first, each with its median time over its rounds (seconds)."""
    meds = {k: statistics.median(v) for k, v in rounds.samples.items() if v}
    return sorted(meds.items(), key=lambda kv: kv[1])


__all__ = ["CASE_ALL_MET", "CASE_DROPPED", "CASE_OVERTIME", "SAMPLING_INTERLEAVED", "SAMPLING_SEQUENTIAL",
           "Candidate", "Rounds", "as_candidate", "rank_from_rounds", "round_ratios", "sample_rounds",
           "stop_sentence", "take_sample"]
