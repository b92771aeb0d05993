"""The teaching figures: units on every axis, legends by op kind, captions, labels that never
overlap, and the kernel figures built on the recorded H200 traces."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest

from cadencelab import viz
from cadencelab.contract import catalog, catalog_counts, catalog_width
from cadencelab.adapters.token2wav.clocks import token2wav_declaration
from cadencelab.course import data
from cadencelab.profile import (
    align_kernels,
    cadence_diff,
    duration_histogram,
    launch_cost_estimate,
)
from cadencelab.viz.options import (
    annotation_boxes,
    boxes_overlap,
    plot_area_px,
    to_paper,
)

H200_DIR = Path(__file__).resolve().parents[1] / "data" / "h200"
UNIT = ("(ms", "(µs", "(MiB", "(frames", "(count", "(index", "(value")


def _axes(fig):
    return [fig.layout[k] for k in fig.layout if k.startswith(("xaxis", "yaxis"))]


def _titles(fig):
    return [a.title.text for a in _axes(fig) if a.title.text]


def _no_raw_titles(fig):
    for t in _titles(fig):
        assert t != "value" and "_" not in t, t


# ---------------------------------------------------------------------------------------------
# kernel figures on the recorded chunk
# ---------------------------------------------------------------------------------------------


def test_kernel_pairs_on_recorded_chunk(streams):
    al = align_kernels(streams["B0"], streams["SRc"], ("B0", "SRc"))
    fig = viz.kernel_pairs(al, start=400, count=40)  # a window with a host-to-device copy B0 alone makes
    names = [t.name for t in fig.data]
    assert "kernel" in names and "same op (aligned)" in names and "only one side runs it" in names
    assert "memcpy HtoD" in names
    solo = next(t for t in fig.data if t.name == "only one side runs it")
    assert any("memcpy" in t.lower() or "Memcpy" in t for t in solo.text)
    # every join goes from a B0 op to the SRc op with the same normalised name
    w = al.iloc[400:440]
    eq = w[w["op"] == "equal"]
    joins = next(t for t in fig.data if t.name == "same op (aligned)")
    assert len([y for y in joins.y if y == "B0"]) == len(eq)
    assert fig.layout.xaxis.title.text.endswith("(µs)") and fig.layout.legend.title.text == "op kind"
    assert "never by index" in viz.caption(fig) and "11506 vs 11682 kernels" in viz.caption(fig)
    with pytest.raises(ValueError, match="align_kernels"):
        viz.kernel_pairs(pd.DataFrame({"op": ["equal"]}))
    with pytest.raises(ValueError, match="past the"):
        viz.kernel_pairs(al, start=len(al) + 5)


def test_kernel_timeline_of_both_chunks_shares_one_axis_and_compresses(streams):
    k = pd.concat([streams["B0"].assign(variant="B0"), streams["SRc"].assign(variant="SRc")], ignore_index=True)
    fig = viz.kernel_timeline(k, options=viz.TimelineOptions(max_events=30_000))
    assert fig.layout.xaxis2.matches == "x"
    legend = [t.name for t in fig.data if t.showlegend]
    assert legend[:2] == ["kernel", "copy kernel"] and "memcpy HtoD" in legend and "memset" in legend
    ends = {}
    for t in fig.data:
        ax = "B0" if t.xaxis == "x" else "SRc"
        ends[ax] = max(ends.get(ax, 0.0), float(np.max(np.asarray(t.base) + np.asarray(t.x))))
    assert ends["SRc"] < ends["B0"] / 5  # the same chunk, far shorter on the same scale


def test_duration_and_launch_cost_figures(streams, chunk):
    h = duration_histogram(streams)
    fig = viz.duration_bars(h)
    assert [t.name for t in fig.data] == ["B0", "SRc"]
    x = fig.layout.xaxis
    assert x.type == "category" and list(fig.data[0].x)[4:7] == ["5.6–10 µs", "10–18 µs", "18–32 µs"]
    assert x.title.text == "device-op duration (µs; bins equal on a log scale)"
    assert fig.layout.yaxis.title.text == "device ops per bin (count)"
    assert "12,527 ops" in viz.caption(fig)
    assert viz.duration_bars(h, metric="busy_us").layout.yaxis.title.text == "device time in the bin (µs)"
    with pytest.raises(ValueError, match="metric"):
        viz.duration_bars(h, metric="value")
    est = launch_cost_estimate(chunk, "chunk", unprofiled_wall_us={"B0": 235_400.0, "SRc": 60_000.0})
    fig = viz.launch_cost_bars(est)
    assert [t.name for t in fig.data] == ["launch calls × per-call cost (estimate)", "measured idle (wall − busy)",
                                          "of which host wait"]
    assert fig.data[0].text[0].startswith("12,527 host calls (11,506 launches + 1,021 copies) × ")
    assert fig.layout.yaxis.title.text == "time per window (ms)"
    assert "profiled / unprofiled wall: B0 2.03x" in viz.caption(fig)
    assert "B0 0.88 profiled vs 0.76 without it" in viz.caption(fig)


def test_cadence_ticks_on_recorded_duplex_seconds():
    from cadencelab.adapters.duplex.models import H200

    a, b = (data.recorded_trace(arm, "duplex") for arm in ("B0", "SRc"))
    d = cadence_diff(a, b, cfg=H200)
    fig = viz.cadence_ticks(d)
    assert [t.name for t in fig.data] == ["backbone", "speech_decoder", "flow", "vocoder"]
    flow = fig.data[2]
    assert len(flow.y) == 20 and set(flow.y) == {"B0", "SRc"}
    assert fig.layout.xaxis.title.text == "time into the second (ms)" and fig.layout.yaxis.title.text == "arm"
    label = next(a for a in fig.layout.annotations if a.text.startswith("cadence"))
    assert label.yref == "paper" and label.yanchor == "bottom" and label.y == 1  # over the plot, under the title
    assert fig.layout.title.text and fig.layout.margin.t >= 90                    # room for both
    assert "SRc ends at" in viz.caption(fig) and "B0 ends at" in viz.caption(fig)


# ---------------------------------------------------------------------------------------------
# catalog, pareto, waterfall, capacity, soak: axes, legends, captions
# ---------------------------------------------------------------------------------------------


def test_catalog_heatmap_reconciles_K_with_admitted_signatures():
    decl = token2wav_declaration()
    cat, counts = catalog(decl, "flow_chunk"), catalog_counts(decl, "flow_chunk")
    stride = catalog_width(decl, "estimator_att_cache")["s"]
    fig = viz.catalog_heatmap(cat, counts, stride=stride)
    hm = fig.data[0]
    assert isinstance(hm, go.Heatmap)
    assert len(hm.y) == counts["steady"] == 3                     # K rows: the cached extents
    z = np.asarray(hm.z, dtype=float)
    assert int((z == 1).sum()) == counts["steady"]               # steady cells
    assert int((z == 0).sum()) + counts["steady"] == counts["flush_admitted"]  # the f = f_chunk flush is steady's
    assert int((z == 2).sum()) == counts["flush_rejected"]
    assert [t.name for t in fig.data[1:]] == ["flush (admitted)", "steady", "rejected (eager)"]
    assert fig.layout.xaxis.title.text == "call size f (frames per call)"
    assert fig.layout.yaxis.title.text == "cached extent (frames)"
    cap = viz.caption(fig)
    assert "K = 3 cached extents of estimator_att_cache" in cap and "3 steady + 69 flush = 72" in cap and "69 distinct admitted" in cap
    assert f"s_r = {stride}" in cap
    with pytest.raises(ValueError, match="does not match the derived counts"):
        viz.catalog_heatmap(cat, {**counts, "flush_rejected": 5})
    with pytest.raises(ValueError, match="no ext_<region> column"):
        viz.catalog_heatmap(cat.drop(columns=[c for c in cat.columns if c.startswith("ext_")]))


def test_catalog_grid_titles_sit_below_ticks_never_value():
    cat = pd.DataFrame({"clock": ["cached extent (frames)"] * 2 + ["call frames f"] * 2, "value": [302, 352, 6, 50],
                        "class_id": [0, 1, 0, 1]})
    fig = viz.catalog_grid(cat)
    assert len(fig.layout.annotations) == 0            # no panel titles to collide with tick labels
    assert [fig.layout.xaxis.title.text, fig.layout.xaxis2.title.text] == ["cached extent (frames)",
                                                                           "call frames f (value)"]
    _no_raw_titles(fig)


def test_pareto_labels_never_overlap_on_the_recorded_arms():
    fig = viz.pareto(data.pareto_frame())
    boxes = annotation_boxes(fig)
    assert len(boxes) == len(data.pareto_frame())
    overlaps = [(a[0], b[0]) for i, a in enumerate(boxes) for b in boxes[i + 1:] if boxes_overlap(a, b)]
    assert overlaps == []
    # no label covers a marker, and all stay inside the plot
    pw, ph = plot_area_px(fig)
    df = data.pareto_frame()
    for x, y in zip(df["lat_ms"], df["peak_MiB"]):
        px, py = to_paper(fig, x, y)
        dot = ("", px - 5 / pw, py - 5 / ph, px + 5 / pw, py + 5 / ph)
        assert not any(boxes_overlap(b, dot) for b in boxes)
    assert all(0 <= b[1] and b[3] <= 1 and 0 <= b[2] and b[4] <= 1 for b in boxes)
    assert fig.layout.xaxis.title.text == "steady-chunk latency (ms)"
    assert fig.layout.yaxis.title.text == "peak memory (MiB)"


def test_waterfall_cadence_label_inside_each_panel():
    st = pd.DataFrame({"stage": ["backbone", "synthesis"] * 2, "start_ms": [0, 500, 0, 300],
                       "dur_ms": [500, 400, 300, 100], "source": ["measured"] * 2 + ["paper"] * 2})
    fig = viz.waterfall(st, options=viz.WaterfallOptions(layout="facets"))
    cad = [a for a in fig.layout.annotations if a.text.startswith("cadence")]
    titles = [a for a in fig.layout.annotations if a.text in ("measured", "paper")]
    assert len(cad) == 2 and len(titles) == 2
    assert all(a.yref.endswith("domain") and a.y == 1 and a.yanchor == "top" for a in cad)  # under the top edge
    assert all(t.yanchor == "bottom" for t in titles)                                        # facet titles above it
    assert fig.layout.xaxis2.title.text == "time in the second (ms)"                       # under the bottom panel


def test_waterfall_facets_stack_with_whole_titles_and_no_legend():
    """Notebook 1's composed seconds: three long panel titles must neither wrap against the main title nor run
    into each other, and no legend may take the width: panels stack on one time axis, each title on one line."""
    from cadencelab.course import anatomy, frames

    composed = anatomy.label_composed(frames.anatomy_frame("exact", compose=True))
    fig = viz.waterfall(composed, options=viz.WaterfallOptions(layout="facets", title="COMPOSED seconds"))
    sources = list(dict.fromkeys(composed["source"]))
    titles = [a for a in fig.layout.annotations if a.text in sources]
    assert [t.text for t in titles] == sources                       # whole, one line each (no <br>)
    assert all(t.x == 0 and t.xanchor == "left" and t.yanchor == "bottom" for t in titles)
    assert fig.layout.showlegend is False                             # the titles name the sources
    domains = [fig.layout[f"yaxis{'' if i == 1 else i}"].domain for i in range(1, len(sources) + 1)]
    assert all(a[0] > b[1] for a, b in zip(domains, domains[1:]))    # stacked top to bottom, apart
    assert len({tr.xaxis for tr in fig.data}) == len(sources) and fig.layout.xaxis.matches == "x3"  # one time axis
    assert fig.layout.xaxis3.title.text == "time in the second (ms)"
    alone = go.Figure(fig)
    alone.layout.annotations = titles  # the titles alone (paper coordinates)
    boxes = annotation_boxes(alone)
    assert not [(a[0], b[0]) for i, a in enumerate(boxes) for b in boxes[i + 1:] if boxes_overlap(a, b)]
    assert viz.wrap_label("short", 300) == "short" and viz.wrap_label("a b c d e f g h i j", 60) == "a b c d<br>e f g h<br>i j"


def test_capacity_and_soak_axes_have_units_and_readable_ticks():
    df = pd.DataFrame({"sessions": [1, 2, 1, 2], "arm": ["B0", "B0", "SRc", "SRc"],
                       "p95_chunk_ms": [900.0, 1800, 80, 120]})
    fig = viz.capacity_lines(df)
    assert fig.layout.yaxis.title.text == "p95 chunk latency (ms)"
    assert viz.metric_title("swap_ms") == "swap (ms)" and viz.metric_title("peak_MiB") == "peak memory (MiB)"
    soak = pd.DataFrame(dict(chunk=range(4), warmup=[True, False, False, False], exact_i16=[True] * 4,
                             peak_bytes=[2 ** 30] * 4, allocated_bytes=[2 ** 29] * 4,
                             latency_ms=[900.0, 70, 75, 74]))
    fig = viz.soak_panel(soak)
    y2 = fig.layout.yaxis2
    assert y2.type == "log" and list(y2.ticktext) == ["10 ms", "100 ms", "1000 ms"]
    assert fig.layout.yaxis.title.text == "allocator (MiB)" and y2.title.text == "chunk latency (ms, log scale)"
    assert fig.layout.xaxis2.title.text == "chunk (index in the stream)"


def test_every_figure_has_a_caption_and_titled_axes(streams):
    figs = [viz.rho_bars(pd.DataFrame({"region": ["carry"], "reserved_bytes": [2 << 20], "live_bytes": [1 << 20]})),
            viz.pareto(data.pareto_frame()),
            viz.duration_bars(duration_histogram(streams))]
    for fig in figs:
        assert len(viz.caption(fig)) > 40
        titles = _titles(fig)
        assert titles and all(any(u in t for u in UNIT) or t in ("state region", "variant", "arm", "stage")
                              for t in titles), titles
        _no_raw_titles(fig)


def test_line_labels_sit_beside_the_line_off_the_data():
    """Notebook 6's session plots and notebook 1's stage spread: the cadence label sits right of the plot, beside
    the line's end, with its unit ("cadence 1000 ms", never "cadence (ms) 1000"), so no curve or box can cross it;
    the capacity legend sits under the plot, not in the right margin the label uses."""
    from cadencelab.course import anatomy, capacity

    for fig in (capacity.capacity_figure("speak_heavy"), anatomy.stage_spread_figure("exact")):
        lab = [a for a in fig.layout.annotations if a.text.startswith("cadence")]
        assert len(lab) == 1 and lab[0].text == "cadence<br>1000 ms", [a.text for a in fig.layout.annotations]
        assert (lab[0].xref, lab[0].x, lab[0].xanchor, lab[0].yref, lab[0].y) == ("paper", 1, "left", "y", 1000)
        assert fig.layout.margin.r >= len("1000 ms") * 7  # the margin holds it
    cap = capacity.capacity_figure("speak_heavy")
    assert cap.layout.legend.orientation == "h" and cap.layout.legend.y < 0
    assert "dashed: the cadence (1000 ms)" in viz.caption(cap)
    assert viz.metric_unit("p95_chunk_ms") == "ms" and viz.metric_unit("goodput") == ""


def test_soak_warmup_is_named_in_the_legend_not_on_the_lines():
    """Notebook 4's soak: no 'warm-up' text on the plot (the peak line struck it through), a legend entry instead."""
    fig = viz.soak_panel(data.soak_chunks())
    assert not [a for a in fig.layout.annotations if "warm" in str(a.text)]
    shaded = [s for s in fig.layout.shapes if s.name and s.name.startswith("warm-up")]
    assert len(shaded) == 2 and [s.showlegend for s in shaded] == [True, False]
    assert shaded[0].name == "warm-up (chunks 0-63, shaded)"


