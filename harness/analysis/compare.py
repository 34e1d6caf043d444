"""Compare two runs row by row and decide whether the new one regressed.

Rows are matched by (suite, case, backend, variant_label); a variant axis only one run has (added
between the runs) is left out of the match where that merges no rows. What fails the gate:

- correctness: pass -> mismatch/error; a row that disappeared; a row that stopped
  running (became skipped/unsupported), unless allowed by --allow-missing / --allow-skip. A
  resource error (out of memory, a cell timeout: attn_contract.status.resource_kind) is no
  correctness regression: such rows are listed apart as "resource: not comparable";
- speed, only where timings are not noise-dominated: a row is *slower* when its median moved
  by more than the threshold AND beyond its device class's run-to-run noise band AND the 95%
  confidence intervals of the two medians do not overlap AND the move is consistent (the
  middle half of the new samples lies above the middle half of the old ones). A move above
  the threshold that fails any of the others is *ambiguous*: reported, never failed.

The noise model (one per device class: CPU wall clock, CPU process time, CUDA events). Two runs
of the same code differ by run-to-run noise that within-run CIs do not see (other processes,
clocks, placement). It is estimated from the data: the log ratios NEW/BASE of all matched
timed rows of the class, their robust spread (the MAD, or the shortest half of the ratios when
a subset of rows moved together, which would widen the MAD), and a band of NOISE_K robust
standard deviations around 1. The band is centred on 1, not on the median ratio: every row
slower by the same factor is a regression (a shared code path), not noise; a warning says so.

A class is *noise-dominated*, and its timings are reported but never fail the gate, when
its timings are CPU wall-clock times (shared cores, frequency scaling: medians move several-
fold between runs), when its run-to-run spread is wider than the threshold, or when its rows'
own confidence intervals are, unless the rows share a shift far outside that noise (below).

The shared-shift rule. A class dominated only by its spread or its rows' CIs (never one noisy
whatever the data says, such as CPU wall clock) is judged after all when most rows moved
together by far more than that noise: the median log ratio exceeds the threshold, SHIFT_K
times the rows' typical CI half-width and the noise band (when a spread is known), and at least
SHIFT_AGREE of the rows moved the same way. Such a shift cannot come from the per-row noise the
class was dominated by; one moved row leaves the median, and so the class, where they were.
``harness gate`` and ``harness compare --confirm N`` re-measure the rows found slower before
failing them (harness/analysis/compare_confirm.py). A baseline of several runs judges each row
against its own spread over them (harness/analysis/compare_runs.py).

The GPU's clock (harness/analysis/compare_clock.py). Rows timed in two clock regimes (burst, sustained)
are not compared: two runs each in one regime are refused (exit 2 from the commands), a row
whose regime differs from its match's is listed, not judged. A slower/faster row whose time moved
with its SM clock, by no more than the clock explains, is *clock-shifted*: reported, never failed.
"""

from __future__ import annotations

import fnmatch
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Sequence

from attn_contract.status import resource_kind
from harness.analysis.compare_clock import clock_explains, clock_note, refuse_mixed_runs
from harness.analysis.compare_runs import Key, RowSpread, as_backend, read_baseline, row_spread
from harness.records.clocks import regime_of
from harness.report import markdown as md
from harness.records.results import (FAILED, NOT_RUN, RAN, TIMED_OK, ResultRow, read_rows, read_run_header,
                                     variant_label)

Speed = Literal["faster", "slower", "same", "ambiguous", "noisy", "not timed", "clock-shifted", "other regime",
                "not reproduced"]
