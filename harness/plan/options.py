"""One run's options, derived once: ``RunPlan``.

The entry points (``harness run``, the pytest plugin, and through ``harness run`` the Python
API) validate their flags (``harness.cli.run_flags.RunFlags``) and resolve them into one
``RunPlan`` at their top; everything below them (planning, execution, the cell engine, the
results folder) takes the parts it needs from the plan and never reads the flags again.

Plain data on purpose: this module imports no command-line code, so a program that builds a
run without the CLI can construct a ``RunPlan`` itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from harness.execute.local import ExecOptions
    from harness.plan.cells import RunOptions


@dataclass(frozen=True)
class RunPlan:
    """What a run does, every flag already applied: the suite (overrides applied), its
    backends, the cell options (``run``: device, filters, timing with its clock regime) and
    the worker layout (``execute``), plus where the rows go and how the run ends."""

    suite_path: str  # as typed, or (--resume) the copy found in the results folder
    suite: Any  # harness.spec.Suite, --model/--tp/--batch-spec applied
    backends: list[Any]  # the backend classes the run covers
    run: RunOptions
    execute: ExecOptions
    variant_filters: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    seed: int | None = None
    out: str | None = None  # --out
    resume: str | None = None  # --resume DIR
    shard: str | None = None  # --shard K/N, already checked to parse
    ray: str | None = None  # --ray ADDRESS ("local" for a local cluster)
    report: bool = False
    strict: bool = False
    quiet: bool = False

    @property
    def device(self) -> torch.device:
        """The first worker's device: the one rows and the header name."""
        return self.run.device
