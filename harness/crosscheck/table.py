"""The markdown of ``harness crosscheck``'s table (harness/crosscheck/run.py builds the records)."""

from __future__ import annotations

import math
from typing import Any


def _us(x: Any) -> str:
    return f"{x:.4g}" if isinstance(x, (int, float)) and math.isfinite(x) else "-"


def cells_of(r: dict[str, Any]) -> dict[str, str]:
    """The explaining columns of one record as text (the markdown and the report both show them)."""
    here, kernel, graph = r.get("here"), r.get("kernel"), r.get("here_graph")
    clocks = [o.get("sm_clock_mhz") for o in [here, graph, r.get("here_adapter"), *(r.get("outside") or {}).values()]
              if isinstance(o, dict)]
    if any(c == "n/a on cpu" for c in clocks) or not r.get("device", "").startswith("cuda"):
        clock = "n/a on cpu"
    else:
        mhz = [v for c in clocks if isinstance(c, dict) for v in (c.get("before"), c.get("during"), c.get("after"))
               if v is not None]
        clock = f"{min(mhz):.0f}-{max(mhz):.0f}" if mhz else "-"
    adapter = r.get("here_adapter")
    return {"harness here us": here_cell(r),
            "adapter here us": _us(adapter.get("median_us")) if isinstance(adapter, dict) else str(adapter or "-"),
            "kernel us (profiler)": _us(kernel.get("per_call_us")) if isinstance(kernel, dict) else str(kernel or "-"),
            "SM MHz": clock}


def here_cell(r: dict[str, Any]) -> str:
    """The harness timer here on the standalone call, and for an eager row whose outside timers
    replay a graph also the same call replayed as a graph here (the markdown and the report)."""
    here, graph = r.get("here"), r.get("here_graph")
    out = _us(here.get("median_us")) if isinstance(here, dict) else str(here or "-")
    if graph is not None:
        out += "; as a graph " + (_us(graph.get("median_us")) + ("" if graph.get("graph") else " (no graph: eager)")
                                  if isinstance(graph, dict) else str(graph))
    return out


def verdict_text(r: dict[str, Any], flagged: str = "**FLAGGED**: ", excluded: bool = True) -> str:
    """A record's verdict in words (the markdown; the report with its own ``flagged`` mark and
    without the timers left out): flagged, noisy, states differ, host-bound, or ok with what an
    eager row's verdict names."""
    reason = str(r.get("reason") or "")
    if r.get("flagged"):
        return flagged + reason
    if r.get("noisy"):
        return "noisy, not flagged (CPU wall clock): " + reason
    if r.get("state") == "states differ":  # no outside timer ran at the row's clock (within 3%): no verdict
        return "states differ: " + reason
    if r.get("state") == "host-bound":
        return reason
    return "ok" + (f" ({reason})" if reason else "") + (_excluded(r) if excluded else "")


def _excluded(r: dict[str, Any]) -> str:
    """Outside timers left out of a verdict because they ran at another clock than the row."""
    differ = r.get("states_differ") or {}
    return f" (left out, states differ: {'; '.join(f'{k}: {v}' for k, v in differ.items())})" if differ else ""


def to_markdown(res: dict[str, Any], source: str) -> str:
    timers = res["timers"]
    state = "" if res.get("complete", True) else " (incomplete: the command is running or was stopped)"
    out = [f"# Outside-timer cross-check of {source}", "",
           f"{res['checked']} row(s) re-timed{state}, **{res['flagged']} flagged** (more than {res['tolerance']:.0%} "
           "from the outside timers' median and outside their spread); "
           f"{res.get('states_differ', 0)} in states that differ (no outside timer ran within 3% of the row's SM "
           f"clock: no verdict); "
           + (f"{res['host_bound']} host-bound (a sustained eager loop against graph replays: not compared); "
              if res.get("host_bound") else "")
           + f"{len(res['not_retimed'])} not re-timed.", "",
           "`adapter here`, `harness here`, `kernel` and `SM MHz` explain a verdict and are not part of the outside "
           "median: the harness's own timer in this process on the adapter's call and on the standalone call the "
           "outside timers time (as the row was timed; an eager row whose outside timers replay a graph also "
           "`as a graph`: that replay is compared with the outside timers, and the row's excess over it is the "
           "eager launches' cost, named in the verdict), the profiler's eager kernel time per call, the SM clock "
           "range around the timers.", ""]
    hows = sorted({r["regime_how"] for r in res["rows"] if r.get("regime_how")})
    if hows:  # which GPU state each comparison is in (harness/crosscheck/regime.py)
        out += ["Clock regime of the comparisons: " + "; ".join(hows) + ".", ""]
    if res["rows"]:
        head = ["row", "case", "backend [variant]", "timed as", "harness us", "adapter here us", "harness here us",
                "kernel us (profiler)",
                *[f"{t} us" for t in timers], "outside median us", "harness / outside", "SM MHz", "verdict"]
        out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in res["rows"]:
            mode = "graph" if r["graph"] else ("cpu " + r["clock"] if not r["device"].startswith("cuda") else "eager")
            if r.get("outside_graph") and not r["graph"]:
                mode += " (outside timers: graph replay)"  # the row hid its host enqueue; a graph does too
            ex = cells_of(r)
            regime = f", {r['clock_regime']}" if r.get("clock_regime") else ""
            cells = [str(r["row"]), r["case"], f"{r['backend']} [{r['variant']}]", f"{mode}, {r['mode']}{regime}",
                     f"{r['harness_us']:.4g}", ex["adapter here us"], ex["harness here us"], ex["kernel us (profiler)"],
                     *[f"{r['outside'][t]['median_us']:.4g}" if t in r["outside"] else "-" for t in timers],
                     f"{r['ref_us']:.4g}", f"{r['ratio']:.3f}", ex["SM MHz"], verdict_text(r)]
            out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        out.append("")
    if res["not_retimed"]:
        out += ["## Not re-timed", ""]
        out += [f"- row {r['row']} {r['case']} / {r['backend']} [{r['variant']}]: {r['reason']}" for r in res["not_retimed"]]
        out.append("")
    return "\n".join(out)


__all__ = ["cells_of", "here_cell", "to_markdown", "verdict_text"]
