"""Plot helpers shared by the sections: one colour per backend+variant for the whole page,
legends outside the data, embedded PNGs."""

from __future__ import annotations

import base64
import io
from typing import Any

import pandas as pd

DPI = 72  # embedded PNGs: sharp enough on screen, small enough to commit
# Qualitative colours, most distinct first (tab10 then the light tab20 tones).
_COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
           "#bcbd22", "#7f7f7f", "#aec7e8", "#ff9896", "#98df8a", "#ffbb78", "#c5b0d5", "#c49c94",
           "#f7b6d2", "#9edae5", "#dbdb8d", "#c7c7c7"]
_MARKERS = "osD^vP*Xh<>p"


def plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # no display; must precede pyplot's first use
    import matplotlib.pyplot as pyplot

    pyplot.rcParams["figure.max_open_warning"] = 0  # figures are closed when the page embeds them
    return pyplot


def palette(labels: list[str]) -> dict[str, str]:
    """label -> colour, fixed for the page: sorted so the same label set always maps the same."""
    return {lab: _COLORS[i % len(_COLORS)] for i, lab in enumerate(sorted(set(labels)))}


def markers(labels: list[str]) -> dict[str, str]:
    return {lab: _MARKERS[i % len(_MARKERS)] for i, lab in enumerate(sorted(set(labels)))}


def colors_of(df: pd.DataFrame) -> dict[str, str]:
    """The page palette (set by the page builder on the frame); a fresh one for a bare frame."""
    return df.attrs.get("colors") or palette(list(df["label"].unique()) if "label" in df else [])


def to_uri(fig: Any) -> str:
    """The figure as an embedded PNG, reduced to a 256-colour palette (plots use few colours:
    a third of the bytes, no visible change)."""
    from PIL import Image

    pyplot = plt()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight", facecolor="white")
    pyplot.close(fig)
    buf.seek(0)
    img = Image.open(buf).convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    out = io.BytesIO()
    img.save(out, format="PNG", optimize=True)
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode("ascii")


def legend_right(fig: Any, handles: list[Any], labels: list[str], title: str = "") -> None:
    """One legend for the whole figure, right of every axis (never over data)."""
    if handles:
        fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8,
                   title=title or None, title_fontsize=8, frameon=False)


def log2_tokens_axis(ax: Any, axis: str = "x") -> None:
    """Log base-2 axis with plain token counts (1k, 4k, 32k) as tick labels."""
    from matplotlib.ticker import FuncFormatter

    fmt = FuncFormatter(lambda v, _: (f"{v / 1024:g}k" if v >= 1024 else f"{v:g}"))
    if axis == "x":
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(fmt)
    else:
        ax.set_yscale("log", base=2)
        ax.yaxis.set_major_formatter(fmt)


def us_axis(ax: Any) -> None:
    """Log latency axis in microseconds with plain numbers."""
    from matplotlib.ticker import FuncFormatter, LogFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    # Minor ticks labelled (plainly) only when the axis spans less than about one decade.
    ax.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(1, 0.4)))
    ax.set_ylabel("median latency (us, log)")
