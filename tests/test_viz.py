"""cadencelab.viz: every figure builds from small frames, with the expected traces and lines."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest

from cadencelab import viz
from cadencelab.profile import gaps, load_trace, rho_table

FIXTURES = Path(__file__).parent / "fixtures" / "traces"
STAGES = ["backbone", "speech_decoder", "flow_encoder", "cfm_loop", "vocoder_core", "finalize"]


def _stages() -> pd.DataFrame:
    measured = dict(start_ms=[0, 300, 520, 560, 760, 950], dur_ms=[300, 220, 40, 200, 190, 191])
    paper = dict(start_ms=[0, 280, 480, 510, 600, 680], dur_ms=[280, 200, 30, 90, 80, 20])
    return pd.concat([pd.DataFrame({"stage": STAGES, **measured, "source": "measured"}),
                      pd.DataFrame({"stage": STAGES, **paper, "source": "paper"})], ignore_index=True)


def _arms() -> pd.DataFrame:
    return pd.DataFrame({
        "arm": ["stock", "S", "R", "SRc", "bucketed"],
        "lat_ms": [240.0, 239.0, 100.0, 84.8, 121.0], "lat_lo": [238.0, 236.0, 98.0, 84.5, 119.0],
        "lat_hi": [242.0, 242.0, 102.0, 85.3, 123.0],
        "peak_MiB": [1000.0, 600.0, 1700.0, 615.0, 1070.0], "peak_lo": [990.0, 590.0, 1690.0, 610.0, 1060.0],
        "peak_hi": [1010.0, 610.0, 1710.0, 620.0, 1080.0],
        "exact": [True, True, True, True, False],
    })


def _timeline_frames():
    eager, graph = load_trace(FIXTURES / "eager_host_wait.json"), load_trace(FIXTURES / "graph_replay.json")
    k = pd.concat([eager.kernels.assign(variant="eager"), graph.kernels.assign(variant="replay")], ignore_index=True)
    g = pd.concat([gaps(eager).assign(variant="eager"), gaps(graph).assign(variant="replay")], ignore_index=True)
    return k, g


# ----------------------------------------------------------------------------------------------
# waterfall
# ----------------------------------------------------------------------------------------------


def test_waterfall_grouped_two_sources():
    fig = viz.waterfall(_stages(), cadence_ms=1000)
    assert isinstance(fig, go.Figure) and len(fig.data) == 2
    assert [t.name for t in fig.data] == ["measured", "paper"] and fig.layout.barmode == "group"
    (line,) = fig.layout.shapes
    assert line.x0 == line.x1 == 1000.0
    measured = fig.data[0]
    assert list(measured.base) == [0, 300, 520, 560, 760, 950] and list(measured.x)[-1] == 191
    assert list(fig.layout.yaxis.categoryarray) == STAGES[::-1]          # first stage on top


def test_waterfall_facets_and_single_source():
    fig = viz.waterfall(_stages(), options=viz.WaterfallOptions(layout="facets", title="one second"))
    assert len(fig.data) == 2 and len(fig.layout.shapes) == 2 and fig.layout.title.text == "one second"
    assert fig.data[1].xaxis == "x2"
    single = viz.waterfall(_stages().query("source == 'paper'").drop(columns="source"), cadence_ms=None)
    assert len(single.data) == 1 and len(single.layout.shapes) == 0


def test_waterfall_checks_columns():
    with pytest.raises(ValueError, match=r"waterfall: missing columns \['dur_ms'\]"):
        viz.waterfall(_stages().drop(columns="dur_ms"))
    with pytest.raises(ValueError, match="layout"):
        viz.waterfall(_stages(), options=viz.WaterfallOptions(layout="stacked"))


# ----------------------------------------------------------------------------------------------
# kernel timeline
# ----------------------------------------------------------------------------------------------


def test_kernel_timeline_eager_vs_replay():
    k, g = _timeline_frames()
    fig = viz.kernel_timeline(k, g)
    # per variant: one bar trace per op kind present (legend by kind), then the gap categories
    assert [t.name for t in fig.data] == ["kernel", "host_wait", "kernel_wait", "other",
                                          "kernel", "memcpy DtoH", "host_wait", "kernel_wait"]
    eager_k, replay_k, replay_copy = fig.data[0], fig.data[4], fig.data[5]
    assert eager_k.xaxis == "x" and replay_k.xaxis == "x2"
    assert fig.layout.xaxis2.matches == "x"                # one shared time scale for both panels
    assert list(eager_k.base)[:2] == [0.0, 25.0]          # µs since the first eager kernel (20 us)
    assert list(replay_k.base)[1] == 20.0                  # cfm_a at 30 us, replay origin 10 us
    assert list(replay_copy.base) == [60.0]                # the DtoH memcpy, drawn as what it is
    assert set(eager_k.y) == {"stream 7", "stream 8"}
    host = fig.data[1]
    assert list(host.x) == [15.0, 14.0] and set(host.y) == {"idle"}
    assert sum(t.showlegend for t in fig.data if t.name == "host_wait") == 1
    assert sum(t.showlegend for t in fig.data if t.name == "kernel") == 1   # one legend entry per kind
    assert fig.layout.legend.title.text == "op kind / idle gap"
    assert fig.layout.xaxis2.title.text == "time since window start (µs)"
    assert "one time axis" in viz.caption(fig)


def test_kernel_timeline_single_variant_without_gaps():
    k, _ = _timeline_frames()
    one = k[k["variant"] == "eager"].drop(columns=["variant", "end_ns"])     # dur_ns is enough
    fig = viz.kernel_timeline(one, label="launcher", options=viz.TimelineOptions(origin_ns=0))
    assert len(fig.data) == 1 and list(fig.data[0].base)[0] == 20.0
    assert "aten::mm" in list(fig.data[0].text)


def test_kernel_timeline_checks():
    k, g = _timeline_frames()
    with pytest.raises(ValueError, match=r"missing columns \['start_ns'\]"):
        viz.kernel_timeline(k.drop(columns="start_ns"))
    with pytest.raises(ValueError, match="needs a 'variant' column"):
        viz.kernel_timeline(k, g.drop(columns="variant"))
    with pytest.raises(ValueError, match="no rows"):
        viz.kernel_timeline(k.iloc[0:0])
    with pytest.raises(ValueError, match="max_events"):
        viz.kernel_timeline(k, options=viz.TimelineOptions(max_events=3))


# ----------------------------------------------------------------------------------------------
# rho, catalog
# ----------------------------------------------------------------------------------------------


def test_rho_bars():
    regions = pd.DataFrame({"region": ["carry", "prompt"], "reserved_bytes": [16 * 1000 * 1024, 2 << 20],
                            "live_bytes": [10 * 458 * 1024, 2 << 20]})
    fig = viz.rho_bars(rho_table(regions))
    assert [t.name for t in fig.data] == ["reserved", "live (declared)"]
    assert list(fig.data[0].text) == [f"ρ={16000 / 4580:.2f}", "ρ=1.00"]
    assert list(fig.data[1].y) == [10 * 458 / 1024, 2.0]                 # MiB
    assert len(viz.rho_bars(regions).data) == 2                           # rho computed when absent
    with pytest.raises(ValueError, match=r"missing columns \['reserved_bytes'\]"):
        viz.rho_bars(regions.drop(columns="reserved_bytes"))


def test_catalog_grid():
    cat = pd.DataFrame({
        "clock": ["attended_frames"] * 4 + ["solver_step"] * 2,
        "value": [352, 302, 402, 452, 0, 1],
        "class_id": [1, 0, 2, -1, 0, 0],
        "admitted": [True, True, True, False, True, True],
    })
    fig = viz.catalog_grid(cat)
    assert len(fig.data) == 2 and all(isinstance(t, go.Heatmap) for t in fig.data)
    frames = fig.data[0]
    assert list(frames.x) == ["302", "352", "402", "452"]                # numeric order
    assert list(frames.text[0]) == ["0", "1", "2", "✗"]
    assert np.isnan(frames.z[0][3])
    with pytest.raises(ValueError, match="listed twice"):
        viz.catalog_grid(pd.concat([cat, cat.iloc[:1]]))
    with pytest.raises(ValueError, match=r"missing columns \['class_id'\]"):
        viz.catalog_grid(cat.drop(columns="class_id"))


# ----------------------------------------------------------------------------------------------
# pareto, capacity
# ----------------------------------------------------------------------------------------------


def test_pareto_marks_non_exact_arms_and_draws_frontier():
    fig = viz.pareto(_arms())
    assert [t.name for t in fig.data][:3] == ["bit-exact", "not bit-exact", "frontier"]
    exact, inexact, front, interval = fig.data
    assert list(inexact.text) == ["bucketed"] and inexact.marker.symbol == "x-open"
    assert list(exact.error_x.array) == pytest.approx([2.0, 3.0, 2.0, 0.5])
    assert list(exact.error_x.arrayminus) == pytest.approx([2.0, 3.0, 2.0, 0.3])
    assert list(front.x) == [84.8, 239.0] and list(front.y) == [615.0, 600.0]
    # the interval kind is named in the legend and the caption
    assert interval.name.startswith("error bars: paired bootstrap 95%")
    assert "Error bars: paired bootstrap 95%" in viz.caption(fig)
    assert sorted(a.text for a in fig.layout.annotations) == sorted(_arms()["arm"])
    plain = viz.pareto(_arms().drop(columns=["exact", "lat_lo", "lat_hi", "peak_lo", "peak_hi"]),
                       options=viz.ParetoOptions(frontier=False))
    assert [t.name for t in plain.data] == ["arms"] and plain.data[0].error_x.array is None
    assert "Error bars" not in viz.caption(plain)


def test_pareto_checks():
    with pytest.raises(ValueError, match=r"missing columns \['peak_MiB'\]"):
        viz.pareto(_arms().drop(columns="peak_MiB"))
    with pytest.raises(ValueError, match="both lat_lo and lat_hi"):
        viz.pareto(_arms().drop(columns="lat_hi"))
    with pytest.raises(ValueError, match="outside"):
        viz.pareto(_arms().assign(lat_lo=500.0))


def test_capacity_lines():
    df = pd.DataFrame({"sessions": [1, 2, 4, 1, 2, 4], "arm": ["stock"] * 3 + ["SRc"] * 3,
                       "p95_chunk_ms": [1130.0, 2100, 4000, 976, 1200, 1900]})
    fig = viz.capacity_lines(df)
    assert [t.name for t in fig.data] == ["stock", "SRc"] and len(fig.layout.shapes) == 1
    assert fig.layout.shapes[0].y0 == 1000.0
    mem = df.rename(columns={"p95_chunk_ms": "peak_MiB"}).assign(peak_MiB_lo=lambda d: d.peak_MiB - 10,
                                                                  peak_MiB_hi=lambda d: d.peak_MiB + 10)
    fig2 = viz.capacity_lines(mem, metric="peak_MiB", cadence_ms=143_000,
                              options=viz.CapacityOptions(hline_label="device memory"))
    assert len(fig2.data) == 2 and list(fig2.data[0].error_y.array) == [10.0] * 3
    assert "device memory" in fig2.layout.annotations[0].text
    with pytest.raises(ValueError, match=r"missing columns \['sessions'\]"):
        viz.capacity_lines(df.drop(columns="sessions"))


# ----------------------------------------------------------------------------------------------
# Library hygiene
# ----------------------------------------------------------------------------------------------


def test_library_never_shows_figures():
    root = Path(viz.__file__).resolve().parents[1]
    offenders = [str(p) for sub in ("viz", "profile") for p in (root / sub).glob("*.py")
                 if re.search(r"\.show\(", p.read_text())]
    assert offenders == []


def test_soak_panel_marks_mismatches_and_warmup():
    df = pd.DataFrame(dict(chunk=range(6), warmup=[True, True, False, False, False, False],
                           exact_i16=[True, True, True, False, True, True],
                           peak_bytes=[2 ** 30] * 6, allocated_bytes=[2 ** 29] * 6,
                           latency_ms=[900.0, 80, 75, 74, 76, 75], latency_ms_ref=[400.0, 350, 360, 355, 352, 351]))
    fig = viz.soak_panel(df)
    assert [t.name for t in fig.data] == ["peak allocated", "allocated", "arm", "reference", "PCM differs"]
    assert list(fig.data[-1].x) == [3]
    assert fig.layout.title.text == "Soak: 5/6 chunks bit-exact"
    assert len(fig.layout.shapes) == 2  # the warm-up band, on each panel
    with pytest.raises(ValueError, match="peak_bytes"):
        viz.soak_panel(df.drop(columns="peak_bytes"))
