"""Widget callbacks, called directly (no browser): rules panel, clock sliders, timeline player,
and the frames and figures the course builds them from. Numbers are worked by hand."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest

pytest.importorskip("ipywidgets")

from cadencelab import viz  # noqa: E402
from cadencelab.course import data, frames, live, panels, player  # noqa: E402
from cadencelab.profile import events  # noqa: E402
from cadencelab.adapters.token2wav.clocks import T2W_CLOCKS, token2wav_declaration
from sizes import CPU_STEPS  # noqa: E402


def _selected(fig: go.Figure) -> tuple[float, float]:
    tr = [t for t in fig.data if t.name == "selected"]
    assert len(tr) == 1
    return float(tr[0].x[0]), float(tr[0].y[0])


# ---------------------------------------------------------------------------------------
# rules panel
# ---------------------------------------------------------------------------------------


def test_arm_for_names_every_cell():
    assert frames.arm_for(False, False, "step") == frames.arm_for(False, False, "chunk") == "B0"
    assert frames.arm_for(True, False) == "S"
    assert frames.arm_for(False, True, "step") == "R" and frames.arm_for(False, True, "chunk") == "Rc"
    assert frames.arm_for(True, True, "step") == "SR" and frames.arm_for(True, True, "chunk") == "SRc"
    with pytest.raises(ValueError, match="granularity"):
        frames.arm_for(True, True, "token")


def _toy_frame():
    df = pd.DataFrame(dict(arm=["B0", "S", "R", "Rc", "SR", "SRc"], lat_ms=[300.0, 301.0, 80.0, 75.0, 78.0, 70.0],
                           peak_MiB=[4000.0, 1500.0, 4500.0, 12000.0, 1600.0, 1400.0], exact=[True] * 5 + [False]))
    df.attrs["n_steps"] = 10
    return df


def test_rules_panel_callbacks_move_the_point_without_widgets():
    p = panels.RulesPanel(_toy_frame(), build=False)
    assert p.arm == "SRc" and p.point()["lat_ms"] == 70.0 and not p.point()["exact"]
    assert _selected(p.figure()) == (70.0, 1400.0)
    q = p.set(state_rule=False)  # replay without the state rule, chunk granularity
    assert q["arm"] == "Rc" and (q["lat_ms"], q["peak_MiB"]) == (75.0, 12000.0)
    assert _selected(p.figure()) == (75.0, 12000.0)
    assert p.set(replay=False)["arm"] == "B0"
    assert p.set(granularity="step")["arm"] == "B0"  # granularity means nothing without replay
    assert p.set(replay=True)["arm"] == "R"
    assert [h["arm"] for h in p.history] == ["Rc", "B0", "B0", "R"]


def test_rules_panel_declared_bindings_and_steps():
    p = panels.RulesPanel(_toy_frame(), build=False)
    # chunk granularity: flow_chunk K=3 + vocoder_core K=2; step: encoder 3 + estimator 3 x steps + vocoder 2
    assert p.point()["steady_bindings"] == 5
    assert p.set(granularity="step")["steady_bindings"] == 3 + 3 * 10 + 2
    q = p.set(steps=6)
    assert q["steady_bindings"] == 3 + 3 * 6 + 2 and q["measured_at_steps"] == 10
    assert "n_steps=10 only" in q["note"] and q["lat_ms"] == 78.0  # no live measurement: the recorded point stays
    # state rule: the declared solver workspace (6 x 16 x 2 x 8 x 458 x 128 float32) vs the stock 16 x 1000
    assert q["solver_workspace_MiB"] == pytest.approx(6 * 16 * 2 * 8 * 458 * 128 * 4 / 2**20)
    assert p.set(state_rule=False)["solver_workspace_MiB"] == pytest.approx(16 * 16 * 2 * 8 * 1000 * 128 * 4 / 2**20)


def test_rules_panel_uses_a_live_measurement_for_other_steps():
    calls = []

    def measure(steps):
        calls.append(steps)
        f = _toy_frame()
        f["lat_ms"] = f["lat_ms"] * steps / 10
        return f

    p = panels.RulesPanel(_toy_frame(), measure=measure, build=False)
    q = p.set(steps=5)
    assert calls == [5] and q["lat_ms"] == 35.0 and q["note"] == "" and q["measured_at_steps"] == 5
    p.set(steps=10)
    p.set(steps=5)
    assert calls == [5]  # cached


def test_rules_panel_shows_the_recorded_value_when_a_live_arm_failed():
    # Found running notebook 5 live on the H200: one arm's live run failed and the panel raised.
    live = _toy_frame()
    live = live[live["arm"] != "R"].reset_index(drop=True)
    live.attrs.update(n_steps=10, failed={"R": "block timeout"}, source="live")
    recorded = _toy_frame()
    recorded.attrs.update(n_steps=10, source="recorded on an H200")
    p = panels.RulesPanel(live, measure=lambda steps: live, build=False, fallback=recorded)
    q = p.set(state_rule=False, replay=True, granularity="step")
    assert q["arm"] == "R" and q["source"] == "recorded on an H200"
    assert "live run of R failed (block timeout)" in q["note"]
    assert p.set(state_rule=True, replay=True, granularity="chunk")["source"] == "live"
    with pytest.raises(KeyError, match="block timeout"):
        panels.RulesPanel(live, measure=lambda steps: live, build=False).set(
            state_rule=False, replay=True, granularity="step")


def test_rules_panel_reads_the_factorial_of_its_condition():
    for condition in data.CONDITIONS:
        p = panels.rules_panel(condition=condition)
        rec = data.pareto_frame(condition).set_index("arm")
        assert condition in p.source
        for arm in ("B0", "S", "SRc"):
            pt = p.set(state_rule=arm != "B0", replay=arm == "SRc", granularity="chunk")
            assert (pt["arm"], pt["lat_ms"], pt["exact"]) == (arm, rec.loc[arm, "lat_ms"], rec.loc[arm, "exact"])
    unpinned = data.pareto_frame("unpinned").set_index("arm")
    assert not unpinned.loc["SRc", "exact"]  # what notebook 5's check relies on: the panel is not pinned data


def test_rules_panel_live_measures_under_its_condition(monkeypatch):
    calls = []

    def fake(n_steps=10, condition="exact", **kw):
        calls.append((n_steps, condition))
        return _toy_frame()

    monkeypatch.setattr(live, "live_factorial", fake)
    p = panels.rules_panel(condition="unpinned", live=True)
    p.set(steps=6)
    assert calls == [(10, "unpinned"), (6, "unpinned")]
    assert "unpinned" in p.fallback.attrs["source"]


def test_rules_panel_widgets_drive_the_callbacks():
    p = panels.rules_panel()  # the recorded H200 factorial
    rec = data.pareto_frame("exact").set_index("arm")
    n = int(data.factorial("exact").set_index("arm").loc["SRc", "blocks"])
    assert "arm SRc" in p.readout.value and f"{n}/{n} blocks" in p.readout.value
    assert "faster" in p.readout.value  # the change against B0 with the claim its interval supports
    before = _selected(p.figure())
    assert before == pytest.approx((rec.loc["SRc", "lat_ms"], rec.loc["SRc", "peak_MiB"]))
    p.controls["state_rule"].value = False  # what a click does
    assert p.arm == "Rc" and "arm Rc" in p.readout.value
    after = _selected(p.figure())
    assert after == pytest.approx((rec.loc["Rc", "lat_ms"], rec.loc["Rc", "peak_MiB"]))
    assert after[1] > 9 * before[1]  # replay without the state rule: the peak explodes
    p.controls["replay"].value = False
    assert p.arm == "B0" and p.controls["granularity"].disabled
    p.controls["steps"].value = 4
    assert "a live measurement at n_steps=4 needs a CUDA device" in p.readout.value
    p.set(state_rule=True, replay=True, granularity="chunk", steps=10)  # the method updates the widgets too
    assert p.controls["state_rule"].value and p.controls["steps"].value == 10 and p.arm == "SRc"


# ---------------------------------------------------------------------------------------
# clock sliders and catalog frames
# ---------------------------------------------------------------------------------------


def test_clock_sliders_rederive():
    s = panels.ClockSliders(build=False)
    t = s.table.set_index("region")
    assert s.extents == [302, 352, 402] and t.loc["estimator_att_cache", "K"] == 3
    assert t.loc["solver_workspace", "rho"] == pytest.approx((16 * 1000) / (10 * 458))
    s.update(f_retained=150)
    assert s.extents == [302, 352, 402, 452] and "K = 4" in s.summary
    s.update(f_retained=100, f_chunk=40)  # the stride no longer divides the window: truncation adds a class
    assert s.extents == [302, 342, 382, 402]
    s.update(f_chunk=50, n_steps=4)
    assert s.table.set_index("region").loc["solver_workspace", "demand_shape"][0] == 4
    with pytest.raises(ValueError, match="whole number of tokens"):
        s.update(f_chunk=41)
    with pytest.raises(TypeError, match="unknown"):
        s.update(f_prompt=10)


def test_clock_slider_widgets_call_update():
    s = panels.clock_sliders()
    s.sliders["f_retained"].value = 150
    assert s.params["f_retained"] == 150 and "K = 4" in s.text.value and "452" in s.text.value
    assert "estimator_att_cache" in s.tab.value
    assert s.figure().data[0].name == "reserved"


def test_catalog_figure_is_the_extent_by_call_size_grid():
    """The notebooks' catalog: rows the K cached extents, columns the call sizes, flushes above f_chunk
    rejected, the counts checked against the closed form (a mismatch would raise inside)."""
    fig = frames.catalog_figure(token2wav_declaration(), "flow_chunk")
    hm = fig.data[0]
    assert list(hm.y) == ["302", "352", "402"] and "50" in list(hm.x) and "54" in list(hm.x)
    z = np.asarray(hm.z, dtype=float)
    col = list(hm.x).index("54")
    assert (z[:, col] == 2).all()  # a 54-frame flush is above the admission predicate at every extent
    assert "72" in viz.caption(fig) and "s_r = 50" in viz.caption(fig)
    from cadencelab.contract import Clock, Declaration, Operator, Region
    from cadencelab.contract.policies import SlidingWindow

    kv = Region("kv", clock="frames", shape=("frames", 4), policy=SlidingWindow(8), growth=2)
    cacheless = Declaration("m", (Clock("frames", "frame"), Clock("samples", "sample")), (kv,),
                            (Operator("op", reads=(), clock="frames", call=2),))
    with pytest.raises(ValueError, match="operator 'op' reads no cached region"):
        frames.catalog_figure(cacheless, "op")


# ---------------------------------------------------------------------------------------
# the duplex second
# ---------------------------------------------------------------------------------------


def test_overrun_table_by_hand():
    df = pd.DataFrame(dict(stage=["a", "b", "a", "b"], start_ms=[0, 700, 0, 600], dur_ms=[700, 450, 600, 300],
                           source=["x", "x", "y", "y"]))
    t = frames.overrun_table(df).set_index("source")
    assert t.loc["x", "end_ms"] == 1150 and t.loc["x", "over_ms"] == 150 and t.loc["x", "over_pct"] == pytest.approx(15)
    assert t.loc["x", "crossing_stage"] == "b" and t.loc["x", "tail_ms"] == 150
    assert t.loc["y", "over_ms"] == -100 and t.loc["y", "crossing_stage"] == "" and t.loc["y", "tail_ms"] == 0


def test_anatomy_frame_paper_and_h200():
    f = frames.anatomy_frame()
    t = frames.overrun_table(f).set_index("source")
    assert t.loc["paper (stock)", "end_ms"] == 1169 and round(t.loc["paper (stock)", "over_pct"], 1) == 16.9
    fac = data.factorial().set_index("arm")
    b0 = t[t.index.str.contains("H200 B0 ")].iloc[0]
    srcs = t[t.index.str.contains("H200 SRc ")].iloc[0]
    if (f["origin"] == "composed").any():  # no recorded duplex second: paper's 842 ms + recorded synthesis
        assert b0["end_ms"] == pytest.approx(842 + fac.loc["B0", "steady_latency_ms_median"])
        assert srcs["end_ms"] == pytest.approx(842 + fac.loc["SRc", "steady_latency_ms_median"])
    assert srcs["end_ms"] < b0["end_ms"]
    assert isinstance(viz.waterfall(f), go.Figure)
    c = frames.overrun_table(frames.anatomy_frame(compose=True)).set_index("source")
    assert c.loc["H200 B0 (composed)", "end_ms"] == pytest.approx(842 + fac.loc["B0", "steady_latency_ms_median"])
    assert c.loc["H200 SRc (composed)", "end_ms"] == pytest.approx(842 + fac.loc["SRc", "steady_latency_ms_median"])


def test_anatomy_frame_prefers_a_recorded_second(tmp_path, monkeypatch):
    import json
    import shutil

    shutil.copytree(data.data_dir() / "paper", tmp_path / "paper")
    shutil.copytree(data.data_dir() / "h200", tmp_path / "h200")
    rows = [dict(stage=s, start_ms=a, dur_ms=d, source="measured", arm=arm, parent=p, n=3)
            for arm, syn in (("B0", 330.0), ("SRc", 80.0))
            for s, a, d, p in (("backbone", 0.0, 500.0, ""), ("speech_decoder", 500.0, 300.0, ""),
                               ("synthesis", 800.0, syn, ""), ("flow", 800.0, syn - 20, "synthesis"))]
    (tmp_path / "h200" / "duplex_second.json").write_text(json.dumps(dict(medians=rows, rows=rows)))
    monkeypatch.setenv(data.DATA_ENV, str(tmp_path))
    f = frames.anatomy_frame()
    assert set(f["origin"]) == {"paper", "recorded"} and "flow" not in set(f["stage"])  # top-level stages only
    t = frames.overrun_table(f).set_index("source")
    assert t.loc["H200 B0 (recorded)", "end_ms"] == 1130 and t.loc["H200 B0 (recorded)", "crossing_stage"] == "synthesis"
    assert t.loc["H200 SRc (recorded)", "over_ms"] == -120


# ---------------------------------------------------------------------------------------
# timeline player
# ---------------------------------------------------------------------------------------


def _kernels():
    # A [0,10]; B [15,20] launched at 12 (after A ended: host_wait 5); C [22,30] launched at 18 (before B
    # ended: kernel_wait 2); D [30,31] back to back (no gap)
    eager = pd.DataFrame(dict(name=["A", "B", "C", "D"], start_ns=[0, 15, 22, 30], end_ns=[10, 20, 30, 31],
                              launch_ns=pd.array([0, 12, 18, 25], dtype="Int64"), graph=False,
                              correlation=pd.array([1, 2, 3, 4], dtype="Int64")))
    replay = pd.DataFrame(dict(name=["A", "B", "C", "D"], start_ns=[100, 111, 117, 125], end_ns=[110, 116, 125, 126],
                               launch_ns=pd.array([90] * 4, dtype="Int64"), graph=True,
                               correlation=pd.array([7] * 4, dtype="Int64")))
    return eager, replay


def test_timeline_player_accumulates_idle_by_hand():
    eager, replay = _kernels()
    p = player.TimelinePlayer(eager, replay, window=2, build=False)
    s = p.state(2).set_index("variant")
    assert s.loc["eager", "elapsed_us"] * 1e3 == 30 and s.loc["eager", "busy_us"] * 1e3 == 23
    assert s.loc["eager", "host_wait_us"] * 1e3 == 5 and s.loc["eager", "kernel_wait_us"] * 1e3 == 2
    assert s.loc["eager", "slack_frac"] == pytest.approx(7 / 30)
    # one graph launch: every gap is device-side (kernel_wait): 1 + 1 ns
    assert s.loc["replay", "idle_us"] * 1e3 == 2 and s.loc["replay", "kernel_wait_us"] * 1e3 == 2
    end = p.state(99).set_index("variant")  # clamps to the last kernel
    assert end.loc["eager", "kernel_index"] == 3 and end.loc["eager", "elapsed_us"] * 1e3 == 31
    assert end.loc["eager", "idle_us"] * 1e3 == 7
    assert p.show(1).set_index("variant").loc["eager", "kernel"] == "B" and p.k == 1
    assert p.step(5).set_index("variant").loc["eager", "kernel_index"] == 3
    fig = p.figure(1)  # window of 2: kernels A and B, the host_wait gap between them
    assert len(fig.layout.shapes) == 2  # one cursor per variant
    assert fig.layout.xaxis2.matches == "x"  # both variants on one time scale: the compression shows
    assert [t.name for t in fig.data if t.name in ("host_wait", "kernel_wait")] == ["host_wait", "kernel_wait"]
    assert not any(t.name == "host_wait" for t in p.figure(2).data)  # B, C: only the launch-latency gap
    prog = p.progress_figure()
    assert [t.name for t in prog.data] == ["eager: idle", "eager: busy", "replay: idle", "replay: busy"]


def test_timeline_player_widgets_drive_show():
    eager, replay = _kernels()
    p = player.timeline_player(eager, replay)
    p.slider.value = 2
    assert p.k == 2 and "host_wait_us" in p.readout.value.replace("<wbr>", "")  # headers may break after "_"
    p.fwd.click()
    assert p.k == 3 and p.slider.value == 3
    p.back.click()
    assert p.k == 2
    assert p.play.max == 3 and p.play.step == 1


def test_short_kernel_names():
    assert events.short_kernel_name("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float> >(x)") == \
        "native::reduce_kernel"
    assert events.short_kernel_name("Memcpy HtoD (Pageable -> Device)") == "Memcpy HtoD"
    assert events.short_kernel_name("sgemm_largek_lds64") == "sgemm_largek_lds64"


def _have_traces() -> bool:
    try:
        data.data_path("h200/trace_B0_chunk.json.gz")
        data.data_path("h200/trace_SRc_chunk.json.gz")
        return True
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not _have_traces(), reason="recorded chunk traces not in data/h200")
def test_recorded_chunk_timelines_and_player_agree_with_the_summary():
    tl = live.chunk_timelines("recorded")
    assert "kernels" in tl.what and len(tl.eager) > 1000 and len(tl.replay) > 1000
    s = tl.summary.set_index("variant")
    assert s.loc["eager", "slack_frac"] > 0.5 > s.loc["replay", "slack_frac"]
    assert s.loc["replay", "graph_launches"] >= 1 and s.loc["eager", "graph_launches"] == 0
    p = player.TimelinePlayer(tl.eager, tl.replay, build=False)
    end = p.state(p.n).set_index("variant")
    for v in ("eager", "replay"):  # idle between the first and last kernel = wall - busy - the window's edges
        assert end.loc[v, "idle_us"] == pytest.approx(s.loc[v, "wall_us"] - s.loc[v, "busy_us"] - s.loc[v, "other_idle_us"],
                                                      rel=0.01)
        assert end.loc[v, "busy_us"] == pytest.approx(s.loc[v, "busy_us"], rel=0.01)


def test_live_cpu_fallback_walks_host_ops():
    """Without recorded traces the player profiles the teaching config on the CPU: host ops, no kernels."""
    tl = live.chunk_timelines("live", config="teaching", device="cpu", warm_chunks=1)
    assert "host ops" in tl.what and len(tl.eager) > 10 and len(tl.replay) > 10
    assert math.isnan(tl.summary["busy_us"].iloc[0])  # CPU-only trace: busy/slack do not apply
    p = player.TimelinePlayer(tl.eager, tl.replay, build=False)
    st = p.state(p.n).set_index("variant")
    assert (st["elapsed_us"] > 0).all() and np.isfinite(st["idle_us"]).all()
    with pytest.raises(ValueError, match="source"):
        live.chunk_timelines("somewhere")


#: the live factorial's CPU run at the tests' solver steps (tests/sizes.py); the declared steps are reported
#: (test_live_factorial_reports_the_declared_steps_and_one_run) and run bit-exact in CI's bench smoke
LIVE_STEPS = CPU_STEPS


class _CountingRuntime:
    """A stand-in for build_runtime's runtime: the clocks, and PCM of one zero byte per token."""

    clocks = T2W_CLOCKS

    def set_stream_cache(self, prompt) -> None:
        pass

    def stream(self, tokens, last_chunk=False) -> bytes:
        return bytes(len(tokens))


