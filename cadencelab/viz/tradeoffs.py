"""Arms against each other: the latency / memory Pareto plot, and capacity vs sessions."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from .options import (
    CHAR_PX,
    LINE_PX,
    CapacityOptions,
    ParetoOptions,
    boxes_overlap,
    label_hline_outside,
    plot_area_px,
    require_columns,
    require_rows,
    set_caption,
    to_paper,
)

__all__ = ["pareto", "pareto_frontier", "capacity_lines", "place_labels", "metric_title", "metric_unit",
           "METRIC_TITLES"]


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


def _padded(lo: float, hi: float, frac: float = 0.08) -> list[float]:
    span = (hi - lo) or abs(hi) or 1.0
    return [lo - frac * span, hi + frac * span]


#: label offsets tried around a point, in px (dx right, dy down), nearest first
_OFFSETS = [(round(r * dx), round(r * dy)) for r in (28, 44, 64, 90, 120)
            for dx, dy in ((0, -1), (1, 0), (-1, 0), (0, 1), (0.7, -0.7), (-0.7, -0.7), (0.7, 0.7), (-0.7, 0.7),
                           (0.4, -0.9), (-0.4, -0.9), (0.4, 0.9), (-0.4, 0.9))]


def _crosses(x0: float, y0: float, x1: float, y1: float, box: tuple) -> bool:
    """True when the segment (x0, y0) -> (x1, y1), sampled along its inner part, enters ``box``."""
    return any(box[1] <= x0 + f * (x1 - x0) <= box[3] and box[2] <= y0 + f * (y1 - y0) <= box[4]
               for f in (0.15, 0.3, 0.45, 0.6, 0.75))


def place_labels(fig: go.Figure, points: list[tuple[str, float, float]],
                 obstacles: list[tuple[float, float, float, float]] = ()) -> None:
    """Add one arrow-annotation per (text, x, y) point so that no label box overlaps another label
    or any point's marker, no leader line runs through another point, and every label stays
    inside the plot. Needs fixed axis ranges and a
    fixed figure size (the boxes are computed in paper coordinates from them). ``obstacles``:
    (x0, y0, x1, y1) data rectangles labels should also avoid (error bars). A label is also kept
    clearly nearer its own point than any other, so that it is not read as another point's. Crowded
    points are placed first; a label that fits nowhere goes to the candidate that breaks fewest
    of these rules.
    """
    pw, ph = plot_area_px(fig)
    pp = [(t,) + to_paper(fig, x, y) for t, x, y in points]
    r = 7.0  # marker half-size, px
    markers = [("", px - r / pw, py - r / ph, px + r / pw, py + r / ph) for _, px, py in pp]
    placed: list[tuple] = []
    leaders: list[tuple] = []
    blocks = []
    for x0, y0, x1, y1 in obstacles:
        a, b = to_paper(fig, x0, y0), to_paper(fig, x1, y1)
        blocks.append(("", min(a[0], b[0]) - 1.5 / pw, min(a[1], b[1]) - 1.5 / ph,
                       max(a[0], b[0]) + 1.5 / pw, max(a[1], b[1]) + 1.5 / ph))

    def crowd(p):
        return -sum(1 for q in pp if abs(q[1] - p[1]) * pw < 80 and abs(q[2] - p[2]) * ph < 40)

    for text, x, y in sorted(points, key=lambda t: crowd((t[0],) + to_paper(fig, t[1], t[2]))):
        px, py = to_paper(fig, x, y)
        w, h = len(text) * CHAR_PX / pw, LINE_PX / ph
        best, best_bad = None, None
        for dx, dy in _OFFSETS:
            cx, cy = px + dx / pw, py - dy / ph
            box = (text, cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2)
            if box[1] < 0 or box[3] > 1 or box[2] < 0 or box[4] > 1:
                continue
            others = [m for m, q in zip(markers, pp) if (q[1], q[2]) != (px, py)]
            # hard: a label on a label or on a point; then a leader line through a point; soft: a label
            # on an error bar; a label less than 1.2x nearer its own point than another
            bad = 100 * sum(boxes_overlap(box, o) for o in placed + others)
            bad += 10 * sum(any(o[1] <= px + f * (cx - px) <= o[3] and o[2] <= py + f * (cy - py) <= o[4]
                                for f in (0.2, 0.4, 0.6, 0.8, 1.0)) for o in others)
            bad += 10 * sum(_crosses(px, py, cx, cy, o) for o in placed)  # own leader through a label
            bad += 10 * sum(_crosses(*seg, box) for seg in leaders)          # a label on an earlier leader
            bad += sum(boxes_overlap(box, o) for o in blocks)
            own = ((cx - px) * pw) ** 2 + ((cy - py) * ph) ** 2
            bad += 5 * sum(((cx - q[1]) * pw) ** 2 + ((cy - q[2]) * ph) ** 2 < 1.44 * own  # 1.2x farther
                           for q in pp if (q[1], q[2]) != (px, py))
            if bad == 0:
                best = (dx, dy, box)
                break
            if best_bad is None or bad < best_bad[0]:
                best_bad = (bad, dx, dy, box)
        if best is None:
            best = best_bad[1:] if best_bad else (0, -28, (text, px - w / 2, py, px + w / 2, py + h))
        dx, dy, box = best
        placed.append(box)
        leaders.append((px, py, px + dx / pw, py - dy / ph))
        fig.add_annotation(x=x, y=y, text=text, showarrow=True, ax=dx, ay=dy, arrowhead=0, arrowwidth=1,
                           arrowcolor="#888", xanchor="center", yanchor="middle", font=dict(size=12),
                           bgcolor="rgba(255,255,255,0.85)")


def pareto(arms_df: pd.DataFrame, options: ParetoOptions | None = None) -> go.Figure:
    """Latency vs peak memory, one point per arm, CI error bars, non-exact arms marked.

    Columns: arm, lat_ms, peak_MiB; optional lat_lo/lat_hi and peak_lo/peak_hi (interval bounds,
    not half-widths); optional exact (bool): arms that are not bit-exact are drawn as open "x"
    markers in their own legend entry. Arm names are placed by :func:`place_labels` (no two
    overlap, none covers a point: SR / SRc and B0 / B0_repeat / vendor_graph sit close together).
    ``options.interval`` names what the error bars are, in the legend and the caption.
    Traces: one for exact arms (or all arms when there is no exact column), one for non-exact
    arms if any, the frontier line over the exact arms when there are two or more and
    ``options.frontier``, and a legend entry naming the interval when there are error bars.
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
    bars = False
    for name, d, marker in groups:
        if len(d) == 0:
            continue
        ex = _errors(d, "lat_ms", "lat_lo", "lat_hi", "pareto")
        ey = _errors(d, "peak_MiB", "peak_lo", "peak_hi", "pareto")
        bars = bars or ex is not None or ey is not None
        fig.add_trace(go.Scatter(
            x=d["lat_ms"], y=d["peak_MiB"], mode="markers", name=name, text=d["arm"].astype(str), marker=marker,
            error_x=ex, error_y=ey,
            hovertemplate="%{text}<br>%{x:.1f} ms<br>%{y:.0f} MiB<extra>" + name + "</extra>",
        ))
    front = pareto_frontier(df[exact])
    if opts.frontier and len(front) >= 2:
        fig.add_trace(go.Scatter(x=front["lat_ms"], y=front["peak_MiB"], mode="lines", name="frontier",
                                 line=dict(dash="dot", color="grey"), hoverinfo="skip"))
    if bars and opts.interval:
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", line=dict(color="#444", width=1),
                                 name=f"error bars: {opts.interval}"))
    xlo = df["lat_lo"].min() if "lat_lo" in df.columns else df["lat_ms"].min()
    xhi = df["lat_hi"].max() if "lat_hi" in df.columns else df["lat_ms"].max()
    ylo = df["peak_lo"].min() if "peak_lo" in df.columns else df["peak_MiB"].min()
    yhi = df["peak_hi"].max() if "peak_hi" in df.columns else df["peak_MiB"].max()
    fig.update_layout(width=opts.width or 860, height=opts.height or 560,
                      margin=dict(l=80, r=30, t=70, b=150), legend=dict(orientation="h", y=-0.2, x=0))
    fig.update_xaxes(title_text="steady-chunk latency (ms)", range=_padded(float(xlo), float(xhi), 0.12))
    fig.update_yaxes(title_text="peak memory (MiB)", range=_padded(float(ylo), float(yhi), 0.15))
    bars_xy = []
    for r in df.itertuples(index=False):
        if "lat_lo" in df.columns:
            bars_xy.append((float(r.lat_lo), float(r.peak_MiB), float(r.lat_hi), float(r.peak_MiB)))
        if "peak_lo" in df.columns:
            bars_xy.append((float(r.lat_ms), float(r.peak_lo), float(r.lat_ms), float(r.peak_hi)))
    place_labels(fig, list(zip(df["arm"].astype(str), df["lat_ms"].astype(float), df["peak_MiB"].astype(float))),
                 obstacles=bars_xy)
    cap = "One point per arm: latency against peak memory; lower-left is better."
    if bars:
        cap += (f" Error bars: {opts.interval}." if opts.interval else
                " Error bars: intervals given with the data (their kind not stated).")
    if opts.frontier and len(front) >= 2:
        cap += " Dotted: the frontier of the bit-exact arms (no other exact arm is faster and smaller)."
    if has_exact and (~exact).any():
        cap += " ✕: not bit-exact with the reference."
    set_caption(fig, cap)
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
    unit = metric_unit(metric)
    line = f"{opts.hline_label} ({cadence_ms:g}{' ' + unit if unit else ''})" if cadence_ms is not None else ""
    if cadence_ms is not None:  # labelled right of the plot, beside the line's end: no curve can cross it there
        fig.add_hline(y=float(cadence_ms), line_dash="dash", line_color="black")
        label_hline_outside(fig, float(cadence_ms), f"{opts.hline_label}<br>{cadence_ms:g}{' ' + unit if unit else ''}")
    # the legend under the plot, so the right margin is the line label's alone
    fig.update_layout(xaxis_title="concurrent sessions N", yaxis_title=metric_title(metric), legend_title_text="arm",
                      legend=dict(orientation="h", yanchor="top", y=-0.22, x=0), margin=dict(b=140))
    if df["sessions"].max() <= 16:
        fig.update_xaxes(dtick=1)
    set_caption(fig, f"{metric_title(metric)} as more sessions share one device, one line per arm"
                     + (f"; dashed: the {line}." if cadence_ms is not None else "."))
    return opts.apply(fig, f"{metric_title(metric)} vs sessions")


