"""Reserved vs live bytes per region, with the over-reservation ratio rho annotated."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from .options import FigureOptions, require_columns, require_rows, set_caption

__all__ = ["rho_bars"]

MiB = 1024 * 1024


def rho_bars(rho_df: pd.DataFrame, options: FigureOptions | None = None) -> go.Figure:
    """Grouped bars per region: reserved and live MiB; rho = reserved / live above each group.

    Columns: region, reserved_bytes, live_bytes (rho is computed when absent; use
    ``cadencelab.profile.rho_table`` to get it with waste_bytes). Traces: 2 (reserved, live).
    """
    opts = options or FigureOptions()
    require_columns(rho_df, ["region", "reserved_bytes", "live_bytes"], "rho_bars")
    require_rows(rho_df, "rho_bars")
    df = rho_df.copy()
    if "rho" not in df.columns:
        with np.errstate(divide="ignore", invalid="ignore"):
            df["rho"] = df["reserved_bytes"].astype(float) / df["live_bytes"].astype(float)
    regions = df["region"].astype(str).tolist()
    reserved = df["reserved_bytes"].astype(float) / MiB
    live = df["live_bytes"].astype(float) / MiB
    rho_text = [("ρ=∞" if np.isinf(r) else "ρ=n/a" if r != r else f"ρ={r:.2f}") for r in df["rho"]]
    fig = go.Figure([
        go.Bar(x=regions, y=reserved, name="reserved", text=rho_text, textposition="outside",
               hovertemplate="%{x}<br>reserved %{y:.2f} MiB<br>%{text}<extra></extra>"),
        go.Bar(x=regions, y=live, name="live (declared)",
               hovertemplate="%{x}<br>live %{y:.2f} MiB<extra></extra>"),
    ])
    fig.update_layout(barmode="group", yaxis_title="memory (MiB)", xaxis_title="state region")
    set_caption(fig, "Per state region: bytes the stock runtime reserves against the bytes the declaration says "
                     "are live; ρ = reserved / live above each pair.")
    return opts.apply(fig, "Reserved vs live bytes per region")
