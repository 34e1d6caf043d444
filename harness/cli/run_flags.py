"""The options of a run, declared once: ``RunFlags``, a pydantic model whose fields carry their
flag (``Flag``: name, help, group, argparse action). ``harness run``'s parser is built from it
(``add_arguments``), the pytest plugin's ``--bench-*`` options too (``add_pytest_options``), and
both validate through it: a bad value is one ``UsageError`` line naming the flag (exit 2).

Field constraints (``gt=0``, ``Literal``) replace hand checks; the checks that involve two
flags are the model validator. Timing values are typed here and range-checked by
``harness.timing.TimingOptions`` (their defaults depend on the device), whose message the
command line prints as ``timing options: ...``.

Light on purpose: pydantic only (torch loads when a device is picked), so building the parser
and registering the pytest plugin stay cheap.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Callable, Iterator, Literal, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from harness.cli.flags import UsageError
from harness.cli.lazy import LazyText

if TYPE_CHECKING:
    import argparse

    import pytest
    import torch

    from harness.execute.local import ExecOptions
    from harness.plan.cells import RunOptions
    from harness.plan.options import RunPlan
    from harness.timing import TimingOptions

MAIN, TIMING, ROBUSTNESS = None, "timing (docs/measurement.md)", "robustness (docs/robustness.md)"
GROUPS = (TIMING, ROBUSTNESS)  # argparse shows them in this order, after the main options


@dataclass(frozen=True)
class Flag:
    """How a field appears on a command line. ``bench``: the pytest plugin offers it too, as
    ``--bench-NAME`` (or the name given)."""

    name: str  # "--max-time", or "suite" for a positional
    help: str
    group: str | None = MAIN
    metavar: str | None = None
    action: str | None = None  # "store_true", "append"
    nargs: str | None = None
    const: Any = None
    bench: bool | str = False
    problem: str | None = None  # what a rejected value should have been (else pydantic's words)
    bench_help: str | None = None  # the pytest option's help, where it says more than the flag's


def _stop_help() -> str:
    from harness.timing.stopping import STOPPING_CRITERIA  # the criteria registered by name (torch)

    return "when sampling stops: " + "; ".join(f"{name}: {cls.help}" for name, cls in
                                               sorted(STOPPING_CRITERIA.items())) + " (default noise)"


class RunFlags(BaseModel):
    """Every ``harness run`` flag, in ``--help`` order."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    suite: Annotated[str, Flag(
        "suite", "suite YAML file, e.g. suites/decode.yaml", bench="--bench-suite",
        bench_help="run this suite's cells as benchmark tests (harness/benchmarks/test_suite_bench.py, "
                   "collected by itself when no test paths are given)")]
    backends: Annotated[str | None, Flag(
        "--backends", "comma-separated backend names or module:Class specs (default: the suite's, else all)",
        bench=True)] = None
    out: Annotated[str | None, Flag("--out", "results folder (default: results/SUITE-TIMESTAMP)")] = None
    # The suite field's range (harness.spec.limits.MAX_SEED, not imported: this module stays light;
    # a test keeps them equal): checked before the results folder is made.
    seed: Annotated[int | None, Field(ge=0, le=2**63 - 1), Flag(
        "--seed", "override every case's seed", problem="an integer from 0 to 2**63-1")] = None
    model: Annotated[list[str] | None, Flag(
        "--model", "every case takes this model's attention shape: a built-in ID or a config.json path "
                   "(comma-separated or repeated: several)", action="append")] = None
    tp: Annotated[str | None, Flag(
        "--tp", "with --model: tensor-parallel degree(s), e.g. 1,2 (heads sliced as vLLM does)")] = None
    batch_spec: Annotated[list[str] | None, Flag(
        "--batch-spec", "every case's batch in vLLM's grammar, e.g. 2q1k_32q1s1k (comma-separated or repeated: "
                        "one case each)", action="append")] = None
    case: Annotated[list[str] | None, Flag(
        "--case", "only cases with this exact name, else this glob (repeatable)", action="append", bench=True)] = None
    variant: Annotated[list[str] | None, Flag(
        "--variant", "restrict a variant axis: BACKEND.AXIS=V[,V] (repeatable)", action="append", bench=True)] = None
    device: Annotated[str | None, Flag(
        "--device", "auto (default: cuda if available), cpu, cuda, cuda:N", bench=True)] = None
    no_check: Annotated[bool, Flag("--no-check", "skip the reference check (timing only)", action="store_true")] = False
    invariants: Annotated[bool, Flag(
        "--invariants", "also check batch invariance, page permutation and decode-vs-prefill per cell"
                        " (check.invariants; docs/conformance.md)", action="store_true")] = False
    adversarial: Annotated[bool, Flag(
        "--adversarial", "fill every KV-cache slot no request owns (spare pages, last-page tails) with NaN;"
                         " a correct kernel never reads them (docs/conformance.md)", action="store_true")] = False
    no_time: Annotated[bool, Flag("--no-time", "skip timing (conformance only)", action="store_true")] = False
    time_references: Annotated[bool, Flag(
        "--time-references", "also time correctness references (backends whose capabilities declare role "
                             "'reference', e.g. torch-math on a GPU); by default their cells are checked, not timed",
        action="store_true")] = False
    all_variants: Annotated[bool, Flag(
        "--all-variants", "run every variant even where an axis cannot apply to the batch (default: one cell "
                          "stands for them, its row says which axes applied; docs/measurement.md)",
        action="store_true")] = False
    # allow_inf_nan=False: NaN passes no comparison, so a NaN limit would skip every cell.
    cpu_max_gflop: Annotated[float, Field(gt=0, allow_inf_nan=False), Flag(
        "--cpu-max-gflop", "on CPU, skip cases above this many GFLOP (default 0.5)",
        problem="a positive number (GFLOP)", bench=True)] = 0.5
    cpu_max_kv_mib: Annotated[float, Field(gt=0, allow_inf_nan=False), Flag(
        "--cpu-max-kv-mib", "on CPU, skip cases whose KV cache exceeds this (default 128)",
        problem="a positive number (MiB)", bench=True)] = 128.0

    timing_mode: Annotated[Literal["hot", "cold"], Flag(
        "--timing-mode", "hot (default): L2 holds the call's own data (an untimed copy of the sample's work before every sample); "
                        "cold: L2 flushed before every sample",
        group=TIMING, bench="--bench-mode")] = "hot"
    no_cuda_graph: Annotated[bool, Flag(
        "--no-cuda-graph", "time eagerly even where the backend allows CUDA-graph replay", group=TIMING,
        action="store_true", bench=True)] = False
    target_noise: Annotated[float | None, Flag(
        "--target-noise", "stop sampling when the median's CI half-width is under this fraction of it "
                          "(default 0.01 on GPU, 0.05 on CPU)", group=TIMING, metavar="FRACTION", bench=True)] = None
    max_time: Annotated[float | None, Flag(
        "--max-time", "sampling time budget per cell (default 2 on GPU, 0.5 on CPU)", group=TIMING,
        metavar="SECONDS", bench=True)] = None
    energy_window: Annotated[float | None, Flag(
        "--energy-window", "GPU: NVML energy (J/call, mean W) is read around the timing loop; a loop shorter "
                           "than this (or cold mode) runs the call back to back this long after timing instead; "
                           "0 = off (the default); 1 repeats within ~1%% on an H200, 0.1 did not", group=TIMING, metavar="SECONDS", bench=True)] = None
    min_samples: Annotated[int | None, Flag(
        "--min-samples", "samples before the noise target may stop (default 10 GPU, 3 CPU)", group=TIMING,
        bench=True)] = None
    max_samples: Annotated[int | None, Flag(
        "--max-samples", "sample cap per cell, the exact count under --stop samples (default 500 GPU, 20 CPU)",
        group=TIMING, bench=True)] = None
    stop: Annotated[str | None, Flag("--stop", LazyText(_stop_help), group=TIMING, metavar="CRITERION",
                                     bench=True)] = None
    cpu_clock: Annotated[Literal["wall", "process"] | None, Flag(
        "--cpu-clock", "CPU timing clock: wall (default, elapsed time) or process (CPU time the call "
                       "used: far steadier on a shared machine; what `harness compare` can gate on)",
        group=TIMING, bench=True)] = None
    clock_regime: Annotated[Literal["burst", "sustained"] | None, Flag(
        "--clock-regime", "GPU clock state the samples are taken in: burst (samples after the cell's warm-up, "
                          "throttled ones discarded) or sustained (continuous calls until clock and power are "
                          "steady, the GPU kept under load while sampling: what a serving GPU sees). Default: "
                          "the suite's clock_regime, else burst (docs/measurement.md, Clock regimes)",
        group=TIMING, bench=True)] = None
    throttle_threshold: Annotated[float | None, Field(gt=0, le=1), Flag(
        "--throttle-threshold", "burst: discard a sample read back below this fraction of the maximum SM clock "
                                "(default 0.75, as nvbench)", group=TIMING, metavar="FRACTION",
        problem="a fraction of the maximum SM clock in (0, 1]")] = None
    throttle_recovery_delay: Annotated[float | None, Field(ge=0), Flag(
        "--throttle-recovery-delay", "burst: seconds the GPU is left idle after a discarded sample (default 0.05)",
        group=TIMING, metavar="SECONDS", problem="seconds >= 0")] = None
    sampling: Annotated[Literal["auto", "interleaved", "sequential"] | None, Flag(
        "--sampling", "how a case's candidates are sampled: auto (default: interleaved rounds A B C A B C on a "
                      "GPU when they fit in memory together, else one after another), interleaved, sequential (one after "
                      "another; on a GPU prepared and held together as rounds hold them, where they fit)",
        group=TIMING, bench=True)] = None
    warm_samples: Annotated[int | None, Field(ge=0), Flag(
        "--warm-samples", "GPU: untimed copies of the sample's work before every timed sample (cold: before "
                          "the flush; default 2 before a work under 1 ms hot in interleaved rounds, else 1; 0 for none)", group=TIMING, metavar="N",
        problem="a count >= 0")] = None
    flush: Annotated[Literal["auto", "read", "write"] | None, Flag(
        "--flush", "cold mode's L2 flush: auto (default: the first of read, write, a write of 8x the L2 that "
                   "evicts at least 90%% of what a reference flush does; docs/measurement.md, Cold L2), read or "
                   "write (twice the L2, used as asked; the row says whether the probe verified it)",
        group=TIMING)] = None
    keep_raw: Annotated[bool, Flag(
        "--keep-raw", "keep every sample's time in the row (timing.raw_us: its distribution, e.g. two levels or "
                      "a drift, behind a median); rows grow by the samples", group=TIMING, action="store_true")] = False

    resume: Annotated[str | None, Flag(
        "--resume", "continue an interrupted run in DIR: run only the cells it lacks", group=ROBUSTNESS,
        metavar="DIR")] = None
    ray: Annotated[str | None, Flag(
        "--ray", "spread cases over a Ray cluster (one actor per GPU keeping one isolated worker; a lost "
                 "actor's case is retried on another): a local cluster, or ADDRESS (e.g. ray://head:10001 or "
                 "auto); needs pip install 'attn-harness[ray]'", group=ROBUSTNESS, metavar="ADDRESS", nargs="?",
        const="local")] = None
    shard: Annotated[str | None, Flag(
        "--shard", "run only shard K of N (1-based): whole cases, balanced by estimated cost, the same "
                   "split on every machine; `harness merge` joins the shard folders (docs/scale-out.md)",
        group=ROBUSTNESS, metavar="K/N")] = None
    devices: Annotated[str | None, Flag(
        "--devices", "one worker per entry, cases spread over them: 0,1,... (GPUs) or cpu,cpu",
        group=ROBUSTNESS)] = None
    cell_timeout: Annotated[float | None, Field(ge=0), Flag(
        "--cell-timeout", "kill a cell's worker after this long and record timeout (default 600 GPU, 120 CPU; "
                          "0 = none)", group=ROBUSTNESS, metavar="SECONDS",
        problem="seconds >= 0 (0 = no limit)")] = None
    memory_budget_mib: Annotated[float | None, Field(gt=0), Flag(
        "--memory-budget-mib", "skip cells whose estimated peak exceeds this (CPU default: half the free RAM; "
                               "caps GPU free memory)", group=ROBUSTNESS, metavar="MIB",
        problem="a positive number of MiB")] = None
    no_isolation: Annotated[bool, Flag(
        "--no-isolation", "run cells in this process: no worker, no crash protection, no timeout",
        group=ROBUSTNESS, action="store_true")] = False

    strict: Annotated[bool, Flag("--strict", "exit 1 if any cell is mismatch/error/timeout", action="store_true")] = False
    report: Annotated[bool, Flag("--report", "write report.html into the results folder at the end",
                                 action="store_true")] = False
    quiet: Annotated[bool, Flag("--quiet", "no progress bar", action="store_true")] = False

    @model_validator(mode="after")
    def _flags_that_go_together(self) -> "RunFlags":
        for name in ("model", "batch_spec", "backends", "devices"):  # "a,,b" or "--model ''": a typo, not a wish to run fewer
            value = getattr(self, name)
            given = [value] if isinstance(value, str) else value or []
            if any(not item.strip() for v in given for item in v.split(",")):
                shown = ",".join(given) if len(given) == 1 else " ".join(given)
                raise ValueError(f"--{name.replace('_', '-')} {shown!r}: an empty item; separate names by single "
                                 "commas")
        if self.tp and not self.model:
            raise ValueError("--tp slices a model's heads: give --model too")
        for item in self.variant or []:
            _parse_variant(item)
        if self.devices and self.device is not None:
            raise ValueError("give either --device or --devices, not both")
        several = self.devices is not None and len([x for x in self.devices.split(",") if x.strip()]) > 1
        if self.no_isolation and several:
            raise ValueError("--no-isolation runs in this process: it takes one device, not --devices")
        if self.ray is not None and (several or self.no_isolation):
            raise ValueError("--ray places cells on the cluster's workers: drop --devices/--no-isolation")
        if self.resume and self.out and _same_path(self.out, self.resume) is False:
            raise ValueError("--resume DIR writes into DIR; drop --out or give the same folder")
        if self.shard:
            from harness.plan.shard import parse_shard

            parse_shard(self.shard)  # its one-line reason, before any worker starts
        return self

    # ------------------------------------------------------------ building the run's options
    @classmethod
    def parse(cls, values: dict[str, Any], bench: bool = False) -> "RunFlags":
        """Validated flags; a bad value -> UsageError naming the flag (its --bench-* name: ``bench``)."""
        try:
            return cls.model_validate({k: v for k, v in values.items() if k in cls.model_fields})
        except ValidationError as e:
            raise UsageError(_one_line(e, bench)) from None

    @classmethod
    def from_args(cls, args: "argparse.Namespace") -> "RunFlags":
        return cls.parse(vars(args))

    @classmethod
    def from_options(cls, **options: Any) -> "RunFlags":
        """The flags from Python keywords, as the command line would take them (``harness.api.run``):
        ``no_time=True`` is ``--no-time``, ``case=["a", "b"]`` (or ``case="a"``) repeats ``--case``,
        ``ray=True`` is a bare ``--ray``, ``max_time=0.5`` is ``--max-time 0.5``; None and False
        leave a flag out. An unknown keyword or a value the flag cannot take -> UsageError."""
        values: dict[str, Any] = {}
        for key, value in options.items():
            info = cls.model_fields.get(key)
            if info is None:
                raise UsageError(f"{key}={value!r}: not a harness run option (harness run --help lists them)")
            flag = next(m for m in info.metadata if isinstance(m, Flag))
            if value is None or value is False:
                continue
            if flag.action == "store_true":
                values[key] = True
            elif flag.action == "append":
                values[key] = [str(v) for v in (value if isinstance(value, (list, tuple)) else [value])]
            elif value is True:
                if flag.const is None:
                    raise UsageError(f"{flag.name}: give it a value")
                values[key] = flag.const
            elif isinstance(value, (list, tuple)):
                raise UsageError(f"{flag.name} {value!r}: takes one value")
            else:
                # A path or a number where the flag is text (--out, --tp): the command line's string.
                values[key] = str(value) if _scalar(info.annotation) is str else value
        return cls.parse(values)

    def variant_filters(self) -> dict[str, dict[str, list[str]]]:
        out: dict[str, dict[str, list[str]]] = {}
        for item in self.variant or []:
            backend, axis, values = _parse_variant(item)
            out.setdefault(backend, {}).setdefault(axis, []).extend(values)
        return out

    def suite_override(self) -> dict[str, Any] | None:
        """``--model`` / ``--tp`` / ``--batch-spec``: fields set in every case of the suite."""
        out: dict[str, Any] = {}
        if self.model:
            out["model"], out["tp"] = ",".join(self.models()), self.tp
        if self.batch_spec:
            out["batch"] = self.batch_specs()
        return out or None

    def models(self) -> list[str]:
        """Every ``--model`` item: a repeated flag adds to the list, as a comma does."""
        return [m.strip() for v in self.model or [] for m in v.split(",")]

    def batch_specs(self) -> list[str]:
        """Every ``--batch-spec`` item (repeated or comma-separated: one case each)."""
        return [b.strip() for v in self.batch_spec or [] for b in v.split(",")]

    def timing_options(self, device: "torch.device", suite_regime: str | None = None, **extra: Any) -> "TimingOptions":
        """The device's timing defaults with the timing flags applied (``extra``: e.g. keep_raw).
        The clock regime: --clock-regime, else the suite's ``clock_regime``, else the default."""
        from harness.timing import TimingOptions

        try:
            return TimingOptions.for_device(
                device, mode=self.timing_mode, cuda_graph=False if self.no_cuda_graph else None,
                target_rel_noise=self.target_noise, max_time_s=self.max_time,
                min_samples=self.min_samples, max_samples=self.max_samples, stop_criterion=self.stop,
                cpu_clock=self.cpu_clock, energy_window_s=self.energy_window,
                clock_regime=self.clock_regime or suite_regime, throttle_threshold=self.throttle_threshold,
                throttle_recovery_s=self.throttle_recovery_delay, sampling=self.sampling,
                warm_samples=self.warm_samples, flush_method=self.flush,
                **{"keep_raw": self.keep_raw or None, **extra})
        except ValueError as e:
            raise UsageError(f"timing options: {e}") from None

    def run_options(self, device: "torch.device", suite_path: str, suite_regime: str | None = None,
                    variant_filters: dict[str, dict[str, list[str]]] | None = None,
                    **timing_extra: Any) -> "RunOptions":
        from harness.plan.cells import RunOptions

        return RunOptions(
            device=device, suite_path=suite_path, seed=self.seed, adversarial=self.adversarial,
            invariants=self.invariants, case_patterns=self.case or [],
            variant_filters=self.variant_filters() if variant_filters is None else variant_filters,
            check=not self.no_check, time=not self.no_time, time_references=self.time_references,
            collapse_variants=not self.all_variants, cpu_max_gflop=self.cpu_max_gflop,
            cpu_max_kv_mib=self.cpu_max_kv_mib, timing=self.timing_options(device, suite_regime, **timing_extra))

    def exec_options(self, device: "torch.device") -> "ExecOptions":
        """Worker layout from --devices/--no-isolation/--cell-timeout/--memory-budget-mib."""
        import torch

        from harness.execute.devices import parse_devices
        from harness.execute.local import ExecOptions, default_cell_timeout

        try:
            devices = parse_devices(self.devices) if self.devices else [str(device)]
        except ValueError as e:
            raise UsageError(str(e)) from None
        timeout = (self.cell_timeout if self.cell_timeout is not None
                   else default_cell_timeout(torch.device(devices[0]).type))
        return ExecOptions(devices=devices, isolation=not self.no_isolation, cell_timeout=timeout or None,
                           memory_budget_mib=self.memory_budget_mib)


    def resolve(self, pick_backends: "Callable[[Any, str | None, dict[str, dict[str, list[str]]]], list]",
                **timing_extra: Any) -> "RunPlan":
        """The run these flags ask for, derived once (the entry points call this at their top and
        pass the plan down): the suite loaded with --model/--tp/--batch-spec applied, its
        backends (``pick_backends(suite, --backends, variant filters)``: the caller's lookup and
        checks), the device, the worker layout and the cell options with their timing
        (``timing_extra``: e.g. keep_raw). A bad value -> UsageError naming the flag; the
        checks run in the order the command line has always reported them."""
        import torch

        from harness.plan.options import RunPlan
        from harness.records.suite_copy import find_suite
        from harness.spec import load_suite

        suite_path = self.suite
        if self.resume and not _is_file(suite_path):  # typed relative to where the run started
            suite_path = find_suite(self.resume, suite_path) or suite_path
        self._check_overrides()  # a bad --model / --batch-spec is the command line's, not the suite file's
        suite = load_suite(suite_path, self.suite_override())
        filters = self.variant_filters()
        backends = pick_backends(suite, self.backends, filters)
        execute = self.exec_options(pick_device(self.device))
        device = torch.device(execute.devices[0])  # rows and the header name the first worker's device
        run = self.run_options(device, suite_path, suite.clock_regime, filters, **timing_extra)
        if not self.backends:  # the suite's choice: backends_for: picks per attention family
            from harness.plan.filters import backend_families

            run.backend_families = backend_families(suite, backends)
        return RunPlan(suite_path=suite_path, suite=suite, backends=backends, run=run, execute=execute,
                       variant_filters=filters, seed=self.seed, out=self.out, resume=self.resume,
                       shard=self.shard, ray=self.ray, report=self.report, strict=self.strict, quiet=self.quiet)

    def _check_overrides(self) -> None:
        """Each ``--model`` (with ``--tp``) resolves and each ``--batch-spec`` parses, else one line
        naming the flag: the suite loader would name the suite file and its first case."""
        from harness.spec.batch_spec import BatchSpecError, parse_batch_spec

        if self.model:
            from harness.spec.models.cases import model_cases
            from harness.spec.models.config import ModelError

            given = f"--model {','.join(self.models())}" + (f" --tp {self.tp}" if self.tp else "")
            try:
                model_cases({"model": self.models(), "tp": self.tp or 1})  # paths: from the working directory
            except ModelError as e:
                raise UsageError(f"{given}: {e}") from None
        for spec in self.batch_specs():
            try:
                parse_batch_spec(spec)
            except BatchSpecError as e:
                raise UsageError(f"--batch-spec {spec}: {e}") from None