#: axis titles (with units) of the metrics the recorded studies carry
METRIC_TITLES = {
    "p95_chunk_ms": "p95 chunk latency (ms)", "p50_chunk_ms": "median chunk latency (ms)",
    "mean_chunk_ms": "mean chunk latency (ms)", "max_chunk_ms": "worst chunk latency (ms)",
    "peak_MiB": "peak memory (MiB)", "lat_ms": "latency (ms)", "goodput": "sessions holding the cadence (count)",
}
_UNITS = {"ms": "ms", "us": "µs", "ns": "ns", "MiB": "MiB", "GiB": "GiB", "bytes": "bytes", "frac": "fraction",
          "s": "s", "pct": "%"}


def metric_unit(metric: str) -> str:
    """The unit a column name ends in ("p95_chunk_ms" -> "ms", "peak_MiB" -> "MiB"); "" when none."""
    unit = str(metric).rpartition("_")[2]
    return _UNITS.get(unit, "") if "_" in str(metric) else ""


def metric_title(metric: str) -> str:
    """A readable axis title with its unit for a column name ("p95_chunk_ms" -> "p95 chunk latency (ms)");
    an unknown name is spelled out from its unit suffix ("swap_ms" -> "swap (ms)")."""
    if metric in METRIC_TITLES:
        return METRIC_TITLES[metric]
    head, _, unit = str(metric).rpartition("_")
    if head and unit in _UNITS:
        return f"{head.replace('_', ' ')} ({_UNITS[unit]})"
    return str(metric).replace("_", " ")