def test_counts_get_whole_number_ticks():
    """Notebook 2's K chart: a count of classes is ticked 0, 1, 2, ..., never 3.2 or 3.4."""
    from cadencelab.course.predict import Prediction, reveal, reveal_figure

    k = reveal_figure(reveal(Prediction("K", unit="classes", value={"a": 3, "b": 3}), {"a": 4, "b": 4}))
    assert (k.layout.yaxis.dtick, k.layout.yaxis.tickformat, k.layout.yaxis.rangemode) == (1, "d", "tozero")
    ms = reveal_figure(reveal(Prediction("busy", unit="ms", value={"a": 200.0}), {"a": 57.25}))
    assert ms.layout.yaxis.dtick is None and ms.layout.yaxis.tickformat is None  # a time keeps plotly's ticks
    wide = viz.integer_axis(go.Figure(), [8, 11510])
    assert wide.layout.yaxis.dtick is None and wide.layout.yaxis.tickformat == "d"  # whole steps, plotly's choice


def test_kernel_timeline_caption_speaks_of_an_idle_row_only_when_drawn():
    """Notebook 6's lanes figure has no idle row: its caption must not describe one."""
    from cadencelab.course.frames import lanes_window

    lanes = viz.kernel_timeline(lanes_window(data.recorded_trace("SRl", "lanes")), label="name")
    assert "idle row" not in viz.caption(lanes) and "one row per CUDA stream" in viz.caption(lanes)
    assert lanes.layout.legend.title.text == "op kind"
    k = pd.DataFrame({"name": ["a", "b"], "start_ns": [0, 2000], "end_ns": [1000, 3000]})
    g = pd.DataFrame({"start_ns": [1000], "end_ns": [2000], "category": ["host_wait"]})
    with_gaps = viz.kernel_timeline(k, gaps_df=g)
    assert "idle row" in viz.caption(with_gaps) and with_gaps.layout.legend.title.text == "op kind / idle gap"


