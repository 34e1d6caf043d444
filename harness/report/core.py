"""The report's frame: section registry, what a section returns, and loading rows into pandas.

A section is a function ``fn(rows: pd.DataFrame) -> list[Block]`` registered with
``@section(...)``. It reads columns only (the JSON keys of a result row flattened with dots,
``timing.median_us``, ``config.block_size``, ... plus the derived columns listed in
``DERIVED``) and returns blocks the template renders: text, tables (DataFrames) and matplotlib
figures. An empty list means "no data in these results" and the page says what the section
looked for. Run headers (run.json) travel in ``rows.attrs["runs"]``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import pandas as pd

from attn_contract.status import FAILED, Status
from harness.records.results import read_header, read_rows, rows_frame

# ---------------------------------------------------------------- what a section returns


@dataclass
class Text:
    """A paragraph (escaped); ``cls``: note, ok, warn, lead."""

    text: str
    cls: str = "note"
    kind: str = "text"


@dataclass
class Heading:
    text: str
    anchor: str = ""
    kind: str = "heading"


@dataclass
class Table:
    """A DataFrame shown as an HTML table. ``classes`` / ``tips`` (same shape as ``data``, or
    None) give each cell CSS classes and a hover text; ``wrap`` names columns of long prose
    that may wrap (every other column keeps its text on one line)."""

    data: pd.DataFrame
    title: str = ""
    note: str = ""
    classes: pd.DataFrame | None = None
    tips: pd.DataFrame | None = None
    wrap: tuple[str, ...] = ()
    cls: str = "data"
    sortable: bool = True
    kind: str = "table"


@dataclass
class Figure:
    """A matplotlib figure; rendered to an embedded SVG and closed by the page builder."""

    fig: Any
    alt: str
    caption: str = ""
    kind: str = "figure"
    uri: str = ""


Block = Text | Heading | Table | Figure


# ---------------------------------------------------------------- registry


@dataclass(frozen=True)
class SectionSpec:
    id: str
    title: str
    order: int
    looked_for: str
    collapsed: bool
    fn: Callable[..., list[Block]]
    cost: int = 1
    parts: int = 1  # >1: fn(df, part=(i, parts)) gives the i-th share of the blocks (built apart, joined in order)


REGISTRY: dict[str, SectionSpec] = {}


def section(id: str, title: str, *, order: int, looked_for: str, collapsed: bool = False, cost: int = 1,
            parts: int = 1) -> Callable[[Callable[..., list[Block]]], Callable[..., list[Block]]]:
    """Register a report section. ``order`` places it on the page (lower first; the answer
    sections use < 100, details 100..899, run headers 900+); ``looked_for`` is said on the page
    when the section finds nothing; ``collapsed`` renders it inside a closed <details>;
    ``cost``: a rough weight (1 = tables only, 5+ = several figures): the page builder starts
    costly sections first so its worker processes finish together. ``parts``: the section is
    built in that many pieces, ``fn(df, part=(i, parts))`` each, which the workers build apart
    (a section much longer than the others would otherwise set the page's time alone); the
    page joins them in order, so it is the same for any number of workers."""

    def deco(fn: Callable[..., list[Block]]) -> Callable[..., list[Block]]:
        if id in REGISTRY and REGISTRY[id].fn.__qualname__ != fn.__qualname__:
            raise ValueError(f"report section id {id!r} registered twice")
        REGISTRY[id] = SectionSpec(id, title, order, looked_for, collapsed, fn, cost, parts)
        return fn

    return deco


def registered() -> list[SectionSpec]:
    """Every registered section in page order (importing harness.report.sections registers them)."""
    import importlib

    importlib.import_module("harness.report.sections")

    return sorted(REGISTRY.values(), key=lambda s: (s.order, s.id))


# ---------------------------------------------------------------- loading


@dataclass
class Loaded:
    rows: list[Any]
    headers: list[dict[str, Any]]
    sources: list[str]
    run_of_row: list[int] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # shown at the top of the page and by `harness report`


def load(paths: Iterable[str | Path]) -> Loaded:
    """Rows and headers of every results folder or .jsonl file, in order. The headers' backend
    facts go to harness.analysis.engines, which the engine sections read (records, not classes)."""
    from harness.analysis.engines import use_headers

    rows: list[Any] = []
    headers: list[dict[str, Any]] = []
    sources: list[str] = []
    run_of_row: list[int] = []
    warnings: list[str] = []
    for i, p in enumerate(paths):
        p = Path(p)
        got = read_rows(p)  # FileNotFoundError names a missing path or an empty folder
        last = {r.key: r for r in got}  # a row key twice (a file appended to twice): the last, as compare does
        if len(last) < len(got):
            warnings.append(f"{p}: {len(got) - len(last)} duplicate row(s) (same suite/case/backend/variant); "
                            "the last of each is used, so no count is doubled")
            got = list(last.values())
        rows.extend(got)
        run_of_row.extend([i] * len(got))
        headers.append(read_header(p))
        sources.append(str(p))
    use_headers((f"{s} (run.json)", h) for s, h in zip(sources, headers))
    return Loaded(rows, headers, sources, run_of_row, warnings)


DERIVED = {
    "run": "index of the source (results folder) the row came from",
    "label": "backend plus its variant label: the identity of one colour in every plot",
    "short": "label for display: variant axes that never vary for that backend dropped",
    "passed": "status is pass (the check passed)",
    "failed": "status is mismatch, error or timeout",
    "median": "timing.median_us", "ci_lo": "timing.ci_low_us", "ci_hi": "timing.ci_high_us",
    "n_req": "batch.num_reqs", "ctx_mean": "batch.mean_seq_len", "ctx_max": "batch.max_seq_len",
    "q_tokens": "batch.num_tokens", "block_size": "config.block_size",
    "shape": "model shape: heads / KV heads / head size / dtype / KV dtype / page size (+ layout, features)",
    "kind": "workload kind from batch.num_decode/num_extend/num_prefill and batch.prefix_groups",
    "group": "shape + kind: the unit the verdict is given for",
    "case_group": "the row's case_group; for older rows the case name without its sweep labels (display only)",
    "case_id": "short id of the case: case group and its index there",
    "workload": "batch 64 · ctx 3.1k: batch size and mean context, for axis labels",
    "bytes_eff": "metrics.bytes with a shared prefix counted once per group (what DRAM must deliver)",
}
"""Columns the frame adds to the flattened row fields (sections may rely on them)."""

_FEATURES = (("config.kv_layout", "NHD", "{}"), ("config.sliding_window", None, "window {:.0f}"),
             ("config.softcap", 0.0, "softcap {:g}"), ("config.alibi", False, "alibi"),
             ("config.sinks", False, "sinks"), ("config.causal", True, "non-causal"))
_DTYPE_SHORT = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def col(df: pd.DataFrame, name: str, default: Any = None) -> pd.Series:
    """Column ``name``, or a column of ``default`` when no row has that field (old rows)."""
    if name in df.columns:
        return df[name]
    return pd.Series([default] * len(df), index=df.index, dtype="object" if default is None else None)


def num(df: pd.DataFrame, name: str) -> pd.Series:
    return pd.to_numeric(col(df, name), errors="coerce")


def value_text(v: Any) -> str:
    """A field value as text: "" when missing, 3 (not 3.0) for a whole float (pandas turns an
    int column holding NaN into floats)."""
    if not _present(v):
        return ""
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def text(s: pd.Series) -> pd.Series:
    """Values as strings, missing ones as "" (pandas' astype(str) keeps NaN in pandas 3)."""
    return s.map(value_text)


def _present(v: Any) -> bool:
    if v is None:
        return False
    if isinstance(v, float) and math.isnan(v):
        return False
    return True


def fmt_tokens(x: Any) -> str:
    """4096 -> '4.1k', 892 -> '892'."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return ""
    if not math.isfinite(v):
        return ""
    if v >= 1000:
        return f"{v / 1000:.1f}k" if v < 100_000 else f"{v / 1000:.0f}k"
    return f"{v:.0f}"


def _shape(r: dict[str, Any]) -> str:
    if not _present(r.get("config.num_heads")):
        return "unknown shape"
    dt = str(r.get("config.dtype") or "")
    s = (f"H{int(r['config.num_heads'])}/KV{int(r['config.num_kv_heads'])} D{int(r['config.head_size'])} "
         f"{_DTYPE_SHORT.get(dt, dt)}")
    kv = r.get("config.kv_cache_dtype")
    if _present(kv) and kv != "auto":
        s += f" kv {kv}"
    if _present(r.get("config.block_size")):
        s += f" · page {int(r['config.block_size'])}"
    feats = []
    for key, default, text in _FEATURES:
        v = r.get(key)
        if _present(v) and v != default:
            feats.append(text.format(v))
    return s + (" · " + ", ".join(feats) if feats else "")


def _kind(r: dict[str, Any]) -> str:
    d, e, p = (r.get(f"batch.num_{k}") for k in ("decode", "extend", "prefill"))
    if not any(_present(x) for x in (d, e, p)):
        return "workload unknown"
    parts = [name for name, n in (("decode", d), ("extend", e), ("prefill", p)) if _present(n) and n > 0]
    s = " + ".join(parts) or "empty"
    g = r.get("batch.prefix_groups")
    if _present(g) and g > 0:
        s += f", shared prefix ({int(g)} group{'s' if g > 1 else ''})"
    return s


def abbreviations(keys: list[str]) -> dict[str, str]:
    """Short names for long variant axis names (decode_tensor_cores -> dtc): the initials of
    their words, kept only where unique. Short names (fa_version) stay as they are."""
    out: dict[str, str] = {}
    for k in sorted(set(keys)):
        if len(k) > 12 and "_" in k:
            a = "".join(w[0] for w in k.split("_") if w)
            if a not in out.values() and a not in keys:
                out[k] = a
    return out


def _short_labels(df: pd.DataFrame) -> tuple[pd.Series, dict[str, str]]:
    """Backend plus only the variant axes that take more than one value for that backend, long
    axis names abbreviated; and the abbreviations used."""
    axes_cols = [c for c in df.columns if c.startswith("variant.")]
    varying: dict[str, list[str]] = {}
    for b, g in df.groupby("backend"):
        varying[b] = [c for c in axes_cols if text(g[c].dropna()).nunique() > 1]
    ab = abbreviations([c[len("variant."):] for cols in varying.values() for c in cols])

    def one(r: pd.Series) -> str:
        parts = []
        for c in varying.get(r["backend"], []):
            if _present(r[c]):
                k = c[len("variant."):]
                parts.append(f"{ab.get(k, k)}={value_text(r[c])}")
        return r["backend"] + (f" [{','.join(parts)}]" if parts else "")

    return (df.apply(one, axis=1) if len(df) else pd.Series([], dtype=object)), ab


def _effective_bytes(df: pd.DataFrame) -> pd.Series:
    """metrics.bytes minus the K/V bytes of shared-prefix tokens read again by every request of
    a group after the first: a kernel must fetch a shared prefix from DRAM once per group (a
    cascade kernel does exactly that; a plain kernel re-reads it, mostly from L2).

    The prefix length comes from ``call.prefix_lens`` of any row of the same run and case (the
    cascade backends record it; every backend of a case gets the same batch); K/V bytes per
    token from ``metrics.bytes_kv / metrics.kv_tokens_read``. Rows without a shared prefix keep
    ``metrics.bytes``; rows whose prefix length is unknown get NaN (not plotted as effective)."""
    out = num(df, "metrics.bytes").copy()
    groups = num(df, "batch.prefix_groups")
    shared = groups.fillna(0) > 0
    if not shared.any():
        return out
    plens: dict[tuple[Any, str], float] = {}
    if "call.prefix_lens" in df.columns:
        for (run, case), v in zip(zip(df["run"], df["case"]), df["call.prefix_lens"]):
            if isinstance(v, list) and v and all(isinstance(x, (int, float)) for x in v):
                plens[(run, case)] = float(max(v)) if len(set(v)) == 1 else float("nan")
    per_tok = num(df, "metrics.bytes_kv") / num(df, "metrics.kv_tokens_read")
    n_req = num(df, "batch.num_reqs")
    for i in df.index[shared]:
        p = plens.get((df.at[i, "run"], df.at[i, "case"]))
        if p is None or not math.isfinite(p):
            out.at[i] = float("nan")
            continue
        repeated = max(0.0, (n_req.at[i] - groups.at[i]) * p)
        out.at[i] = out.at[i] - repeated * per_tok.at[i]
    return out


def case_ids(cases: Iterable[str], groups: Iterable[str]) -> dict[str, str]:
    """Short case ids: the case group, numbered within it in order of appearance ("llama#3");
    a case that is its own group keeps its name. The report and the terminal both use them."""
    ids: dict[str, str] = {}
    per_group: dict[str, int] = {}
    for c, cg in zip(cases, groups):
        if c not in ids:
            per_group[cg] = per_group.get(cg, 0) + 1
            ids[c] = cg if c == cg else f"{cg}#{per_group[cg]}"
    return ids


class RowsRef(tuple):
    """The typed rows behind a frame, carried in ``attrs["rows"]`` for sections that read rows
    (recommend): pandas deep-copies attrs into every derived frame; this one is shared instead."""

    def __deepcopy__(self, memo: dict[int, Any]) -> "RowsRef":
        return self


def result_rows(df: pd.DataFrame) -> list[Any]:
    """The ``ResultRow``s of the report's frame, in its order."""
    return list(df.attrs.get("rows", ()))


class _Runs(list):
    """The run headers in ``attrs``: pandas deep-copies ``attrs`` on every derived frame, and
    the sections only read them, so a copy is the same list (the H200 report: 18 s of 60)."""

    def __deepcopy__(self, memo: dict) -> "_Runs":
        return self


class SharedDict(dict):
    """A read-only mapping in ``attrs`` (the page's colours, the label abbreviations): shared by
    every derived frame instead of deep-copied into each (the H200 report: 15k copies, 1.5 s)."""

    def __deepcopy__(self, memo: dict) -> "SharedDict":
        return self


def frame(loaded: Loaded) -> pd.DataFrame:
    """One row per result: every JSON field flattened with dots, plus the ``DERIVED`` columns.
    Run headers and sources go in ``attrs`` (``runs``: list of (source, header, row count))."""
    runs = _Runs((s, h, sum(1 for r in loaded.run_of_row if r == i))
                 for i, (s, h) in enumerate(zip(loaded.sources, loaded.headers)))
    if not loaded.rows:
        df = pd.DataFrame({c: pd.Series([], dtype=object) for c in
                           ["suite", "case", "backend", "status", "variant_label", "reason", "reproducer", *DERIVED]})
        df.attrs["runs"] = runs
        df.attrs["rows"] = RowsRef(loaded.rows)
        return df
    df = rows_frame(loaded.rows).reset_index(drop=True)
    df.attrs.pop("case_legend", None)  # the report numbers cases per case group (case_id below)
    for c in ("suite", "case", "backend", "status", "variant_label", "reason", "reproducer"):
        if c not in df.columns:
            df[c] = ""
    df["variant_label"] = df["variant_label"].fillna("")
    df["run"] = loaded.run_of_row if loaded.run_of_row else [0] * len(df)
    df["label"] = [b + (f" [{v}]" if v else "") for b, v in zip(df["backend"], df["variant_label"])]
    df["short"], abbreviated = _short_labels(df)
    df.attrs["abbreviations"] = SharedDict(abbreviated)
    df["passed"] = df["status"] == Status.PASS.value
    df["failed"] = df["status"].isin([s.value for s in FAILED])
    df["median"], df["ci_lo"], df["ci_hi"] = (num(df, f"timing.{k}") for k in ("median_us", "ci_low_us", "ci_high_us"))
    df["n_req"], df["ctx_mean"], df["ctx_max"], df["q_tokens"] = (
        num(df, f"batch.{k}") for k in ("num_reqs", "mean_seq_len", "max_seq_len", "num_tokens"))
    df["block_size"] = num(df, "config.block_size")
    recs2 = df.to_dict("records")
    df["shape"] = [_shape(r) for r in recs2]
    df["kind"] = [_kind(r) for r in recs2]
    # The row's case_group (the suite case it was expanded from); rows written before that field
    # existed show the case name up to its sweep labels, for display only.
    given = text(col(df, "case_group"))
    df["case_group"] = [g if g else str(c).split("[", 1)[0] for g, c in zip(given, df["case"])]
    # Rows of a case that never got a batch (not run) borrow its shape and kind from a row that did.
    known = {c: k for c, k in zip(df["case"], df["kind"]) if k != "workload unknown"}
    df["kind"] = [known.get(c, k) for c, k in zip(df["case"], df["kind"])]
    df["group"] = df["kind"] + " · " + df["shape"]
    df["case_id"] = df["case"].map(case_ids(df["case"], df["case_group"]))
    df["workload"] = [f"b{n:.0f} · ctx {fmt_tokens(c)}" if _present(n) and _present(c) else ""
                      for n, c in zip(df["n_req"], df["ctx_mean"])]
    df["bytes_eff"] = _effective_bytes(df)
    df.attrs["runs"] = runs
    df.attrs["rows"] = RowsRef(loaded.rows)
    return df


def group_title(g: pd.DataFrame) -> str:
    """'llama3-8b: decode · H32/KV8 D128 bf16 · page 16' (the case groups that make up a group)."""
    names = list(dict.fromkeys(g["case_group"]))
    shown = ", ".join(names[:3]) + (f" +{len(names) - 3} more" if len(names) > 3 else "")
    return f"{shown}: {g['group'].iloc[0]}"


def timed(df: pd.DataFrame) -> pd.DataFrame:
    """Rows that passed the check and carry a median: the only rows speed is judged on."""
    return df[df["passed"] & df["median"].notna()] if len(df) else df


def merged_cells(t: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """One timing per ``keys`` + label. Several runs of the same cell merge conservatively: the
    median of their medians and the envelope of their confidence intervals."""
    if t.empty:
        return t.assign(runs=[])
    g = t.groupby([*keys, "label"], sort=False, dropna=False)
    out = g.agg(median=("median", "median"), ci_lo=("ci_lo", "min"), ci_hi=("ci_hi", "max"),
                short=("short", "first"), backend=("backend", "first"), runs=("median", "size"))
    return out.reset_index()