def pick_device(name: str | None) -> "torch.device":
    """``--device``: auto -> cuda if torch sees one, else cpu; always with an index on CUDA."""
    import torch

    name = name or "auto"
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError(f"--device {name}: torch sees no CUDA device here (torch {torch.__version__})")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UsageError(f"--device {name!r}: expected auto, cpu, cuda or cuda:N") from None
    # Always carry an index: workers call torch.cuda.set_device, which rejects a bare "cuda".
    return torch.device("cuda", device.index or 0) if device.type == "cuda" else device


# ---------------------------------------------------------------- flags from the fields
def flags(bench_only: bool = False) -> Iterator[tuple[str, Any, Flag]]:
    """(field name, field info, its Flag) in declaration order."""
    for name, info in RunFlags.model_fields.items():
        flag = next(m for m in info.metadata if isinstance(m, Flag))
        if flag.bench or not bench_only:
            yield name, info, flag


def _argparse_kwargs(info: Any, flag: Flag) -> dict[str, Any]:
    kw: dict[str, Any] = {"help": flag.help}  # the same text object: LazyText stays lazy
    if flag.action:
        kw["action"] = flag.action
        if flag.action == "store_true":
            return kw
    else:
        base = _scalar(info.annotation)
        if get_origin(base) is Literal:
            kw["choices"] = list(get_args(base))
        elif base in (int, float):
            kw["type"] = base
    if info.default is not None and not flag.action:
        kw["default"] = info.default
    for key in ("metavar", "nargs", "const"):
        if getattr(flag, key) is not None:
            kw[key] = getattr(flag, key)
    return kw