def test_live_factorial_reports_the_declared_steps_and_one_run(monkeypatch):
    """With n_steps left out every arm is built at the clocks' declared solver steps and the frame says so; one
    run of one block: each arm's one turn gated on B0's, and no interval claimed from one turn."""
    from cadencelab.adapters.token2wav import runtime

    built = []
    monkeypatch.setattr(runtime, "build_runtime", lambda cfg, arm, seed, dev, n_timesteps=None: (
        built.append((arm, n_timesteps)) or _CountingRuntime(), None))
    df = live.live_factorial(config="teaching", arms=("B0", "SRc"), blocks=1, chunks_per_turn=2, device="cpu",
                             condition="exact", runs=1)
    t = df.set_index("arm")
    assert built == [("B0", None), ("SRc", None)] and df.attrs["n_steps"] == T2W_CLOCKS.n_steps
    assert list(t.index) == ["B0", "SRc"] and t["exact"].all() and (t["exact_blocks"] == 1).all()
    assert t.loc["B0", "latency_delta"] == 0.0 and t.loc["SRc", "claim"] == "no interval (one turn)"
    assert df.attrs["failed"] == {} and "1 alternating run(s)" in df.attrs["source"]


def test_factorial_frame_marks_a_turn_that_differs_from_b0():
    turn = lambda sha, ms: dict(rows=[dict(kind="first", latency_ms=9.0), dict(kind="steady", latency_ms=ms),
                                      dict(kind="flush", latency_ms=1.0)], sha256=sha, peak_MiB=100.0)
    df = live.factorial_frame({"B0": [turn("a", 4.0), turn("b", 6.0)], "SRc": [turn("a", 1.0), turn("x", 1.0)]})
    t = df.set_index("arm")
    assert t.loc["B0", "lat_ms"] == 5.0 and t.loc["SRc", "lat_ms"] == 1.0  # medians of the steady calls only
    assert bool(t.loc["B0", "exact"]) and not bool(t.loc["SRc", "exact"]) and t.loc["SRc", "exact_blocks"] == 1
    assert t.loc["SRc", "latency_delta"] == pytest.approx(1.0 / 5.0 - 1.0) and t.loc["SRc", "peak_delta"] == 0.0
    with pytest.raises(ValueError, match="must include B0"):
        live.live_factorial(arms=("SRc",), device="cpu")


