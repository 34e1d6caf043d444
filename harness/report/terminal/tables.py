"""What ``harness run`` prints at the end: the tables, readable at 80 columns (pipes, CI logs),
and the verdict per case group. Cases and backend variants get short ids with a legend, so no
name is ever split across lines; times have 3-4 significant digits in a unit that suits them."""

from __future__ import annotations

import math
import re
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from harness.report.markdown import fmt_time
from harness.records.results import FAILED, NOT_RUN, RESULTS_FILE, ResultRow, Status

if TYPE_CHECKING:
    from harness.analysis.recommend.rank import BucketResult  # imported where ranking happens, as below

STATUS_STYLE: dict[str, str] = {Status.PASS: "green", Status.UNCHECKED: "cyan", Status.MISMATCH: "bold red", Status.ERROR: "red",
                Status.UNSUPPORTED: "yellow", Status.SKIPPED: "dim", Status.TIMEOUT: "magenta"}
SHORT_STATUS: dict[str, str] = {Status.PASS: "pass", Status.UNCHECKED: "unchk", Status.MISMATCH: "mism", Status.ERROR: "err", Status.TIMEOUT: "tmo",
                Status.UNSUPPORTED: "unsup", Status.SKIPPED: "skip"}
MAX_CASE_ID = 16  # longer case ids (long case group names) become c1, c2, ...: the table keeps 80 columns

_SIZE_FIGURE = re.compile(r"[\d,]+(\.\d+)?\s*(GFLOP|MiB)\s*>")


def fmt(x: Any, spec: str) -> str:
    return "" if x is None else format(x, spec)


def reason_kind(reason: str) -> str:
    """A skip reason with its case-specific figures elided ("12.5 GFLOP > limit" -> "... GFLOP > limit")."""
    return _SIZE_FIGURE.sub(lambda m: f"... {m.group(2)} >", reason)


def letter_ids(n: int) -> list[str]:
    """Short ids A..Z, then AA, AB, ...: one per backend variant, explained in a legend."""
    out = []
    for i in range(n):
        label, i = "", i + 1
        while i:
            i, r = divmod(i - 1, 26)
            label = chr(65 + r) + label
        out.append(label)
    return out


def short_case_ids(rows: list[ResultRow]) -> dict[str, str]:
    """The report's case ids (case group#n); a group name too long for the table is replaced
    by c1, c2, ... (the legend gives every full name either way)."""
    from harness.report.core import case_ids

    groups = [r.group for r in rows]
    long = [g for g in dict.fromkeys(groups) if len(g) > MAX_CASE_ID]
    alias = {g: f"c{i + 1}" for i, g in enumerate(long)}
    ids = case_ids([r.case for r in rows], groups)
    group_of = dict(zip((r.case for r in rows), groups))
    return {c: (alias[g] + i[len(g):] if (g := group_of[c]) in alias else i) for c, i in ids.items()}


MAX_NAME_CHARS = 120  # a case name in a terminal line; results.jsonl, the report and export keep it whole


def shorten(text: str, limit: int = MAX_NAME_CHARS) -> str:
    """``text`` cut to ``limit`` characters with an ellipsis (a 3000-character generated case
    name made one 3004-character terminal line)."""
    return text if len(text) <= limit else text[:limit - 1] + "…"


def print_legend(console: Console, pairs: list[tuple[str, str]], width: int) -> None:
    """``id = full name``, one a line; a name too long for the line starts on the next one,
    broken after commas; a token wider than the line is cut with an ellipsis."""
    for i, name in pairs:
        line = f"  {i} = {name}"
        if len(line) <= width:
            console.print(escape(line), highlight=False, soft_wrap=True)
            continue
        console.print(escape(f"  {i} ="), highlight=False)
        # Longer than a line: break after a comma (between axis=value pairs), never inside a token.
        cur = ""
        for part in [p + "," for p in name.split(",")[:-1]] + [name.split(",")[-1]]:
            part = shorten(part, max(width - 4, 20))
            if cur and len(cur) + len(part) + 4 > width:
                console.print(escape(f"    {cur}"), highlight=False, soft_wrap=True)
                cur = ""
            cur += part
        console.print(escape(f"    {cur}"), highlight=False, soft_wrap=True)


