"""Kernel timeline: device intervals per stream on a µs axis, idle gaps highlighted.

Eager vs replay side by side: give the kernels (and gaps) a ``variant`` column; each variant
gets its own panel with its own time zero, on a shared, zoomable time axis.
"""

from __future__ import annotations

import zlib

import numpy as np
import pandas as pd
import plotly.colors
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .options import IDLE_COLORS, TimelineOptions, require_columns, require_rows

__all__ = ["kernel_timeline"]

IDLE_ROW = "idle"
_PALETTE = plotly.colors.qualitative.Plotly + plotly.colors.qualitative.D3


def _color(label: str) -> str:
    return _PALETTE[zlib.crc32(str(label).encode()) % len(_PALETTE)]


def _ends(df: pd.DataFrame, where: str) -> pd.Series:
    if "end_ns" in df.columns:
        return df["end_ns"]
    if "dur_ns" in df.columns:
        return df["start_ns"] + df["dur_ns"]
    raise ValueError(f"{where}: missing columns ['end_ns'] (or 'dur_ns'); got {list(df.columns)}")


def kernel_timeline(kernels_df: pd.DataFrame, gaps_df: pd.DataFrame | None = None, label: str = "name",
                    options: TimelineOptions | None = None) -> go.Figure:
    """Bars on a time axis in µs relative to the window start (the first kernel of each variant).

    kernels_df: ``label`` column (default name), start_ns and end_ns (or dur_ns); optional stream
    (one row per stream) and variant (one panel per variant, e.g. "eager" / "replay").
    gaps_df: start_ns, end_ns, category (as from ``cadencelab.profile.gaps``); optional variant.
    Gaps are drawn on an ``idle`` row coloured by category.

    Traces: per variant one kernel trace, plus one per gap category present in that variant.
    """
    opts = options or TimelineOptions()
    require_columns(kernels_df, [label, "start_ns"], "kernel_timeline")
    require_rows(kernels_df, "kernel_timeline", "no device activity: a CPU-only trace has no kernels")
    if len(kernels_df) > opts.max_events:
        raise ValueError(f"kernel_timeline: {len(kernels_df)} kernels exceed max_events={opts.max_events}; "
                         "slice a window first, or raise TimelineOptions.max_events")
    k = kernels_df.copy()
    k["end_ns"] = _ends(k, "kernel_timeline")
    if "variant" not in k.columns:
        k["variant"] = ""
    variants = list(dict.fromkeys(k["variant"]))

    g = None
    if gaps_df is not None:
        require_columns(gaps_df, ["start_ns", "category"], "kernel_timeline gaps_df")
        g = gaps_df.copy()
        g["end_ns"] = _ends(g, "kernel_timeline gaps_df")
        if "variant" not in g.columns:
            if len(variants) > 1:
                raise ValueError("kernel_timeline: gaps_df needs a 'variant' column when kernels_df has "
                                 f"several variants {variants}")
            g["variant"] = variants[0]

    titles = [str(v) for v in variants] if len(variants) > 1 else None
    fig = make_subplots(rows=len(variants), cols=1, shared_xaxes=True, subplot_titles=titles,
                        vertical_spacing=0.08 if len(variants) > 1 else 0.02)
    seen_cats: set[str] = set()
    for i, var in enumerate(variants, start=1):
        kv = k[k["variant"] == var]
        origin = int(opts.origin_ns) if opts.origin_ns is not None else int(kv["start_ns"].min())
        start_us = (kv["start_ns"].to_numpy(np.int64) - origin) / 1e3
        dur_us = (kv["end_ns"].to_numpy(np.int64) - kv["start_ns"].to_numpy(np.int64)) / 1e3
        rows = [f"stream {s}" for s in kv["stream"]] if "stream" in kv.columns else ["device"] * len(kv)
        labels = kv[label].astype(str).tolist()
        fig.add_trace(go.Bar(
            y=rows, x=dur_us, base=start_us, orientation="h", name=f"kernels {var}".strip(),
            marker_color=[_color(s) for s in labels], text=labels, textposition="none",
            customdata=np.c_[start_us, start_us + dur_us],
            hovertemplate="%{text}<br>%{customdata[0]:.3f} → %{customdata[1]:.3f} µs<br>dur %{x:.3f} µs<extra></extra>",
            showlegend=False,
        ), row=i, col=1)
        if g is not None:
            gv = g[g["variant"] == var]
            for cat in [c for c in IDLE_COLORS if c in set(gv["category"])] + sorted(set(gv["category"]) - set(IDLE_COLORS)):
                gc = gv[gv["category"] == cat]
                gs = (gc["start_ns"].to_numpy(np.int64) - origin) / 1e3
                gd = (gc["end_ns"].to_numpy(np.int64) - gc["start_ns"].to_numpy(np.int64)) / 1e3
                fig.add_trace(go.Bar(
                    y=[IDLE_ROW] * len(gc), x=gd, base=gs, orientation="h", name=cat, legendgroup=cat,
                    showlegend=cat not in seen_cats, marker_color=IDLE_COLORS.get(cat, "#bcbd22"), opacity=0.6,
                    hovertemplate=f"{cat}<br>" + "%{base:.3f} µs + %{x:.3f} µs<extra></extra>",
                ), row=i, col=1)
                seen_cats.add(cat)
        fig.update_yaxes(autorange="reversed", row=i, col=1)
    fig.update_xaxes(title_text="time since window start (µs)", row=len(variants), col=1)
    fig.update_layout(barmode="overlay", dragmode="zoom", legend_title_text="idle gaps",
                      height=opts.height or 180 + 160 * len(variants))
    return opts.apply(fig, "Kernel timeline")
