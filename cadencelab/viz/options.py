"""Plot options as small dataclasses (widget controls map onto their fields), and the column check.

Every figure function takes its data as a DataFrame, checks the columns it needs with
:func:`require_columns` (the error names the missing ones), and returns a ``go.Figure``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import pandas as pd
import plotly.graph_objects as go

__all__ = [
    "FigureOptions", "WaterfallOptions", "TimelineOptions", "TIME_UNITS", "ParetoOptions", "CapacityOptions",
    "require_columns", "IDLE_COLORS", "OP_KIND_COLORS", "set_caption", "caption", "log_ticks",
    "annotation_boxes", "boxes_overlap", "plot_area_px", "to_paper", "wrap_label", "label_hline_outside",
    "integer_axis",
]

IDLE_COLORS = {"host_wait": "#d62728", "kernel_wait": "#ff7f0e", "other": "#7f7f7f"}


@dataclass
class FigureOptions:
    """Options every figure understands."""

    title: str | None = None
    height: int | None = None
    width: int | None = None
    template: str = "plotly_white"

    def apply(self, fig: go.Figure, default_title: str | None = None) -> go.Figure:
        fig.update_layout(template=self.template, title=self.title if self.title is not None else default_title)
        if self.height:
            fig.update_layout(height=self.height)
        if self.width:
            fig.update_layout(width=self.width)
        return fig


@dataclass
class WaterfallOptions(FigureOptions):
    """layout: "grouped" (sources side by side in each stage row) or "facets" (one panel per source).
    stage_order: stages top to bottom (default: by earliest start)."""

    layout: str = "grouped"
    stage_order: Sequence[str] | None = None


@dataclass
class TimelineOptions(FigureOptions):
    """origin_ns: time zero (default: first kernel of each variant); max_events: refuse larger
    frames (slice a window first) rather than freeze the browser; time_unit: the x axis in "us"
    or "ms" (:data:`TIME_UNITS`)."""

    origin_ns: int | None = None
    max_events: int = 50_000
    time_unit: str = "us"


#: nanoseconds per unit of a timeline's x axis, and how the axis names it
TIME_UNITS = {"us": (1e3, "µs"), "ms": (1e6, "ms")}


@dataclass
class ParetoOptions(FigureOptions):
    """frontier: draw the Pareto frontier (lower latency and lower peak are better).
    interval: what the error bars are, named in the legend and the caption (None: not said)."""

    frontier: bool = True
    interval: str | None = "paired bootstrap 95% intervals of each arm's ratio to the reference arm"


@dataclass
class CapacityOptions(FigureOptions):
    """hline_label: label of the horizontal line (the cadence, or a memory limit)."""

    hline_label: str = "cadence"
    markers: bool = True


def require_columns(df: pd.DataFrame, columns: Iterable[str], where: str) -> None:
    """Raise ValueError naming the missing columns (and those present) when df lacks any."""
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"{where}: expected a pandas DataFrame, got {type(df).__name__}")
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{where}: missing columns {missing}; got {list(df.columns)}")


def require_rows(df: pd.DataFrame, where: str, hint: str = "") -> None:
    if len(df) == 0:
        raise ValueError(f"{where}: no rows to plot" + (f" ({hint})" if hint else ""))


# ----------------------------------------------------------------------------------------------
# Captions, op-kind colours, readable log ticks, label boxes
# ----------------------------------------------------------------------------------------------

#: one colour per device-op kind (cadencelab.profile.OP_KINDS), shared by every kernel figure
OP_KIND_COLORS = {
    "kernel": "#1f77b4", "copy kernel": "#9467bd", "memcpy HtoD": "#2ca02c", "memcpy DtoH": "#8c564b",
    "memcpy DtoD": "#e377c2", "memset": "#17becf",
}


def set_caption(fig: go.Figure, text: str) -> go.Figure:
    """Store the figure's caption (what it shows, how to read it) in ``fig.layout.meta["caption"]``."""
    meta = dict(fig.layout.meta) if isinstance(fig.layout.meta, dict) else {}
    meta["caption"] = str(text)
    fig.update_layout(meta=meta)
    return fig


def caption(fig: go.Figure) -> str:
    """The caption a figure function stored (empty when it stored none): the HTML report prints it."""
    meta = fig.layout.meta
    return str(meta.get("caption", "")) if isinstance(meta, dict) else ""


def log_ticks(lo: float, hi: float, unit: str) -> dict:
    """Axis settings for a log axis whose ticks read as plain numbers with a unit: one tick per
    power of ten between ``lo`` and ``hi`` (> 0), labelled "0.1 µs", "1 µs", "10 µs", ..."""
    import math

    if not (lo > 0 and hi > 0):
        raise ValueError(f"log_ticks: bounds must be > 0, got {lo!r}, {hi!r}")
    vals = [10.0 ** e for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)]
    text = [f"{v:g} {unit}".strip() for v in vals]
    return dict(type="log", tickmode="array", tickvals=vals, ticktext=text)