ATTEMPTED = RAN | FAILED  # the cell was tried: it ran, or it failed trying
NOISE_K = 3.0  # the noise band's half-width in robust standard deviations
MIN_ROWS_FOR_SPREAD = 5  # fewer matched timed rows in a class: no spread estimate (CIs only)
# The shared-shift rule: a typical move this many times the rows' CI half-width (and beyond the
# threshold and the band), in this share of the rows, is a shift the per-row noise cannot explain.
SHIFT_K = 3.0
SHIFT_AGREE = 0.75
# Timing methods whose numbers are noise-dominated whatever the data says, and why.
NOISY_METHODS = {
    "wall_clock": "CPU wall-clock time: on shared cores medians move several-fold between runs of the same "
                  "code; `harness run --cpu-clock process` gives CPU timings the gate can judge",
    "cuda_event/host-bound": "the timed region includes host time (the launches were not hidden behind the "
                             "hold kernel: the call synchronizes or enqueues for longer than --max-hold); host "
                             "load moved such rows by up to 2.5x between identical runs on the H200",
}


@dataclass
class RowDiff:
    key: tuple[str, str, str, str]
    base: ResultRow | None
    new: ResultRow | None
    speed: Speed = "not timed"
    ratio: float | None = None  # new median / base median
    problem: str = ""  # non-empty: a regression, and why
    allowed: str = ""  # non-empty: would be a regression, accepted by an --allow-* pattern
    info: str = ""  # a change worth reporting that is not a regression (fixed, new row, ...)
    noise_class: str = ""  # the device class whose noise model judged the timing
    resource: str = ""  # non-empty: the new row hit a resource limit (memory, time): not comparable

    @property
    def name(self) -> str:
        suite, case, backend, var = self.key
        return f"{case} / {backend}" + (f" [{var}]" if var else "")


@dataclass
class NoiseModel:
    """Run-to-run noise of one device class, from the matched timed rows of two runs."""

    device_class: str  # e.g. "cuda/cuda_event", "cpu/process_time"
    rows: int  # matched rows timed on both sides
    median_ratio: float | None  # the typical NEW/BASE ratio (1.0: no common shift)
    sigma: float | None  # robust standard deviation of log(NEW/BASE); None: too few rows
    row_noise: float | None  # the rows' own median relative CI half-width (the wider side)
    dominated: str = ""  # non-empty: the timings are noise-dominated, and why (never gated)
    shared_shift: str = ""  # non-empty: judged despite wide noise, because most rows shared a large shift

    @property
    def band(self) -> float:
        """Half-width of the noise band around ratio 1, as a fraction (0: unknown)."""
        return math.expm1(NOISE_K * self.sigma) if self.sigma else 0.0


@dataclass
class Comparison:
    diffs: list[RowDiff]
    threshold: float
    correctness_only: bool
    warnings: list[str] = field(default_factory=list)
    noise: dict[str, NoiseModel] = field(default_factory=dict)
    unmatched_base: list[RowDiff] = field(default_factory=list)  # set when the suites differ
    unmatched_new: list[RowDiff] = field(default_factory=list)
    baseline_runs: int = 1  # runs the baseline holds (harness/analysis/compare_runs.py)
    match_backend: dict[str, str] = field(default_factory=dict)  # NEW's backend name -> the baseline's

    @property
    def regressions(self) -> list[RowDiff]:
        return [d for d in self.diffs if d.problem]

    @property
    def regressed(self) -> bool:
        return bool(self.regressions)

    def of(self, speed: Speed) -> list[RowDiff]:
        return [d for d in self.diffs if d.speed == speed]


def _matches(key: tuple[str, str, str, str], patterns: list[str]) -> str:
    """The first pattern naming this row: an exact case/backend/variant, or a glob over
    ``suite/case/backend/variant``. Returns "" when none does."""
    suite, case, backend, var = key
    full = f"{suite}/{case}/{backend}/{var}"
    for p in patterns:
        if p in (case, backend, var, full) or fnmatch.fnmatchcase(full, p):
            return p
    return ""


def _timing(row: ResultRow) -> tuple[float, float, float] | None:
    """(median, CI low, CI high) in microseconds, or None when the row has no usable timing."""
    t = row.timing
    if t is None:
        return None
    med, lo, hi = t.median_us, t.ci_low_us, t.ci_high_us
    if not med > 0:
        return None
    return med, min(lo, med), max(hi, med)


