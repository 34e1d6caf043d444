"""``harness repro``: one result row -> a standalone Python script for an upstream issue.

The script imports only torch and the backend's library. It draws the inputs from the row's
seed (simple inline generation: a paged KV cache behind a shuffled block table, the queries,
the row's request lengths), makes the library call as the backend's adapter does (source text
from ``AttentionBackend.standalone_call``: the core never knows a library), computes an fp64
reference inline and judges each request with the harness's relative-L2 limit
(harness/cell/check.py), exiting 1 on a mismatch and 0 when every request passes.

``--shrink`` first re-runs the row's cell in-process and then smaller versions of its case
(fewer requests, shorter contexts and queries, fewer heads) while it still fails the same
way, and writes the script for the smallest one. The script's inputs follow the same
distributions as the harness's, not the same bits, so the script judges its own run.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any, Callable

import torch

from attn_contract import AttentionBackend, decode_first_order
from harness.cell.check import ACCUMULATION, rel_l2_base
from harness.case.layout import draw_lengths
from harness.records.results import ResultRow, Status
from harness.spec import CaseSpec

MAX_SHRINK_ATTEMPTS = 40


class ReproError(Exception):
    """Bad input to ``harness repro``: the CLI prints it as one line and exits 2."""


# ------------------------------------------------------------------ choosing the row
def select_row(rows: list[ResultRow], selector: str, backend: str | None = None,
               variant: str | None = None) -> tuple[int, ResultRow]:
    """The one row ``selector`` names: its index in the results file (0-based), its
    ``reproducer`` string, or its case name (narrowed by ``backend`` / ``variant`` label)."""
    if selector.isdigit():
        i = int(selector)
        if i >= len(rows):
            raise ReproError(f"row index {i} out of range: the results hold {len(rows)} rows (0..{len(rows) - 1})")
        return i, rows[i]
    hits = [(i, r) for i, r in enumerate(rows) if r.reproducer and r.reproducer == selector]
    if not hits:
        hits = [(i, r) for i, r in enumerate(rows) if r.case == selector]
    if backend is not None:
        hits = [(i, r) for i, r in hits if r.backend == backend]
    if variant is not None:
        hits = [(i, r) for i, r in hits if r.variant_label == variant]
    if not hits:
        narrowed = "".join(f" {k} {v!r}" for k, v in (("--backend", backend), ("--variant", variant)) if v)
        raise ReproError(f"no row matches {selector!r}{narrowed} (give a row index, a row's reproducer "
                         "string, or a case name)")
    if len(hits) > 1:
        shown = "; ".join(f"#{i} {r.backend} [{r.variant_label}] {r.status}" for i, r in hits[:6])
        more = f"; +{len(hits) - 6} more" if len(hits) > 6 else ""
        raise ReproError(f"{selector!r} matches {len(hits)} rows ({shown}{more}): pass a row index, or narrow "
                         "with --backend NAME and --variant LABEL")
    return hits[0]


def case_of_row(row: ResultRow, suite_path: str | None = None) -> tuple[CaseSpec, str]:
    """The row's case as its suite defines it (seed and --adversarial as the row ran), and the
    backend spec its reproducer names (a registered name or module:Class)."""
    from harness.plan.cells import RunOptions, select_cases
    from harness.spec import SpecError, load_suite

    try:
        parts = shlex.split(row.reproducer)
    except ValueError:
        parts = []
    if len(parts) < 3 or parts[:2] != ["harness", "run"]:
        raise ReproError(f"row {row.case!r} / {row.backend}: no usable reproducer string to find its suite")
    path = suite_path or parts[2]
    backend_spec = parts[parts.index("--backends") + 1] if "--backends" in parts else row.backend
    if not Path(path).is_file():
        raise ReproError(f"suite {path} (from the row's reproducer) not found: run from the repository root "
                         "or pass --suite FILE")
    try:
        suite = load_suite(path)
    except SpecError as e:
        raise ReproError(f"{path}: {str(e).splitlines()[0]}") from None
    seed = row.config.seed if row.config is not None else None
    opts = RunOptions(device=torch.device("cpu"), case_patterns=[row.case], seed=seed,
                      adversarial="--adversarial" in parts)
    cases = [c for c in select_cases(suite, opts) if c.name == row.case]
    if not cases:
        raise ReproError(f"{path} has no case {row.case!r} (the suite changed since the run?)")
    return cases[0], backend_spec


# ------------------------------------------------------------------ the standalone script
@dataclass
class ScriptCase:
    """What the script needs about a case, in the order the backend sees its requests."""

    case: CaseSpec
    query_lens: list[int]
    seq_lens: list[int]
    k_scale: float
    v_scale: float


def script_case(case: CaseSpec, backend: type[AttentionBackend], variant: dict[str, Any]) -> ScriptCase:
    from harness.case.layout import case_layout
    from harness.case.workload import kv_scales

    lay = case_layout(case)
    qlens, slens = list(lay.query_lens), list(lay.seq_lens)
    threshold = backend.capabilities(variant).reorder_batch_threshold
    if threshold is not None:
        order = decode_first_order(qlens, threshold)
        qlens, slens = [qlens[i] for i in order], [slens[i] for i in order]
    k, v = kv_scales(case)
    return ScriptCase(case, qlens, slens, k, v)


_DTYPES = {"float16": "torch.float16", "bfloat16": "torch.bfloat16", "auto": None,
           "fp8_e4m3": "torch.float8_e4m3fn", "fp8_e5m2": "torch.float8_e5m2"}

def _template(name: str) -> str:
    """A fixed part of the script (harness/templates/repro_*.py.tmpl): plain Python that reads
    the constants ``inputs_source`` writes above it."""
    return "\n" + (files("harness") / "templates" / name).read_text(encoding="utf-8")


def render_script(row: ResultRow, sc: ScriptCase, backend: type[AttentionBackend], variant: dict[str, Any],
                  call_source: str, note: str = "") -> str:
    """The standalone script's text."""
    body = inputs_source(row, sc, backend, note)
    body += f"\n# ---- the library call, as the harness's {backend.name} adapter makes it\n"
    body += call_source.strip("\n") + "\n\n" + _template("repro_check.py.tmpl")
    return body