#: average glyph width / line height of the default 12 px plotly font, in px (label boxes)
CHAR_PX, LINE_PX = 7.0, 16.0


def plot_area_px(fig: go.Figure) -> tuple[float, float]:
    """(width, height) of the plotting area in px: the figure's size less its margins."""
    lay = fig.layout
    w = lay.width or 700
    h = lay.height or 450
    m = lay.margin
    left = m.l if m.l is not None else 80
    right = m.r if m.r is not None else 80
    top = m.t if m.t is not None else 100
    bottom = m.b if m.b is not None else 80
    return float(w - left - right), float(h - top - bottom)


def to_paper(fig: go.Figure, x: float, y: float) -> tuple[float, float]:
    """Data coordinates of the first x / y axes -> paper coordinates (needs fixed axis ranges)."""
    import math

    out = []
    for v, ax in ((x, fig.layout.xaxis), (y, fig.layout.yaxis)):
        lo, hi = ax.range
        if ax.type == "log":
            v = math.log10(v)
        out.append((v - lo) / (hi - lo))
    return out[0], out[1]


def annotation_boxes(fig: go.Figure) -> list[tuple[str, float, float, float, float]]:
    """Each annotation's box in paper coordinates: (text, x0, y0, x1, y1).

    Data-referenced annotations are placed through the axes' fixed ranges; an arrow offset
    (ax, ay in px) moves the label; its size is estimated from the text (:data:`CHAR_PX` per
    character, :data:`LINE_PX` per line).
    """
    pw, ph = plot_area_px(fig)
    boxes = []
    for a in fig.layout.annotations:
        text = str(a.text or "")
        if a.xref == "paper" and a.yref == "paper":
            px, py = float(a.x), float(a.y)
        else:
            px, py = to_paper(fig, float(a.x), float(a.y))
        if a.showarrow is not False and a.ax is not None and a.ay is not None:
            px += float(a.ax) / pw
            py -= float(a.ay) / ph
        lines = text.split("<br>")
        w = max(len(_strip_tags(t)) for t in lines) * CHAR_PX / pw
        h = len(lines) * LINE_PX / ph
        xa = a.xanchor if a.xanchor not in (None, "auto") else "center"
        ya = a.yanchor if a.yanchor not in (None, "auto") else "middle"
        x0 = px - (w / 2 if xa == "center" else (w if xa == "right" else 0.0))
        y0 = py - (h / 2 if ya == "middle" else (h if ya == "top" else 0.0))
        boxes.append((text, x0, y0, x0 + w, y0 + h))
    return boxes


def wrap_label(text: str, width_px: float) -> str:
    """``text`` broken into ``<br>``-separated lines that fit ``width_px`` (at :data:`CHAR_PX` per character,
    the estimate :func:`annotation_boxes` uses); words are never split, so one longer word keeps its line."""
    import textwrap

    chars = max(8, int(width_px // CHAR_PX))
    return "<br>".join(textwrap.wrap(str(text), chars, break_long_words=False)) or str(text)


def _strip_tags(s: str) -> str:
    import re

    return re.sub(r"<[^>]+>", "", s)


def boxes_overlap(a: tuple, b: tuple) -> bool:
    """True when two (…, x0, y0, x1, y1) boxes share area."""
    return a[-4] < b[-2] and b[-4] < a[-2] and a[-3] < b[-1] and b[-3] < a[-1]


def label_hline_outside(fig: go.Figure, y: float, text: str) -> go.Figure:
    """Label a horizontal line at ``y`` (first y axis) right of the plotting area, beside the line's end,
    and widen the right margin to hold it: no trace can cross the label there. The legend must not sit on
    the right (put it under the plot)."""
    lines = str(text).split("<br>")
    need = int(max(len(_strip_tags(t)) for t in lines) * CHAR_PX) + 16
    fig.add_annotation(x=1, xref="paper", xanchor="left", xshift=6, y=y, yref="y", yanchor="middle",
                       text=text, showarrow=False, align="left")
    right = fig.layout.margin.r
    fig.update_layout(margin=dict(r=max(need, right if right is not None else 0)))
    return fig


def integer_axis(fig: go.Figure, values, axis: str = "y") -> go.Figure:
    """An axis of counts: when every one of ``values`` is a whole number, ticks fall on whole numbers only
    (one per unit over a short range, plotly's choice of whole steps otherwise) and the axis starts at 0."""
    import math

    vals = [float(v) for v in values if pd.notna(v)]
    if not vals or any(not math.isfinite(v) or v != int(v) for v in vals):
        return fig
    ticks = dict(tickformat="d", rangemode="tozero" if min(vals) >= 0 else "normal")
    if max(vals + [0.0]) - min(vals + [0.0]) <= 12:
        ticks.update(dtick=1, tick0=0)
    getattr(fig, f"update_{axis}axes")(**ticks)
    return fig
