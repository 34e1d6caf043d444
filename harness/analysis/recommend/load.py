"""Loading: the typed rows of every results folder / .jsonl, and the GPU their run headers name."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from harness.analysis.engines import EngineFacts
from harness.records.header import RunHeader
from harness.records.load import Run, load_run
from harness.records.results import ResultRow


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
    facts: EngineFacts = field(default_factory=EngineFacts)  # the runs' backend facts (run.json), over the table
    headers: list[RunHeader] = field(default_factory=list)  # the runs' run.json, in order


def load_inputs(paths: Sequence[str | Path], call_form: str = "vllm") -> Inputs:
    """Rows of every results folder / .jsonl, refusing runs of different GPUs."""
    runs: list[Run] = []
    for p in paths:
        p = Path(p)
        try:
            runs.append(load_run(p))
        except FileNotFoundError as e:  # already names the path
            raise RecommendError(str(e)) from None
        except (ValueError, OSError, UnicodeDecodeError) as e:
            raise RecommendError(f"{p}: {e}") from None
    rows = [r for run in runs for r in run.rows]
    if not rows:
        raise RecommendError(f"{', '.join(map(str, paths))}: no result rows")
    return inputs_of(rows, runs, call_form)


def inputs_of(rows: list[ResultRow], runs: Sequence[Run], call_form: str = "vllm") -> Inputs:
    """Rows with the GPU their runs' headers name and the runs' backend facts; refuses runs of
    different GPUs."""
    gpus: dict[str, list[str]] = defaultdict(list)
    caps: set[str] = set()
    notes: list[str] = []
    cpu = False
    for run in runs:
        src, dev = str(run.source), run.header.device
        name = dev.name or (dev.type if dev.type == "cpu" else None)
        if name:
            gpus[str(name)].append(src)
        else:
            notes.append(f"{src}: no run.json device; assumed to be the same GPU as the others")
        if dev.capability:
            caps.add(str(dev.capability))
        cpu = cpu or dev.type == "cpu"
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
    return Inputs(rows, [str(run.source) for run in runs], next(iter(gpus), "unknown"),
                  next(iter(caps)) if len(caps) == 1 else None, notes, call_form, cpu, EngineFacts.of(runs),
                  [run.header for run in runs])
