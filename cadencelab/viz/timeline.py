"""Kernel timeline: device ops per stream on a µs axis, coloured by op kind, idle gaps highlighted.

Eager vs replay side by side: give the kernels (and gaps) a ``variant`` column; each variant
gets its own panel with its own time zero, on ONE shared time axis (the same µs are the same
length in every panel, so a replayed chunk shows how much it compresses). ``kernel_pairs``
draws an aligned window of two streams (``cadencelab.profile.align_kernels``) the same way.
"""

from __future__ import annotations

import zlib

import numpy as np
import pandas as pd
import plotly.colors
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..profile.compare import OP_KINDS, op_kind
from .options import (
    IDLE_COLORS,
    OP_KIND_COLORS,
    FigureOptions,
    TIME_UNITS,
    TimelineOptions,
    require_columns,
    require_rows,
    set_caption,
)

__all__ = ["kernel_timeline", "kernel_pairs"]

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


def _kind_order(kinds) -> list[str]:
    present = set(kinds)
    return [k for k in OP_KINDS if k in present] + sorted(present - set(OP_KINDS))


def kernel_timeline(kernels_df: pd.DataFrame, gaps_df: pd.DataFrame | None = None, label: str = "name",
                    options: TimelineOptions | None = None) -> go.Figure:
    """Bars on a time axis relative to the window start (the first kernel of each variant), in
    ``options.time_unit`` (µs by default, or ms).

    kernels_df: ``label`` column (default name), start_ns and end_ns (or dur_ns); optional stream
    (one row per stream) and variant (one panel per variant, e.g. "eager" / "replay").
    gaps_df: start_ns, end_ns, category (as from ``cadencelab.profile.gaps``); optional variant.
    Gaps are drawn on an ``idle`` row coloured by category.

    Bars are coloured by op kind (column ``op_kind``; else derived from ``cat`` and the name, see
    ``cadencelab.profile.op_kind``; else all "kernel"), one legend entry per kind.

    Traces: per variant one bar trace per op kind present, plus one per gap category present in
    that variant. All panels share one x axis (``matches="x"``). Caption in ``fig.layout.meta``.
    """
    opts = options or TimelineOptions()
    require_columns(kernels_df, [label, "start_ns"], "kernel_timeline")
    require_rows(kernels_df, "kernel_timeline", "no device activity: a CPU-only trace has no kernels")
    if len(kernels_df) > opts.max_events:
        raise ValueError(f"kernel_timeline: {len(kernels_df)} kernels exceed max_events={opts.max_events}; "
                         "slice a window first, or raise TimelineOptions.max_events")
    if opts.time_unit not in TIME_UNITS:
        raise ValueError(f"kernel_timeline: time_unit must be one of {sorted(TIME_UNITS)}, got {opts.time_unit!r}")
    per_ns, unit = TIME_UNITS[opts.time_unit]
    k = kernels_df.copy()
    k["end_ns"] = _ends(k, "kernel_timeline")
    if "op_kind" not in k.columns:
        names = k["name"] if "name" in k.columns else k[label]
        k["op_kind"] = [op_kind(n, c) for n, c in zip(names.astype(str), k["cat"])] if "cat" in k.columns \
            else "kernel"
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
    seen_kinds: set[str] = set()
    for i, var in enumerate(variants, start=1):
        kv = k[k["variant"] == var]
        origin = int(opts.origin_ns) if opts.origin_ns is not None else int(kv["start_ns"].min())
        start_t = (kv["start_ns"].to_numpy(np.int64) - origin) / per_ns  # in the axis unit
        dur_t = (kv["end_ns"].to_numpy(np.int64) - kv["start_ns"].to_numpy(np.int64)) / per_ns
        rows = [f"stream {s}" for s in kv["stream"]] if "stream" in kv.columns else ["device"] * len(kv)
        labels = kv[label].astype(str).to_numpy(object)
        kinds = kv["op_kind"].to_numpy(object)
        rows = np.asarray(rows, dtype=object)
        for kind in _kind_order(kinds):
            m = kinds == kind
            fig.add_trace(go.Bar(
                y=rows[m], x=dur_t[m], base=start_t[m], orientation="h", name=kind, legendgroup=kind,
                showlegend=kind not in seen_kinds, marker_color=OP_KIND_COLORS.get(kind, _color(kind)),
                text=labels[m], textposition="none", customdata=np.c_[start_t[m], start_t[m] + dur_t[m]],
                hovertemplate=f"{kind}<br>" + "%{text}<br>%{customdata[0]:.3f} → %{customdata[1]:.3f} "
                              f"{unit}<br>dur %{{x:.3f}} {unit}<extra>" + (str(var) or "ops") + "</extra>",
            ), row=i, col=1)
            seen_kinds.add(kind)
        if g is not None:
            gv = g[g["variant"] == var]
            for cat in [c for c in IDLE_COLORS if c in set(gv["category"])] + sorted(set(gv["category"]) - set(IDLE_COLORS)):
                gc = gv[gv["category"] == cat]
                gs = (gc["start_ns"].to_numpy(np.int64) - origin) / per_ns
                gd = (gc["end_ns"].to_numpy(np.int64) - gc["start_ns"].to_numpy(np.int64)) / per_ns
                fig.add_trace(go.Bar(
                    y=[IDLE_ROW] * len(gc), x=gd, base=gs, orientation="h", name=cat, legendgroup=cat,
                    showlegend=cat not in seen_cats, marker_color=IDLE_COLORS.get(cat, "#bcbd22"), opacity=0.6,
                    hovertemplate=f"{cat}<br>" + f"%{{base:.3f}} {unit} + %{{x:.3f}} {unit}<extra></extra>",
                ), row=i, col=1)
                seen_cats.add(cat)
        fig.update_yaxes(autorange="reversed", row=i, col=1)
    for i in range(1, len(variants) + 1):  # one time scale for every panel: each axis follows the first
        fig.update_xaxes(matches="x" if i > 1 else None, row=i, col=1)
    fig.update_xaxes(title_text=f"time since window start ({unit})", row=len(variants), col=1)
    fig.update_yaxes(title_text="CUDA stream" if "stream" in k.columns else None)
    fig.update_layout(barmode="overlay", dragmode="zoom", legend_title_text="op kind / idle gap" if seen_cats
                      else "op kind", height=opts.height or 180 + 160 * len(variants))
    where = "one row per CUDA stream" if "stream" in k.columns else "one row for the device"
    idle = (" The idle row colours the gaps by what the device waited for (host_wait: the next launch was not "
            "issued yet; kernel_wait: launch or queue latency)." if seen_cats else
            " A gap between the bars of a row: nothing ran on that row then.")
    across = (f" Every panel shares one time axis in {unit} from its own window start, so equal lengths are equal "
              "times across panels." if len(variants) > 1 else f" Time in {unit} from the window start.")
    set_caption(fig, f"Each bar is one device op ({where}), coloured by what it is (kernel; copy kernel: a copy or "
                     "fill run as a kernel, as inside a CUDA graph; memcpy by direction; memset)." + idle + across)
    return opts.apply(fig, "Kernel timeline")