def print_summary(rows: list[ResultRow], out_dir: Path, console: Console, err_console: Console,
                  max_rows: int = 80) -> None:
    """The run's tables, then the verdict. Names never wrap inside a table: long ones are ids."""
    # Table order: what ran, what failed, what did not run.
    statuses = [str(s_) for s_ in (Status.PASS, Status.UNCHECKED, Status.MISMATCH, Status.ERROR, Status.TIMEOUT,
                                   Status.UNSUPPORTED, Status.SKIPPED)]
    if not any(r.status == Status.UNCHECKED for r in rows):  # a column only where a --no-check run has them
        statuses.remove(Status.UNCHECKED.value)
    counts = Counter((r.backend, r.variant_label, str(r.status)) for r in rows)
    keys = sorted({(b, v) for b, v, _ in counts})
    ids = dict(zip(keys, letter_ids(len(keys))))
    t = Table(title="Summary: cells by status", show_lines=False)
    t.add_column("id", no_wrap=True)
    t.add_column("backend", no_wrap=True)
    for s_ in statuses:
        t.add_column(SHORT_STATUS[s_], justify="right", style=STATUS_STYLE[s_], no_wrap=True)
    for b, v in keys:
        t.add_row(ids[(b, v)], escape(b), *[str(counts.get((b, v, s_), 0) or "") for s_ in statuses])
    console.print(t)
    width = console.width
    # The legend: every variant's full name on its own line, never cut (the terminal may wrap it).
    print_legend(console, [(i, f"{b} {v}") for (b, v), i in ids.items() if v], width)
    abbreviated = [s_ for s_ in statuses if SHORT_STATUS[s_] != s_]
    console.print(f"  {'/'.join(SHORT_STATUS[s_] for s_ in abbreviated)} = {'/'.join(abbreviated)}",
                  highlight=False)

    ran = [r for r in rows if r.status not in NOT_RUN]  # attempted: failures included
    if ran:
        cids = short_case_ids(rows)
        d = Table(title=f"Cells that ran ({len(ran)}; first {min(len(ran), max_rows)} shown)")
        d.add_column("case", no_wrap=True)
        d.add_column("id", no_wrap=True)
        d.add_column("status", no_wrap=True)
        for col in ("median", "TFLOP/s", "TB/s", "max err"):
            d.add_column(col, justify="right", no_wrap=True)
        for r in ran[:max_rows]:
            m, tm, ck = r.metrics, r.timing, r.check
            st = str(r.status)
            # Names and reasons are data, not rich markup: sweep names look like "[tags]".
            d.add_row(escape(cids[r.case]), ids[(r.backend, r.variant_label)], f"[{STATUS_STYLE[st]}]{SHORT_STATUS[st]}",
                      fmt_time(tm.median_us if tm else None), fmt(m.tflops if m else None, ".3g"),
                      fmt(m.tbps if m else None, ".3g"), fmt(ck.max_abs_err if ck else None, ".2e"))
        console.print(d)
        shown = list(dict.fromkeys(r.case for r in ran[:max_rows]))
        print_legend(console, [(cids[c], c) for c in shown if cids[c] != c], width)

    # Size-dependent reasons differ only in their numbers: group them so the table stays short.
    not_run = Counter((str(r.status), r.backend, reason_kind(r.reason)) for r in rows if r.status in NOT_RUN)
    if not_run:
        s = Table(title="Not run, and why")
        s.add_column("status", no_wrap=True)
        s.add_column("backend", no_wrap=True)
        s.add_column("cells", justify="right", no_wrap=True)
        s.add_column("reason", ratio=1)
        for (st, b, reason), n in sorted(not_run.items()):
            s.add_row(f"[{STATUS_STYLE[st]}]{SHORT_STATUS[st]}", escape(b), str(n), escape(reason))
        console.print(s)
    print_trace_costs(rows, console)
    bad = [r for r in rows if r.status in FAILED]
    for r in bad[:20]:
        st = str(r.status)
        err_console.print(f"[{STATUS_STYLE[st]}]{st}[/] " + escape(f"{shorten(r.case)} {r.backend} {r.variant_label}: {r.reason}"),
                          soft_wrap=True)
        rep = r.reproducer if len(r.reproducer) <= 4 * MAX_NAME_CHARS else \
            shorten(r.reproducer, 4 * MAX_NAME_CHARS) + " (whole: the row's reproducer in results.jsonl)"
        err_console.print(f"  reproduce: {escape(rep)}", soft_wrap=True)
    note = first_call_note(rows)
    if note:
        console.print(escape(note), highlight=False, soft_wrap=True)
    console.print(f"Results: {out_dir / RESULTS_FILE}", soft_wrap=True)
    print_verdict(rows, ids, console)


