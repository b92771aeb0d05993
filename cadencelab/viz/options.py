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
    "FigureOptions", "WaterfallOptions", "TimelineOptions", "ParetoOptions", "CapacityOptions",
    "require_columns", "IDLE_COLORS",
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
    frames (slice a window first) rather than freeze the browser."""

    origin_ns: int | None = None
    max_events: int = 50_000


@dataclass
class ParetoOptions(FigureOptions):
    """frontier: draw the Pareto frontier (lower latency and lower peak are better)."""

    frontier: bool = True


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
