"""The suite's ``trace:`` source: a case whose ``batch`` is a mapping with ``trace: FILE``
expands, when the suite is loaded, into one case per sampled scheduler step (exactly the cases
``python -m harness.spec.trace.make_suite`` writes). Fields (docs/traces.md)::

    batch:
      trace: data/traces/mooncake-fast25-conversation.jsonl   # .csv = Azure, .jsonl = Mooncake
      first_n: 20            # keep the first N requests (after the window)
      window: [0, 600]       # arrival seconds [lo, hi)
      rate_scale: 1.0        # divide arrival gaps by this
      steps: 4               # sampled steps (stratified); omit for every step
      scheduler: {max_num_batched_tokens: 2048, max_num_seqs: 256, num_blocks: 65536,
                  enable_prefix_caching: true}

The page size is the case's ``block_size``. A relative path is looked up next to the suite
file first, then from the current directory."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from harness.spec.trace.readers import TraceError, read_trace, select
from harness.spec.trace.replay import Sampled, sample_steps, step_case
from harness.spec.trace.scheduler import SchedulerParams, simulate

MAX_STEPS = 512  # cases one trace source may expand to (each is a full cell per backend)


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


class SchedulerSpec(_Strict):
    max_num_batched_tokens: Annotated[int, Field(ge=1, le=1 << 20)] = 8192
    max_num_seqs: Annotated[int, Field(ge=1, le=4096)] = 256
    num_blocks: Annotated[int, Field(ge=1, le=1 << 24)] = 65536
    enable_prefix_caching: bool = True


class TraceSource(_Strict):
    trace: Annotated[str, Field(min_length=1)]
    first_n: Annotated[int, Field(ge=1)] | None = None
    window: Annotated[list[Annotated[float, Field(ge=0)]], Field(min_length=2, max_length=2)] | None = None
    rate_scale: Annotated[float, Field(gt=0)] = 1.0
    steps: Annotated[int, Field(ge=1, le=MAX_STEPS)] | None = None
    scheduler: SchedulerSpec = SchedulerSpec()

    @model_validator(mode="before")
    @classmethod
    def _ints_are_floats(cls, data: Any) -> Any:
        # YAML writes 4 for 4.0: strict floats would refuse it
        if isinstance(data, dict):
            data = dict(data)
            if isinstance(data.get("rate_scale"), int) and not isinstance(data["rate_scale"], bool):
                data["rate_scale"] = float(data["rate_scale"])
            if isinstance(data.get("window"), list):
                data["window"] = [float(x) if isinstance(x, int) and not isinstance(x, bool) else x
                                  for x in data["window"]]
        return data

    @field_validator("window")
    @classmethod
    def _window_order(cls, v: list[float] | None) -> list[float] | None:
        if v is not None and v[0] >= v[1]:
            raise ValueError(f"[{v[0]:g}, {v[1]:g}] is empty (lo must be < hi)")
        return v


def resolve(path: str, suite_dir: Path | None) -> Path:
    p = Path(path)
    if not p.is_absolute() and suite_dir is not None and (suite_dir / p).is_file():
        return suite_dir / p
    return p


def sampled_steps(src: TraceSource, block_size: int, suite_dir: Path | None = None) -> tuple[list[Sampled], str]:
    """The sampled steps of the source (TraceError / ValueError on a bad trace or parameters)
    and a one-line description of the replay."""
    path = resolve(src.trace, suite_dir)
    if not path.is_file():
        given = Path(src.trace)
        tried = [given] if given.is_absolute() else [*([suite_dir / given] if suite_dir is not None else []),
                                                     Path.cwd() / given]
        raise TraceError(src.trace, 0, "file", "no such file (looked for "
                         + " and ".join(str(t.resolve()) for t in dict.fromkeys(tried)) + ")")
    reqs = select(read_trace(path), first=src.first_n,
                  window_s=(src.window[0], src.window[1]) if src.window else None, rate_scale=src.rate_scale)
    if not reqs:
        raise ValueError(f"{path}: no requests left after window/first_n")
    s = src.scheduler
    res = simulate(reqs, SchedulerParams(s.max_num_batched_tokens, s.max_num_seqs, block_size, s.num_blocks,
                                         enable_prefix_caching=s.enable_prefix_caching))
    k = src.steps if src.steps is not None else len(res.steps)
    if src.steps is None and k > MAX_STEPS:
        raise ValueError(f"the trace replays in {k:,} steps; give steps: K (at most {MAX_STEPS}) to sample them")
    desc = (f"{path.name}: {len(reqs)} requests, {len(res.steps)} steps, {res.preemptions} preemptions, "
            f"{res.prefix_hit_tokens} prefix-hit tokens")
    return sample_steps(res.steps, k), desc


def step_case_dict(s: Sampled, block_size: int) -> dict[str, Any]:
    """One sampled step as a suite case: its requests, its shared prefix (prefix-cache pages
    shared by several requests) and tags ``trace``, ``step=I``, ``weight=W`` and, when pages are
    shared, ``shared_tokens=N`` (KV tokens the case reads from pages another request reads too)
    and ``trace_shared_tokens=M`` (the same in the scheduler's step)."""
    sc = step_case(s.step, block_size)
    case: dict[str, Any] = {"name": f"step-{s.step.index}", "batch": sc.batch}
    tags = ["trace", f"step={s.step.index}", f"weight={s.weight:.3f}"]
    if sc.shared_prefix is not None:
        case["shared_prefix"] = sc.shared_prefix
        tags.append(f"shared_tokens={sc.shared_tokens}")
    if sc.trace_shared_tokens:
        tags.append(f"trace_shared_tokens={sc.trace_shared_tokens}")
    case["tags"] = tags
    return case


def expand_trace_case(raw: dict[str, Any], suite_dir: Path | None = None) -> list[dict[str, Any]]:
    """A raw case whose ``batch`` is a trace source -> one raw case per sampled step, named
    ``<case>.step-<I>``. Raises ValueError (pydantic's ValidationError included) on bad input;
    the caller names file and case."""
    src = TraceSource.model_validate(raw["batch"])
    block_size = raw.get("block_size", 16)
    if not isinstance(block_size, int) or isinstance(block_size, bool):
        raise ValueError(f"block_size must be an integer for a trace source, got {block_size!r}")
    if "shared_prefix" in raw:
        raise ValueError("shared_prefix comes from the trace's prefix cache; leave it out of a trace case")
    sampled, _ = sampled_steps(src, block_size, suite_dir)
    out = []
    for s in sampled:
        step = step_case_dict(s, block_size)
        case = {k: v for k, v in raw.items() if k not in ("batch", "name", "tags")}
        case.update(name=f"{raw.get('name', 'trace')}.{step['name']}", batch=step["batch"],
                    tags=[*raw.get("tags", []), *step["tags"]])
        if "shared_prefix" in step:
            case["shared_prefix"] = step["shared_prefix"]
        out.append(case)
    return out
