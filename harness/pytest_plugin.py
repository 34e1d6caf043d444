"""pytest-benchmark integration: a suite's cells as benchmark tests.

    pytest --bench-suite suites/decode.yaml --bench-backends flash-attn,flashinfer --benchmark-json out.json

(pip install 'attn-harness[bench]'; the tests are harness/benchmarks/test_suite_bench.py, in
the package: with --bench-suite and no test paths on the command line, pytest collects them)

Each cell is run by the harness itself (check against the reference, then the harness timer:
CUDA events, CUDA graphs where declared, launch hiding, cold L2 on request); the per-sample
times the harness measured are then handed to pytest-benchmark through ``harness_clock``, a
clock that advances by exactly one harness sample per round. pytest-benchmark never times
anything with its own wall clock, so its JSON, ``--benchmark-compare`` and
``--benchmark-compare-fail`` see the device times.

This module is registered as a pytest plugin (entry point ``pytest11``) for its options only;
it imports nothing heavy until a benchmark test asks for a cell.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pathlib import Path

import pytest

BENCH_TESTS = Path(__file__).resolve().parent / "benchmarks" / "test_suite_bench.py"


def pytest_addoption(parser: pytest.Parser) -> None:
    # The options are `harness run`'s flags (harness/cli/run_flags.py, declared once there) as
    # --bench-*: --bench-suite, --bench-backends, --bench-device, --bench-case, --bench-mode
    # (--timing-mode), --bench-max-samples, ...
    from harness.cli.run_flags import add_pytest_options

    add_pytest_options(parser.getgroup("attn-harness", "attention harness suites as pytest-benchmark tests"))


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    # pytest-benchmark switches itself off under pytest-xdist, and the cells share one device:
    # a suite's benchmarks run in this process even where a project's addopts ask for `-n N`.
    if config.getoption("bench_suite", default=None) and getattr(config.option, "numprocesses", None):
        config.option.numprocesses = 0
        config.option.dist = "no"


def pytest_configure(config: pytest.Config) -> None:
    # `pytest --bench-suite X` with no paths: collect the packaged benchmark module (not the
    # testpaths or the current directory), so it works wherever the package is installed.
    if config.getoption("bench_suite", default=None) and config.args_source != pytest.Config.ArgsSource.ARGS:
        config.args[:] = [str(BENCH_TESTS)]


# ---------------------------------------------------------------- the replay clock
@dataclass
class _Replay:
    now: float = 0.0
    queue: list[float] = field(default_factory=list)


_REPLAY = _Replay()


def harness_clock() -> float:
    """pytest-benchmark's timer: virtual seconds, advanced only by ``replay_one_sample``."""
    return _REPLAY.now


def load_samples(samples_us: list[float]) -> None:
    _REPLAY.queue = [float(x) * 1e-6 for x in samples_us]


def replay_one_sample() -> None:
    """The benchmark target: one round lasts exactly one sample the harness measured."""
    if not _REPLAY.queue:
        raise RuntimeError("no harness sample left to replay (rounds must equal the number of samples)")
    _REPLAY.now += _REPLAY.queue.pop(0)


# ---------------------------------------------------------------- cells
@dataclass
class BenchPlan:
    suite: Any
    backends: list[Any]
    opts: Any
    cells: list[Any]


def make_plan(config: pytest.Config) -> BenchPlan | None:
    """The cells of ``--bench-suite`` (None when no suite was given). Bad input -> pytest.UsageError."""
    from harness import registry
    from harness.cli.flags import UsageError
    from harness.cli.run_flags import from_pytest
    from harness.plan.cells import plan_cells
    from harness.spec import SpecError

    try:
        flags = from_pytest(config)
        if flags is None:
            return None
        # Resolved once, as `harness run` does; keep_raw: the per-sample times are what
        # pytest-benchmark receives.
        plan = flags.resolve(_pick_backends, keep_raw=True)
    except (SpecError, UsageError, registry.BackendLookupError) as e:
        raise pytest.UsageError(str(e)) from None
    return BenchPlan(plan.suite, plan.backends, plan.run, plan_cells(plan.suite, plan.backends, plan.run))


def _pick_backends(suite: Any, names: str | None, variant_filters: dict) -> list:
    """--bench-backends (comma-separated), else the suite's (``backends_for:`` too), else every
    registered backend."""
    from harness import registry
    from harness.plan.filters import backend_names

    return registry.resolve_many(backend_names(names, suite))


def cell_id(cell: Any) -> str:
    from harness.records.results import variant_label

    v = variant_label(cell.variant)
    return f"{cell.case.name}|{cell.backend.name}" + (f"|{v}" if v else "")


class CaseRunner:
    """Runs one case's cells through the harness at a time (one batch + reference per case)
    and hands out their rows; tests arrive in case order, so only one case is held."""

    def __init__(self, plan: BenchPlan):
        self.plan = plan
        self._case: str | None = None
        self._rows: dict[str, Any] = {}

    def row(self, cell: Any) -> Any:
        from harness.cell.case import iterate_case

        if cell.case.name != self._case:
            self._rows.clear()
            self._case = cell.case.name
            # The runner's own loop over the case (prechecks, one batch + reference, run_cell):
            # the rows a `harness run` of these cells would write.
            cells = [c for c in self.plan.cells if c.case.name == cell.case.name]
            for r in iterate_case(cells, self.plan.suite, self.plan.opts):
                self._rows[row_id(r)] = r
        return self._rows[cell_id(cell)]


def row_id(row: Any) -> str:
    return f"{row.case}|{row.backend}" + (f"|{row.variant_label}" if row.variant_label else "")
