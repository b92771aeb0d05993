"""course.anatomy: notebook 1's recorded duplex seconds kept per second, never as stacked medians."""

from __future__ import annotations

import pytest

from cadencelab import viz
from cadencelab.course import anatomy, data, frames


def test_spread_keeps_every_timed_second_and_names_what_ran():
    s = anatomy.stage_spread("exact").set_index(["arm", "stage"])
    rows = data.duplex_seconds("exact")
    timed = rows[~rows["warmup"].astype(bool) & (rows["parent"].fillna("") == "")]
    syn = timed[(timed["arm"] == "B0") & (timed["stage"] == "synthesis")]["dur_ms"]
    assert s.loc[("B0", "synthesis"), "seconds"] == len(syn)
    assert s.loc[("B0", "synthesis"), ["min_ms", "max_ms"]].tolist() == [syn.min(), syn.max()]
    assert s.loc[("B0", "synthesis"), "launches"] == data.duplex_summary("exact").loc["B0", "synthesis_launches"]
    assert "stand-in LM" in s.loc[("SRc", "backbone"), "what"] and (s["decode"] == "eager").all()
    whole = anatomy.seconds_frame("exact").query("stage == @anatomy.WHOLE and arm == 'B0'")["dur_ms"]
    assert (whole >= timed[timed["arm"] == "B0"].groupby("second")["dur_ms"].sum().values - 1e-3).all()


def test_condition_without_a_duplex_recording_falls_back_to_exact():
    assert anatomy.duplex_condition("unpinned") == "exact" and anatomy.duplex_condition("pinned") == "pinned"
    assert anatomy.stage_spread("unpinned").attrs["condition"] == "exact"
    with pytest.raises(ValueError, match="bogus"):
        anatomy.duplex_condition("bogus")


def test_figure_labels_the_stand_ins_and_has_units_and_caption():
    fig = anatomy.stage_spread_figure("exact")
    ticks = list(fig.layout.xaxis.categoryarray)
    assert any("stand-in LM" in t for t in ticks) and fig.layout.yaxis.title.text.endswith("(ms)")
    assert "random weights" in viz.caption(fig) and {t.name for t in fig.data} == {"B0", "SRc"}


def test_composed_sources_say_composed():
    c = anatomy.label_composed(frames.anatomy_frame("exact", compose=True))
    comp = c.loc[c["origin"] == "composed", "source"].unique()
    assert len(comp) == 2 and all(s.startswith("COMPOSED: paper-GPU") for s in comp)
    assert set(c.loc[c["origin"] == "paper", "source"]) == {"paper (stock)"}


def test_served_spread_labels_every_served_run_a_control():
    """The served-LM recording's spread: eager and served runs side by side, the served LM stages named a
    control, their launches from the served summary, and the figure's caption and ticks say so."""
    s = anatomy.stage_spread(served=True).set_index(["arm", "stage"])
    summary = data.duplex_served_summary()
    assert set(s.index.get_level_values("arm")) == set(summary.index)
    for run in summary.index:
        served = summary.loc[run, "decode"] != "eager"
        assert ("control, not exact" in s.loc[(run, "backbone"), "what"]) == served
        assert s.loc[(run, "backbone"), "launches"] == summary.loc[run, "backbone_launches"]
        assert s.loc[(run, "synthesis"), "seconds"] == summary.loc[run, "seconds_timed"]
    fig = anatomy.stage_spread_figure(served=True)
    assert {t.name for t in fig.data} == set(summary.index) and "control, not exact" in fig.layout.title.text
    assert "served idle" in " ".join(fig.layout.xaxis.categoryarray) and "+graphLM runs" in viz.caption(fig)
