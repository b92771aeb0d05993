"""One sample per process: each arm's process means as points with their block range, so a reader sees
the spread that an interval over processes is built from (``course.trust.process_frame`` makes the frame)."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from .options import require_columns, set_caption

__all__ = ["process_means"]

#: one colour per arm in the process figures (the stock runtime red, both rules green, the A/A control grey)
PROCESS_COLORS = {"B0": "#d62728", "B0_repeat": "#7f7f7f", "SRc": "#2ca02c"}


def process_means(df: pd.DataFrame, title: str = "One point per fresh process", unit: str = "ms") -> go.Figure:
    """``df``: one row per arm and process with ``mean``, ``min``, ``max`` (and optionally
    ``tiny_ops_per_s``, shown on hover). Each process is a point at its mean with a bar from its fastest
    to its slowest block; arms side by side on a shared axis that starts at zero."""
    require_columns(df, ["arm", "process", "mean", "min", "max"], "process_means")
    fig = go.Figure()
    for arm, g in df.groupby("arm", sort=False):
        hover = [f"process {p}: mean {m:.1f} {unit}, blocks {lo:.1f}-{hi:.1f}"
                 + (f", host {r / 1e3:.0f} k tiny ops/s" if pd.notna(r) else "")
                 for p, m, lo, hi, r in zip(g["process"], g["mean"], g["min"], g["max"],
                                           g.get("tiny_ops_per_s", pd.Series([float("nan")] * len(g))))]
        fig.add_trace(go.Scatter(
            x=[arm] * len(g), y=g["mean"], mode="markers", name=str(arm), hovertext=hover, hoverinfo="text",
            marker=dict(size=10, color=PROCESS_COLORS.get(arm), line=dict(width=1, color="white")),
            error_y=dict(type="data", symmetric=False, array=(g["max"] - g["mean"]).tolist(),
                         arrayminus=(g["mean"] - g["min"]).tolist(), thickness=1, width=4)))
    fig.update_layout(title=title, yaxis=dict(title=f"steady-chunk latency ({unit}), process mean", rangemode="tozero"),
                      xaxis=dict(title="arm"), showlegend=False, height=420, margin=dict(t=60, b=50))
    return set_caption(fig, "Each point is one fresh process: the mean of its timed blocks, with a bar from its "
                            "fastest to its slowest block. The spread of the points is what an interval over "
                            "processes measures; one process alone would hide it.")
