"""The shape catalog: which clock values map to which shape class, and which are admitted."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .options import FigureOptions, require_columns, require_rows

__all__ = ["catalog_grid"]


def catalog_grid(catalog_df: pd.DataFrame, options: FigureOptions | None = None) -> go.Figure:
    """One heatmap row per clock: cells are clock values, coloured and labelled by class_id.

    Columns: clock, value, class_id; optional admitted (bool, default True). Cells of values the
    admission predicate rejects are left blank and marked "✗". Values are ordered numerically on
    each clock's own axis. Traces: one heatmap per clock.
    """
    opts = options or FigureOptions()
    require_columns(catalog_df, ["clock", "value", "class_id"], "catalog_grid")
    require_rows(catalog_df, "catalog_grid")
    df = catalog_df.copy()
    if "admitted" not in df.columns:
        df["admitted"] = True
    dup = df[df.duplicated(["clock", "value"], keep=False)]
    if len(dup):
        raise ValueError(f"catalog_grid: (clock, value) pairs listed twice: "
                         f"{sorted(set(zip(dup['clock'], dup['value'])))[:5]}")
    clocks = list(dict.fromkeys(df["clock"]))
    ids = pd.to_numeric(df.loc[df["admitted"].astype(bool), "class_id"], errors="coerce")
    zmin, zmax = (float(ids.min()), float(ids.max())) if len(ids.dropna()) else (0.0, 1.0)
    fig = make_subplots(rows=len(clocks), cols=1, subplot_titles=[str(c) for c in clocks],
                        vertical_spacing=min(0.15, 0.6 / max(1, len(clocks))))
    for i, clock in enumerate(clocks, start=1):
        d = df[df["clock"] == clock].sort_values("value", kind="stable")
        admitted = d["admitted"].astype(bool).to_numpy()
        z = np.where(admitted, pd.to_numeric(d["class_id"], errors="coerce"), np.nan)
        text = [str(c) if a else "✗" for c, a in zip(d["class_id"], admitted)]
        fig.add_trace(go.Heatmap(
            x=[str(v) for v in d["value"]], y=[str(clock)], z=[z.tolist()], text=[text],
            texttemplate="%{text}", coloraxis="coloraxis", xgap=2, ygap=2, name=str(clock),
            hovertemplate=f"{clock}=" + "%{x}<br>class %{text}<extra></extra>",
        ), row=i, col=1)
        fig.update_xaxes(type="category", title_text="value", row=i, col=1)
    fig.update_layout(coloraxis=dict(colorscale="Viridis", cmin=zmin, cmax=zmax, showscale=False),
                      height=opts.height or 120 + 130 * len(clocks))
    return opts.apply(fig, "Shape catalog: clock values → classes (✗ = not admitted)")
