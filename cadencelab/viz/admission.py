"""Figure of the compute rule's admission: calls per class, replayed or eager by miss reason."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from .options import require_columns

__all__ = ["misses_figure", "REASON_COLORS"]

#: one colour per path, the same in every notebook ("eager: probe" is always purple)
REASON_COLORS = {"replayed": "#1f77b4", "probe": "#9467bd", "priming": "#8c564b", "outside_catalog": "#ff7f0e",
                 "host_rng": "#d62728", "invalidated": "#e377c2", "unclassed": "#7f7f7f"}


def misses_figure(counters: pd.DataFrame) -> go.Figure:
    """Calls per class label: replayed vs eager by miss reason (stacked)."""
    require_columns(counters, ["label", "replays", "miss_reasons"], "misses_figure")
    reasons_ = counters["reason"] if "reason" in counters.columns else [""] * len(counters)
    labels = [str(l) if l is not None else f"(no class: {r or 'unkeyed'})" for l, r in zip(counters["label"], reasons_)]
    fig = go.Figure([go.Bar(x=labels, y=counters["replays"], name="replayed", marker_color=REASON_COLORS["replayed"])])
    reasons = sorted({r for m in counters["miss_reasons"] for r in (m or {})})
    for r in reasons:
        fig.add_trace(go.Bar(x=labels, y=[(m or {}).get(r, 0) for m in counters["miss_reasons"]], name=f"eager: {r}",
                             marker_color=REASON_COLORS.get(r, "#bcbd22")))
    fig.update_layout(barmode="stack", template="plotly_white", height=360, xaxis_title="class (cached extent, f)",
                      yaxis_title="calls", title="Admission per class: replays and misses by reason")
    return fig
