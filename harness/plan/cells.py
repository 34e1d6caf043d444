"""Suite -> cells: the run's options, the cases and backend variants a run selects, the variants
whose differences cannot apply to a case's batch collapsed into one cell, and the checks made
before a cell's batch exists (available? supported? fits?)."""

from __future__ import annotations

import fnmatch
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from attn_contract import AttentionBackend, Capabilities
from attn_contract.status import Status
from harness.case.layout import CaseLayout, case_layout
from harness.case.metrics import layout_work
from harness.records.results import variant_label
from harness.spec import CaseSpec, Suite

if TYPE_CHECKING:
    import torch

    from harness.timing import TimingOptions


@dataclass
class RunOptions:
    device: torch.device
    suite_path: str = ""
    seed: int | None = None
    adversarial: bool = False  # --adversarial: NaN in every KV slot no request owns
    invariants: bool = False  # --invariants: metamorphic checks per cell (harness/cell/invariants.py)
    case_patterns: list[str] = field(default_factory=list)
    variant_filters: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    check: bool = True
    time: bool = True
    # Time backends whose Capabilities declare them untimed here (role "reference"; --time-references).
    time_references: bool = False
    timing: TimingOptions | None = None
    roofline: bool = True  # attach % of the measured device ceilings to each timed row
    cpu_max_gflop: float = 0.5  # the CLI defaults: keep them in step
    cpu_max_kv_mib: float = 128.0
    collapse_variants: bool = True  # one cell where variant axes cannot apply (--all-variants: off)
    # Extra pre-run check (e.g. the memory planner of harness.plan.memory): a reason to skip, or None.
    fit_check: Callable[["Cell"], str | None] | None = None
    # Whether a case's cells fit in memory prepared at once (interleaved sampling), or why not.
    fit_together: Callable[[list["Cell"]], str | None] | None = None
    # backend name -> the attention families ("mha", "mla") whose cases it runs: the backends a
    # suite's ``backends_for:`` picked (harness.plan.filters.backend_families); absent: every case.
    backend_families: dict[str, frozenset[str]] = field(default_factory=dict)


@dataclass
class Cell:
    case: CaseSpec
    backend: type[AttentionBackend]
    variant: dict[str, Any]
    # Which variant axes applied to this case's batch, and the values of those that did not
    # (the cell stands for all of them: their result cannot differ). None: nothing collapsed.
    axes: dict[str, Any] | None = None


def select_cases(suite: Suite, opts: RunOptions) -> list[CaseSpec]:
    cases = suite.cases
    if opts.case_patterns:
        # A pattern that is some case's exact name selects that case only, so a reproducer's
        # --case picks one cell even when the name holds glob characters (`c*`, `llama[count=8]`).
        names = {c.name for c in cases}
        cases = [c for c in cases if any(c.name == p if p in names else fnmatch.fnmatchcase(c.name, p)
                                         for p in opts.case_patterns)]
    if opts.seed is not None:
        cases = [c.model_copy(update={"seed": opts.seed}) for c in cases]
    if opts.adversarial:
        cases = [c.model_copy(update={"adversarial": True}) for c in cases]
    return cases


def select_variants(backend: type[AttentionBackend], suite: Suite, opts: RunOptions) -> list[dict[str, Any]]:
    """The backend's variants, narrowed by the suite's ``variants:`` and ``--variant`` filters."""
    filters = [suite.variants.get(backend.name, {}), opts.variant_filters.get(backend.name, {})]
    pool = backend.variants() if any(filters) else backend.default_variants()
    named = {axis for f in filters for axis in f}
    for axis in backend.opt_in_axes - named:  # an opt-in axis no filter names keeps its default values
        keep = {str(d.get(axis)) for d in backend.default_variants()}
        pool = [v for v in pool if str(v.get(axis)) in keep]
    out = []
    for v in pool:
        if all(str(v.get(axis)) in {str(x) for x in allowed} for f in filters for axis, allowed in f.items()):
            out.append(v)
    return out


# Backends whose availability this process has asked once: the first ask imports the backend's
# library (FA4 ~8.6 s, FlashInfer ~2.3 s on the H200), which rows record as "import", not "precheck".
IMPORTED: set[type] = set()