def device_class(row: ResultRow) -> str:
    """The noise class of a row's timing: device type and timing method (``cpu/wall_clock``).
    GPU rows timed eagerly (no CUDA-graph replay) form their own class (``cuda/cuda_event/eager``):
    their time includes launch gaps, so host load moves them (measured on the H200: up to +37%
    between two identical runs while graph-replayed rows stayed within ±0.5%) and they must not
    share, or widen, the graph-timed rows' noise band. Rows whose launches were not hidden behind
    the hold kernel (``timing.launch.hidden_frac`` below 0.5) time host work too and form
    ``cuda/cuda_event/host-bound``, noise-dominated: such rows moved by far more between two
    identical runs than graph-replayed ones (docs/measurement.md §12)."""
    dev = (row.device or "?").split(":")[0]
    if row.timing is None:
        return f"{dev}/?"
    cls = f"{dev}/{row.timing.method}"
    if dev == "cuda" and row.timing.cuda_graph.used is False:
        hidden = row.timing.launch.hidden_frac if row.timing.launch is not None else None
        cls += "/host-bound" if hidden is not None and hidden < 0.5 else "/eager"
    return cls


# ---------------------------------------------------------------- the noise model
def _shortest(xs: list[float], share: float) -> float:
    """Length of the shortest interval holding ``share`` of the sorted values ``xs``."""
    n = len(xs)
    h = int(n * share) + 1
    return min(xs[i + h - 1] - xs[i] for i in range(n - h + 1))


def robust_sigma(log_ratios: Sequence[float]) -> float | None:
    """Robust standard deviation of ``log_ratios`` (None below MIN_ROWS_FOR_SPREAD values): the
    smallest of the normal-consistent MAD, the shortest half of the values / 1.349 and (12 values
    or more) the shortest quarter / 0.637. All equal the standard deviation for normal noise;
    when a subset of rows moved together (a real regression of one backend) the MAD widens with
    them while the shortest half (a moved minority) or quarter (up to about half moved) stays on
    the unmoved rows' spread."""
    xs = sorted(log_ratios)
    n = len(xs)
    if n < MIN_ROWS_FOR_SPREAD:
        return None
    med = statistics.median(xs)
    estimates = [1.4826 * statistics.median(abs(x - med) for x in xs), _shortest(xs, 0.5) / 1.349]
    if n >= 12:
        estimates.append(_shortest(xs, 0.25) / 0.637)
    return min(estimates)


def estimate_noise(device_class_name: str, pairs: Sequence[tuple[ResultRow, ResultRow]], threshold: float) -> NoiseModel:
    """The noise model of one device class from its matched (base, new) timed rows."""
    logs, widths = [], []
    for b, n in pairs:
        tb, tn = _timing(b), _timing(n)
        if tb is None or tn is None:
            continue
        logs.append(math.log(tn[0] / tb[0]))
        widths.append(max((tb[2] - tb[1]) / (2 * tb[0]), (tn[2] - tn[1]) / (2 * tn[0])))
    sigma = robust_sigma(logs)
    model = NoiseModel(device_class_name, len(logs), math.exp(statistics.median(logs)) if logs else None, sigma,
                       statistics.median(widths) if widths else None)
    method = device_class_name.split("/", 1)[-1]
    if method in NOISY_METHODS:
        model.dominated = NOISY_METHODS[method]
    elif sigma is not None and math.expm1(sigma) > threshold:
        model.dominated = (f"run-to-run spread ±{math.expm1(sigma) * 100:.1f}% (robust sd of NEW/BASE over {len(logs)} "
                           f"rows) is wider than the {threshold * 100:g}% threshold")
    elif model.row_noise is not None and model.row_noise > threshold:
        model.dominated = (f"the rows' own 95% CIs (median half-width ±{model.row_noise * 100:.1f}%) are wider than "
                           f"the {threshold * 100:g}% threshold")
    if model.dominated and method not in NOISY_METHODS:
        model.shared_shift = shared_shift(logs, model, threshold)
        if model.shared_shift:
            model.dominated = ""
    return model


