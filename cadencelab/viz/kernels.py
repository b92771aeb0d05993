"""Kernel-level teaching figures: duration histogram, launch-cost envelope, two seconds on the cadence."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from .options import (
    FigureOptions,
    require_columns,
    require_rows,
    set_caption,
)

__all__ = ["duration_bars", "launch_cost_bars", "cadence_ticks"]

_VARIANT_COLORS = ("#d62728", "#1f77b4", "#2ca02c", "#9467bd")
_STAGE_COLORS = {"backbone": "#8c564b", "speech_decoder": "#e377c2", "flow": "#1f77b4", "vocoder": "#17becf"}


def _num(v: float) -> str:
    return f"{v:.2g}" if v < 10 else f"{v:.0f}"


def _bin_label(lo: float, hi: float) -> str:
    return f"{_num(lo)}–{_num(hi)} µs"


def duration_bars(hist_df: pd.DataFrame, metric: str = "ops", options: FigureOptions | None = None) -> go.Figure:
    """Kernel-duration histogram, one bar group per variant: log-spaced bins drawn as equal-width
    bars, each tick a range in µs ("1–1.8 µs").

    ``hist_df``: :func:`cadencelab.profile.duration_histogram` output (variant, bin_lo_us,
    bin_hi_us, ops, busy_us, ...). ``metric``: "ops" (how many ops per bin) or "busy_us" (how much
    device time the bin's ops take). Traces: one per variant.
    """
    opts = options or FigureOptions()
    ytitle = {"ops": "device ops per bin (count)", "busy_us": "device time in the bin (µs)"}.get(metric)
    if ytitle is None:
        raise ValueError(f"duration_bars: metric must be 'ops' or 'busy_us', got {metric!r}")
    require_columns(hist_df, ["variant", "bin_lo_us", "bin_hi_us", metric], "duration_bars")
    require_rows(hist_df, "duration_bars")
    fig = go.Figure()
    for i, (var, d) in enumerate(hist_df.groupby("variant", sort=False)):
        fig.add_trace(go.Bar(
            x=[_bin_label(lo, hi) for lo, hi in zip(d["bin_lo_us"], d["bin_hi_us"])], y=d[metric], name=str(var),
            marker_color=_VARIANT_COLORS[i % len(_VARIANT_COLORS)], opacity=0.85,
            hovertemplate=f"{var}<br>" + "%{x}: %{y}<extra></extra>",
        ))
    # log-spaced bins as equal-width categories: each tick reads as a range with its unit
    fig.update_xaxes(type="category", title_text="device-op duration (µs; bins equal on a log scale)")
    fig.update_yaxes(title_text=ytitle)
    fig.update_layout(barmode="group", bargap=0.1, legend_title_text="variant")
    n = hist_df.groupby("variant", sort=False)["ops"].sum()
    set_caption(fig, "How long each device op runs, on log-spaced bins shared by every variant ("
                     + ", ".join(f"{v}: {int(c):,} ops" for v, c in n.items())
                     + "). Most ops last a few µs: far less than launching one from Python costs, which is why an "
                       "eager chunk leaves the device idle between them.")
    return opts.apply(fig, "Device-op durations")


def launch_cost_bars(est_df: pd.DataFrame, options: FigureOptions | None = None) -> go.Figure:
    """Per variant: launches x per-launch cost next to the measured idle and host-wait time (ms).

    ``est_df``: :func:`cadencelab.profile.launch_cost_estimate` output. Each estimate bar is
    labelled "N host calls (L launches + C copies) × c µs". Traces: estimated launch cost, measured idle, of which host wait.
    """
    opts = options or FigureOptions()
    require_columns(est_df, ["variant", "host_calls", "per_launch_us", "est_launch_ms", "idle_ms", "host_wait_ms"],
                    "launch_cost_bars")
    require_rows(est_df, "launch_cost_bars")
    v = est_df["variant"].astype(str).tolist()
    launches = (est_df["kernel_launches"] + est_df["graph_launches"] if {"kernel_launches", "graph_launches"} <=
                set(est_df.columns) else est_df["host_calls"])  # host calls = launches + copies / memsets
    label = [f"{int(n):,} host calls ({int(k):,} launches + {int(n - k):,} copies) × {c:.1f} µs"
             for n, k, c in zip(est_df["host_calls"], launches, est_df["per_launch_us"])]
    fig = go.Figure([
        go.Bar(x=v, y=est_df["est_launch_ms"], name="launch calls × per-call cost (estimate)", text=label,
               textposition="outside", marker_color="#ff7f0e"),
        go.Bar(x=v, y=est_df["idle_ms"], name="measured idle (wall − busy)", marker_color="#7f7f7f",
               text=[f"{x:.1f} ms" for x in est_df["idle_ms"]], textposition="outside"),
        go.Bar(x=v, y=est_df["host_wait_ms"], name="of which host wait", marker_color="#d62728",
               text=[f"{x:.1f} ms" for x in est_df["host_wait_ms"]], textposition="outside"),
    ])
    fig.update_xaxes(title_text="variant")
    fig.update_yaxes(title_text="time per window (ms)")
    fig.update_layout(barmode="group", legend_title_text="")
    src = ", ".join(sorted(set(est_df.get("per_launch_source", pd.Series(["?"])).astype(str))))
    cap = ("Back of the envelope: host launch calls times the cost of one call (" + src + ") against the idle time "
           "the trace measures. Where the estimate falls short of the idle time, the host spends the rest between "
           "launches (Python, dispatch). The calls are timed under the profiler, which lengthens each one")
    if "profiler_overhead" in est_df.columns:
        cap += " (profiled / unprofiled wall: " + ", ".join(
            f"{a} {o:.2f}x" for a, o in zip(v, est_df["profiler_overhead"]) if o == o) + ")"
    if {"profiled_slack", "unprofiled_slack"} <= set(est_df.columns):
        cap += ("; the slack measured under the profiler overstates the idle share (" + ", ".join(
            f"{a} {p:.2f} profiled vs {u:.2f} without it" for a, p, u in
            zip(v, est_df["profiled_slack"], est_df["unprofiled_slack"]) if u == u) + ")")
    set_caption(fig, cap + ".")
    return opts.apply(fig, "Launch cost vs measured idle")


def cadence_ticks(diff_df: pd.DataFrame, options: FigureOptions | None = None) -> go.Figure:
    """Two duplex seconds on the cadence: one lane per side, a bar per (stage, tick) from its first
    device start to its last end (ms into the second), coloured by stage; a dashed line at the
    cadence, labelled just above the plot (between the plot and the title: no facet titles here).

    ``diff_df``: :func:`cadencelab.profile.cadence_diff` output. Traces: one per stage.
    """
    opts = options or FigureOptions()
    if not isinstance(diff_df, pd.DataFrame) or "labels" not in diff_df.attrs:
        raise ValueError("cadence_ticks: expected the frame cadencelab.profile.cadence_diff returns")
    la, lb = diff_df.attrs["labels"]
    require_columns(diff_df, ["stage", "tick", "clock"] + [f"{c}_{x}" for x in (la, lb) for c in ("start_ms", "end_ms")],
                    "cadence_ticks")
    require_rows(diff_df, "cadence_ticks")
    cadence = float(diff_df.attrs.get("cadence_ms", 1000.0))
    fig = go.Figure()
    for stage, d in diff_df.groupby("stage", sort=False):
        ys, xs, bases, text = [], [], [], []
        for x in (la, lb):
            ok = d[f"start_ms_{x}"].notna()
            ys += [x] * int(ok.sum())
            bases += d.loc[ok, f"start_ms_{x}"].tolist()
            xs += (d.loc[ok, f"end_ms_{x}"] - d.loc[ok, f"start_ms_{x}"]).tolist()
            text += [f"{stage} {c} {t}" for c, t in zip(d.loc[ok, "clock"], d.loc[ok, "tick"])]
        fig.add_trace(go.Bar(y=ys, x=xs, base=bases, orientation="h", name=str(stage), text=text, textposition="none",
                             marker=dict(color=_STAGE_COLORS.get(str(stage)), line=dict(color="white", width=0.5)),
                             hovertemplate="%{text}<br>%{base:.1f} ms + %{x:.1f} ms<extra>%{y}</extra>"))
    fig.add_vline(x=cadence, line_dash="dash", line_color="black")
    fig.add_annotation(x=cadence, y=1, xref="x", yref="paper", yanchor="bottom", yshift=2, showarrow=False,
                       text=f"cadence {cadence:g} ms", font=dict(size=11))
    fig.update_yaxes(categoryorder="array", categoryarray=[lb, la], title_text="arm")
    fig.update_xaxes(title_text="time into the second (ms)")
    fig.update_layout(barmode="overlay", legend_title_text="stage", height=opts.height or 340,
                      margin=dict(t=100))
    ends = diff_df.attrs.get("second_end_ms", {})
    tail = "; ".join(f"{x} ends at {e:.0f} ms ({e / cadence - 1:+.0%} vs the cadence)" for x, e in ends.items())
    set_caption(fig, "Two profiled duplex seconds aligned on the cadence: 0 ms is each second's start; each bar is "
                     "one tick of a stage's own clock (a text token, a speech token, a solver step, the vocoder's "
                     f"chunk), drawn from its first kernel's start to its last kernel's end. {tail}. Both seconds "
                     "ran under the profiler, which slows the eager host path most.")
    return opts.apply(fig, f"One duplex second, tick by tick: {la} vs {lb}")