def inputs_source(row: ResultRow, sc: ScriptCase, backend: type[AttentionBackend], note: str = "") -> str:
    """The script up to the library call: its constants and the inputs drawn from the seed
    (the names ``AttentionBackend.standalone_call`` sources read; harness/crosscheck/run.py runs it)."""
    case = sc.case
    cfg = case.attention_config()
    device = "cuda" if str(row.device).startswith("cuda") else "cpu"
    reason = (row.reason or "pass").replace('"""', "'''")
    lines = [
        "#!/usr/bin/env python3",
        f'"""Standalone reproducer: {backend.name} [{row.variant_label}] on {case.name!r} '
        f"({row.status} in the harness).",
        "",
        f"Harness verdict: {reason[:600]}",
        *([note] if note else []),
        "",
        "Written by `harness repro` (attn-harness); needs only torch and the library it calls.",
        "Exit 1: some request mismatches the fp64 reference; 0: all pass.",
        '"""',
        "import math",
        "import sys",
        "",
        "import torch",
        "",
        f"SEED = {case.seed}",
        f"DEVICE = {device!r}",
        f"DTYPE = {_DTYPES[cfg.dtype]}",
        f"CACHE_DTYPE = {_DTYPES[cfg.kv_cache_dtype] or _DTYPES[cfg.dtype]}",
        f"FP8 = {cfg.is_fp8_kv}",
        f"NUM_HEADS, NUM_KV_HEADS, HEAD_SIZE = {cfg.num_heads}, {cfg.num_kv_heads}, {cfg.head_size}",
        f"BLOCK_SIZE = {cfg.block_size}",
        f"KV_LAYOUT = {cfg.kv_layout!r}",
        f"QUERY_LENS = {sc.query_lens}",
        f"SEQ_LENS = {sc.seq_lens}  # cached context + new tokens",
        f"SCALE = {cfg.softmax_scale!r}",
        f"CAUSAL = {cfg.causal}  # bottom-right aligned",
        f"WINDOW_LEFT = {cfg.window_left}  # keys left of the diagonal a query sees; -1: all",
        f"SOFTCAP = {float(cfg.softcap)!r}",
        f"K_SCALE, V_SCALE = {sc.k_scale!r}, {sc.v_scale!r}  # real value = stored value * scale",
        f"MAGNITUDE = {float(case.magnitude)!r}  # q and k are N(0, 1) * MAGNITUDE",
        f"ADVERSARIAL = {bool(case.adversarial)}  # NaN in every cache slot no request owns",
        f"REL_L2_BASE = {rel_l2_base(cfg.dtype, cfg.kv_cache_dtype)!r}  # 3 u(dtype) + 2^-4 with an fp8 KV cache",
        f"ACCUMULATION = {ACCUMULATION!r}  # fp32 accumulation, per sqrt(reduction length)",
    ]
    if cfg.alibi:
        lines.append("ALIBI_SLOPES = torch.tensor(" + repr([round(float(x), 9) for x in _alibi(cfg.num_heads)]) + ")")
    else:
        lines.append("ALIBI_SLOPES = None")
    if cfg.sinks:
        lines.append("SINKS = torch.randn(NUM_HEADS, generator=torch.Generator().manual_seed(SEED + 1))")
    else:
        lines.append("SINKS = None")
    return "\n".join(lines) + "\n" + _template("repro_inputs.py.tmpl")


