"""Before a slowdown fails: re-measure it.

Two ways, both judged with the comparison's own noise model and clock rule (``judged``):

- ``confirm_slowdowns``: the caller re-ran the cells (``harness gate`` runs the suite's suspect
  cases again, ``harness bisect`` its releases); a slowdown stands only if every re-measurement
  finds the row slower too.
- ``confirm_by_rerun`` (``harness compare --confirm N``, ``harness gate --confirm N``): each row
  that would fail on speed is run again N times, each in a fresh ``harness run`` process, from
  the NEW run's own suite copy with the row's reproducer filters (case, backend, variant, seed)
  and the timing options its run.json's command recorded. The row stays a regression when a
  strict majority of the N re-runs is slower (k > N/2: 1/1, 2/2, 2/3, 3/4), reported as
  "regressed, reproduced k/N"; otherwise it passes as "not reproduced" (listed with the re-runs'
  moves). Where a re-run cannot be made (no suite file, no reproducer, another device than the
  new run's, the re-run itself failed) the row keeps its unconfirmed verdict and says why.
  Correctness changes are never re-measured: they fail as they are.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

from harness.analysis.compare import Comparison, RowDiff, Speed, classify_speed
from harness.analysis.compare_runs import as_backend
from harness.analysis.compare_clock import clock_explains
from harness.records.results import TIMED_OK, ResultRow, read_header, read_rows

# Flags of the new run's command that shape a row's timing: a re-run takes them as recorded.
PASS_VALUE_FLAGS = ("--target-noise", "--max-time", "--min-samples", "--max-samples", "--stop", "--cpu-clock",
                    "--clock-regime", "--timing-mode", "--bench-mode", "--sampling", "--cell-timeout",
                    "--memory-budget-mib", "--cpu-max-gflop", "--cpu-max-kv-mib", "--throttle-threshold",
                    "--throttle-recovery-delay", "--energy-window")
PASS_BOOL_FLAGS = ("--no-isolation", "--no-cuda-graph", "--time-references", "--no-check", "--adversarial")
RERUN_TIMEOUT_S = 900.0

def judged(comp: Comparison, d: RowDiff, r: ResultRow | None) -> tuple[Speed, float | None]:
    """One re-measurement of ``d``'s row against its baseline: the speed verdict with the clock
    rule applied (a slowdown its SM clock explains is clock-shifted, not slower)."""
    if r is None or r.status not in TIMED_OK or d.base is None:
        return "not timed", None
    model = comp.noise.get(d.noise_class)
    speed, ratio = classify_speed(d.base, r, comp.threshold, model)
    if speed == "slower" and ratio is not None and clock_explains(d.base, r, ratio, model.band if model else 0.0):
        speed = "clock-shifted"
    return speed, ratio


def confirm_slowdowns(comp: Comparison, remeasured: list[list[ResultRow]]) -> None:
    """Keep a *slower* verdict only if every re-measurement (runs of the same cells on the same
    machine, after the first) finds the row slower too, judged with the same noise model and
    clock rule; otherwise the row becomes *ambiguous* and its slowdown is reported as
    unconfirmed. A *clock-shifted* row that every re-measurement finds slower at a clock that
    does not explain it becomes a regression; otherwise it stays clock-shifted, with the
    re-measurements named."""
    if not remeasured:
        return
    runs = [{r.key: r for r in rows} for rows in remeasured]
    for d in comp.diffs:
        if d.speed not in ("slower", "clock-shifted") or d.base is None:
            continue
        verdicts = [judged(comp, d, run.get(d.key)) for run in runs]
        moves = ", ".join(_pct(v[1]) or "no timing" for v in verdicts)
        confirmed = all(v[0] == "slower" for v in verdicts)
        if d.speed == "clock-shifted":
            if confirmed:
                d.speed, d.problem = "slower", (f"slower: {_pct(d.ratio)} with a clock shift at first, then slower at "
                                                f"a clock that does not explain it on every re-measurement ({moves})")
            else:
                d.info += f"; re-measured: {moves}"
        elif confirmed:
            d.problem += f"; confirmed by {len(verdicts)} re-measurement(s): {moves}"
        else:
            d.speed, d.problem = "ambiguous", ""
            d.info = f"slower by {_pct(d.ratio)} at first, not confirmed on re-measurement ({moves})"


def reproduced(k: int, n: int) -> bool:
    """A slowdown found again in a strict majority of ``n`` re-runs stands."""
    return n > 0 and 2 * k > n


def _recorded_flags(command: str) -> list[str]:
    """The timing-shaping flags of a recorded ``harness run`` command line (``PASS_*_FLAGS``)."""
    try:
        argv = shlex.split(command)
    except ValueError:
        return []
    out: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        name, eq, val = a.partition("=")
        if name in PASS_VALUE_FLAGS:
            if eq:
                out.append(a)
            elif i + 1 < len(argv):
                out += [a, argv[i + 1]]
                i += 1
        elif a in PASS_BOOL_FLAGS:
            out.append(a)
        i += 1
    return out


def rerun_argv(new: str | Path, row: ResultRow) -> list[str] | str:
    """The ``harness run`` argument list (after ``harness``) re-measuring ``row`` of the results
    folder ``new``, or why there is none."""
    from harness.records.suite_copy import find_suite

    header = read_header(new)
    parts = shlex.split(row.reproducer) if row.reproducer else []
    if parts[:2] != ["harness", "run"] or len(parts) < 3:
        return "the row records no `harness run` reproducer"
    suite = find_suite(new, parts[2])
    if suite is None:
        return f"the suite of {new} is not found (no suite.yaml copy in the folder, the original moved)"
    argv = ["run", suite, *parts[3:], *_recorded_flags(str(header.get("command") or ""))]
    if header.get("clock_regime") in ("burst", "sustained") and "--clock-regime" not in argv:
        argv += ["--clock-regime", header["clock_regime"]]
    if row.device and row.device != "cpu" and "--device" not in argv:
        argv += ["--device", row.device]
    return argv + ["--quiet"]


def run_fresh(argv: list[str]) -> tuple[list[ResultRow] | None, str]:
    """``harness ARGV --out TMP`` in a fresh process: its rows and the device it ran on (its
    run.json's device name), or None and why."""
    tmp = Path(tempfile.mkdtemp(prefix="confirm-"))
    try:
        cmd = [sys.executable, "-m", "harness", *argv, "--out", str(tmp / "r")]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=RERUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return None, f"the re-run took longer than {RERUN_TIMEOUT_S:g} s"
        if done.returncode == 2:
            tail = (done.stderr or done.stdout).strip().splitlines()
            return None, f"the re-run refused its arguments: {tail[-1] if tail else 'exit 2'}"
        try:
            return read_rows(tmp / "r"), str((read_header(tmp / "r").get("device") or {}).get("name") or "")
        except (FileNotFoundError, ValueError) as e:
            return None, f"the re-run wrote no rows ({e})"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# (rows, the device name the re-run recorded) or (None, why there are none)
Runner = Callable[[list[str]], "tuple[list[ResultRow] | None, str]"]


def _split_cases(argv: list[str]) -> tuple[list[str], tuple[str, ...]]:
    """(the ``--case`` values, the rest of the argument list)."""
    cases, rest, i = [], [], 0
    while i < len(argv):
        if argv[i] == "--case" and i + 1 < len(argv):
            cases.append(argv[i + 1])
            i += 2
            continue
        rest.append(argv[i])
        i += 1
    return cases, tuple(rest)


def confirm_by_rerun(comp: Comparison, new: str | Path, n: int, runner: Runner = run_fresh,
                     log: Callable[[str], None] | None = None) -> None:
    """Re-measure each row that fails on speed ``n`` times in fresh processes and keep it failing
    only when reproduced in a majority (see the module docstring). Rows whose re-runs differ
    only in their case (same backend, variant and flags) share each re-run's process: one
    ``harness run`` with all their cases, each case holding just that one cell."""
    if n <= 0:
        return
    want = str((read_header(new).get("device") or {}).get("name") or "")
    groups: dict[tuple[str, ...], list[tuple[RowDiff, list[str]]]] = {}
    for d in [d for d in comp.diffs if d.speed == "slower" and d.problem and d.new is not None]:
        assert d.new is not None
        argv = rerun_argv(new, d.new)
        if isinstance(argv, str):
            d.problem += f"; not re-measured ({argv})"
            continue
        cases, rest = _split_cases(argv)
        groups.setdefault(rest, []).append((d, cases))
    for rest, items in groups.items():
        cases = list(dict.fromkeys(c for _, cs in items for c in cs))
        argv = [*rest, *(x for c in cases for x in ("--case", c))]
        verdicts: dict[int, list[tuple[Speed, float | None]]] = {id(d): [] for d, _ in items}
        failure: dict[int, str] = {}
        for i in range(n):
            if log:
                log(f"confirm: re-run {i + 1}/{n} of {len(items)} row(s): {', '.join(d.name for d, _ in items)[:300]}")
            rows, got = runner(argv)
            if want and rows is not None and got and got != want:  # the re-run measured another device
                rows, got = None, f"the new run was timed on {want!r}, this machine has {got!r}"
            for d, _ in items:
                if id(d) in failure:
                    continue
                if rows is None:
                    failure[id(d)] = got
                    continue
                assert d.new is not None
                match = [r for r in (as_backend(r, comp.match_backend) for r in rows) if r.key == d.new.key]
                if not match or match[-1].status not in TIMED_OK:
                    failure[id(d)] = ("the re-run has no row of it" if not match else
                                      f"the re-run did not time it ({match[-1].status}: {match[-1].reason})")
                    continue
                verdicts[id(d)].append(judged(comp, d, match[-1]))
            if len(failure) == len(items):
                break
        for d, _ in items:
            _verdict(d, verdicts[id(d)], failure.get(id(d), ""), n)


def _verdict(d: RowDiff, verdicts: list[tuple[Speed, float | None]], failure: str, n: int) -> None:
    if failure:
        d.problem += f"; not re-measured ({failure})"
        return
    k = sum(v[0] == "slower" for v in verdicts)
    moves = ", ".join(_pct(v[1]) or "no timing" for v in verdicts)
    if reproduced(k, n):
        d.problem = f"regressed, reproduced {k}/{n} in fresh processes ({moves}); " + d.problem
    else:
        d.speed, d.problem = "not reproduced", ""
        d.info = f"not reproduced: {_pct(d.ratio)} at first, {k}/{n} fresh re-runs slower ({moves})"


def _pct(ratio: float | None) -> str:
    return "" if ratio is None else f"{(ratio - 1) * 100:+.1f}%"


__all__ = ["confirm_by_rerun", "confirm_slowdowns", "judged", "reproduced", "rerun_argv", "run_fresh"]
