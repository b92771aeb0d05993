"""course.capacity: the sessions study's bounds, figures and plateaus, read from the recorded files."""

from __future__ import annotations

import pytest

from cadencelab import viz
from cadencelab.course import capacity, data


def test_bounds_follow_the_summary_and_mark_lower_bounds():
    b = capacity.capacity_bounds("sessions").set_index(["arm", "workload"])
    s = data.sessions_summary("sessions")
    for (arm, w), r in b.iterrows():
        assert r["max_sessions"] == s[f"max_sessions_at_cadence_{arm}"][w]
        assert r["shown"].startswith(">=") == (s["capacity_bound"][arm][w] == "lower_bound")
        assert r["largest_n_run"] >= r["max_sessions"]
    assert b.loc[("SRb", "mixed"), "experimental"] and not b.loc[("SRc", "mixed"), "experimental"]


@pytest.mark.parametrize("dataset", list(capacity.DATASETS))
def test_capacity_figure_names_references_and_rings_lower_bounds(dataset):
    fig = capacity.capacity_figure("speak_heavy", dataset)
    names = [t.name for t in fig.data]
    assert any("exact vs solo B0" in n for n in names) and any("experimental" in n for n in names)
    low = capacity.capacity_bounds(dataset)
    low = low[(low["workload"] == "speak_heavy") & (low["bound"] == "lower_bound")]
    ringed = [t for t in fig.data if t.name.startswith("sweep stopped")]
    assert len(ringed) == (1 if len(low) else 0)
    if ringed:
        assert sorted(ringed[0].x) == sorted(low["largest_n_run"])
    assert fig.layout.yaxis.title.text == "p95 chunk latency (ms)"
    assert "at least that N" in viz.caption(fig)
    with pytest.raises(ValueError, match="dataset must be one of"):
        capacity.capacity_figure("speak_heavy", "nope")


def test_goodput_plateau_is_the_best_row_per_arm():
    p = capacity.goodput_plateau("speak_heavy").set_index("arm")
    cap = data.sessions_capacity("speak_heavy")
    for arm, r in p.iterrows():
        assert r["plateau_audio_s_per_s"] == cap.loc[cap["arm"] == arm, "goodput"].max()
    assert p.loc["SRc", "vs_SRc"] == 1.0


def test_b0_alone_reads_both_studies():
    t = capacity.b0_alone().set_index("measurement")
    fac = data.factorial().set_index("arm")
    assert t.loc["factorial B0", "ms"] == fac.loc["B0", "steady_latency_ms_median"]
    assert t.loc["sessions B0, N = 1, steady chunks", "ms"] > 0 and "host clock" in t["what"].str.cat()


@pytest.mark.parametrize("dataset", list(capacity.DATASETS))
def test_lower_bounds_names_every_bound_from_the_file(dataset):
    line = capacity.lower_bounds(dataset)
    low = capacity.capacity_bounds(dataset).query("bound == 'lower_bound'")
    for r in low.itertuples():
        assert f"{r.arm} {r.workload.replace('_', '-')} {r.shown}" in line
    assert ("no lower bounds" in line) == low.empty


def test_lanes_reading_says_what_a_lower_bound_settles(monkeypatch):
    r = capacity.lanes_reading("speak_heavy")
    plateau = capacity.goodput_plateau("speak_heavy").set_index("arm")
    assert r["ratio"] == pytest.approx(plateau.loc["SRl", "vs_SRc"]) and r["lanes"] == data.sessions_summary()["lanes"]
    assert f"{r['ratio']:.2f}x" in r["reading"]
    assert ("does not settle" in r["reading"]) == (r["bound"] == "lower_bound")
    # a recording where SRl broke: the same reading says the plateau is measured (the notebook prints it, no prose)
    bounds = capacity.capacity_bounds("sessions")
    broke = bounds.assign(bound="exact", shown=bounds["max_sessions"].astype(str))
    monkeypatch.setattr(capacity, "capacity_bounds", lambda dataset="sessions": broke)
    r = capacity.lanes_reading("speak_heavy")
    assert r["bound"] == "exact" and "measured, not bounded" in r["reading"] and ">=" not in r["reading"]
    with pytest.raises(ValueError, match="no SRl and SRc runs"):
        capacity.lanes_reading("mixed", "sessions_srb_mixed")


@pytest.mark.parametrize("dataset", list(capacity.DATASETS))
def test_recorded_capacities_are_exact_once_swept_to_the_break(dataset):
    """Issue 23's done-when: every capacity of a recording made with the sweep to the break point (it records
    ``capacity_bracket``) is exact, its bracket [holds, breaks] around it; the older recordings predate it."""
    s = data.sessions_summary(dataset)
    if "capacity_bracket" not in s:
        pytest.skip(f"{dataset}: recorded before the sweep to the break point (no capacity_bracket)")
    b = capacity.capacity_bounds(dataset)
    assert (b["bound"] == "exact").all(), b[b["bound"] != "exact"]
    assert (b["breaks_at"] > b["max_sessions"]).all()