def add_arguments(parser: "argparse.ArgumentParser") -> None:
    """``harness run``'s arguments: the main ones, then the timing and robustness groups."""
    groups = {g: parser.add_argument_group(g) for g in GROUPS}
    for name, info, flag in flags():
        target = parser if flag.group is MAIN else groups[flag.group]
        kw = _argparse_kwargs(info, flag)
        if flag.name.startswith("-"):
            target.add_argument(flag.name, dest=name, **kw)
        else:
            target.add_argument(name, **kw)


def _bench_name(name: str, flag: Flag) -> str:
    return flag.bench if isinstance(flag.bench, str) else "--bench-" + flag.name.lstrip("-")


def add_pytest_options(group: Any) -> None:
    """The flags marked ``bench`` as ``--bench-*`` pytest options (the same help and choices)."""
    for name, info, flag in flags(bench_only=True):
        kw = _argparse_kwargs(info, flag)
        kw["help"] = flag.bench_help or kw["help"]
        kw.pop("nargs", None)
        kw.pop("const", None)
        if "metavar" not in kw and kw.get("action") != "store_true" and "choices" not in kw:
            kw["metavar"] = name.upper()
        if kw.get("action") != "store_true" and (kw.get("default") is None or "default" not in kw
                                                  or type(kw["default"]).__name__ == "PydanticUndefinedType"):
            kw["default"] = None  # a required field (--bench-suite) has no default: absent means "not asked"
        group.addoption(_bench_name(name, flag), dest=f"bench_{name}", **kw)


