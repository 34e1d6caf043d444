"""Loading: the typed rows of every results folder / .jsonl, and the GPU their run headers name."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from harness.analysis.engines import use_headers
from harness.records.results import ResultRow, read_header, read_rows


class RecommendError(ValueError):
    """Input that cannot give a recommendation (mixed GPUs, no rows): one clear message."""


@dataclass
class Inputs:
    rows: list[ResultRow]
    sources: list[str]
    gpu: str
    capability: str | None
    notes: list[str] = field(default_factory=list)
    call_form: str = "vllm"  # which call form the verdicts rank (harness/analysis/callform_gap.py)
    cpu: bool = False  # run.json says the rows were timed on the CPU (``gpu`` is then the CPU's name)


def load_inputs(paths: Sequence[str | Path], call_form: str = "vllm") -> Inputs:
    """Rows of every results folder / .jsonl, refusing runs of different GPUs."""
    rows: list[ResultRow] = []
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
        rows.extend(got)
    if not rows:
        raise RecommendError(f"{', '.join(map(str, paths))}: no result rows")
    return inputs_of(rows, headers, call_form)


def inputs_of(rows: list[ResultRow], headers: Sequence[tuple[str, dict[str, Any]]], call_form: str = "vllm") -> Inputs:
    """Rows with the GPU their run headers name; refuses headers of different GPUs."""
    gpus: dict[str, list[str]] = defaultdict(list)
    caps: set[str] = set()
    notes: list[str] = []
    cpu = False
    try:
        use_headers(headers)  # the engine rules read these runs' recorded backend facts
    except ValueError as e:
        raise RecommendError(str(e)) from None
    for src, header in headers:
        dev = header.get("device") or {}
        name = dev.get("name") or (dev.get("type") if dev.get("type") == "cpu" else None)
        if name:
            gpus[str(name)].append(src)
        else:
            notes.append(f"{src}: no run.json device; assumed to be the same GPU as the others")
        if dev.get("capability"):
            caps.add(str(dev["capability"]))
        cpu = cpu or dev.get("type") == "cpu"
    if len(gpus) > 1:
        detail = "; ".join(f"{g}: {', '.join(srcs)}" for g, srcs in sorted(gpus.items()))
        raise RecommendError(f"results come from different GPUs ({detail}); recommend ranks one GPU at a time")
    from harness.analysis.callform_gap import form_note, only_call_form  # serving verdicts rank one call form

    notes.append(form_note(call_form, rows))
    from harness.records.clocks import clock_summary, run_regimes

    regimes = run_regimes(rows)
    if len(regimes) > 1:  # one ranking holds one GPU state
        raise RecommendError(f"results of two clock regimes ({', '.join(sorted(regimes))}): recommend ranks one "
                             "regime at a time (docs/measurement.md, Clock regimes)")
    if clocks := clock_summary(rows):
        notes.append(clocks)
    if rows and not (rows := only_call_form(rows, call_form)):
        raise RecommendError(f"--call-form {call_form}: no result rows of that call form")
    return Inputs(rows, [src for src, _ in headers], next(iter(gpus), "unknown"),
                  next(iter(caps)) if len(caps) == 1 else None, notes, call_form, cpu)
