"""Compare two runs row by row and decide whether the new one regressed.

Rows are matched by (suite, case, backend, variant_label). Speed is judged against measured
noise, not a bare percentage: a row is *slower* only when its median moved by more than the
threshold AND the ~95% confidence intervals of the two medians do not overlap; a change above
the threshold with overlapping intervals is *ambiguous* (reported, not failed). Correctness:
pass -> mismatch/error/timeout is a regression, as is a row that disappeared or stopped
running (became skipped/unsupported), unless allowed by pattern.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from harness.results import FAILED, NOT_RUN, RAN, ResultRow, Status, read_header, read_rows

Speed = Literal["faster", "slower", "same", "ambiguous", "not timed"]
ATTEMPTED = RAN | FAILED  # the cell was tried: it ran, or it failed trying


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

    @property
    def name(self) -> str:
        suite, case, backend, var = self.key
        return f"{case} / {backend}" + (f" [{var}]" if var else "")


@dataclass
class Comparison:
    diffs: list[RowDiff]
    threshold: float
    correctness_only: bool
    warnings: list[str] = field(default_factory=list)

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
    t = row.timing
    if t is None:
        return None
    med, lo, hi = t.median_us, t.ci_low_us, t.ci_high_us
    if not med > 0:
        return None
    return med, min(lo, med), max(hi, med)


def classify_speed(base: ResultRow, new: ResultRow, threshold: float) -> tuple[Speed, float | None]:
    """faster / slower / same / ambiguous from the medians and their confidence intervals."""
    b, n = _timing(base), _timing(new)
    if b is None or n is None:
        return "not timed", None
    ratio = n[0] / b[0]
    if abs(ratio - 1.0) <= threshold:
        return "same", ratio
    overlap = n[1] <= b[2] and b[1] <= n[2]
    if overlap:
        return "ambiguous", ratio
    return ("slower" if ratio > 1 else "faster"), ratio


def _index(rows: list[ResultRow], label: str, warnings: list[str]) -> dict[tuple[str, str, str, str], ResultRow]:
    out: dict[tuple[str, str, str, str], ResultRow] = {}
    dups = 0
    for r in rows:
        dups += r.key in out
        out[r.key] = r  # the last one wins: a re-run appended to the same file supersedes
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
) -> Comparison:
    warnings: list[str] = []
    base = _index(base_rows, "baseline", warnings)
    new = _index(new_rows, "new", warnings)
    allow_missing = allow_missing or []
    allow_skip = allow_skip or []
    diffs: list[RowDiff] = []
    for key in list(base) + [k for k in new if k not in base]:
        b, n = base.get(key), new.get(key)
        d = RowDiff(key, b, n)
        diffs.append(d)
        if b is None:
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
        if b.status == Status.PASS and n.status in FAILED:
            d.problem = f"correctness: pass -> {n.status}" + (f" ({n.reason})" if n.reason else "")
            continue
        if b.status != n.status:
            d.info = f"status {b.status} -> {n.status}" + (f" ({n.reason})" if n.reason else "")
        if b.status == Status.PASS and n.status == Status.PASS and not correctness_only:
            d.speed, d.ratio = classify_speed(b, n, threshold)
            if d.speed == "slower":
                d.problem = f"slower: {_pct(d.ratio)} beyond the noise ({_ci(b)} -> {_ci(n)})"
    if not correctness_only:
        devs = {(r.device or "?") for r in base_rows} | {(r.device or "?") for r in new_rows}
        if len(devs) > 1:
            warnings.append(f"rows ran on different devices ({', '.join(sorted(devs))}): timings are not comparable")
    return Comparison(diffs, threshold, correctness_only, warnings)


def compare_paths(baseline: str | Path, new: str | Path, **kw: Any) -> Comparison:
    """Compare two results folders or .jsonl files (see ``compare_rows`` for the options)."""
    for p in (baseline, new):
        if not Path(p).exists():
            raise FileNotFoundError(f"{p}: no such results folder or file")
        if Path(p).is_dir() and not (Path(p) / "results.jsonl").exists():
            raise FileNotFoundError(f"{p}: folder holds no results.jsonl")
    comp = compare_rows(read_rows(baseline), read_rows(new), **kw)
    hb, hn = read_header(baseline), read_header(new)
    db, dn = (hb.get("device") or {}).get("name"), (hn.get("device") or {}).get("name")
    if db and dn and db != dn and not kw.get("correctness_only"):
        comp.warnings.append(f"baseline device {db!r} differs from new device {dn!r}")
    return comp


def _pct(ratio: float | None) -> str:
    return "" if ratio is None else f"{(ratio - 1) * 100:+.1f}%"


def _ci(r: ResultRow | None) -> str:
    t = _timing(r) if r is not None else None
    return "-" if t is None else f"{t[0]:.2f} us [{t[1]:.2f}, {t[2]:.2f}]"


def _md_escape(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def to_markdown(comp: Comparison, baseline: str = "baseline", new: str = "new", max_rows: int = 200) -> str:
    """A markdown summary: the verdict, counts, then the rows that matter."""
    regs = comp.regressions
    verdict = f"**REGRESSED**: {len(regs)} row(s)" if regs else "**OK**: no regression"
    mode = "correctness only" if comp.correctness_only else f"threshold {comp.threshold * 100:g}% and non-overlapping 95% CIs"
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
    if not comp.correctness_only:
        counts += [(s, len(comp.of(s))) for s in ("slower", "faster", "ambiguous", "same")]  # type: ignore[arg-type]
    lines += ["| " + " | ".join(k for k, _ in counts) + " |", "|" + "---|" * len(counts),
              "| " + " | ".join(str(v) for _, v in counts) + " |", ""]

    def table(title: str, items: list[RowDiff], what: str) -> None:
        if not items:
            return
        lines.extend([f"### {title} ({len(items)})", ""])
        timed = not comp.correctness_only
        head = ["row", "baseline", "new"] + (["change"] if timed else []) + [what]
        lines.extend(["| " + " | ".join(head) + " |", "|" + "---|" * len(head)])
        for d in items[:max_rows]:
            bs = d.base.status if d.base else "-"
            ns = d.new.status if d.new else "-"
            if timed:
                bs, ns = f"{bs}, {_ci(d.base)}", f"{ns}, {_ci(d.new)}"
            text = getattr(d, what)
            cells = [d.name, bs, ns] + ([_pct(d.ratio)] if timed else []) + [text or d.speed]
            lines.append("| " + " | ".join(_md_escape(c) for c in cells) + " |")
        if len(items) > max_rows:
            lines.append(f"| ... {len(items) - max_rows} more | | | |")
        lines.append("")

    table("Regressions", regs, "problem")
    if not comp.correctness_only:
        table("Ambiguous (change above the threshold, within the noise)", comp.of("ambiguous"), "speed")
        table("Faster", comp.of("faster"), "speed")
    table("Accepted by --allow-missing / --allow-skip", [d for d in comp.diffs if d.allowed], "allowed")
    table("Other changes", [d for d in comp.diffs if d.info and not d.problem], "info")
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
        raise ValueError(f"--threshold {text!r}: out of range")
    return v