def rank_groups(rows: list[ResultRow]) -> dict[str, BucketResult]:
    """Per case group (``ResultRow.group``, in the rows' order): its ranking by ``harness
    recommend``'s rules and default tie threshold (harness/analysis/recommend/ ``rank_rows``)."""
    from harness.analysis.recommend import DEFAULT_TIE, rank_rows

    groups: dict[str, list[ResultRow]] = {}
    for r in rows:
        groups.setdefault(r.group, []).append(r)
    return {g: rank_rows(rs, DEFAULT_TIE) for g, rs in groups.items()}


def verdict_lines(rows: list[ResultRow], ids: dict[tuple[str, str], str]) -> list[str]:
    """Per case group: the fastest passing backend+variant and its margin over the runner-up
    with the interval, or a tie; ranked by ``harness recommend``'s rules (harness/analysis/recommend/)."""
    from harness.analysis.recommend import DEFAULT_TIE, ratio_text

    out = []
    for g, res in rank_groups(rows).items():
        w, ru = res.winner, res.runner_up

        def name(c: Any) -> str:
            return f"{ids.get((c.backend, c.variant_label), '?')} {c.backend}"

        n = len(res.cases)
        where = f" ({n} case{'s' if n != 1 else ''})"
        if w is None:
            why = ("; ".join(f"{c.backend}: {c.excluded}" for c in res.excluded[:3])
                   + (f"; {len(res.excluded) - 3} more" if len(res.excluded) > 3 else "")) or "every case was skipped"
            out.append(f"{g}: no backend passed the check with a timing ({why})")
            continue
        med = fmt_time(math.exp(sum(math.log(t.median) for t in w.times.values()) / len(w.times)))
        if ru is None:
            out.append(f"{g}{where}: {name(w)}, {med}; the only one that passed and was timed")
            continue
        r = res.ratios.get(ru.name)
        margin = f"{ratio_text(r)} over {name(ru)}" if r else f"ahead of {name(ru)}"
        if res.tie:
            why = "the interval reaches 0" if res.tie == "noise" else f"under {DEFAULT_TIE * 100:g}%"
            tied = [name(c) for c in res.ranked if c.name in res.tied_with]
            out.append(f"{g}{where}: tie ({why}): {name(w)} {med}, {', '.join(tied)}; {ratio_text(r)}")
        else:
            out.append(f"{g}{where}: {name(w)}, {med}; {margin}")
    return out


def print_verdict(rows: list[ResultRow], ids: dict[tuple[str, str], str], console: Console) -> None:
    from harness.report.terminal.per_model import print_model_answers

    print_model_answers(rows, ids, console)  # the answer per model shape first, when cases name one
    if rows and not any(r.timing is not None for r in rows):  # --no-time (a correctness-only gate): one line
        unchecked = sum(r.status == Status.UNCHECKED for r in rows)
        why = (f"no row was timed and {unchecked} row(s) were not checked either (--no-check)" if unchecked
               else "no row was timed (--no-time checks correctness only)")
        console.print(f"Verdict per case group: none, {why}", highlight=False)
        return
    lines = verdict_lines(rows, ids)
    if not lines:
        return
    console.print("Verdict per case group: fastest backend that passed (id as above), geometric-mean median; "
                  "margin: runner-up slower by [95% interval]; a tie when the interval reaches 0 or the margin "
                  "is under 3% (harness recommend's rules)", highlight=False)
    from harness.records.clocks import clock_summary

    clocks = clock_summary(rows)  # which GPU state every number is from (None: CPU rows)
    if clocks:
        console.print(escape(f"  {clocks}"), highlight=False)
    for line in lines:
        console.print(escape(f"  {line}"), highlight=False)


FIRST_CALLS_NOTE_S = 5.0  # first calls on a GPU this long in all: name them (a cold run's JIT compilation)


