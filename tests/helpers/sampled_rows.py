"""Rows timed from synthesized samples: fixed-seed draws summarized by the harness's own
statistics (harness.timing.stats.summarize), typed as harness.records.results rows.

Tests of the noise model, compare and the gate use these instead of timing this machine: the
draws are the same on every run, so a verdict cannot change with the box's load."""

from __future__ import annotations

import math
import random
from pathlib import Path

from harness.records.results import ResultRow, row_json
from harness.timing.stats import summarize
from helpers.typed_rows import ran_row, timing

# Per-sample log-normal spread giving a median CI of about ±6.6% with 30 samples: what two
# separate CPU runs with --cpu-clock process showed on the shared 2-core box.
CPU_SPREAD = 0.145
SAMPLES = 30


def sampled_row(median_us: float, rng: random.Random, *, spread: float = CPU_SPREAD, samples: int = SAMPLES,
                method: str = "process_time", device: str = "cpu", **kw) -> ResultRow:
    """One passing row whose timing summarizes ``samples`` draws of median_us * exp(N(0, spread))."""
    draws = [median_us * math.exp(rng.gauss(0.0, spread)) for _ in range(samples)]
    stats = summarize(draws)
    row = ran_row(None, device=device, **kw)
    t = timing(stats["median_us"], method=method, **{k: v for k, v in stats.items() if k != "median_us"})
    return row.model_copy(update={"timing": t})


def sampled_run(seed: int, n: int = 16, *, scale: float | dict[int, float] = 1.0, run_sd: float = 0.01,
                suite: str = "s", **kw) -> list[ResultRow]:
    """n rows of one run: row i's true median (50 + 25 i µs), a per-row run-to-run factor
    exp(N(0, run_sd)), times ``scale`` (one factor for every row, or {row index: factor})."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        f = scale.get(i, 1.0) if isinstance(scale, dict) else scale
        med = (50.0 + 25.0 * i) * math.exp(rng.gauss(0.0, run_sd)) * f
        out.append(sampled_row(med, rng, case=f"c{i}", backend="b" if i % 2 else "a", suite=suite, **kw))
    return out


def write_run(rows: list[ResultRow], folder: Path) -> Path:
    """A results folder holding ``rows`` (results.jsonl), as a run writes it."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.jsonl").write_text("".join(row_json(r) + "\n" for r in rows))
    return folder
