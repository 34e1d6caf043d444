"""Plot helpers shared by the sections: one colour per backend+variant for the whole page,
legends outside the data, embedded SVGs."""

from __future__ import annotations

import base64
import io
import re
from typing import TYPE_CHECKING, Any

import pandas as pd

if TYPE_CHECKING:  # matplotlib is imported only when a figure is drawn
    from matplotlib.typing import RcKeyType

# Embedded SVG: sharp at any zoom and on high-density screens. Text stays text (the browser draws
# it: 40% fewer bytes than glyph outlines, and searchable); ids and metadata are fixed so the
# same rows give the same page.
SVG_RC: dict[RcKeyType, Any] = {"svg.fonttype": "none", "svg.hashsalt": "attn-harness"}
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
    """The figure as an embedded SVG data URI; the figure is closed. Every figure uses the
    constrained layout, which already makes room for titles and the legend, so no
    ``bbox_inches="tight"`` (that draws the whole figure a second time: a third of the time)."""
    import matplotlib

    pyplot = plt()
    buf = io.BytesIO()
    with matplotlib.rc_context(SVG_RC):
        fig.savefig(buf, format="svg", facecolor="white", metadata={"Date": None})
    pyplot.close(fig)
    return "data:image/svg+xml;base64," + base64.b64encode(compact_svg(buf.getvalue().decode()).encode()).decode("ascii")


_COORDS = re.compile(r'( (?:d|x|y|width|height)=")([^"]*)"')
_LONG_DECIMALS = re.compile(r"(\d\.\d\d)\d+")
_FONT_LIST = re.compile(r"font-family: 'DejaVu Sans',[^;\"]*")


def compact_svg(svg: str) -> str:
    """Matplotlib's SVG, about 40% smaller and drawn the same: coordinates to 0.01 pt (1/100 of a
    pixel), no metadata, layout whitespace or unreferenced group ids, no no-op rotations, one
    short font list (DejaVu Sans as matplotlib measured it, then the same-width Verdana)."""
    svg = svg[svg.index("<svg"):]  # the XML declaration and DOCTYPE: not needed in a data URI
    svg = re.sub(r"<metadata>.*?</metadata>", "", svg, flags=re.S)
    svg = re.sub(r'<g id="[^"]*"', "<g", svg)  # ids that are referenced sit on defs, paths and clipPaths
    svg = re.sub(r' transform="rotate\(-?0 [^")]*\)"', "", svg)
    svg = _FONT_LIST.sub("font-family: 'DejaVu Sans', 'Bitstream Vera Sans', Verdana, sans-serif", svg)
    svg = _COORDS.sub(lambda m: m.group(1) + _LONG_DECIMALS.sub(r"\1", m.group(2)) + '"', svg)
    svg = re.sub(r"\s*\n\s*", " ", svg)
    return re.sub(r">\s+<", "><", svg)


def legend_right(fig: Any, handles: list[Any], labels: list[str], title: str = "") -> None:
    """One legend for the whole figure, right of every axis (never over data). The figure grows
    by the legend's width, so the axes keep the room they were given."""
    if handles:
        # "outside": the constrained layout places it beside the axes and leaves room for it.
        leg = fig.legend(handles, labels, loc="outside right center", fontsize=8,
                         title=title or None, title_fontsize=8, frameon=False)
        width = leg.get_window_extent(fig.canvas.get_renderer()).width / fig.dpi
        fig.set_figwidth(fig.get_figwidth() + width)


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
    from matplotlib.ticker import FuncFormatter, LogFormatter, LogLocator

    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    # Minor ticks (and grid lines) at 2x and 5x each power of ten, not at every 2x..9x: a
    # latency figure spans 4-5 decades, and matplotlib's cost of laying out a figure grows with
    # its ticks (8 per decade on every panel made the latency figures half the report's time).
    ax.yaxis.set_minor_locator(LogLocator(subs=(2.0, 5.0)))
    # Minor ticks labelled (plainly) only when the axis spans less than about one decade.
    ax.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(1, 0.4)))
    ax.set_ylabel("median latency (us, log)")