# ---------------------------------------------------------------------------------------
# carry and replay figures
# ---------------------------------------------------------------------------------------


def test_course_figures():
    t = pd.DataFrame(dict(call=[0, 1, 2], cache_ptr=[4096, 4096, 4096], extent=[16, 20, 20]))
    u = t.assign(cache_ptr=[4096, 8192, 4096 + 2048])
    fig = viz.pointer_figure({"carry": t, "stock": u})
    assert list(fig.data[0].y) == [0, 0, 0] and list(fig.data[1].y) == [0, 4, 2]
    rec = pd.DataFrame(dict(call=[0, 1, 2], agreed=[True, True, False]))
    ex = pd.DataFrame(dict(call=[0, 1, 2], equal=[True, True, False], max_abs_diff=[0.0, 0.0, 3.0]))
    fig = viz.audit_figure({"frames": rec}, ex)
    assert list(fig.data[0].y) == [1, 1, 0] and fig.data[1].y[2] == 3.0 and fig.data[1].y[0] == 1e-12
    label = [a for a in fig.layout.annotations if a.text.startswith("tolerance")]
    assert len(label) == 1 and label[0].y == -5 and label[0].yref == "y2"  # at its line: a log axis takes the exponent
    c = pd.DataFrame(dict(label=[(12, 4), None], replays=[3, 0], miss_reasons=[{"probe": 1}, {"priming": 2}]))
    fig = viz.misses_figure(c)
    assert [t.name for t in fig.data] == ["replayed", "eager: priming", "eager: probe"]