def shared_shift(logs: Sequence[float], model: NoiseModel, threshold: float) -> str:
    """Why most rows' common move is far outside the class's noise ("" when it is not): the
    median log ratio beyond the threshold, SHIFT_K x the rows' typical CI half-width and the noise
    band, with at least SHIFT_AGREE of the rows moved the same way."""
    if len(logs) < MIN_ROWS_FOR_SPREAD or model.row_noise is None:
        return ""
    med = statistics.median(logs)
    shift = abs(med)
    ci = math.log1p(model.row_noise)  # the CI half-width on the log scale of the ratios
    band = NOISE_K * model.sigma if model.sigma else 0.0
    same_way = sum(1 for x in logs if x * med > 0) / len(logs)
    if shift <= math.log1p(threshold) or shift <= SHIFT_K * ci or shift <= band or same_way < SHIFT_AGREE:
        return ""
    return (f"{same_way * 100:.0f}% of {len(logs)} rows moved the same way, typically by {_pct(math.exp(med))}: "
            f"{shift / ci:.1f}x the rows' CI half-width (±{model.row_noise * 100:.1f}%), beyond the "
            f"{threshold * 100:g}% threshold" + (f" and the ±{math.expm1(band) * 100:.1f}% band" if band else ""))


def classify_speed(base: ResultRow, new: ResultRow, threshold: float,
                   noise: NoiseModel | None = None) -> tuple[Speed, float | None]:
    """faster / slower / same / ambiguous / noisy, from the medians, their CIs, the samples'
    quartiles and (given) the device class's noise model."""
    b, n = _timing(base), _timing(new)
    if b is None or n is None:
        return "not timed", None
    ratio = n[0] / b[0]
    if noise is not None and noise.dominated:
        return "noisy", ratio
    if abs(ratio - 1.0) <= threshold:
        return "same", ratio
    slower = ratio > 1
    beyond_band = noise is None or abs(ratio - 1.0) > noise.band
    overlap = n[1] <= b[2] and b[1] <= n[2]
    tb, tn = base.timing, new.timing
    assert tb is not None and tn is not None
    # Consistency: the middle half of the new samples clears the middle half of the old ones,
    # so the move is not carried by a few slow (or fast) samples.
    consistent = tn.q1_us > tb.q3_us if slower else tn.q3_us < tb.q1_us
    if beyond_band and not overlap and consistent:
        return ("slower" if slower else "faster"), ratio
    return "ambiguous", ratio


def _one_sided_axes(base_rows: list[ResultRow], new_rows: list[ResultRow], warnings: list[str]) -> dict[str, set[str]]:
    """Per backend, the variant axes only one run has (an axis added between the runs, e.g.
    FlashInfer's decode_backend): rows are matched on the axes both runs have, so a baseline
    from before the axis still meets its rows. Not where dropping the axis would merge rows
    of one run (several values of the new axis): those stay unmatched, as new/missing."""
    def axes(rows: list[ResultRow]) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for r in rows:
            out.setdefault(r.backend, set()).update(r.variant)
        return out

    a, b = axes(base_rows), axes(new_rows)
    drop: dict[str, set[str]] = {}
    for backend in set(a) & set(b):
        only = a[backend] ^ b[backend]
        if not only:
            continue
        for rows in (base_rows, new_rows):
            keys = [_key(r, only) for r in rows if r.backend == backend]
            if len(keys) != len(set(keys)):
                break
        else:
            drop[backend] = only
            warnings.append(f"{backend}: variant axis {', '.join(sorted(only))} is in only one run; its rows are "
                            "matched on the axes both runs have")
    return drop


def _key(r: ResultRow, drop: set[str]) -> tuple[str, str, str, str]:
    if not drop:
        return r.key
    return (r.suite, r.case, r.backend, variant_label({k: v for k, v in r.variant.items() if k not in drop}))