def test_catalog_heatmap_takes_a_declaration_with_several_regions_and_its_units():
    """A declaration in: the catalog, counts and units derived from it. Mimi's decoder reads nine regions on two
    clocks (a row names each extent with its regions; the call size is in the operator's frames); the
    Freeze-style carry counts in tokens, and its flush bound is a token region's."""
    from cadencelab.adapters.freeze_style import kit_declaration
    from cadencelab.adapters.mimi import declaration as mimi_declaration

    fig = viz.catalog_heatmap(mimi_declaration(), operator="decode_frame")
    assert list(fig.data[0].y) == ["decoder_kv_0 +7 250; conv_left_context 6"]
    assert fig.layout.xaxis.title.text == "call size f (frames per call)"
    assert fig.layout.yaxis.title.text == "cached extent (each region, in its clock's ticks)"
    cap = viz.caption(fig)
    assert "the 9 regions it reads" in cap and "No flush is declared" in cap and "s_r" not in cap
    fig = viz.catalog_heatmap(kit_declaration())
    assert list(fig.data[0].y) == ["0", "20"] and fig.layout.xaxis.title.text == "call size f (tokens per call)"
    assert "(0; 20 tokens: the rows)" in viz.caption(fig) and "s_r = 20" in viz.caption(fig)
    assert viz.extent_labels([(1, 1, 2, 2), (1, 2, 1, 2)], ["a", "b", "c", "d"]) == {
        (1, 1, 2, 2): "a +1 1; c +1 2", (1, 2, 1, 2): "a +1 1; b +1 2"}
    clash = viz.extent_labels([(1, 2, 2, 1), (1, 2, 1, 2)], ["a", "b", "c", "d"])  # compact labels would be equal
    assert clash == {(1, 2, 2, 1): "a 1; b 2; c 2; d 1", (1, 2, 1, 2): "a 1; b 2; c 1; d 2"}
    with pytest.raises(ValueError, match="Declaration or a catalog DataFrame"):
        viz.catalog_heatmap([1, 2])


def test_waterfall_names_its_span():
    st = pd.DataFrame({"stage": ["encode", "decode"], "start_ms": [0.0, 1.0], "dur_ms": [1.0, 2.0]})
    fig = viz.waterfall(st, cadence_ms=80.0, span="call")
    assert fig.layout.xaxis.title.text == "time in the call (ms)"
    assert "second" not in viz.caption(fig) and "the 80 ms cadence the call must fit in" in viz.caption(fig)
