"""The shape catalog: which clock values map to which shape class, and which are admitted.

    catalog_grid     one heatmap row per clock (clock values -> class ids)
    catalog_heatmap  an operator's catalog as a cached-extent x call-frames grid, each cell
                     steady / flush (admitted) / rejected, reconciled with the derived counts
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .options import FigureOptions, require_columns, require_rows, set_caption

__all__ = ["catalog_grid", "catalog_heatmap", "extent_labels", "CATALOG_CELL_COLORS"]

#: cell colours of catalog_heatmap
CATALOG_CELL_COLORS = {"steady": "#1f77b4", "flush (admitted)": "#9ecae1", "rejected (eager)": "#d62728"}


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
    fig = make_subplots(rows=len(clocks), cols=1, vertical_spacing=min(0.3, 0.9 / max(1, len(clocks))))
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
        # the clock's name is the axis title, below its tick labels: no panel title over the ticks
        fig.update_xaxes(type="category", title_text=_clock_title(clock), title_standoff=4, row=i, col=1)
        fig.update_yaxes(showticklabels=False, row=i, col=1)
    fig.update_layout(coloraxis=dict(colorscale="Viridis", cmin=zmin, cmax=zmax, showscale=False),
                      height=opts.height or 140 + 150 * len(clocks))
    set_caption(fig, "Each row is one clock; each cell one value that clock takes in a call, labelled with the "
                     "shape class it lands in. ✗: a value the admission predicate rejects (that call runs eager).")
    return opts.apply(fig, "Shape catalog: clock values → classes (✗ = not admitted)")


def extent_labels(rows: list[tuple], regions: list[str]) -> dict[tuple, str]:
    """A row label per combination of extents: the extent alone for one region; for several, each extent with
    the regions holding it (``kv_0 +7 250; conv 6``), every region named where that would confuse two rows."""
    if len(regions) == 1:
        return {r: str(r[0]) for r in rows}

    def compact(row):
        groups: dict[int, list[str]] = {}
        for name, v in zip(regions, row):
            groups.setdefault(v, []).append(name)
        return "; ".join(f"{g[0]}{f' +{len(g) - 1}' if len(g) > 1 else ''} {v}" for v, g in groups.items())

    out = {r: compact(r) for r in rows}
    if len(set(out.values())) < len(out):
        out = {r: "; ".join(f"{n} {v}" for n, v in zip(regions, r)) for r in rows}
    return out


def _from_source(source, counts, stride, operator):
    """(catalog frame, counts, stride, (call unit, {ext column: unit})) from a declaration or a catalog frame."""
    from ..contract import Declaration, catalog, catalog_counts, catalog_width

    if not isinstance(source, Declaration):
        if not isinstance(source, pd.DataFrame):
            raise ValueError(f"catalog_heatmap: give a Declaration or a catalog DataFrame, got {type(source).__name__}")
        ext = [c for c in source.columns if c.startswith("ext_")]
        return source, counts, stride, ("frames", {c: "frames" for c in ext})
    decl = source
    if not decl.operators:
        raise ValueError(f"catalog_heatmap: the {decl.model} declaration has no operator")
    op = decl.operator(operator) if operator is not None else decl.operators[0]
    if not op.reads:
        raise ValueError(f"catalog_heatmap: operator {op.name!r} reads no cached region; nothing to grid")
    if stride is None:  # the flush bound of a region counted in the call's own unit
        same = [r for r in dict.fromkeys(op.reads) if decl.region(r).clock == op.clock]
        stride = catalog_width(decl, same[0]).get("s") if same else None
    cat = catalog(decl, op.name)
    units = {c: decl.region(c[4:]).clock for c in cat.columns if c.startswith("ext_")}
    return cat, catalog_counts(decl, op.name) if counts is None else counts, stride, (op.clock, units)


def _clock_title(clock) -> str:
    """An axis title for a clock row: its name, with the unit when it names one in brackets."""
    c = str(clock)
    return c if "(" in c else f"{c} (value)"


def catalog_heatmap(source, counts: dict | None = None, stride: int | None = None,
                    options: FigureOptions | None = None, *, operator: str | None = None) -> go.Figure:
    """An operator's catalog as a grid: one row per cached-extent class, one column per call size f.

    ``source``: a :class:`~cadencelab.contract.Declaration` (with ``operator``, default its first): the catalog,
    its counts, the flush bound s_r and every unit are derived from it; or the
    :func:`cadencelab.contract.catalog` frame of one operator (kind, f, admitted, ext_<region> columns; units
    then read as frames). A row is one combination of the extents of every region the operator reads (one
    region: its extent; several: each region's, those with equal extents named together). The priming row,
    cache-free and eager by construction, is counted in the caption, not drawn. Each cell is "steady" (the
    steady call size), "flush (admitted)" or "rejected (eager)" (a flush above the admission predicate); a
    steady call and a flush of the same size share one cell (and one label). ``counts``: the operator's
    :func:`cadencelab.contract.catalog_counts` (checked against the grid: a mismatch raises); ``stride``: the
    per-call advance s_r of a region on the operator's clock, for the caption's bound.

    Traces: the heatmap and one legend entry per cell kind present.
    """
    opts = options or FigureOptions()
    catalog_df, counts, stride, units = _from_source(source, counts, stride, operator)
    require_columns(catalog_df, ["kind", "f", "admitted"], "catalog_heatmap")
    ext = [c for c in catalog_df.columns if c.startswith("ext_")]
    if not ext:
        raise ValueError(f"catalog_heatmap: no ext_<region> column; got {list(catalog_df.columns)} "
                         "(pass cadencelab.contract.catalog(decl, operator))")
    df = catalog_df[catalog_df["kind"].isin(["steady", "flush"])].copy()
    require_rows(df, "catalog_heatmap", "the catalog has no steady or flush rows")
    op = str(catalog_df["operator"].iloc[0]) if "operator" in catalog_df.columns else "operator"
    call_unit, ext_units = units
    rows = [tuple(int(v) for v in row) for row in df[ext].itertuples(index=False)]
    one = len(ext) == 1 or (len(set(ext_units.values())) == 1 and all(len(set(r)) == 1 for r in rows))
    names = [c[4:] for c in ext]
    region = (names[0] if len(ext) == 1 else " and ".join(names) + " (equal in every class)") if one \
        else f"the {len(ext)} regions it reads"
    labels = extent_labels(sorted(set(rows)), names[:1] if one else names) if not one else \
        {r: str(r[0]) for r in set(rows)}
    df["extent"] = [labels[r] for r in rows]
    order = {lab: r for r, lab in labels.items()}
    df["f"] = df["f"].astype(int)
    extents = sorted(set(df["extent"]), key=order.get)
    sizes = sorted(set(df["f"]))
    code = {"flush (admitted)": 0, "steady": 1, "rejected (eager)": 2}
    z = np.full((len(extents), len(sizes)), np.nan)
    text = [["" for _ in sizes] for _ in extents]
    rank = {"steady": 2, "rejected (eager)": 1, "flush (admitted)": 0}  # a cell shows its strongest kind
    cell: dict[tuple[int, int], str] = {}
    for r in df.itertuples(index=False):
        key = (extents.index(r.extent), sizes.index(r.f))
        kind = "steady" if r.kind == "steady" else ("flush (admitted)" if bool(r.admitted) else "rejected (eager)")
        if key not in cell or rank[kind] > rank[cell[key]]:
            cell[key] = kind
    for (i, j), kind in cell.items():
        z[i, j] = code[kind]
        text[i][j] = {"steady": "S", "rejected (eager)": "✗", "flush (admitted)": ""}[kind]
    colors = list(CATALOG_CELL_COLORS.values())
    scale = [[0.0, colors[1]], [0.333, colors[1]], [0.334, colors[0]], [0.666, colors[0]], [0.667, colors[2]],
             [1.0, colors[2]]]
    fig = go.Figure(go.Heatmap(
        x=[str(f) for f in sizes], y=[str(e) for e in extents], z=z.tolist(), text=text, texttemplate="%{text}",
        zmin=0, zmax=2, colorscale=scale, showscale=False, xgap=1, ygap=3, name="catalog",
        hovertemplate=f"cached extent %{{y}}<br>call f=%{{x}} {call_unit}<br>%{{text}}<extra></extra>",
    ))
    present = {int(v) for v in z[~np.isnan(z)].ravel()}
    for kind, c in code.items():
        if c in present:
            fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=kind,
                                     marker=dict(symbol="square", size=12, color=CATALOG_CELL_COLORS[kind])))
    fig.update_xaxes(type="category", title_text=f"call size f ({call_unit} per call)")
    fig.update_yaxes(type="category", title_text="cached extent (" + (next(iter(ext_units.values())) if one
                                                                        else "each region, in its clock's ticks") + ")")
    fig.update_layout(legend_title_text="cell", height=opts.height or 260 + 45 * len(extents), plot_bgcolor="white")
    k = len(extents)
    n_steady = int((df["kind"] == "steady").sum())
    fl = df[df["kind"] == "flush"]
    n_fa, n_fr = int(fl["admitted"].astype(bool).sum()), int((~fl["admitted"].astype(bool)).sum())
    steady_f = sorted(set(df.loc[df["kind"] == "steady", "f"]))
    shared = int(len(fl[fl["f"].isin(steady_f) & fl["admitted"].astype(bool)]))
    labels = n_steady + n_fa - shared
    if counts is not None:
        want = dict(steady=counts.get("steady"), flush_admitted=counts.get("flush_admitted"),
                    flush_rejected=counts.get("flush_rejected"), admitted_classes=counts.get("admitted_classes"))
        got = dict(steady=n_steady, flush_admitted=n_fa, flush_rejected=n_fr, admitted_classes=labels)
        bad = {key: (got[key], want[key]) for key in want if want[key] is not None and got[key] != want[key]}
        if bad:
            raise ValueError(f"catalog_heatmap: {op}: the grid does not match the derived counts "
                             f"(grid, derived): {bad}")
    n_prime = int((catalog_df["kind"] == "priming").sum())
    flush_sizes = sorted(set(fl["f"]))
    unit = f" {next(iter(ext_units.values()))}" if one else ""
    cap = (f"{op}: K = {k} cached extents of {region} ({'; '.join(map(str, extents))}{unit}: the rows) are the "
           f"steady shape classes; every steady call has f = {', '.join(map(str, steady_f))} {call_unit}. ")
    if flush_sizes:
        cap += (f"A flush at a turn's end may carry any of {len(flush_sizes)} sizes f ({flush_sizes[0]}-"
                f"{flush_sizes[-1]}), at each extent: {k} × {len(flush_sizes)} = {len(fl)} flush cells, {n_fa} "
                f"admitted and {n_fr} rejected (above the admission predicate: eager). ")
    else:
        cap += "No flush is declared: every call is a steady one. "
    cap += (f"Admitted rows: {n_steady} steady + {n_fa} flush = {n_steady + n_fa}; the steady call and the flush of "
            f"the same size share a label, so {labels} distinct admitted signatures.")
    if stride is not None and flush_sizes:
        cap += (f" The paper bounds flushes at s_r = {stride} extra classes per extent: {len(flush_sizes)} flush "
                f"sizes here ({'within' if len(flush_sizes) <= stride else 'OVER'} the bound).")
    if n_prime:
        cap += f" Not drawn: {n_prime} priming call (cache-free, eager by construction)."
    set_caption(fig, cap)
    return opts.apply(fig, f"Signature catalog of {op}: cached extent × call size")
