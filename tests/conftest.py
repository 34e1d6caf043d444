import os
from pathlib import Path

import pytest
import torch

from helpers.report_runs import cpu_run  # noqa: F401  (a module fixture: the report tests' CPU run)

ROOT = Path(__file__).resolve().parent.parent

# One torch thread, here and (through the environment) in every worker and subprocess the tests
# start. The tests' tensors are small: a second intra-op thread saves little on an idle 2-core
# machine, and on a busy one its spin-waits cost up to 10x the CPU time (measured on the
# conformance fixture of tests/cell/test_mutants.py). No test asserts on a thread count.
os.environ["OMP_NUM_THREADS"] = "1"
torch.set_num_threads(1)


def pytest_runtest_setup(item: pytest.Item) -> None:
    # `@pytest.mark.gpu` (pyproject.toml): the test needs CUDA, so it is skipped, with the reason, without it.
    if item.get_closest_marker("gpu") is not None and not torch.cuda.is_available():
        pytest.skip("needs a CUDA device (marked gpu)")


def interrupt(proc, sig: int, group: bool = True, timeout: float = 30) -> tuple[int, str]:
    """Send ``sig`` to the process group a run started in (``group``: what a terminal's Ctrl-C
    reaches) or to its parent only (``kill PID``); its exit code and stderr. Whatever is left of
    the group is killed afterwards, whatever happened."""
    import signal

    try:
        (os.killpg if group else os.kill)(proc.pid, sig)
        return proc.wait(timeout=timeout), proc.stderr.read()
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def subprocess_env(**extra: str) -> dict[str, str]:
    """Environment for a ``harness`` subprocess: the caller's, with the repo and tests/ put in
    front of the caller's PYTHONPATH, never in place of it. On machines where torch and the
    kernel libraries come from PYTHONPATH (a prebuilt environment), dropping it breaks every import."""
    keep = os.environ.get("PYTHONPATH", "")
    first = extra.pop("PYTHONPATH", "")  # a caller's own entries (e.g. a plugin's folder) come first
    path = os.pathsep.join([*([first] if first else []), str(ROOT / "tests"), str(ROOT), *([keep] if keep else [])])
    # A child pytest started from an xdist worker must not think it is one (pytest-benchmark
    # disables itself when PYTEST_XDIST_WORKER is set).
    base = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST_")}
    return {**base, **extra, "PYTHONPATH": path}


@pytest.fixture(scope="session")
def driver():
    """Headless Chromium (tests/helpers/browser_page.py), one per test process; skips without chromium."""
    from helpers.browser_page import CHROMIUM, NO_CHROMIUM, chrome

    if CHROMIUM is None:
        pytest.skip(NO_CHROMIUM)
    yield from chrome()
