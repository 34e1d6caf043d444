"""Candidates of one case sampled in interleaved rounds (A B C A B C ...), so a drift of the clock,
power or temperature over the sampling falls on all of them alike, and ranked from those rounds.

Sampled one after another, two identical candidates differ by whatever the GPU's state did
between their turns: a clock falling under load makes the later one look slower (a false
margin; tests/test_timing_interleave.py shows it on a drifting stand-in). In rounds, every
candidate sees the same drift; each candidate's per-round ratio to the others is free of it.

``sample_rounds`` takes one ``take`` per candidate (a sample in seconds, or None for a sample the
candidate rejected, as ``harness.timing.loop``'s takes do; optionally with its host-bound test)
and the options whose stopping criterion each candidate's samples must satisfy; a candidate is
sampled once per round until its own criterion says stop, then leaves the rounds. The candidates
that meet the rule together (most rows stop at ``min_samples``) share every round; one that needs
more samples goes on alone, as it would sequentially. Sampling everyone until the last one stops
would cost a slow candidate's samples for every round a noisy fast one needs (on the H200's
decode suite: 32 s of sampling instead of 7.5 s). A take that raises drops its candidate
(``Rounds.errors``); the others go on.
``harness.timing.loop.time_interleaved`` drives whole timing runs this way.
"""

from __future__ import annotations

import bisect
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping

from harness.timing.options import TimingOptions
from harness.timing.stopping import STOP_TIME, ask, criterion_for

SAMPLING_INTERLEAVED = "interleaved"
SAMPLING_SEQUENTIAL = "sequential"
MAX_REJECTS_PER_ROUND = 8  # a candidate rejecting this many samples in a row gives up the round


@dataclass
class Rounds:
    """Per candidate: its samples (seconds, one per round it completed), why it stopped, and the
    seconds its own samples took."""

    samples: dict[str, list[float]] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)
    elapsed: dict[str, float] = field(default_factory=dict)
    rounds: int = 0
    errors: dict[str, BaseException] = field(default_factory=dict)


Take = Callable[[], "float | None"]


def sample_rounds(takes: Mapping[str, Take | tuple[Take, Callable[[], bool] | None]], opts: TimingOptions,
                  clock: Callable[[], float] = time.perf_counter) -> Rounds:
    """Sample every candidate once per round until its stopping criterion says stop (asked with
    its own samples, its own sampling seconds and its host-bound test)."""
    criterion = criterion_for(opts)
    live = {k: (v if isinstance(v, tuple) else (v, None)) for k, v in takes.items()}
    out = Rounds({k: [] for k in live}, {}, {k: 0.0 for k in live})
    sorted_s: dict[str, list[float]] = {k: [] for k in live}
    while live:
        out.rounds += 1
        for name, (take, host_bound) in list(live.items()):
            x = None
            try:
                for _ in range(MAX_REJECTS_PER_ROUND):
                    t0 = clock()
                    x = take()
                    out.elapsed[name] += clock() - t0
                    if x is not None:
                        break
            except Exception as e:  # this candidate's failure, not the others'
                out.errors[name] = e
                del live[name]
                continue
            if x is not None:
                out.samples[name].append(x)
                bisect.insort(sorted_s[name], x)
            hb = host_bound is not None and host_bound()
            reason = (ask(criterion, sorted_s[name], out.elapsed[name], hb) if sorted_s[name]
                      else (STOP_TIME if out.elapsed[name] > opts.max_time_s else None))
            if reason:
                out.reasons[name] = reason
                del live[name]
    return out


def round_ratios(rounds: Rounds, a: str, b: str) -> list[float]:
    """a's time over b's, round by round (the rounds both completed)."""
    return [x / y for x, y in zip(rounds.samples[a], rounds.samples[b]) if y > 0]


def rank_from_rounds(rounds: Rounds) -> list[tuple[str, float]]:
    """Candidates fastest first, each with its median time over its rounds (seconds)."""
    meds = {k: statistics.median(v) for k, v in rounds.samples.items() if v}
    return sorted(meds.items(), key=lambda kv: kv[1])


__all__ = ["SAMPLING_INTERLEAVED", "SAMPLING_SEQUENTIAL", "Rounds", "rank_from_rounds", "round_ratios",
           "sample_rounds"]