def from_pytest(config: "pytest.Config") -> RunFlags | None:
    """The ``--bench-*`` options as RunFlags (None without --bench-suite). Bad value -> UsageError."""
    values = {name: config.getoption(f"bench_{name}", default=None) for name, _, _ in flags(bench_only=True)}
    if not values.get("suite"):
        return None
    return RunFlags.parse({k: v for k, v in values.items() if v is not None}, bench=True)


def option_argv(options: dict[str, Any]) -> list[str]:
    """Keyword options (``RunFlags.from_options``'s) as the `harness run` flags a run.json records:
    no_time=True -> --no-time, case=["a", "b"] -> --case a --case b, max_time=0.5 -> --max-time 0.5;
    False/None leave the flag out."""
    out: list[str] = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            out.append(flag)
        elif isinstance(value, (list, tuple)):
            for v in value:
                out += [flag, str(v)]
        else:
            out += [flag, str(value)]
    return out


# ---------------------------------------------------------------- messages
def _scalar(annotation: Any) -> Any:
    """``float | None`` -> float; ``Literal[...] | None`` -> the Literal."""
    args = [a for a in get_args(annotation) if a is not type(None)]
    return args[0] if get_origin(annotation) is not Literal and len(args) == 1 else annotation


def _parse_variant(item: str) -> tuple[str, str, list[str]]:
    target, eq, values = item.partition("=")
    backend, dot, axis = target.rpartition(".")
    if not eq or not dot or not backend or not axis or not values:
        raise ValueError(f"--variant {item!r}: expected BACKEND.AXIS=VALUE[,VALUE...], e.g. flash-attn.fa_version=3")
    return backend, axis, [v for v in values.split(",") if v]


def _is_file(path: str) -> bool:
    from pathlib import Path

    return Path(path).is_file()


def _same_path(a: str, b: str) -> bool:
    from pathlib import Path

    return Path(a) == Path(b)


def _one_line(e: ValidationError, bench: bool = False) -> str:
    """The first problem, as ``--flag VALUE: what it should be`` (or the validator's sentence)."""
    err = e.errors(include_url=False)[0]
    if not err["loc"]:  # the model validator: its message is the whole sentence
        return str(err["ctx"]["error"]) if "ctx" in err and "error" in err["ctx"] else err["msg"]
    name = str(err["loc"][0])
    info = RunFlags.model_fields[name]
    flag = next(m for m in info.metadata if isinstance(m, Flag))
    value = err.get("input")
    shown = f"{value:g}" if isinstance(value, float) else value
    return f"{_bench_name(name, flag) if bench else flag.name} {shown}: {flag.problem or err['msg']}"
