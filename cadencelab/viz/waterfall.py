"""The stage waterfall of one window (a duplex second, a call of any model): when each stage runs, against the
cadence."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .options import LINE_PX, WaterfallOptions, plot_area_px, require_columns, require_rows, set_caption, wrap_label

__all__ = ["waterfall"]

#: facets: px per stage row of a panel, and the gap between panels (a fraction of the plotting height)
ROW_PX, FACET_GAP = 42, 0.12


def _stage_order(df: pd.DataFrame, opts: WaterfallOptions) -> list[str]:
    if opts.stage_order is not None:
        unknown = sorted(set(df["stage"]) - set(opts.stage_order))
        if unknown:
            raise ValueError(f"waterfall: stages {unknown} are not in stage_order")
        return list(opts.stage_order)
    return list(df.groupby("stage", sort=False)["start_ms"].min().sort_values(kind="stable").index)


def _bar(d: pd.DataFrame, name: str, showlegend: bool = True) -> go.Bar:
    end = d["start_ms"] + d["dur_ms"]
    return go.Bar(
        y=d["stage"], x=d["dur_ms"], base=d["start_ms"], orientation="h", name=name, showlegend=showlegend,
        customdata=list(zip(d["start_ms"], end)),
        hovertemplate="%{y}<br>start %{customdata[0]:.1f} ms<br>dur %{x:.1f} ms<br>end %{customdata[1]:.1f} ms"
                      f"<extra>{name}</extra>",
    )


def waterfall(stages_df: pd.DataFrame, cadence_ms: float | None = 1000.0,
              options: WaterfallOptions | None = None, *, span: str = "second") -> go.Figure:
    """Horizontal bars, one per stage (columns stage, start_ms, dur_ms; optional source).

    With a ``source`` column (e.g. "measured" vs "paper") each source is one trace, drawn side by
    side in each stage row (``layout="grouped"``) or in its own panel (``layout="facets"``: the panels
    stacked on one time axis, each titled with its source above it, left-aligned; no legend).
    A vertical line marks ``cadence_ms`` (None: no line). ``span`` names what the time axis spans (the duplex
    "second", or e.g. "call" for a model that is not duplex) in its title and caption. Traces: one per source.
    """
    opts = options or WaterfallOptions()
    require_columns(stages_df, ["stage", "start_ms", "dur_ms"], "waterfall")
    require_rows(stages_df, "waterfall")
    if opts.layout not in ("grouped", "facets"):
        raise ValueError(f"waterfall: layout must be 'grouped' or 'facets', got {opts.layout!r}")
    df = stages_df.copy()
    if (df["dur_ms"] < 0).any():
        raise ValueError(f"waterfall: negative dur_ms for stages {df.loc[df['dur_ms'] < 0, 'stage'].tolist()}")
    if "source" not in df.columns:
        df["source"] = "stages"
    sources = list(dict.fromkeys(df["source"]))
    order = _stage_order(df, opts)

    facets = opts.layout == "facets" and len(sources) > 1
    if facets:  # one panel per source, stacked on one time axis: each title has the figure's whole width
        fig = make_subplots(rows=len(sources), cols=1, shared_xaxes=True, vertical_spacing=FACET_GAP,
                            subplot_titles=sources)
        opts.apply(fig)  # its width decides whether a panel title must wrap
        lines = 1
        for a in fig.layout.annotations:  # the panel titles: left-aligned, wrapped to the panel if ever needed
            a.update(text=wrap_label(a.text, plot_area_px(fig)[0]), x=0, xanchor="left")
            lines = max(lines, a.text.count("<br>") + 1)
        for i, src in enumerate(sources, start=1):
            fig.add_trace(_bar(df[df["source"] == src], src, showlegend=False), row=i, col=1)
        fig.update_xaxes(title_text=f"time in the {span} (ms)", row=len(sources), col=1)
        fig.update_layout(height=opts.height or 150 + len(sources) * (ROW_PX * len(order) + 30 * lines),
                          margin=dict(t=90 + int(LINE_PX) * (lines - 1)))
    else:
        fig = go.Figure([_bar(df[df["source"] == src], src) for src in sources])
        fig.update_layout(barmode="group")
        fig.update_xaxes(title_text=f"time in the {span} (ms)")
    fig.update_yaxes(categoryorder="array", categoryarray=order[::-1])
    fig.update_yaxes(title_text="stage")
    panels = len(sources) if facets else 1
    if cadence_ms is not None:
        fig.add_vline(x=float(cadence_ms), line_dash="dash", line_color="black")
        for i in range(1, panels + 1):  # the label sits inside each panel, under its top edge: never on a title
            sfx = "" if i == 1 else str(i)
            fig.add_annotation(x=float(cadence_ms), xref=f"x{sfx}", y=1, yref=f"y{sfx} domain", yanchor="top",
                               xanchor="left", xshift=3, showarrow=False, text=f"cadence {cadence_ms:g} ms",
                               font=dict(size=11), bgcolor="rgba(255,255,255,0.8)")
    # a legend only where colours tell sources apart: facets name theirs in the panel titles
    fig.update_layout(legend_title_text="source" if len(sources) > 1 else None,
                      showlegend=len(sources) > 1 and not facets)
    set_caption(fig, f"When each stage of the {span} runs (bars: start to end, ms into the {span})"
                     + (f"; dashed: the {cadence_ms:g} ms cadence the {span} must fit in." if cadence_ms is not None
                        else ".") + (" One bar per source in each stage row." if len(sources) > 1 and not facets
                        else " One panel per source, on one time axis." if facets else ""))
    return opts.apply(fig, "Stage waterfall")