def _index(rows: list[ResultRow], label: str, warnings: list[str],
           drop: dict[str, set[str]] | None = None) -> dict[tuple[str, str, str, str], ResultRow]:
    out: dict[tuple[str, str, str, str], ResultRow] = {}
    dups = 0
    for r in rows:
        k = _key(r, (drop or {}).get(r.backend, set()))
        dups += k in out
        out[k] = r  # the last one wins: a re-run appended to the same file supersedes
    if dups:
        warnings.append(f"{label}: {dups} duplicate row key(s); the last occurrence of each is used")
    return out


def compare_rows(
    base_rows: list[ResultRow],
    new_rows: list[ResultRow],
    *,
    threshold: float = 0.05,
    correctness_only: bool = False,
    allow_missing: list[str] | None = None,
    allow_skip: list[str] | None = None,
    base_runs: dict[Key, list[ResultRow]] | None = None,
) -> Comparison:
    """``base_runs``: every baseline run's row of each (raw) key, for a baseline of several runs
    (harness/analysis/compare_runs.py); ``base_rows`` then holds one representative row per key."""
    warnings: list[str] = []
    drop = _one_sided_axes(base_rows, new_rows, warnings)
    base = _index(base_rows, "baseline", warnings, drop)
    new = _index(new_rows, "new", warnings, drop)
    allow_missing = allow_missing or []
    allow_skip = allow_skip or []
    diffs: list[RowDiff] = []
    timed: list[RowDiff] = []
    for key in list(base) + [k for k in new if k not in base]:
        b, n = base.get(key), new.get(key)
        d = RowDiff(key, b, n)
        diffs.append(d)
        if b is None:
            assert n is not None  # every key comes from one side or the other
            d.info = f"new row ({n.status})"
            continue
        if n is None:
            why = f"missing: was {b.status}, absent from the new results"
            pat = _matches(key, allow_missing)
            d.allowed, d.problem = (f"{why} (allowed by --allow-missing {pat})", "") if pat else ("", why)
            continue
        if b.status in ATTEMPTED and n.status in NOT_RUN:
            why = f"stopped running: {b.status} -> {n.status} ({n.reason})"
            pat = _matches(key, allow_skip)
            d.allowed, d.problem = (f"{why} (allowed by --allow-skip {pat})", "") if pat else ("", why)
            continue
        kind = resource_kind(n.status, n.reason) if n.status in FAILED else ""
        if kind and b.status != n.status:  # ran out of memory / time: says nothing of the numbers
            d.resource = (f"resource ({'out of memory' if kind == 'memory' else 'cell timeout'}): not comparable; "
                          f"{b.status} -> {n.status}" + (f" ({n.reason})" if n.reason else ""))
            continue
        if b.status in TIMED_OK and n.status in FAILED:  # unchecked (--no-check) -> a failure counts too
            d.problem = f"correctness: {b.status} -> {n.status}" + (f" ({n.reason})" if n.reason else "")
            continue
        if b.status != n.status:
            d.info = f"status {b.status} -> {n.status}" + (f" ({n.reason})" if n.reason else "")
        if b.status in TIMED_OK and n.status in TIMED_OK and not correctness_only:
            rb, rn = regime_of(b), regime_of(n)
            if rb and rn and rb != rn:  # two GPU states: not a regression, not compared
                d.speed = "other regime"
                d.info = (f"not compared: timed in the {rb} clock regime in the baseline, {rn} in the new run "
                          "(docs/measurement.md, Clock regimes)")
                continue
            timed.append(d)
    comp = Comparison(diffs, threshold, correctness_only, warnings)
    _check_suites(comp, base_rows, new_rows)
    if correctness_only:
        return comp
    # One noise model per device class, from every matched row timed on both sides.
    by_class: dict[str, list[RowDiff]] = {}
    for d in timed:
        if d.base is not None and d.new is not None and _timing(d.base) and _timing(d.new):
            d.noise_class = device_class(d.new)
            by_class.setdefault(d.noise_class, []).append(d)
    for name, ds in by_class.items():
        comp.noise[name] = estimate_noise(name, [(d.base, d.new) for d in ds], threshold)  # type: ignore[misc]
    for d in timed:
        assert d.base is not None and d.new is not None
        model = comp.noise.get(d.noise_class)
        spread = row_spread((base_runs or {}).get(d.base.key, []))
        if spread is not None:  # a baseline of several runs: the row's own spread (compare_runs.py)
            _classify_over_runs(d, spread, threshold, model)
        else:
            d.speed, d.ratio = classify_speed(d.base, d.new, threshold, model)
        if d.speed in ("slower", "faster") and d.ratio is not None:
            why = clock_explains(d.base, d.new, d.ratio, model.band if model else 0.0)
            if why:  # the GPU's state moved, not the code (harness/analysis/compare_clock.py): reported, never failed
                d.speed, d.info = "clock-shifted", f"{_pct(d.ratio)} with the clock: {why}"
        if d.speed == "slower":
            clk = clock_note(d.base, d.new)
            d.problem = (f"slower: {_pct(d.ratio)} beyond the noise ({_ci(d.base)} -> {_ci(d.new)})"
                         + (f"; {clk}, which does not explain it" if clk else ""))
    for m in comp.noise.values():
        if m.shared_shift:
            warnings.append(f"{m.device_class}: a shift shared by most rows, far outside their noise, is judged "
                            f"(rows' CIs or spread alone would leave the class noise-dominated): {m.shared_shift}")
        if m.dominated:
            warnings.append(f"{m.device_class} timings are noise-dominated ({m.dominated}): "
                            f"{m.rows} row(s) compared on correctness only")
        elif m.median_ratio is not None and m.rows >= MIN_ROWS_FOR_SPREAD and abs(m.median_ratio - 1) > threshold:
            warnings.append(f"{m.device_class}: the typical row moved by {_pct(m.median_ratio)} — every row shifted "
                            "together: a machine-wide change (clocks, driver, load) or a change in shared code")
    devs = {(r.device or "?") for r in base_rows} | {(r.device or "?") for r in new_rows}
    if len(devs) > 1:
        warnings.append(f"rows ran on different devices ({', '.join(sorted(devs))}): timings are not comparable")
    cb, cn = ({r.timing.method for r in rows if r.timing is not None} for rows in (base_rows, new_rows))
    if cb and cn and cb != cn:  # CPU wall clock vs process time: two different quantities
        warnings.append(f"the runs were timed on different clocks (baseline: {', '.join(sorted(cb))}; new: "
                        f"{', '.join(sorted(cn))}): their timings measure different things (harness run --cpu-clock)")
    return comp


