"""One self-contained HTML page from one or more results folders / .jsonl files.

Every plot is a base64 PNG inside the page and the page loads nothing from the network, so the
file can be mailed, attached to a CI run or opened offline. Each section is always present:
when the results hold nothing for it, it says so and names what it looked for.

Fields are read defensively (``_get``): timing and metrics fields are still being extended, and
older result files must keep rendering.
"""

from __future__ import annotations

import base64
import html
import io
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from harness.results import STATUSES, ResultRow, read_header, read_rows

SECTIONS: tuple[tuple[str, str], ...] = (
    ("run-header", "Runs"),
    ("correctness", "Correctness matrix"),
    ("problems", "Failures, skips and their reasons"),
    ("latency", "Latency"),
    ("latency-context", "Latency against context length"),
    ("latency-batch", "Latency against batch size"),
    ("page-size", "Page-size sweep"),
    ("fa-versions", "FlashAttention versions"),
    ("roofline", "Roofline"),
    ("cascade", "Cascade against plain"),
)
"""Section ids (stable: the browser test and links rely on them) and titles, in page order."""

STATUS_COLORS = {"pass": "#2e7d32", "mismatch": "#c62828", "error": "#b71c1c", "timeout": "#6a1b9a",
                 "unsupported": "#f9a825", "skipped": "#9e9e9e"}
RAN = ("pass", "mismatch", "error", "timeout")
MAX_FACETS = 12  # more small plots than this stop being readable; the rest are counted, not drawn
CASCADE_SUFFIX = "-cascade"


def _get(d: Any, *path: str) -> Any:
    """``d[path[0]][path[1]]...`` or None, whatever is missing or of the wrong type."""
    for p in path:
        if not isinstance(d, dict):
            return None
        d = d.get(p)
    return d


def _num(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


# ---------------------------------------------------------------- loading
@dataclass
class Loaded:
    rows: list[ResultRow]
    headers: list[dict[str, Any]]
    sources: list[str]
    run_of_row: list[int] = field(default_factory=list)


def load(paths: Iterable[str | Path]) -> Loaded:
    """Rows and headers of every results folder or .jsonl file, in order."""
    rows: list[ResultRow] = []
    headers: list[dict[str, Any]] = []
    sources: list[str] = []
    run_of_row: list[int] = []
    for i, p in enumerate(paths):
        p = Path(p)
        if not p.exists():
            raise FileNotFoundError(f"{p}: no such results folder or file")
        if p.is_dir() and not (p / "results.jsonl").exists():
            raise FileNotFoundError(f"{p}: folder holds no results.jsonl")
        got = read_rows(p)
        rows.extend(got)
        run_of_row.extend([i] * len(got))
        headers.append(read_header(p))
        sources.append(str(p))
    return Loaded(rows, headers, sources, run_of_row)


def frame(loaded: Loaded) -> pd.DataFrame:
    """One flat row per result with the fields the report uses (None where absent)."""
    recs = []
    for r, run in zip(loaded.rows, loaded.run_of_row or [0] * len(loaded.rows)):
        t, m, c, b, cfg = r.timing or {}, r.metrics or {}, r.check or {}, r.batch or {}, r.config or {}
        flops, nbytes = _num(m.get("flops")), _num(m.get("bytes"))
        med = _num(t.get("median_us"))
        tflops = _num(m.get("tflops"))
        if tflops is None and flops and med:
            tflops = flops / (med * 1e-6) / 1e12
        label = f"{r.backend} [{r.variant_label}]" if r.variant_label else r.backend
        recs.append({
            "run": run, "suite": r.suite, "case": r.case, "backend": r.backend, "variant": r.variant_label,
            "label": label, "status": r.status, "reason": r.reason, "reproducer": r.reproducer,
            "median_us": med, "ci_low_us": _num(t.get("ci_low_us")), "ci_high_us": _num(t.get("ci_high_us")),
            "stdev_us": _num(t.get("stdev_us")), "samples": t.get("samples"), "timing_method": t.get("method"),
            "flops": flops, "bytes": nbytes, "tflops": tflops, "tbps": _num(m.get("tbps")),
            "intensity": (flops / nbytes) if flops and nbytes else None,
            "pct_peak_flops": _num(_get(m, "roofline", "pct_of_flops")),
            "pct_peak_bw": _num(_get(m, "roofline", "pct_of_bw")),
            "pct_ceiling": _num(_get(m, "roofline", "pct_of_ceiling")),
            "bound": _get(m, "roofline", "bound"),
            "max_abs_err": _num(c.get("max_abs_err")),
            "num_reqs": _num(b.get("num_reqs")), "mean_seq_len": _num(b.get("mean_seq_len")),
            "max_seq_len": _num(b.get("max_seq_len")), "num_tokens": _num(b.get("num_tokens")),
            "block_size": _num(cfg.get("block_size")),
            "fa_version": (r.variant or {}).get("fa_version"),
            "shape": _shape_label(cfg),
            "config_key": _config_key(cfg, b),
        })
    cols = ["run", "suite", "case", "backend", "variant", "label", "status", "reason", "median_us"]
    return pd.DataFrame.from_records(recs) if recs else pd.DataFrame(columns=cols)


def _shape_label(cfg: dict[str, Any]) -> str:
    """The layer shape a latency is comparable within (heads, head size, dtypes)."""
    if not cfg:
        return "?"
    kv = cfg.get("kv_cache_dtype", "auto")
    s = f"H{cfg.get('num_heads')}/KV{cfg.get('num_kv_heads')} D{cfg.get('head_size')} {cfg.get('dtype', '')}"
    return s + (f" kv={kv}" if kv not in (None, "auto") else "")


def _config_key(cfg: dict[str, Any], batch: dict[str, Any]) -> str:
    """Identity of a workload apart from its page size: the rows of a page-size sweep share it."""
    keep = {k: v for k, v in sorted(cfg.items()) if k not in ("block_size", "tags", "name")}
    sig = {k: batch.get(k) for k in ("num_reqs", "num_tokens", "total_kv_tokens", "max_seq_len")}
    return repr((keep, sig))


# ---------------------------------------------------------------- plotting helpers
def _png(fig: Any) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=96, bbox_inches="tight")
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # no display; must precede pyplot's first use
    import matplotlib.pyplot as plt

    return plt


