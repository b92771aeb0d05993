"""Arms against each other: the latency / memory Pareto plot, and capacity vs sessions."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from .options import CapacityOptions, ParetoOptions, require_columns, require_rows

__all__ = ["pareto", "pareto_frontier", "capacity_lines"]


def _errors(df: pd.DataFrame, value: str, lo: str, hi: str, where: str) -> dict | None:
    have = [c in df.columns for c in (lo, hi)]
    if not any(have):
        return None
    if not all(have):
        raise ValueError(f"{where}: give both {lo} and {hi}, or neither")
    bad = df[(df[lo] > df[value]) | (df[hi] < df[value])]
    if len(bad):
        raise ValueError(f"{where}: {value} outside [{lo}, {hi}] for {bad.iloc[:, 0].tolist()}")
    return dict(type="data", symmetric=False, array=(df[hi] - df[value]).tolist(),
                arrayminus=(df[value] - df[lo]).tolist())


def pareto_frontier(df: pd.DataFrame, x: str = "lat_ms", y: str = "peak_MiB") -> pd.DataFrame:
    """Rows not dominated by another row (lower-or-equal on both, lower on one), sorted by x."""
    d = df.sort_values([x, y], kind="stable")
    best = np.inf
    keep = []
    for idx, yy in zip(d.index, d[y]):
        if yy < best:
            keep.append(idx)
            best = yy
    return d.loc[keep]


def pareto(arms_df: pd.DataFrame, options: ParetoOptions | None = None) -> go.Figure:
    """Latency vs peak memory, one point per arm, CI error bars, non-exact arms marked.

    Columns: arm, lat_ms, peak_MiB; optional lat_lo/lat_hi and peak_lo/peak_hi (interval bounds,
    not half-widths); optional exact (bool): arms that are not bit-exact are drawn as open "x"
    markers in their own legend entry. Traces: one for exact arms (or all arms when there is no
    exact column), one for non-exact arms if any, and the frontier line over the exact arms when
    there are two or more and ``options.frontier``.
    """
    opts = options or ParetoOptions()
    require_columns(arms_df, ["arm", "lat_ms", "peak_MiB"], "pareto")
    require_rows(arms_df, "pareto")
    df = arms_df.reset_index(drop=True)
    has_exact = "exact" in df.columns
    exact = df["exact"].astype(bool) if has_exact else pd.Series(True, index=df.index)
    groups = [("bit-exact" if has_exact else "arms", df[exact], dict(symbol="circle", size=11)),
              ("not bit-exact", df[~exact], dict(symbol="x-open", size=13, line=dict(width=2)))]
    fig = go.Figure()
    for name, d, marker in groups:
        if len(d) == 0:
            continue
        fig.add_trace(go.Scatter(
            x=d["lat_ms"], y=d["peak_MiB"], mode="markers+text", name=name, text=d["arm"].astype(str),
            textposition="top center", marker=marker,
            error_x=_errors(d, "lat_ms", "lat_lo", "lat_hi", "pareto"),
            error_y=_errors(d, "peak_MiB", "peak_lo", "peak_hi", "pareto"),
            hovertemplate="%{text}<br>%{x:.1f} ms<br>%{y:.0f} MiB<extra>" + name + "</extra>",
        ))
    front = pareto_frontier(df[exact])
    if opts.frontier and len(front) >= 2:
        fig.add_trace(go.Scatter(x=front["lat_ms"], y=front["peak_MiB"], mode="lines", name="frontier",
                                 line=dict(dash="dot", color="grey"), hoverinfo="skip"))
    fig.update_layout(xaxis_title="latency (ms)", yaxis_title="peak memory (MiB)")
    return opts.apply(fig, "Latency vs peak memory per arm")


def capacity_lines(df: pd.DataFrame, metric: str = "p95_chunk_ms", cadence_ms: float | None = 1000.0,
                   options: CapacityOptions | None = None) -> go.Figure:
    """Sessions N (x) vs ``metric`` (y), one line per arm, with a horizontal cadence line.

    Columns: sessions, arm, ``metric``; optional ``<metric>_lo`` / ``<metric>_hi`` bounds for
    error bars. For a memory metric pass ``cadence_ms`` = the device limit in the metric's units
    and ``CapacityOptions(hline_label="device memory")``, or None for no line.
    Traces: one per arm.
    """
    opts = options or CapacityOptions()
    require_columns(df, ["sessions", "arm", metric], "capacity_lines")
    require_rows(df, "capacity_lines")
    fig = go.Figure()
    for arm, d in df.groupby("arm", sort=False):
        d = d.sort_values("sessions", kind="stable")
        fig.add_trace(go.Scatter(
            x=d["sessions"], y=d[metric], name=str(arm), mode="lines+markers" if opts.markers else "lines",
            error_y=_errors(d, metric, f"{metric}_lo", f"{metric}_hi", "capacity_lines"),
        ))
    if cadence_ms is not None:
        fig.add_hline(y=float(cadence_ms), line_dash="dash", line_color="black",
                      annotation_text=f"{opts.hline_label} {cadence_ms:g}", annotation_position="top left")
    fig.update_layout(xaxis_title="concurrent sessions N", yaxis_title=metric, legend_title_text="arm")
    if df["sessions"].max() <= 16:
        fig.update_xaxes(dtick=1)
    return opts.apply(fig, f"{metric} vs sessions")