def _classify_over_runs(d: RowDiff, spread: RowSpread, threshold: float, noise: NoiseModel | None) -> None:
    """A row with several timed baseline runs: *same* inside their range widened by the class's
    band, else judged against the nearest edge run (harness/analysis/compare_runs.py)."""
    assert d.new is not None and d.new.timing is not None
    n = d.new.timing.median_us
    band = noise.band if noise is not None else 0.0
    d.base = spread.mid
    if noise is not None and noise.dominated:
        d.speed, d.ratio = classify_speed(spread.mid, d.new, threshold, noise)
        return
    if spread.covers(n, band):
        moved, d.ratio = classify_speed(spread.mid, d.new, threshold, noise)
        d.speed = "same"
        note = f"within the spread of the {spread.describe(band)}" if moved in ("slower", "faster") else ""
    else:
        d.base = spread.edge(n)
        d.speed, d.ratio = classify_speed(d.base, d.new, threshold, noise)
        note = f"against the {'slowest' if d.base is spread.hi else 'fastest'} of {spread.describe(band)}"
    d.info = "; ".join(x for x in (d.info, note) if x)


def _check_suites(comp: Comparison, base_rows: list[ResultRow], new_rows: list[ResultRow]) -> None:
    """Different suites on the two sides: say so, and keep the rows that cannot be matched."""
    sb, sn = {r.suite for r in base_rows}, {r.suite for r in new_rows}
    if not sb or not sn or sb == sn:
        return
    comp.unmatched_base = [d for d in comp.diffs if d.new is None]
    comp.unmatched_new = [d for d in comp.diffs if d.base is None]
    comp.warnings.append(
        f"the runs are of different suites (baseline: {', '.join(sorted(sb))}; new: {', '.join(sorted(sn))}): rows "
        f"match by suite/case/backend/variant, so {len(comp.unmatched_base)} baseline row(s) and "
        f"{len(comp.unmatched_new)} new row(s) cannot be matched (listed under \"Rows that cannot be matched\")")