@pytest.mark.cuda
def test_live_factorial_on_cuda_measures_peak_and_gates_on_b0():
    """On a GPU the live factorial times steady chunks with CUDA events and reads the allocator peak."""
    df = live.live_factorial(config="teaching", arms=("B0", "S", "SRc"), blocks=2, chunks_per_turn=3, device="cuda",
                             runs=1)
    t = df.set_index("arm")
    assert df.attrs["failed"] == {} and t["exact"].all() and (t["exact_blocks"] == 2).all()
    assert (t["peak_MiB"] > 0).all() and (t["lat_ms"] > 0).all()
    assert t.loc["S", "peak_MiB"] <= t.loc["B0", "peak_MiB"]  # the state rule sizes workspaces to demand (teaching: not measured yet)


def test_live_factorial_alternates_runs_gates_on_b0_and_gives_an_interval_over_them():
    """The live method at a small scale: each arm built through build_runtime, the arms alternating within each run
    (the order rotated per run), each run a sample; SRc's PCM equals B0's, turn by turn; the change against B0
    carries an interval over runs and claims only what it supports."""
    order = []
    df = live.live_factorial(n_steps=LIVE_STEPS, config="teaching", arms=("B0", "SRc"), blocks=1, chunks_per_turn=2,
                             device="cpu", condition="exact", runs=2, progress=order.append)
    t = df.set_index("arm")
    assert [m.split(":")[0] for m in order] == ["live B0", "live SRc", "live SRc", "live B0"]  # rotated per run
    assert list(t.index) == ["B0", "SRc"] and (t["runs"] == 2).all() and (t["exact_blocks"] == 2).all()
    assert t["exact"].all() and (t["lat_ms"] > 0).all() and t.loc["B0", "latency_delta"] == 0.0
    assert t.loc["B0", "claim"] == "reference"
    lo, hi = t.loc["SRc", "latency_delta_lo"], t.loc["SRc", "latency_delta_hi"]
    assert lo <= t.loc["SRc", "latency_delta"] <= hi
    assert t.loc["SRc", "claim"] == ("no clear difference" if lo <= 0 <= hi else "faster" if hi < 0 else "slower")
    assert df.attrs["failed"] == {} and df.attrs["n_steps"] == LIVE_STEPS
    assert "teaching config" in df.attrs["source"] and "2 alternating run(s)" in df.attrs["source"]
    with pytest.raises(ValueError, match="runs"):
        live.live_factorial(arms=("B0",), device="cpu", runs=0)
