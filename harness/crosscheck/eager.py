"""The verdict of an eager GPU row whose outside timers replay the call from a CUDA graph
(harness/crosscheck/run.py), judged like with like.

The row's eager samples hide the host's enqueue behind a spin kernel, but each eager launch still
pays the GPU's own gap between kernels, which a graph replay does not (H100 2026-12-07, burst row
44, FA4's two-kernel mixed-MQA step: row 108.9 us, the harness timer here eagerly 107.7, the
outside graph timers' median 103.9). So beside the eager timing here the harness's own timer
also replays the same standalone call as a graph in the cross-check process (``here_graph``),
and:

- **the timers**: the harness's graph replay against the outside timers' median, in the same band
  ``verdict`` uses; off, the row is flagged (the timers disagree);
- **the eager launch cost**: the row over the harness's graph replay, named in the verdict. A row
  outside the band is ok when that is all it is: the harness's graph replay agrees with the outside
  timers and the eager timing here reproduces the row (within the tolerance), so the excess shows
  in one process with one timer. Otherwise the row stays flagged and the reason says which.

Where the graph timing here is missing (an older record), failed, fell back to eager (capture
failed) or ran at another clock than the row, the verdict is ``verdict``'s alone, the reason
saying why.
"""

from __future__ import annotations

from typing import Any

from harness.crosscheck.regime import timer_clock, timer_state


def applies(rec: dict[str, Any]) -> bool:
    """Whether a record is an eager GPU row whose outside timers replayed a graph."""
    return str(rec.get("device", "")).startswith("cuda") and not rec.get("graph") and bool(rec.get("outside_graph"))


def graph_here_of(here_graph: Any, row_mhz: float | None) -> tuple[dict[str, Any] | None, str]:
    """(the harness's graph replay here, usable for the timer comparison, or None; why not, or ""
    where none was taken)."""
    if here_graph is None:
        return None, ""
    if not isinstance(here_graph, dict):
        return None, str(here_graph)
    if not here_graph.get("graph"):
        return None, f"the harness timer replayed no graph ({here_graph.get('graph_reason') or 'timed eagerly'})"
    state = timer_state(row_mhz, timer_clock(here_graph))
    if state:
        return None, f"the harness's graph replay here ran in another state ({state})"
    return here_graph, ""


def eager_verdict(harness_us: float, base: dict[str, Any], here_eager: dict[str, Any] | None,
                  here_graph: dict[str, Any] | None, why_not: str, graph_timer: dict[str, Any] | None,
                  tol: float) -> dict[str, Any]:
    """What changes in ``base`` (``run.judge``'s verdict of the row against the outside timers in
    its state) for an eager row against graph replays; ``eager`` always set (None where ``base``
    is host-bound or states differ). ``graph_timer``: ``run.verdict`` of ``here_graph``'s median
    against the same outside timers (None with ``here_graph``)."""
    if base.get("state") != "matched":
        return {"eager": None}
    ref, (lo, hi) = base["ref_us"], base["band_us"]
    if here_graph is None or graph_timer is None:
        why = why_not or "not timed"
        out: dict[str, Any] = {"eager": {"here_graph": why}}
        if base["flagged"] or base["noisy"]:
            out["reason"] = (base["reason"] + f"; eager row against graph replays, and the harness's graph replay "
                             f"of the call here is missing ({why}): the eager launch cost is not separated")
        return out
    g = float(here_graph["median_us"])
    cost = harness_us / g - 1
    info = {"here_graph_us": g, "cost_frac": cost, "cost_us": harness_us - g, "timer_ratio": graph_timer["ratio"],
            "timer_agrees": not (graph_timer["flagged"] or graph_timer["noisy"])}
    over = f"{cost:+.1%} {'over' if cost >= 0 else 'against'} a graph replay of the same call"
    if not info["timer_agrees"]:
        return {"eager": info, "flagged": bool(graph_timer["flagged"]), "noisy": bool(graph_timer["noisy"]),
                "reason": (f"the harness's graph replay of the call here {g:.4g} us is {graph_timer['ratio']:.3g}x the "
                           f"outside timers' median {ref:.4g} us, outside {tol:.0%} and their spread "
                           f"[{lo:.4g}, {hi:.4g}] us (both replay a graph); the eager row {harness_us:.4g} us is "
                           f"{over}")}
    agrees = f"the harness's graph replay {g:.4g} us agrees with the outside timers' {ref:.4g}"
    ok = {"eager": info, "flagged": False, "noisy": False,
          "reason": f"eager row: {over}" + (", the device-side launch gaps of eager launches" if cost > tol else "")
                    + f"; {agrees}"}
    if lo <= harness_us <= hi:
        return ok
    if harness_us < lo:
        return {"eager": info, "reason": base["reason"] + f"; the eager row is {over} ({agrees}): an eager loop "
                                                          "faster than a graph replay of its kernels is no launch cost"}
    e = here_eager["median_us"] if here_eager is not None else None
    if e is not None and abs(harness_us / e - 1) <= tol:
        return ok  # the eager timing here reproduces the row: the excess is the eager launches'
    seen = (f"the eager timing here gives {e:.4g} us ({harness_us / e:.3f}x): the row's conditions, not only the eager "
            "launches" if e is not None else "no eager timing here to tell the eager launches from the row's conditions")
    return {"eager": info, "reason": base["reason"] + f"; the eager row is {over} ({agrees}), but {seen}"}


__all__ = ["applies", "eager_verdict", "graph_here_of"]
