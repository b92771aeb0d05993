"""Where a lane's chunk spends its host time, per session count: the lanes-limiter study's picture."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from ..profile.limiter import PARTS, limiter_table
from .options import require_columns, set_caption

__all__ = ["limiter_figure", "analyse_limiter", "PART_COLORS"]

#: one colour per part: waits grey, copies blue, Python bookkeeping orange, the launch red, the device green
PART_COLORS = {"lock_wait": "#bbbbbb", "swap": "#1f77b4", "tokens_in": "#6baed6", "classify": "#ff7f0e",
               "signature": "#fdae6b", "checks": "#fdd0a2", "stage": "#9ecae1", "launch": "#d62728",
               "outputs": "#c6dbef", "to_host": "#3182bd", "device_wait": "#2ca02c", "other": "#8c6d31"}


def limiter_figure(split: pd.DataFrame, by: str = "sessions",
                   title: str = "Where a lane's chunk spends its host time") -> go.Figure:
    """``split``: :func:`~cadencelab.profile.limiter.host_split` (or
    :func:`~cadencelab.profile.limiter.limiter_table`). One stacked bar per session count: the mean milliseconds per chunk of every part; with a
    ``launch_concurrency`` column, the launches' mean concurrency on a second axis."""
    require_columns(split, [by, *(f"{p}_ms" for p in PARTS)], "limiter_figure")
    x = [str(v) for v in split[by]]
    fig = go.Figure()
    for p in PARTS:
        fig.add_trace(go.Bar(x=x, y=split[f"{p}_ms"], name=p, marker_color=PART_COLORS[p],
                             hovertemplate=f"{p}: %{{y:.2f}} ms per chunk<extra></extra>"))
    if "launch_concurrency" in split:
        fig.add_trace(go.Scatter(x=x, y=split["launch_concurrency"], name="launches at once (mean)", yaxis="y2",
                                 mode="lines+markers", line=dict(color="black", dash="dot")))
    fig.update_layout(barmode="stack", title=title, height=440, margin=dict(t=60, b=50),
                      xaxis=dict(title="sessions served (N)", type="category"),
                      yaxis=dict(title="host ms per chunk (mean)", rangemode="tozero"),
                      yaxis2=dict(title="graph launches at once", overlaying="y", side="right", rangemode="tozero",
                                  showgrid=False))
    return set_caption(fig, "Each bar is one session count: a chunk's host window split into its parts (lock wait "
                            "before it), means over every chunk served. A launch part that grows with N while the "
                            "launches overlap (dotted, right axis) is the lanes' graph launches slowing each other.")


def analyse_limiter(chunks: pd.DataFrame, launches: pd.DataFrame, by: str = "sessions", solo: int = 1):
    """The study's chunk and launch rows -> (:func:`~cadencelab.profile.limiter.limiter_table`, its figure)."""
    table = limiter_table(chunks, launches, by, solo)
    return table, limiter_figure(table, by)