def compare_paths(baseline: str | Path | Sequence[str | Path], new: str | Path, **kw: Any) -> Comparison:
    """Compare results folders or .jsonl files (see ``compare_rows`` for the options). The
    baseline may be several runs: a folder of results folders, or several paths
    (harness/analysis/compare_runs.py: each row is then judged against its spread over them)."""
    base = read_baseline(baseline)  # FileNotFoundError names the path
    renames = dict(kw.pop("match_backend", None) or {})
    base_rows, new_rows = base.rows, [as_backend(r, renames) for r in read_rows(new)]
    all_base = [r for rows in base.runs.values() for r in rows] or base_rows
    refused = None if kw.get("correctness_only") else refuse_mixed_runs(all_base, new_rows)
    if refused:
        raise ValueError(refused)  # the commands: one line, exit 2
    comp = compare_rows(base_rows, new_rows, base_runs=base.runs, **kw)
    comp.baseline_runs, comp.match_backend = base.count, renames
    db, dn = read_run_header(base.folders[0]).device_name, read_run_header(new).device_name
    if db and dn and db != dn and not kw.get("correctness_only"):
        comp.warnings.append(f"baseline device {db!r} differs from new device {dn!r}")
    return comp


def _pct(ratio: float | None) -> str:
    return "" if ratio is None else f"{(ratio - 1) * 100:+.1f}%"


def _ci(r: ResultRow | None) -> str:
    t = _timing(r) if r is not None else None
    return "-" if t is None else f"{t[0]:.2f} us [{t[1]:.2f}, {t[2]:.2f}]"