def _colors(labels: list[str]) -> dict[str, Any]:
    plt = _plt()
    cmap = plt.get_cmap("tab10" if len(labels) <= 10 else "tab20")
    return {lab: cmap(i % cmap.N) for i, lab in enumerate(sorted(labels))}


def _facet_grid(n: int) -> tuple[Any, list[Any]]:
    plt = _plt()
    cols = min(3, n)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.8 * rows), squeeze=False)
    flat = [a for row in axes for a in row]
    for a in flat[n:]:
        a.set_visible(False)
    return fig, flat[:n]


def _ctx_bucket(x: float | None) -> str:
    if not x:
        return "?"
    p = 2 ** round(math.log2(x))
    return f"~{p // 1024}k" if p >= 1024 else f"~{p}"


def _fmt(x: Any, spec: str = ".1f") -> str:
    v = _num(x)
    return "" if v is None else format(v, spec)


def _table(df: pd.DataFrame, cls: str = "data") -> str:
    """A sortable HTML table (values escaped)."""
    if df.empty:
        return ""
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in df.columns)
    body = []
    for _, r in df.iterrows():
        cells = []
        for v in r.values:
            s = "" if v is None or (isinstance(v, float) and not math.isfinite(v)) else str(v)
            cells.append(f"<td>{html.escape(s)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f'<table class="{cls} sortable"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


# ---------------------------------------------------------------- sections
@dataclass
class Section:
    id: str
    title: str
    looked_for: str
    html: str = ""  # empty: "no data in these results"
    images: list[tuple[str, str]] = field(default_factory=list)  # (alt, data URI)
    note: str = ""

    @property
    def has_data(self) -> bool:
        return bool(self.html.strip() or self.images)


def _timed(df: pd.DataFrame) -> pd.DataFrame:
    if df.empty or "median_us" not in df:
        return df.iloc[0:0]
    return df[df["median_us"].notna() & df["status"].isin(RAN)]


def section_header(loaded: Loaded) -> Section:
    s = Section("run-header", "Runs", "run.json headers next to the results")
    parts = []
    for i, (src, h) in enumerate(zip(loaded.sources, loaded.headers)):
        dev = h.get("device") or {}
        items = [
            ("source", src), ("suite", h.get("suite")), ("time (UTC)", h.get("time_utc")),
            ("command", h.get("command")), ("git", h.get("git_sha")),
            ("device", ", ".join(f"{k}={v}" for k, v in dev.items() if v is not None) if isinstance(dev, dict) else dev),
            ("torch", h.get("torch")), ("python", h.get("python")), ("platform", h.get("platform")),
        ]
        bk = h.get("backends") or {}
        for name, info in sorted(bk.items()) if isinstance(bk, dict) else []:
            if isinstance(info, dict):
                vers = ", ".join(f"{k} {v}" for k, v in info.items() if k not in ("available", "reason"))
                avail = "available" if info.get("available") else f"unavailable: {info.get('reason', '')}"
                items.append((f"backend {name}", f"{avail}{'; ' + vers if vers else ''}"))
        n = sum(1 for r in loaded.run_of_row if r == i)
        items.append(("rows", str(n)))
        dl = "".join(f"<dt>{html.escape(str(k))}</dt><dd>{html.escape(str(v))}</dd>" for k, v in items if v not in (None, ""))
        missing = "" if h else '<p class="note">no run.json next to these results: environment unknown</p>'
        parts.append(f'<div class="run"><h3>Run {i + 1}</h3>{missing}<dl>{dl}</dl></div>')
    s.html = "".join(parts)
    return s


def section_correctness(df: pd.DataFrame) -> Section:
    s = Section("correctness", "Correctness matrix", "result rows (any status)")
    if df.empty:
        return s
    labels = sorted(df["label"].unique())
    cases = list(dict.fromkeys(df["case"]))
    cell: dict[tuple[str, str], list[dict]] = {}
    for rec in df.to_dict("records"):
        cell.setdefault((rec["case"], rec["label"]), []).append(rec)
    head = "<th>case</th>" + "".join(f"<th>{html.escape(lab)}</th>" for lab in labels)
    body = []
    for c in cases:
        tds = [f'<th class="case">{html.escape(c)}</th>']
        for lab in labels:
            recs = cell.get((c, lab), [])
            if not recs:
                tds.append('<td class="st-none">-</td>')
                continue
            st = [r["status"] for r in recs]
            worst = min(st, key=lambda x: _STATUS_RANK.get(x, 9))
            tip = "; ".join(
                f"{r['status']}" + (f": {r['reason']}" if r["reason"] else "")
                + (f" (max abs err {r['max_abs_err']:.2e})" if r.get("max_abs_err") is not None else "")
                for r in recs)
            text = worst if len(recs) == 1 else f"{worst} ({len(recs)} runs)"
            tds.append(f'<td class="st st-{worst}" title="{html.escape(tip, quote=True)}">{html.escape(text)}</td>')
        body.append("<tr>" + "".join(tds) + "</tr>")
    counts = df["status"].value_counts()
    legend = " ".join(f'<span class="st st-{k}">{k}: {int(counts.get(k, 0))}</span>' for k in STATUSES)
    s.html = (f'<p class="legend">{legend}</p><p class="note">Hover a cell for its error, mismatch or skip reason.</p>'
              f'<div class="scroll"><table class="matrix"><thead><tr>{head}</tr></thead>'
              f'<tbody>{"".join(body)}</tbody></table></div>')
    return s


_STATUS_RANK = {"mismatch": 0, "error": 1, "timeout": 2, "unsupported": 3, "skipped": 4, "pass": 5}


def section_problems(df: pd.DataFrame) -> Section:
    s = Section("problems", "Failures, skips and their reasons", "rows whose status is not pass")
    if df.empty:
        return s
    bad = df[df["status"] != "pass"]
    if bad.empty:
        s.html = '<p class="ok">Every cell passed.</p>'
        return s
    failing = bad[bad["status"].isin(("mismatch", "error", "timeout"))]
    parts = []
    if not failing.empty:
        t = failing[["case", "label", "status", "reason", "max_abs_err", "reproducer"]].rename(
            columns={"label": "backend [variant]", "max_abs_err": "max abs err"})
        parts.append("<h3>Failures</h3>" + _table(t))
    notrun = bad[bad["status"].isin(("unsupported", "skipped"))]
    if not notrun.empty:
        g = (notrun.groupby(["status", "label", "reason"], dropna=False).size().reset_index(name="cells")
             .sort_values(["status", "label"]))
        parts.append("<h3>Not run</h3>" + _table(g.rename(columns={"label": "backend [variant]"})))
    s.html = "".join(parts)
    return s


def section_latency(df: pd.DataFrame) -> Section:
    s = Section("latency", "Latency", "rows with timing.median_us")
    t = _timed(df)
    if t.empty:
        return s
    pv = t.assign(v=t.apply(lambda r: _fmt(r["median_us"]) + (
        f" [{_fmt(r['ci_low_us'])}-{_fmt(r['ci_high_us'])}]" if r["ci_low_us"] is not None and pd.notna(r["ci_low_us"]) else ""), axis=1))
    pivot = pv.pivot_table(index="case", columns="label", values="v", aggfunc="first", sort=False).reset_index()
    pivot.columns.name = None
    detail = t[["case", "label", "median_us", "ci_low_us", "ci_high_us", "samples", "tflops", "tbps",
                "bound", "pct_ceiling", "pct_peak_flops", "pct_peak_bw", "num_reqs", "mean_seq_len", "block_size"]].copy()
    detail["bound"] = detail["bound"].map(lambda x: x if isinstance(x, str) else "")
    for col, spec in (("median_us", ".2f"), ("ci_low_us", ".2f"), ("ci_high_us", ".2f"), ("tflops", ".4g"),
                      ("tbps", ".4g"), ("pct_ceiling", ".1f"), ("pct_peak_flops", ".1f"), ("pct_peak_bw", ".1f"),
                      ("mean_seq_len", ".0f"),
                      ("num_reqs", ".0f"), ("block_size", ".0f")):
        detail[col] = detail[col].map(lambda x, sp=spec: _fmt(x, sp))
    detail = detail.loc[:, [c for c in detail.columns if (detail[c].astype(str) != "").any()]]
    detail = detail.rename(columns={"pct_ceiling": "% of bounding ceiling", "pct_peak_flops": "% of FLOP ceiling",
                                    "pct_peak_bw": "% of bandwidth ceiling"})
    methods = sorted({m for m in t["timing_method"].dropna().unique()})
    s.note = f"Median of the timed samples, us, with the ~95% confidence interval of the median. Timer: {', '.join(methods) or 'unknown'}."
    s.html = ("<h3>Median latency (us) [95% CI]</h3>" + _table(pivot) + "<h3>All timed cells</h3>"
              + _table(detail.rename(columns={"label": "backend [variant]"})))
    return s


def _facet_lines(t: pd.DataFrame, facet_col: str, x: str, series_cols: list[str], xlabel: str,
                 title_fmt: str, logx: bool) -> tuple[list[tuple[str, str]], str]:
    """Small multiples: one axis per facet, one line per (label, extra series key)."""
    facets = [f for f, g in t.groupby(facet_col, sort=True) if g[x].nunique() >= 2]
    if not facets:
        return [], ""
    shown, hidden = facets[:MAX_FACETS], len(facets) - MAX_FACETS
    colors = _colors(list(t["label"].unique()))
    fig, axes = _facet_grid(len(shown))
    markers = "osD^v<>ph*"
    for ax, f in zip(axes, shown):
        g = t[t[facet_col] == f]
        extra_vals = sorted(g[series_cols[1]].unique(), key=str) if len(series_cols) > 1 else [None]
        for (lab, *rest), sg in g.groupby(series_cols, sort=True):
            sg = sg.sort_values(x)
            mk = markers[extra_vals.index(rest[0]) % len(markers)] if rest else "o"
            name = lab + (f" @ {rest[0]}" if rest else "")
            ax.plot(sg[x], sg["median_us"], marker=mk, color=colors[lab], label=name, linewidth=1.2)
            lo, hi = sg["ci_low_us"], sg["ci_high_us"]
            if lo.notna().all() and hi.notna().all():
                ax.fill_between(sg[x], lo, hi, color=colors[lab], alpha=0.12, linewidth=0)
        if logx:
            ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("median latency (us)")
        ax.set_title(title_fmt.format(f), fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6.5)
    note = f"{hidden} more groups not drawn (see the latency table)." if hidden > 0 else ""
    return [(f"latency against {xlabel}", _png(fig))], note


def _block_label(t: pd.DataFrame) -> pd.Series:
    return t["block_size"].map(lambda b: f" block {b:.0f}" if _num(b) else "")


def section_latency_context(df: pd.DataFrame) -> Section:
    s = Section("latency-context", "Latency against context length",
                "timed rows of one layer shape and batch size at two or more mean context lengths (batch.mean_seq_len)")
    t = _timed(df)
    if t.empty:
        return s
    t = t[t["mean_seq_len"].notna() & t["num_reqs"].notna()].copy()
    if t.empty:
        return s
    t["facet"] = t["shape"] + _block_label(t) + " | batch " + t["num_reqs"].map(lambda v: f"{v:.0f}")
    imgs, note = _facet_lines(t, "facet", "mean_seq_len", ["label"], "mean context length (tokens)", "{}", True)
    if imgs:
        s.images, s.note = imgs, ("One panel per layer shape and batch size; shaded: 95% CI of the median. " + note).strip()
    return s


def section_latency_batch(df: pd.DataFrame) -> Section:
    s = Section("latency-batch", "Latency against batch size",
                "timed rows of one layer shape at two or more batch sizes (batch.num_reqs)")
    t = _timed(df)
    if t.empty:
        return s
    t = t[t["mean_seq_len"].notna() & t["num_reqs"].notna()].copy()
    if t.empty:
        return s
    t["ctx"] = t["mean_seq_len"].map(_ctx_bucket)
    t["facet"] = t["shape"] + _block_label(t)
    imgs, note = _facet_lines(t, "facet", "num_reqs", ["label", "ctx"], "batch size (requests)", "{}", True)
    if imgs:
        s.images = imgs
        s.note = ("One panel per layer shape; one line per backend and context bucket (mean context length rounded "
                  "to a power of two, marker shape). " + note).strip()
    return s


def section_page_size(df: pd.DataFrame) -> Section:
    s = Section("page-size", "Page-size sweep",
                "timed rows of one workload (same layer and batch) at two or more config.block_size values")
    t = _timed(df)
    if t.empty:
        return s
    t = t[t["block_size"].notna()]
    keys = [k for k, g in t.groupby("config_key", sort=False) if g["block_size"].nunique() >= 2]
    if not keys:
        return s
    t = t[t["config_key"].isin(keys)].copy()
    # Name each sweep by its first case with the block_size label dropped (cases differ only in it).
    names = {}
    for k in keys:
        c = re.sub(r"block_size=\d+,?", "", t[t["config_key"] == k]["case"].iloc[0]).replace(",]", "]").replace("[]", "")
        names[k] = f"{c} ({t[t['config_key'] == k]['shape'].iloc[0]})"
    t["sweep"] = t["config_key"].map(names)
    imgs, note = _facet_lines(t, "sweep", "block_size", ["label"], "page size (tokens per block)", "{}", True)
    pv = t.pivot_table(index=["sweep", "label"], columns="block_size", values="median_us", aggfunc="median").reset_index()
    pv.columns = [f"block {int(c)} (us)" if isinstance(c, float) else c for c in pv.columns]
    for c in pv.columns[2:]:
        pv[c] = pv[c].map(lambda x: _fmt(x, ".2f"))
    s.images, s.note = imgs, ("Every backend and variant on the same axes per workload. " + note).strip()
    s.html = _table(pv.rename(columns={"label": "backend [variant]"}))
    return s


def _fa_name(v: Any) -> str:
    n = _num(v)  # pandas turns a column holding NaN into floats: 3 -> 3.0
    return f"FA{int(n)}" if n is not None and n.is_integer() else f"FA{v}"


def section_fa_versions(df: pd.DataFrame) -> Section:
    s = Section("fa-versions", "FlashAttention versions",
                "timed rows whose variant has fa_version (flash-attn FA2 / FA3 / FA4)")
    t = _timed(df)
    if t.empty or "fa_version" not in t:
        return s
    t = t[t["fa_version"].notna()].copy()
    if t.empty:
        return s
    t["fa"] = t["fa_version"].map(_fa_name)
    t["other"] = t["variant"].map(lambda v: ",".join(p for p in str(v).split(",") if not p.startswith("fa_version=")))
    t["row"] = t["case"] + t["other"].map(lambda o: f" [{o}]" if o else "")
    pv = t.pivot_table(index="row", columns="fa", values="median_us", aggfunc="median", sort=False)
    versions = sorted(pv.columns, key=lambda c: str(c))
    base = versions[0]
    out = pv.reset_index().rename(columns={"row": "case [other variant axes]"})
    for v in versions:
        if v != base:
            out[f"{base}/{v} speedup"] = (pv[base] / pv[v]).map(lambda x: _fmt(x, ".2f")).values
        out[v] = pv[v].map(lambda x: _fmt(x, ".2f")).values
    out.columns = [f"{c} (us)" if c in versions else c for c in out.columns]
    plt = _plt()
    n = len(pv)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.5 * n * len(versions)), 4.0))
    width = 0.8 / len(versions)
    colors = _colors(versions)
    for i, v in enumerate(versions):
        ax.bar([j + i * width for j in range(n)], pv[v].values, width, label=v, color=colors[v])
    ax.set_xticks([j + 0.4 - width / 2 for j in range(n)])
    ax.set_xticklabels([str(x)[:40] for x in pv.index], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("median latency (us)")
    ax.set_yscale("log")
    ax.legend()
    ax.grid(True, axis="y", alpha=0.3)
    s.images = [("FA versions per case", _png(fig))]
    s.html = _table(out)
    return s


def ceilings(headers: list[dict[str, Any]]) -> tuple[float | None, float | None, str]:
    """Device ceilings (peak TFLOP/s, peak TB/s) from the run headers, and where they came from.

    Looked for: header ``ceilings`` or ``device.ceilings`` (keys ``peak_tflops``/``peak_tbps`` or
    ``tflops``/``tbps``), then ``device.peak_tflops``/``device.peak_tbps``. Ceilings measured on
    the device belong there; none is hard-coded here.
    """
    for h in headers:
        for where, d in (("run header: ceilings", h.get("ceilings")),
                         ("run header: device.ceilings", _get(h, "device", "ceilings")),
                         ("run header: device", h.get("device"))):
            if not isinstance(d, dict):
                continue
            f = _num(d.get("peak_tflops", d.get("tflops") if where != "run header: device" else None))
            b = _num(d.get("peak_tbps", d.get("tbps") if where != "run header: device" else None))
            if f or b:
                return f, b, where
    return None, None, ""


def _row_ceilings(loaded: Loaded) -> tuple[float | None, float | None]:
    """The ceilings harness.roofline attached to rows (metrics.roofline.ceiling_tflops/_tbps)."""
    fs, bs = [], []
    for r in loaded.rows:
        roof = _get(r.metrics, "roofline") or {}
        f, b = _num(roof.get("ceiling_tflops")), _num(roof.get("ceiling_tbps"))
        if f:
            fs.append(f)
        if b:
            bs.append(b)
    return (max(fs) if fs else None), (max(bs) if bs else None)


def section_roofline(df: pd.DataFrame, loaded: Loaded) -> Section:
    s = Section("roofline", "Roofline",
                "timed rows with metrics.flops and metrics.bytes (achieved TFLOP/s against FLOP/byte)")
    t = _timed(df)
    if t.empty:
        return s
    t = t[t["intensity"].notna() & t["tflops"].notna() & (t["tflops"] > 0)]
    if t.empty:
        return s
    peak_f, peak_b, src = ceilings(loaded.headers)
    if not (peak_f or peak_b):
        peak_f, peak_b = _row_ceilings(loaded)
        src = "measured device ceilings (metrics.roofline)" if (peak_f or peak_b) else ""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 5.0))
    colors = _colors(list(t["label"].unique()))
    for lab, g in t.groupby("label"):
        ax.scatter(g["intensity"], g["tflops"], color=colors[lab], label=lab, s=22, alpha=0.85)
    ax.set_xscale("log")
    ax.set_yscale("log")
    lo, hi = t["intensity"].min() / 2, t["intensity"].max() * 2
    if peak_b:
        xs = [lo, hi]
        ys = [peak_b * x for x in xs]
        if peak_f:
            knee = peak_f / peak_b
            xs, ys = [lo, knee, max(hi, knee * 2)], [peak_b * lo, peak_f, peak_f]
        ax.plot(xs, ys, "k--", linewidth=1, label=f"ceiling ({src})")
    elif peak_f:
        ax.axhline(peak_f, color="k", linestyle="--", linewidth=1, label=f"peak {peak_f:g} TFLOP/s ({src})")
    ax.set_xlabel("arithmetic intensity (FLOP / byte, metrics.flops / metrics.bytes)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    s.images = [("roofline", _png(fig))]
    ceil = (f"Ceilings from {src}: " + ", ".join(x for x in (f"{peak_f:g} TFLOP/s" if peak_f else "",
                                                             f"{peak_b:g} TB/s" if peak_b else "") if x)
            if src else "No device ceilings in these results (looked for header ceilings / device.peak_tflops, "
                        "device.peak_tbps and metrics.roofline.ceiling_tflops / ceiling_tbps): points only.")
    s.note = ceil
    return s


def section_cascade(df: pd.DataFrame) -> Section:
    s = Section("cascade", "Cascade against plain",
                f"timed rows of backends named '*{CASCADE_SUFFIX}' and the same case on the backend without the suffix"
                " (or, if absent, the backends starting with that name, e.g. torch-cascade vs torch-math)")
    t = _timed(df)
    if t.empty:
        return s
    casc = t[t["backend"].str.endswith(CASCADE_SUFFIX)]
    if casc.empty:
        return s
    plain = t[~t["backend"].str.endswith(CASCADE_SUFFIX)]
    recs = []
    for r in casc.to_dict("records"):
        base = r["backend"][: -len(CASCADE_SUFFIX)]
        same_case = plain[plain["case"] == r["case"]]
        cand = same_case[same_case["backend"] == base]
        if cand.empty:  # e.g. torch-cascade is built on torch-math: match the family prefix
            cand = same_case[same_case["backend"].str.startswith(base + "-")]
        same = cand[cand["variant"] == r["variant"]]
        cand = same if not same.empty else cand
        for p in cand.to_dict("records"):
            recs.append({"case": r["case"], "cascade": r["label"], "plain": p["label"],
                         "plain (us)": p["median_us"], "cascade (us)": r["median_us"],
                         "speedup": p["median_us"] / r["median_us"] if r["median_us"] else None,
                         "mean seq len": r["mean_seq_len"], "requests": r["num_reqs"]})
    if not recs:
        s.note = "Cascade rows are present, but no plain row of the same case and base backend to compare with."
        s.html = _table(casc[["case", "label", "median_us"]])
        return s
    out = pd.DataFrame.from_records(recs)
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(6.0, 0.45 * len(out)), 3.8))
    names = [f"{c[:30]}\n{p}" for c, p in zip(out["case"], out["plain"])]
    ax.bar(range(len(out)), out["speedup"], color=["#2e7d32" if x and x >= 1 else "#c62828" for x in out["speedup"]])
    ax.axhline(1.0, color="k", linewidth=0.8)
    ax.set_xticks(range(len(out)))
    ax.set_xticklabels(names, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("plain / cascade latency (>1: cascade pays)")
    s.images = [("cascade speedup", _png(fig))]
    for col, spec in (("plain (us)", ".2f"), ("cascade (us)", ".2f"), ("speedup", ".2f"), ("mean seq len", ".0f"),
                      ("requests", ".0f")):
        out[col] = out[col].map(lambda x, sp=spec: _fmt(x, sp))
    s.html = _table(out)
    return s


# ---------------------------------------------------------------- page
def build_sections(loaded: Loaded) -> list[Section]:
    df = frame(loaded)
    secs = [
        section_header(loaded), section_correctness(df), section_problems(df), section_latency(df),
        section_latency_context(df), section_latency_batch(df), section_page_size(df), section_fa_versions(df),
        section_roofline(df, loaded), section_cascade(df),
    ]
    assert [x.id for x in secs] == [i for i, _ in SECTIONS]
    return secs


def render_html(loaded: Loaded, title: str | None = None) -> str:
    from jinja2 import Environment, PackageLoader, select_autoescape

    env = Environment(loader=PackageLoader("harness", "templates"), autoescape=select_autoescape(["html"]))
    suites = sorted({r.suite for r in loaded.rows})
    counts = {s: sum(1 for r in loaded.rows if r.status == s) for s in STATUSES}
    return env.get_template("report.html.j2").render(
        title=title or f"Attention harness report: {', '.join(suites) or 'no rows'}",
        sections=build_sections(loaded), counts=counts, colors=STATUS_COLORS, total=len(loaded.rows),
        sources=loaded.sources,
    )


def write_report(paths: Iterable[str | Path], out: str | Path, title: str | None = None) -> Path:
    """Render the report of ``paths`` into ``out`` (written atomically) and return its path."""
    loaded = load(paths)
    page = render_html(loaded, title)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(out)
    return out