def first_call_note(rows: list[ResultRow], min_s: float = FIRST_CALLS_NOTE_S) -> str | None:
    """How long the GPU rows' first calls took (``host.first_call_ms``: for FlashAttention 4 and
    FlashInfer mostly JIT compilation, which the libraries cache on disk), by backend variant,
    when that is ``min_s`` or more: a cold run then says why it was slow and that the next is not."""
    by: dict[str, float] = {}
    for r in rows:
        if r.host is not None and r.host.first_call_ms and r.device.startswith("cuda"):
            key = f"{r.backend} {r.variant_label}".strip()
            by[key] = by.get(key, 0.0) + r.host.first_call_ms / 1e3
    total = sum(by.values())
    if total < min_s:
        return None
    big = [(k, v) for k, v in sorted(by.items(), key=lambda kv: -kv[1]) if v >= 0.5]
    parts = ", ".join(f"{k} {v:.1f} s" for k, v in big[:3]) + (f", {len(by) - 3} more" if len(by) > 3 else "")
    return (f"First calls took {total:.1f} s in all ({parts}): mostly kernel compilation (JIT), which the "
            "libraries cache on disk, so the next run on this machine starts faster.")


def print_trace_costs(rows: list[ResultRow], console: Console) -> None:
    """Rows of a replayed trace (tags step=/weight=): the report's trace numbers as a table."""
    if not any(any(str(t).startswith("weight=") for t in (r.config.tags if r.config else [])) for r in rows):
        return
    from harness.report.core import Loaded, frame
    from harness.report.sections.trace import trace_costs

    costs = trace_costs(frame(Loaded.of_rows(rows)))
    if costs.empty or not costs["total_us"].notna().any():
        return

    def f(x: Any, spec: str) -> str:  # 4 significant digits, but never an exponent (80 columns)
        return "" if x is None or x != x else format(x, ",.0f" if abs(x) >= 1e4 else spec)

    suites = ", ".join(dict.fromkeys(str(x) for x in costs["suite"]))
    # The suite goes in the title, not in every row: at 80 columns the backend column keeps
    # about 18 characters next to the six numbers instead of one character per line.
    t = Table(title=f"Trace {suites}: attention cost over the whole trace (docs/traces.md)")
    t.add_column("backend", overflow="fold", ratio=1, min_width=16)
    for c in ("p50 us", "p99 us", "trace ms", "us/gen", "us/prompt", "vs best"):
        t.add_column(c, justify="right", no_wrap=True)
    for _, c in costs.iterrows():
        t.add_row(escape(str(c["short"]) if len(costs["suite"].unique()) == 1 else f"{c['suite']}: {c['short']}"),
                  f(c["p50"], ".4g"), f(c["p99"], ".4g"),
                  f(c["total_us"] / 1e3, ".4g"), f(c["us_per_gen"], ".4g"), f(c["us_per_prompt"], ".4g"),
                  f"{c['vs_best']:.3g}x" if c["vs_best"] == c["vs_best"] else f"{c['timed']}/{c['steps']} st")
    console.print(t)


def print_backends_verbose(backends: list[dict[str, Any]], console: Console) -> None:
    """``harness list --verbose``: one block per variant instead of a table, so the long
    reasons and capability lists wrap between words at any width, never inside one."""
    from rich.padding import Padding
    from rich.text import Text

    console.print("[bold]Backends[/] (one block per variant: availability, versions or why not, capabilities)")
    for b in backends:
        console.print(Text(b["name"], style="bold"))
        if b["error"]:
            console.print(Padding(Text(f"no: {b['error']}"), (0, 0, 0, 2), expand=False))
            continue
        for v in b["variants"]:
            ok = "yes" if v["available"] else "no"
            info = v["reason"] if not v["available"] else ", ".join(f"{k} {x}" for k, x in v["versions"].items())
            from harness.records.versions import untested_note  # installed libraries outside the tested range

            info = "; ".join(x for x in (info, untested_note(b.get("untested") or [])) if x)
            caps = "; ".join(f"{k}={','.join(map(str, x)) if isinstance(x, list) else x}"
                             for k, x in v["capabilities"].items())
            # axis=value pairs split at ", " so a long label wraps between pairs, never inside one
            head = Text(f"{(v['label'] or '(one variant)').replace(',', ', ')}: ")
            head.append(ok, style="green" if v["available"] else "red")
            console.print(Padding(head, (0, 0, 0, 2), expand=False))
            if info:
                console.print(Padding(Text(info), (0, 0, 0, 4), expand=False))
            console.print(Padding(Text(f"capabilities: {caps}"), (0, 0, 0, 4), expand=False))
