"""The soak as a picture: allocator bytes and chunk latency over a long stream, mismatches marked."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .memory import MiB
from .options import (
    FigureOptions,
    log_ticks,
    require_columns,
    require_rows,
    set_caption,
)

__all__ = ["soak_panel"]


def soak_panel(chunks_df: pd.DataFrame, options: FigureOptions | None = None, arm: str = "arm",
               reference: str = "reference") -> go.Figure:
    """Two stacked panels over the chunk index: allocator peak / allocated MiB (top) and chunk
    latency of the arm and the reference (bottom, log scale). The warm-up is shaded; a chunk whose
    int16 PCM differs from the reference is marked with a red x on both panels.

    Columns: chunk, warmup, exact_i16, peak_bytes, allocated_bytes, latency_ms; optional
    latency_ms_ref. (``cadencelab.course.data.soak_chunks()`` has them.) Traces: 3-5. ``arm`` / ``reference``:
    what the latency traces are called in the legend (e.g. "SRc", "B0, 4 processes").
    """
    opts = options or FigureOptions()
    require_columns(chunks_df, ["chunk", "warmup", "exact_i16", "peak_bytes", "allocated_bytes", "latency_ms"],
                    "soak_panel")
    require_rows(chunks_df, "soak_panel")
    df = chunks_df.sort_values("chunk", kind="stable")
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08)
    fig.add_trace(go.Scatter(x=df["chunk"], y=df["peak_bytes"] / MiB, name="peak allocated", mode="lines"), 1, 1)
    fig.add_trace(go.Scatter(x=df["chunk"], y=df["allocated_bytes"] / MiB, name="allocated", mode="lines",
                             line=dict(dash="dot")), 1, 1)
    fig.add_trace(go.Scatter(x=df["chunk"], y=df["latency_ms"], name=arm, mode="markers",
                             marker=dict(size=3)), 2, 1)
    if "latency_ms_ref" in df.columns:
        ref = pd.to_numeric(df["latency_ms_ref"], errors="coerce")
        fig.add_trace(go.Scatter(x=df["chunk"], y=ref, name=reference, mode="markers",
                                 marker=dict(size=3, opacity=0.5)), 2, 1)
    bad = df[~df["exact_i16"].astype(bool)]
    if len(bad):
        fig.add_trace(go.Scatter(x=bad["chunk"], y=bad["latency_ms"], name="PCM differs", mode="markers",
                                 marker=dict(symbol="x", color="red", size=9)), 2, 1)
    warm = df[df["warmup"].astype(bool)]
    if len(warm):  # named in the legend, not on the plot: no label can sit on the lines it shades
        name = f"warm-up (chunks {int(warm['chunk'].min())}-{int(warm['chunk'].max())}, shaded)"
        for row in (1, 2):
            fig.add_vrect(x0=float(warm["chunk"].min()) - 0.5, x1=float(warm["chunk"].max()) + 0.5, row=row, col=1,
                          fillcolor="grey", opacity=0.15, line_width=0, name=name, legendgroup="warm-up",
                          showlegend=row == 1)
    lat = pd.to_numeric(df["latency_ms"], errors="coerce")
    if "latency_ms_ref" in df.columns:
        lat = pd.concat([lat, pd.to_numeric(df["latency_ms_ref"], errors="coerce")])
    lat = lat[lat > 0]
    if len(lat):
        fig.update_yaxes(**log_ticks(float(lat.min()), float(lat.max()), "ms"), row=2, col=1)
    else:
        fig.update_yaxes(type="log", row=2, col=1)
    fig.update_yaxes(title_text="allocator (MiB)", row=1, col=1)
    fig.update_yaxes(title_text="chunk latency (ms, log scale)", row=2, col=1)
    fig.update_xaxes(title_text="chunk (index in the stream)", row=2, col=1)
    set_caption(fig, "Top: the allocator's peak and current MiB per chunk; flat after the warm-up (shaded) means no "
                     "growth. Bottom: each chunk's latency (log scale), arm and reference; a red ✕ marks a chunk "
                     "whose int16 PCM differs from the reference.")
    n, exact = len(df), int(df["exact_i16"].astype(bool).sum())
    return opts.apply(fig, f"Soak: {exact}/{n} chunks bit-exact")
