"""The kernel-timeline player steps along the alignment of the two streams, never by index:
at every step both cursors show the same op, or one shows "none" and says why."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("ipywidgets")

from cadencelab import viz  # noqa: E402
from cadencelab.course import player  # noqa: E402
from cadencelab.profile import events  # noqa: E402


def _streams():
    # eager: A, an HtoD copy of an input, a device-to-device memcpy, B. replay: A, the same copy run as a
    # graph's copy kernel (memcpy32_post), B; no HtoD copy. Times in ns.
    eager = pd.DataFrame(dict(name=["gemm_A", "Memcpy HtoD (Pageable -> Device)", "Memcpy DtoD (Device -> Device)",
                                    "layer_norm_B"],
                              cat=["kernel", "memcpy", "memcpy", "kernel"],
                              start_ns=[1000, 1020, 1040, 1060], end_ns=[1010, 1030, 1050, 1070]))
    replay = pd.DataFrame(dict(name=["gemm_A", "memcpy32_post", "layer_norm_B"], cat=["kernel"] * 3,
                               start_ns=[5000, 5012, 5024], end_ns=[5010, 5020, 5030], graph=True))
    return eager, replay


def test_player_steps_pair_a_copy_with_its_copy_kernel_and_show_none_for_a_missing_op():
    p = player.TimelinePlayer(*_streams(), window=4, build=False)
    st = p.steps
    assert st["op"].tolist() == ["equal", "delete", "equal", "equal"] and p.n == 4
    one = p.state(1).set_index("variant")  # the HtoD copy only eager makes
    assert one.loc["eager", "kernel"] == "Memcpy HtoD" and one.loc["eager", "op_kind"] == "memcpy HtoD"
    assert one.loc["replay", "kernel"] == "none" and pd.isna(one.loc["replay", "kernel_index"])
    assert one.loc["replay", "reason"] == "none: only eager runs this op here"
    # the empty side keeps its readout at its last op (A: 10 ns busy, nothing idle yet)
    assert one.loc["replay", "ops_so_far"] == 1 and one.loc["replay", "busy_us"] * 1e3 == 10
    two = p.state(2).set_index("variant")  # the same copy: a memcpy eagerly, a copy kernel in the graph
    assert two.loc["eager", "norm"] == two.loc["replay", "norm"] == "copy DtoD"
    assert (two.loc["eager", "op_kind"], two.loc["replay", "op_kind"]) == ("memcpy DtoD", "copy kernel")
    assert (two.loc["eager", "kernel_index"], two.loc["replay", "kernel_index"]) == (2, 1)
    end = p.state(99).set_index("variant")  # clamps to the last step: the whole stream accumulated
    assert end.loc["eager", "elapsed_us"] * 1e3 == 70 and end.loc["eager", "idle_us"] * 1e3 == 30
    assert end.loc["replay", "elapsed_us"] * 1e3 == 30 and end.loc["replay", "idle_us"] * 1e3 == 6
    prog = p.progress_frame()
    assert prog.groupby("variant")["step"].apply(list).to_dict() == {"eager": [0, 1, 2, 3], "replay": [0, 1, 2, 3]}
    assert prog[prog["variant"] == "replay"]["kernel_index"].tolist() == [0, 0, 1, 2]


def test_player_figure_panels_start_at_their_window_on_one_ms_axis():
    p = player.TimelinePlayer(*_streams(), window=2, build=False)
    fig = p.figure(1)  # steps 0-1: eager A + HtoD copy, replay A only (the HtoD has no partner)
    bases = {}
    for t in fig.data:
        if t.type == "bar" and t.name not in ("host_wait", "kernel_wait", "other"):
            ax = t.xaxis or "x"
            bases[ax] = min(bases.get(ax, np.inf), float(np.min(t.base)))
    assert bases == {"x": 0.0, "x2": 0.0}  # each panel from its own window start, not the chunk's or the trace's
    assert fig.layout.xaxis2.matches == "x" and "(ms)" in fig.layout.xaxis2.title.text
    cur = {s.xref: s for s in fig.layout.shapes}
    assert cur["x"].line.dash == "solid" and cur["x"].x0 == pytest.approx(30 / 1e6)  # end of HtoD, in ms
    assert cur["x2"].line.dash == "dash" and cur["x2"].x0 == pytest.approx(10 / 1e6)  # replay: still at A
    titles = [a.text for a in fig.layout.annotations]
    assert "eager: op 1, Memcpy HtoD (memcpy HtoD)" in titles[0] and titles[1] == "replay: none: only eager runs this op here"
    assert p.progress_figure(1).layout.xaxis.title.text == "step"


def test_kernel_timeline_time_unit():
    eager, _ = _streams()
    us = viz.kernel_timeline(eager.assign(kernel=eager["name"]), label="kernel")
    ms = viz.kernel_timeline(eager.assign(kernel=eager["name"]), label="kernel", options=viz.TimelineOptions(time_unit="ms"))
    assert np.allclose(np.concatenate([t.base for t in ms.data]).astype(float) * 1e3,
                       np.concatenate([t.base for t in us.data]).astype(float))
    assert "(ms)" in ms.layout.xaxis.title.text and "(µs)" in us.layout.xaxis.title.text
    with pytest.raises(ValueError, match="'s'"):
        viz.kernel_timeline(eager, options=viz.TimelineOptions(time_unit="s"))


@pytest.fixture(scope="module")
def recorded_player(chunk):
    """The player over the recorded chunk's timeline events (what notebook 7 passes it)."""
    ev = {arm: events.timeline_events(t)[0] for arm, t in chunk.items()}
    return player.TimelinePlayer(ev["B0"], ev["SRc"], build=False)