def to_markdown(comp: Comparison, baseline: str = "baseline", new: str = "new", max_rows: int = 200) -> str:
    """A markdown summary: the verdict, counts, then the rows that matter."""
    regs = comp.regressions
    verdict = f"**REGRESSED**: {len(regs)} row(s)" if regs else "**OK**: no regression"
    mode = ("correctness only" if comp.correctness_only else
            f"speed: threshold {comp.threshold * 100:g}%, beyond the run-to-run noise band, non-overlapping 95% CIs "
            "and a consistent shift; noise-dominated timings are not gated")
    if comp.baseline_runs > 1 and not comp.correctness_only:
        mode += f"; each row against its spread over the baseline's {comp.baseline_runs} runs"
    lines = [f"## Comparison: `{new}` against `{baseline}`", "", f"{verdict} ({mode}).", ""]
    for w in comp.warnings:
        lines.append(f"> warning: {w}")
    if comp.warnings:
        lines.append("")
    matched = sum(1 for d in comp.diffs if d.base is not None and d.new is not None)
    counts = [("rows matched", matched), ("regressions", len(regs)),
              ("missing", sum(1 for d in comp.diffs if d.new is None)),
              ("new", sum(1 for d in comp.diffs if d.base is None)),
              ("allowed", sum(1 for d in comp.diffs if d.allowed))]
    if any(d.resource for d in comp.diffs):
        counts.append(("resource", sum(1 for d in comp.diffs if d.resource)))
    if not comp.correctness_only:
        counts += [(s, len(comp.of(s))) for s in ("slower", "faster", "ambiguous", "same", "noisy")]
        counts += [(s, len(comp.of(s))) for s in ("clock-shifted", "other regime", "not reproduced")
                   if comp.of(s)]
    lines += md.table([k for k, _ in counts], [[str(v) for _, v in counts]]) + [""]
    if comp.noise:
        lines += ["### Noise model (per device class)", ""]
        body = []
        for m in comp.noise.values():
            sd = f"±{math.expm1(m.sigma) * 100:.1f}%" if m.sigma is not None else f"- (< {MIN_ROWS_FOR_SPREAD} rows)"
            band = f"±{m.band * 100:.1f}%" if m.sigma is not None else "-"
            ci = f"±{m.row_noise * 100:.1f}%" if m.row_noise is not None else "-"
            verdict = (f"not gated: {m.dominated}" if m.dominated else
                       f"gated: shared shift ({m.shared_shift})" if m.shared_shift else "gated")
            body.append([m.device_class, str(m.rows), _pct(m.median_ratio), sd, band, ci, verdict])
        lines += md.table(["device class", "rows", "typical NEW/BASE", "run-to-run sd", "noise band", "rows' CI",
                           "timings"], body) + [""]

    def table(title: str, items: list[RowDiff], what: str) -> None:
        if not items:
            return
        lines.extend([f"### {title} ({len(items)})", ""])
        timed = not comp.correctness_only
        head = ["row", "baseline", "new"] + (["change"] if timed else []) + [what]
        body = []
        for d in items[:max_rows]:
            bs = d.base.status if d.base else "-"
            ns = d.new.status if d.new else "-"
            if timed:
                bs, ns = f"{bs}, {_ci(d.base)}", f"{ns}, {_ci(d.new)}"
            text = getattr(d, what)
            cells = [d.name, bs, ns] + ([_pct(d.ratio)] if timed else []) + [text or d.speed]
            body.append(cells)
        lines.extend(md.table(head, body))
        if len(items) > max_rows:
            lines.append(f"| ... {len(items) - max_rows} more | | | |")
        lines.append("")

    table("Regressions", regs, "problem")
    if not comp.correctness_only:
        table("Ambiguous (change above the threshold, within the noise)", comp.of("ambiguous"), "speed")
        table("Not reproduced (slower at first, not in a majority of fresh re-runs: passed)", comp.of("not reproduced"),
              "info")
        table("Faster", comp.of("faster"), "speed")
        table("Clock-shifted (the time moved with the SM clock: reported, not failed)", comp.of("clock-shifted"), "info")
    table("Resource errors: not comparable (out of memory or cell timeout; retried once by the run, "
          "not failed)", [d for d in comp.diffs if d.resource], "resource")
    table("Accepted by --allow-missing / --allow-skip", [d for d in comp.diffs if d.allowed], "allowed")
    if comp.unmatched_base or comp.unmatched_new:
        lines.extend(["### Rows that cannot be matched (different suites)", ""])
        for side, items in (("baseline only", comp.unmatched_base), ("new only", comp.unmatched_new)):
            if items:
                names = ", ".join(f"`{d.key[0]}/{d.name}`" for d in items[:max_rows])
                more = f" and {len(items) - max_rows} more" if len(items) > max_rows else ""
                lines.append(f"- {side} ({len(items)}): {md.escape(names)}{more}")
        lines.append("")
    table("Other changes", [d for d in comp.diffs if d.info and not d.problem
                            and d.speed not in ("clock-shifted", "not reproduced")], "info")
    return "\n".join(lines).rstrip() + "\n"


def parse_threshold(text: str) -> float:
    """'5%', '5' (percent) or '0.05' -> 0.05."""
    s = text.strip()
    try:
        v = float(s[:-1]) / 100 if s.endswith("%") else float(s)
    except ValueError:
        raise ValueError(f"--threshold {text!r}: expected a percentage such as 5% or a fraction such as 0.05") from None
    if not s.endswith("%") and v >= 1:
        v /= 100  # "5" means 5%, not 500%
    if not 0 <= v < 10:
        raise ValueError(f"--threshold {text!r}: out of range (0% up to 1000%)")
    return v
