"""The paper's figures (data/paper/figures.csv) beside this project's recordings (course.paper)."""

from __future__ import annotations

import math
import shutil

import pandas as pd
import pytest

from cadencelab.course import data, paper


def test_recovered_share_is_the_papers_definition():
    assert paper.recovered_share(10.0, 4.0, 2.0) == pytest.approx(6 / 8)
    assert paper.recovered_share(10.0, 1.0, 2.0) > 1  # replay saves more than the vendor
    with pytest.raises(ValueError, match="saves nothing"):
        paper.recovered_share(10.0, 4.0, 10.0)


def test_the_papers_mimi_share_agrees_with_its_two_speedups():
    f = data.paper_figures(["mimi_vendor_speedup", "mimi_replay_speedup", "mimi_recovered_share"])["value"]
    # latencies relative to eager = 1: vendor 1/4.97, replay 1/3.46
    implied = paper.recovered_share(1.0, 1 / f["mimi_replay_speedup"], 1 / f["mimi_vendor_speedup"])
    assert implied == pytest.approx(f["mimi_recovered_share"], abs=0.005)


def test_paper_figures_rows_and_units():
    figs = data.paper_figures()
    assert figs.index.is_unique and set(figs["unit"]) <= {"x", "fraction"}
    assert (figs.loc[figs["unit"] == "fraction", "value"].abs() < 1).all()  # fractions, not percent
    lo, hi = figs.loc["eager_slack", ["value", "value_hi"]]
    assert lo < hi
    with pytest.raises(ValueError, match="unknown key.*nope"):
        data.paper_figures("nope")
    assert "arXiv" in data.provenance("paper_figures")["source"]


def _paper_folder(tmp_path, edit) -> None:
    shutil.copytree(data.data_dir() / "paper", tmp_path / "paper")
    f = tmp_path / "paper" / "figures.csv"
    df = pd.read_csv(f, dtype=str)
    edit(df).to_csv(f, index=False)


@pytest.mark.parametrize("edit, match", [
    (lambda df: df.drop(columns=["unit"]), "missing columns.*unit"),
    (lambda df: pd.concat([df, df.iloc[:1]]), "duplicate keys.*t2w_speedup"),
    (lambda df: df.assign(unit=df["unit"].where(df.index > 0, "percent")), "unknown unit.*percent"),
    (lambda df: df.assign(value=df["value"].where(df.index > 0, "2.85x")), "'value' is not a number.*t2w_speedup"),
    (lambda df: df.assign(value=df["value"].where(df.index > 0, None)), "'value' is not a number.*t2w_speedup"),
])
def test_a_malformed_figures_file_names_what_is_wrong(tmp_path, monkeypatch, edit, match):
    _paper_folder(tmp_path, edit)
    monkeypatch.setenv(data.DATA_ENV, str(tmp_path))
    with pytest.raises(ValueError, match=match):
        data.paper_figures()


def test_paper_vs_recording_reads_both_sides_from_files():
    vs = paper.paper_vs_recording("exact").set_index("key")
    figs = data.paper_figures()
    assert set(figs.index) < set(vs.index) and "live_synthesis_speedup" in vs.index
    assert (vs.loc[figs.index, "paper"] == figs["value"]).all()
    summ = data.factorial_summary("exact")
    head = data.result("headline")["summary"]  # the speedup over the most processes
    assert vs.loc["t2w_speedup", "recorded"] == head["speedup_SRc_vs_B0"]
    assert [vs.loc["t2w_speedup", "recorded_lo"], vs.loc["t2w_speedup", "recorded_hi"]] == head["speedup_SRc_vs_B0_ci"]
    assert vs.loc["t2w_peak_reduction", "recorded"] == summ["peak_reduction_SRc_vs_B0"]
    lat = data.mimi_arms().set_index("arm")["latency_ms_median"]
    assert vs.loc["mimi_recovered_share", "recorded"] == pytest.approx(
        (lat["eager"] - lat["replay"]) / (lat["eager"] - lat["vendor_graph"]))
    live = data.paper_duplex_second("live_synthesis").set_index("arm")["dur_ms"]
    assert vs.loc["live_synthesis_speedup", "paper"] == pytest.approx(live["stock"] / live["duplexcadence"])
    assert vs["recorded"].notna().all() and vs["recorded_from"].str.startswith("h200/").all()
    assert vs["recorded_setting"].str.contains("H200").all()
    table = paper.paper_vs_table("exact")
    assert list(table.columns) == ["figure", "paper", "this recording", "note", "recorded in"]
    assert table["paper"].iloc[0].endswith("x") and "-" in table.set_index("figure")["paper"].str.cat()


def test_paper_vs_recording_without_recordings_says_so(tmp_path, monkeypatch):
    shutil.copytree(data.data_dir() / "paper", tmp_path / "paper")
    monkeypatch.setenv(data.DATA_ENV, str(tmp_path))
    vs = paper.paper_vs_recording("exact")
    assert vs["recorded"].isna().all() and vs["paper"].notna().all()
    assert vs["note"].str.contains("not recorded").all()
    assert (paper.paper_vs_table("exact")["this recording"] == "not recorded").all()


def test_format_figure():
    assert paper.format_figure(2.854, "x") == "2.85x"
    assert paper.format_figure(-0.3851, "fraction") == "-38.5%"
    assert paper.format_figure(0.57, "fraction", 0.65) == "57.0-65.0%"
    assert paper.format_figure(math.nan, "x") == "not recorded"
    with pytest.raises(ValueError, match="unknown unit 'ms'"):
        paper.format_figure(1.0, "ms")