def warm_backend(backend: type[AttentionBackend], suite: Suite, opts: RunOptions) -> float:
    """Import ``backend``'s library now (its availability for every selected variant), so that
    a worker pays it while the parent still expands the suite. Seconds taken."""
    t0 = time.perf_counter()
    try:
        for v in select_variants(backend, suite, opts) or [{}]:
            backend.availability(v)
    except Exception:  # the cell's own precheck reports it, with the cell's name
        pass
    IMPORTED.add(backend)
    return time.perf_counter() - t0


def backend_versions(backend: type[AttentionBackend]) -> dict[str, Any]:
    """What the run header records about ``backend``: available or why not, library versions.
    Imports the library: a worker asks this at start (``WorkerReady.versions``), not the parent."""
    a = backend.availability()
    return {"available": a.available, "reason": a.reason, **a.versions}


def segment_kinds(query_lens: Sequence[int], seq_lens: Sequence[int]) -> set[str]:
    """Kinds of the requests in a batch, by their lengths (what a backend's split sees):
    ``decode`` (one query token), ``prefill`` (no cached context) or ``extend``."""
    kinds = set()
    for q, s in zip(query_lens, seq_lens):
        kinds.add("decode" if q == 1 else "prefill" if s == q else "extend")
    return kinds


def collapse_variants(backend: type[AttentionBackend], variants: list[dict[str, Any]], kinds: set[str],
                      runnable: Callable[[dict[str, Any]], bool] | None = None,
                      ) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
    """One variant per group that differs only in axes that do not apply to ``kinds``
    (``backend.applicable_axes``), with what the row records about it. The group's first
    variant that ``runnable`` accepts represents it (else its first)."""
    applied = backend.applicable_axes(kinds)
    idle = [a for a in backend.variant_axes if a not in applied]
    if not idle:
        return [(v, None) for v in variants]
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for v in variants:
        groups.setdefault(tuple(str(v.get(a)) for a in applied), []).append(v)
    out: list[tuple[dict[str, Any], dict[str, Any] | None]] = []
    for members in groups.values():
        rep = next((v for v in members if runnable is None or runnable(v)), members[0])
        out.append((rep, {"applied": list(applied), "segment_kinds": sorted(kinds),
                          "not_applied": {a: sorted({str(v.get(a)) for v in members}) for a in idle},
                          "stands_for": [variant_label(v) for v in members]}))
    return out


def plan_cells(suite: Suite, backends: list[type[AttentionBackend]], opts: RunOptions) -> list[Cell]:
    """Every case x backend x selected variant, with variants whose differences cannot apply to
    the case's batch collapsed into one cell (``RunOptions.collapse_variants``)."""
    cells = []
    for case in select_cases(suite, opts):
        kinds: set[str] | None = None
        for b in backends:
            if b.name in opts.backend_families and case.attention not in opts.backend_families[b.name]:
                continue  # picked for another attention family (the suite's backends_for:)
            variants = select_variants(b, suite, opts)
            if not (opts.collapse_variants and b.variant_axis_kinds and len(variants) > 1):
                cells += [Cell(case, b, v) for v in variants]
                continue
            if kinds is None:
                lay = case_layout(case)
                kinds = segment_kinds(lay.query_lens, lay.seq_lens)

            # Declared data only (check_support reads the capabilities tables): the parent
            # imports no library to plan. Availability is the worker's to find; it does not
            # differ within a group for the backends' declared axis orders.
            def runnable(v: dict[str, Any], b: type[AttentionBackend] = b) -> bool:
                try:
                    cfg = case.attention_config()  # noqa: B023  (called at once, in this iteration)
                    return (b.capabilities(v).kind_reason(cfg) is None
                            and b.check_support(cfg, v, opts.device.type) is None)
                except Exception:  # a probe that fails only loses the preference
                    return False

            cells += [Cell(case, b, v, info) for v, info in collapse_variants(b, variants, kinds, runnable)]
    return cells



def group_by_case(cells: list[Cell]) -> list[list[Cell]]:
    """Cells grouped by case, cases in first-seen order."""
    by_case: dict[str, list[Cell]] = {}
    for c in cells:
        by_case.setdefault(c.case.name, []).append(c)
    return list(by_case.values())


def backend_spec(backend: type[AttentionBackend]) -> str:
    """How to name ``backend`` on the command line: its registered name, else module:Class."""
    from harness.registry import known_backends

    if backend.name in known_backends():
        return backend.name
    return f"{backend.__module__}:{backend.__qualname__}"


