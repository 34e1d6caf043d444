"""``harness run SUITE``: the flags resolved once into a ``RunPlan``, run by
``harness.execute.runner.Runner`` with the terminal's reporter.

The flags are ``harness.cli.run_flags.RunFlags`` (declared once, validated there); ``start`` is
the one way from flags to a finished run, shared with ``harness gate`` and ``harness.api.run``:
it starts the workers early, resolves the plan (``pick_backends``: the suite's checks and the
backends looked up) and hands it to the ``Runner``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from rich.markup import escape

from harness.cli.common import UsageError, check_suite_backends, err_console, registry
from harness.cli.run_flags import RunFlags, add_arguments

if TYPE_CHECKING:
    from harness.execute.runner import Reporter, RunOutcome


def add_parser(sub: Any) -> None:
    r = sub.add_parser("run", help="run a suite: check every cell against the reference and time it")
    add_arguments(r)  # every flag is a RunFlags field (harness/cli/run_flags.py)
    r.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    t_start = time.perf_counter()
    flags = RunFlags.from_args(args)
    argv = ["harness", *getattr(args, "argv", sys.argv[1:])]

    def started(out_dir: Path) -> None:  # from here (run.json written) an interrupt can be resumed
        args.started_out_dir = out_dir

    return start(flags, argv, on_started=started, t_start=t_start).exit_code


def start(flags: RunFlags, argv: list[str], reporter: Reporter | None = None,
          on_started: Callable[[Path], None] | None = None, t_start: float | None = None) -> RunOutcome:
    """Flags -> ``RunPlan`` -> ``Runner(plan).run(reporter)``. ``argv``: the command run.json
    records; ``reporter``: default the terminal's (``--quiet``: no progress bar). A bad flag or
    suite raises UsageError / SpecError, a plan the run cannot carry out RunError."""
    from harness.cli.clock import PROCESS_T0
    from harness.execute.runner import RunError, Runner

    t_start = time.perf_counter() if t_start is None else t_start
    # torch.cuda.is_available() asks NVML, not the CUDA driver, so choosing the device does not
    # initialise CUDA in this process (0.2 s, docs/measurement.md §12); a worker inherits the setting, harmless
    # there.
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    # The workers start first: their torch import overlaps this process's (harness/execute/worker/boot.py).
    prestarted = prestart_workers(flags)
    try:
        plan = flags.resolve(pick_backends)  # the one place the flags become the run's options
        for note in clock_regime_notes(argv, flags.clock_regime, plan.run.device.type):
            err_console().print(f"note: {escape(note)}", highlight=False, soft_wrap=True)
        if reporter is None:
            from harness.cli.reporter import ConsoleReporter

            reporter = ConsoleReporter(quiet=plan.quiet)
        try:
            return Runner(plan, argv=argv, t_start=t_start, process_t0=PROCESS_T0, prestarted=prestarted,
                          on_started=on_started).run(reporter)
        except RunError as e:
            raise UsageError(str(e)) from None
    finally:
        from harness.execute.worker.boot import discard

        discard(prestarted)  # those the run did not take (bad input, an empty plan)


def prestart_workers(flags: RunFlags) -> list:
    """One worker per ``--devices`` entry, started now, when the run will use local workers.
    ``HARNESS_PRESTART=0`` turns it off (the workers then start once the parent has planned)."""
    if flags.no_isolation or flags.ray is not None or os.environ.get("HARNESS_PRESTART", "1") == "0":
        return []
    from harness.execute.worker.boot import prestart

    return prestart(len([d for d in (flags.devices or "").split(",") if d.strip()]) or 1)


def clock_regime_notes(argv: list[str], given: str | None, device_type: str) -> list[str]:
    """What the command line's ``--clock-regime`` does not do: a repeated flag keeps its last
    value; a CPU run has no GPU clock to hold in a state."""
    n = sum(a == "--clock-regime" or a.startswith("--clock-regime=") for a in argv)
    out = [f"--clock-regime given {n} times: the last one, {given}, is used"] if n > 1 else []
    if given and device_type != "cuda":
        out.append(f"--clock-regime {given}: a GPU clock state; this {device_type} run has no GPU clock, so it "
                   "changes nothing")
    return out


def pick_backends(suite: Any, names: str | None, variant_filters: dict[str, dict[str, list[str]]]) -> list:
    """The suite's checks (`harness validate`'s, with file and field), then --backends looked up
    and --variant checked against them: what RunFlags.resolve asks of the command line."""
    for note in suite.notes:  # a vLLM study file: what it could not map, and why
        err_console().print(f"ignored: {escape(note)}", highlight=False, soft_wrap=True)
    check_suite_backends(suite)
    from harness.plan.filters import FilterError, backend_names, family_backends  # imports the registry

    if not names and suite.backends_for:
        for note in family_backends(suite)[1]:
            err_console().print(f"note: {escape(note)}", highlight=False, soft_wrap=True)
    try:
        backends = registry.resolve_many(backend_names(names, suite))
    except (registry.BackendLookupError, FilterError) as e:
        raise UsageError(str(e)) from None
    check_variant_flags(variant_filters, backends)
    return backends


def check_variant_flags(filters: dict[str, dict[str, list[str]]], backends: list) -> None:
    """--variant names a backend of this run and axis values it has: a filter on a backend the
    run does not include would be ignored, and the user would think it applied."""
    from harness.spec.registry_check import variant_filter_problem

    in_run = {b.name: b for b in backends}
    for name, f in filters.items():
        if name not in in_run:
            try:
                registry.resolve(name)  # a misspelt name gets the registry's closest match
            except registry.BackendLookupError as e:
                raise UsageError(f"--variant {name}: {e}") from None
            raise UsageError(f"--variant {name}: {name} is not in this run (its backends: {', '.join(in_run)}); "
                             "add it to --backends or drop the --variant")
        problem = variant_filter_problem(in_run[name], f)
        if problem:
            raise UsageError(f"--variant {name}: {problem}")
