"""Figures of the state rule: where the carry lives after each call, and what the audits said.

    pointer_figure   cache address per call, offset from the first (a carry is flat)
    audit_figure     per call, did each audit agree; optionally the output's max |diff| vs stock
"""

from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go

from .options import require_columns

__all__ = ["pointer_figure", "audit_figure"]


def pointer_figure(tables: dict[str, pd.DataFrame]) -> go.Figure:
    """Cache address per call for each run (offset from its first address, KiB): a carry is flat.

    tables: name -> a StreamRun.table (columns call, cache_ptr, extent).
    """
    fig = go.Figure()
    for name, t in tables.items():
        require_columns(t, ["call", "cache_ptr", "extent"], "pointer_figure")
        off = (t["cache_ptr"].astype("int64") - int(t["cache_ptr"].iloc[0])) / 1024
        fig.add_trace(go.Scatter(x=t["call"], y=off, mode="lines+markers", name=name, text=t["extent"],
                                 hovertemplate="call %{x}<br>address +%{y:.1f} KiB<br>extent %{text}<extra></extra>"))
    fig.update_layout(template="plotly_white", height=340, xaxis_title="call",
                      yaxis_title="cache address - first address (KiB)",
                      title="Where the K|V cache lives after each call")
    return fig


def audit_figure(records: dict[str, pd.DataFrame], exact: pd.DataFrame | None = None,
                 tolerance: float = 1e-5) -> go.Figure:
    """Per call: did each audit agree (1) or flag a divergence (0). With ``exact`` (a
    ``cadencelab.adapters.teaching.bit_exact`` frame) a second panel shows the output's max |diff| against the stock
    stream (log) and the ``tolerance`` a value check would use; when ``exact`` has an ``allclose_ratio`` column
    (the worst element's |diff| over ``atol + rtol * |stock|``, relative as torch.allclose is) that ratio is
    drawn against 1 instead."""
    from plotly.subplots import make_subplots

    rows = 2 if exact is not None else 1
    fig = make_subplots(rows=rows, cols=1, shared_xaxes=True, vertical_spacing=0.12,
                        subplot_titles=["audit verdict per retention"] + (["output max |diff| vs stock"] if rows == 2 else []))
    for name, r in records.items():
        require_columns(r, ["call", "agreed"], "audit_figure")
        fig.add_trace(go.Scatter(x=r["call"], y=r["agreed"].astype(int), mode="lines+markers", name=name,
                                 line_shape="hv"), row=1, col=1)
    fig.update_yaxes(title_text="agrees (1)", range=[-0.15, 1.15], tickvals=[0, 1], row=1, col=1)
    if exact is not None:
        require_columns(exact, ["call", "max_abs_diff"], "audit_figure exact")
        ratio = "allclose_ratio" in exact.columns  # |diff| over allclose's own bound, atol + rtol * |stock|
        d = exact["allclose_ratio" if ratio else "max_abs_diff"].clip(lower=1e-12)
        name = "max |diff| / (atol + rtol·|stock|)" if ratio else "max |diff|"
        tolerance = 1.0 if ratio else tolerance
        fig.add_trace(go.Bar(x=exact["call"], y=d, name=name, marker_color="#7f7f7f"), row=2, col=1)
        fig.add_hline(y=tolerance, line_dash="dash", line_color="black", row=2, col=1)
        # the label by hand: on a log axis an annotation's y is the exponent (add_hline's own label would
        # land at 10 ** tolerance, the top of the panel, far from its line)
        fig.add_annotation(x=1, xref="x2 domain", y=math.log10(tolerance), yref="y2", xanchor="right",
                           yanchor="bottom", showarrow=False, font=dict(size=11),
                           text="torch.allclose rejects above 1" if ratio else f"tolerance {tolerance:g}",
                           bgcolor="rgba(255,255,255,0.8)")
        fig.update_yaxes(type="log", title_text="|diff| / allclose bound" if ratio else "max |diff|", row=2, col=1)
    fig.update_xaxes(title_text="call", dtick=1, row=rows, col=1)
    fig.update_layout(template="plotly_white", height=260 + 180 * rows, title="Shadow audit per retention")
    return fig