def test_recorded_chunk_every_step_shows_the_same_op_or_none(recorded_player):
    p = recorded_player
    st = p.steps
    for x in p.labels:  # every op of each side once, in stream order
        assert st[f"i_{x}"].dropna().astype(int).tolist() == list(range(len(p.events[x])))
    ne, nr = st["norm_eager"], st["norm_replay"]
    one_side = ne.isna() ^ nr.isna()
    assert ((ne == nr) | one_side).all() and not (ne.isna() & nr.isna()).any()
    assert (one_side == (st["op"] != "equal")).all()
    # by index, the two streams disagree on most ops: what the player used to show as "the same kernel"
    m = min(len(v) for v in p.events.values())
    assert (p.events["eager"]["norm"].to_numpy()[:m] != p.events["replay"]["norm"].to_numpy()[:m]).sum() > m // 2
    assert {"delete", "insert", "replace"} <= set(st["op"])
    # copies shown as copies: eager memcpy DtoD opposite the graph's copy kernel, each by its own kind
    eq = st[st["op"] == "equal"]
    assert ((eq["op_kind_eager"] == "memcpy DtoD") & (eq["op_kind_replay"] == "copy kernel")).any()
    picks = [int(st.index[st["op"] == o][0]) for o in ("delete", "insert", "replace")]
    picks += [int(eq.index[(eq["op_kind_eager"] == "memcpy DtoD") & (eq["op_kind_replay"] == "copy kernel")][0]), p.n // 2]
    for k in picks:  # the readout agrees with the steps frame
        s = p.state(k).set_index("variant")
        kern = s["kernel"].tolist()
        if "none" in kern:
            other = s.index[s["kernel"] != "none"][0]
            assert s.loc[s.index[s["kernel"] == "none"][0], "reason"].startswith("none:") and other in \
                s.loc[s.index[s["kernel"] == "none"][0], "reason"]
        else:
            assert s.loc["eager", "norm"] == s.loc["replay", "norm"]
    fig = p.figure(picks[0])
    assert [sh.line.dash for sh in fig.layout.shapes] == ["solid", "dash"]  # a delete: eager has it, replay not
    # panel titles stay on one line inside the figure, however long the kernel's name (cuDNN's run past 150)
    from cadencelab.viz.options import CHAR_PX, plot_area_px

    mid = p.figure(p.n // 2)
    titles = [a.text for a in mid.layout.annotations if a.text.startswith(tuple(p.labels))]
    assert len(titles) == 2 and all("<br>" not in t and len(t) <= plot_area_px(mid)[0] // CHAR_PX for t in titles)
    end = p.state(p.n).set_index("variant")
    assert (end["ops_so_far"] == end["kernels"]).all()
    assert end.loc["eager", "slack_frac"] > 3 * end.loc["replay", "slack_frac"]


def test_recorded_player_over_kernel_stream_frames_walks_the_same_steps(recorded_player, streams):
    """Frames from compare.kernel_stream (already labelled norm / op_kind) give the same walk."""
    q = player.TimelinePlayer(streams["B0"], streams["SRc"], build=False)
    assert q.steps["op"].tolist() == recorded_player.steps["op"].tolist()
    assert q.steps["norm_replay"].equals(recorded_player.steps["norm_replay"])