def _alibi(num_heads: int) -> list[float]:
    from harness.case.workload import alibi_slopes

    return alibi_slopes(num_heads).tolist()


def call_source(backend: type[AttentionBackend], row: ResultRow, case: CaseSpec, variant: dict[str, Any]) -> str:
    call = row.call.model_dump() if row.call is not None else None
    src = backend.standalone_call(case.attention_config(), variant, call)
    if not src:
        raise ReproError(f"repro not supported for backend {backend.name}: it offers no standalone_call "
                         "(attn_contract.AttentionBackend.standalone_call)")
    return src


# ------------------------------------------------------------------ shrinking
def failure_kinds(row: ResultRow) -> set[str]:
    """What failed, coarsely: the checks a shrunk case must still fail (one of them)."""
    kinds: set[str] = set()
    if row.status != Status.MISMATCH or row.check is None:
        return {str(row.status)} if row.status != Status.PASS else set()
    c = row.check
    if c.inputs_modified:
        kinds.add("inputs modified")
    for p in c.per_request or []:
        text = p.problems
        for key, name in (("never written", "unwritten"), ("NaN", "nan"), ("Inf", "inf"),
                          ("outside atol", "elementwise"), ("rel L2", "rel-l2"), ("LSE", "lse")):
            if key in text:
                kinds.add(name)
    if any(not r.passed for r in c.rechecks or []):
        kinds.add("recheck")
    return kinds or {"mismatch"}


def _explicit(case: CaseSpec, kinds: list[str], qlens: list[int], clens: list[int], **changes: Any) -> CaseSpec:
    """The case with an explicit batch: one request group per request, in order."""
    batch = [{"kind": k, "count": 1, "query_len": q, **({"context_len": c} if k != "prefill" else {})}
             for k, q, c in zip(kinds, qlens, clens)]
    data = case.model_dump()
    data.update(batch=batch, **changes)
    return CaseSpec.model_validate(data)


