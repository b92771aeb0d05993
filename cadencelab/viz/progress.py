"""Figure of idle time accumulating kernel by kernel, one line pair per variant (eager, replay)."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from .options import require_columns

__all__ = ["idle_progress", "VARIANT_COLORS"]

#: line colours of the variants, in the order they appear in the frame
VARIANT_COLORS = ("#d62728", "#1f77b4", "#2ca02c", "#9467bd")


def idle_progress(frame: pd.DataFrame, cursor: int | None = None, x: str = "kernel_index") -> go.Figure:
    """Accumulated idle (solid) and busy (dotted) ms against ``x``, per variant.

    frame: columns variant, ``x`` (default kernel_index; the player passes "step", a row of the
    two streams' alignment), idle_ms, busy_ms (one row per plotted point).
    cursor: a value of ``x`` marked by a vertical line.
    """
    require_columns(frame, ["variant", x, "idle_ms", "busy_ms"], "idle_progress")
    fig = go.Figure()
    for i, (name, d) in enumerate(frame.groupby("variant", sort=False)):
        color = VARIANT_COLORS[i % len(VARIANT_COLORS)]
        fig.add_trace(go.Scatter(x=d[x], y=d["idle_ms"], name=f"{name}: idle", mode="lines",
                                 line=dict(color=color)))
        fig.add_trace(go.Scatter(x=d[x], y=d["busy_ms"], name=f"{name}: busy", mode="lines",
                                 line=dict(color=color, dash="dot")))
    if cursor is not None:
        fig.add_vline(x=cursor, line_color="black", line_width=1)
    fig.update_layout(template="plotly_white", height=320, xaxis_title=x.replace("_", " "),
                      yaxis_title="accumulated ms", title="Idle accumulates where the host launches one by one")
    return fig