def reproducer(cell: Cell, opts: RunOptions) -> str:
    parts = ["harness", "run", opts.suite_path or "SUITE.yaml", "--case", cell.case.name,
             "--backends", backend_spec(cell.backend), "--seed", str(cell.case.seed)]
    if cell.case.adversarial:
        parts.append("--adversarial")
    for k, v in sorted(cell.variant.items()):
        parts += ["--variant", f"{cell.backend.name}.{k}={v}"]
    if opts.device.type == "cpu":
        parts += ["--device", "cpu"]
    if opts.timing is not None and opts.timing.mode != "hot":
        parts += ["--timing-mode", opts.timing.mode]
    if opts.timing is not None and not opts.timing.cuda_graph:
        parts += ["--no-cuda-graph"]
    if opts.timing is not None and opts.timing.stop_criterion != "noise":
        parts += ["--stop", opts.timing.stop_criterion]
    if opts.timing is not None and opts.timing.cpu_clock != "wall" and opts.device.type == "cpu":
        parts += ["--cpu-clock", opts.timing.cpu_clock]
    return shlex.join(parts)


def case_work(case: CaseSpec, layout: CaseLayout | None = None) -> tuple[dict, Any]:
    """Exact FLOPs/bytes of the batch a case generates (lengths only: no tensors)."""
    layout = layout or case_layout(case)
    return {"query_lens": list(layout.query_lens), "seq_lens": list(layout.seq_lens)}, layout_work(layout)


def too_large_reason(case: CaseSpec, opts: RunOptions) -> str | None:
    """On the CPU, cases above the work/memory limits are skipped with this reason."""
    if opts.device.type != "cpu":
        return None
    layout = case_layout(case)
    _, work = case_work(case, layout)
    kv_mib = layout.logical_kv_bytes / 2**20
    if work.flops / 1e9 > opts.cpu_max_gflop:
        return (f"too large for the CPU: {work.flops / 1e9:.1f} GFLOP > --cpu-max-gflop {opts.cpu_max_gflop:g}"
                " (run on a GPU or raise the limit)")
    if kv_mib > opts.cpu_max_kv_mib:
        return (f"too large for the CPU: KV cache {kv_mib:.0f} MiB > --cpu-max-kv-mib {opts.cpu_max_kv_mib:g}"
                " (run on a GPU or raise the limit)")
    return None


def precheck(cell: Cell, opts: RunOptions) -> tuple[str | None, Status | None]:
    """Before the case's batch exists: why ``cell`` cannot run here and its status, or (None, None)."""
    avail = cell.backend.availability(cell.variant)
    if not avail.available:
        return f"backend unavailable: {avail.reason}", Status.SKIPPED
    cfg = cell.case.attention_config()
    # The declared attention kinds first: a check_support override written for MHA alone
    # (FlashAttention's, FlashInfer's) must not be the one to judge an MLA layer.
    reason = (cell.backend.capabilities(cell.variant).kind_reason(cfg)
              or cell.backend.check_support(cfg, cell.variant, opts.device.type))
    if reason:
        return reason, Status.UNSUPPORTED
    big = too_large_reason(cell.case, opts)
    if big:
        return big, Status.SKIPPED
    if opts.fit_check is not None:
        reason = opts.fit_check(cell)
        if reason:
            return reason, Status.SKIPPED
    return None, None


def timing_skip_reason(caps: Capabilities | None, device_type: str, opts: RunOptions) -> str | None:
    """Why a cell ``opts`` would time is not timed (a reference backend on ``device_type``
    without ``--time-references``), or None; None too when ``opts`` times nothing."""
    if not opts.time or opts.time_references or caps is None:
        return None
    return caps.timing_skip_reason(device_type)


def cell_timed(cell: Cell, device_type: str, opts: RunOptions) -> bool:
    """Whether ``cell`` will be timed on ``device_type`` (for cost estimates, before it runs),
    from the backend's declared ``untimed_on``: the parent plans without importing a library
    (``capabilities()`` may need one; the cell itself obeys its capabilities' same set)."""
    if not opts.time:
        return False
    return opts.time_references or device_type not in cell.backend.untimed_on


def default_out_dir(suite: Suite) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path("results") / f"{suite.suite}-{stamp}"