def _smaller(kinds: list[str], qlens: list[int], clens: list[int], hq: int, hk: int):
    """Candidate smaller batches, most aggressive first: (what, kinds, qlens, clens, hq, hk)."""
    n = len(kinds)
    if n > 1:
        half = n // 2
        yield f"first {half} of {n} requests", kinds[:half], qlens[:half], clens[:half], hq, hk
        yield f"last {n - half} of {n} requests", kinds[half:], qlens[half:], clens[half:], hq, hk
        for i in range(n):
            rest = [j for j in range(n) if j != i]
            yield f"drop request {i}", [kinds[j] for j in rest], [qlens[j] for j in rest], [clens[j] for j in rest], hq, hk
    if any(c > 1 for c in clens):
        yield "halve the contexts", kinds, qlens, [c // 2 if c > 1 else c for c in clens], hq, hk
    if any(q > 1 for q in qlens):
        yield "halve the query lengths", kinds, [max(1, q // 2) for q in qlens], clens, hq, hk
    if hk > 1 and hk % 2 == 0:
        yield f"heads {hq}/{hk} -> {hq // 2}/{hk // 2}", kinds, qlens, clens, hq // 2, hk // 2
    if hq > hk:
        g = hq // hk
        if g % 2 == 0:
            yield f"GQA group {g} -> {g // 2}", kinds, qlens, clens, hq // 2, hk


def shrink(case: CaseSpec, run: Callable[[CaseSpec], ResultRow], log: Callable[[str], None],
           max_attempts: int = MAX_SHRINK_ATTEMPTS) -> tuple[CaseSpec, ResultRow]:
    """The smallest version of ``case`` found (greedy, at most ``max_attempts`` runs) whose
    row from ``run`` still fails with one of the original failure kinds."""
    first = run(case)
    want = failure_kinds(first)
    if first.status == Status.PASS or not want:
        raise ReproError(f"case {case.name!r} does not fail when re-run here (status {first.status}); "
                         "nothing to shrink (drop --shrink to write the script of the row as it is)")
    log(f"original: {case.num_requests} requests, heads {case.num_heads}/{case.num_kv_heads}: "
        f"{first.status} ({', '.join(sorted(want))})")
    if case.shared_prefix is not None:
        log("not shrunk: the case has a shared prefix")
        return case, first
    kinds, qlens, clens = draw_lengths(case)
    best, best_row = case, first
    hq, hk = case.num_heads, case.num_kv_heads
    attempts = 0
    tried: set[tuple] = set()
    progress = True
    while progress and attempts < max_attempts:
        progress = False
        for what, k2, q2, c2, hq2, hk2 in _smaller(kinds, qlens, clens, hq, hk):
            key = (tuple(k2), tuple(q2), tuple(c2), hq2, hk2)
            if key in tried:  # passed (or differed) before: the same batch cannot fail now
                continue
            tried.add(key)
            if attempts >= max_attempts:
                break
            attempts += 1
            try:
                cand = _explicit(case, k2, q2, c2, num_heads=hq2, num_kv_heads=hk2)
            except ValueError:
                continue
            row = run(cand)
            kept = row.status == first.status and bool(failure_kinds(row) & want)
            log(f"  try {what}: {row.status}" + (" -> still fails, keep" if kept else " -> passes or differs, undo"))
            if kept:
                kinds, qlens, clens, hq, hk = k2, q2, c2, hq2, hk2
                best, best_row = cand, row
                progress = True
                break
    log(f"smallest failing: {len(kinds)} requests, query lens {qlens}, contexts {clens}, heads {hq}/{hk} "
        f"({attempts} attempts)")
    return best, best_row


def cell_runner(backend: type[AttentionBackend], variant: dict[str, Any], device: torch.device,
                row: ResultRow) -> Callable[[CaseSpec], ResultRow]:
    """Runs one case through the harness's own cell path (generate, reference, prepare,
    forward, check; no timing) and returns its row."""
    from harness.cell.prepare import CaseContext
    from harness.plan.cells import Cell, RunOptions
    from harness.cell.run import run_cell
    from harness.spec import Suite

    def run(case: CaseSpec) -> ResultRow:
        suite = Suite.model_validate({"suite": row.suite or "repro", "cases": [case.model_dump()]})
        opts = RunOptions(device=device, time=False, check=True, roofline=False, suite_path="repro")
        return run_cell(Cell(case, backend, variant), CaseContext(case, device, True), suite, opts)

    return run