def kernel_pairs(aligned: pd.DataFrame, start: int = 0, count: int = 60,
                 options: FigureOptions | None = None) -> go.Figure:
    """A window of two aligned kernel streams on one time axis, matched ops joined by a line.

    ``aligned``: :func:`cadencelab.profile.align_kernels` output (its ``attrs["labels"]`` name the
    two sides). Rows ``start`` .. ``start + count`` are drawn: one lane per side, each op a bar at
    its time since its own first op in the window (µs, one shared axis: a compressed replay is
    visibly shorter), coloured by op kind; an equal pair is joined by a grey line; an op only one
    side runs is marked with a red ✕ (e.g. a host-to-device copy the replay no longer makes).
    Traces: one bar trace per op kind present (legend), "same op" (the joins), "only one side".
    """
    opts = options or FigureOptions()
    if not isinstance(aligned, pd.DataFrame) or "labels" not in aligned.attrs:
        raise ValueError("kernel_pairs: expected the frame cadencelab.profile.align_kernels returns "
                         "(its attrs name the two sides)")
    la, lb = aligned.attrs["labels"]
    need = ["op"] + [f"{c}_{x}" for x in (la, lb) for c in ("kernel", "op_kind", "start_us", "dur_us")]
    require_columns(aligned, need, "kernel_pairs")
    if int(count) < 1 or int(start) < 0:
        raise ValueError(f"kernel_pairs: start must be >= 0 and count >= 1, got start={start!r}, count={count!r}")
    w = aligned.iloc[int(start): int(start) + int(count)]
    require_rows(w, "kernel_pairs", f"start {start} is past the {len(aligned)} aligned rows")
    fig = go.Figure()
    seen: set[str] = set()
    t0 = {x: float(np.nanmin(w[f"start_us_{x}"])) if w[f"start_us_{x}"].notna().any() else 0.0 for x in (la, lb)}
    for x in (la, lb):
        d = w[w[f"start_us_{x}"].notna()]
        kinds = d[f"op_kind_{x}"].to_numpy(object)
        for kind in _kind_order(kinds):
            m = kinds == kind
            dd = d[m]
            st = dd[f"start_us_{x}"].to_numpy(float) - t0[x]
            fig.add_trace(go.Bar(
                y=[x] * len(dd), x=dd[f"dur_us_{x}"].to_numpy(float), base=st, orientation="h", name=kind,
                legendgroup=kind, showlegend=kind not in seen, marker_color=OP_KIND_COLORS.get(kind, _color(kind)),
                text=dd[f"kernel_{x}"].astype(str).tolist(), textposition="none",
                hovertemplate=f"{x}: {kind}<br>" + "%{text}<br>start %{base:.2f} µs, dur %{x:.2f} µs<extra></extra>",
            ))
            seen.add(kind)
    eq = w[w["op"] == "equal"]
    xs, ys = [], []
    for a0, b0 in zip(eq[f"start_us_{la}"] - t0[la], eq[f"start_us_{lb}"] - t0[lb]):
        xs += [float(a0), float(b0), None]
        ys += [la, lb, None]
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name="same op (aligned)",
                             line=dict(color="rgba(90,90,90,0.45)", width=1), hoverinfo="skip"))
    solo = w[w["op"] != "equal"]
    sx, sy, st = [], [], []
    for x in (la, lb):
        d = solo[solo[f"start_us_{x}"].notna()]
        sx += (d[f"start_us_{x}"] - t0[x]).tolist()
        sy += [x] * len(d)
        st += [f"{o}: {k}" for o, k in zip(d["op"], d[f"kernel_{x}"])]
    fig.add_trace(go.Scatter(x=sx, y=sy, mode="markers", name="only one side runs it",
                             marker=dict(symbol="x", color="#d62728", size=10), text=st,
                             hovertemplate="%{text}<extra></extra>"))
    fig.update_yaxes(categoryorder="array", categoryarray=[lb, la], title_text="stream")
    fig.update_xaxes(title_text="time since the window's first op on each side (µs)")
    fig.update_layout(barmode="overlay", legend_title_text="op kind", height=opts.height or 480)
    c = aligned.attrs.get("counts", {})
    set_caption(fig, f"Rows {start}-{start + len(w) - 1} of the alignment of {la} and {lb}: ops are paired by "
                     "sequence matching on normalised names, never by index, so a grey line always joins the same "
                     f"op (a memcpy on one side may be the copy kernel a CUDA graph runs in its place). Red ✕: an op "
                     f"only one side runs. Both lanes share one µs axis. Whole streams: {c.get(f'ops_{la}', '?')} vs "
                     f"{c.get(f'ops_{lb}', '?')} device ops ({c.get(f'kernels_{la}', '?')} vs "
                     f"{c.get(f'kernels_{lb}', '?')} kernels), {c.get('rows_equal', '?')} paired.")
    return opts.apply(fig, f"Aligned kernels: {la} vs {lb}")
