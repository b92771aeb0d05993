"""The raw CUDA-graph lesson (cadencelab.course.graph_lesson): the outcome logic and the recorder's
file on a CPU (frames built by hand, no device); the lesson itself live on CUDA (marked cuda)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch

from cadencelab.course import graph_lesson as gl


def _steps(*rows):
    return pd.DataFrame([dict(step=i, what="w", happened=h, read_back=[1.0], eager=[1.0], equal_to_eager=e)
                         for i, (h, e) in enumerate(rows, 1)], columns=gl.STEP_COLUMNS)


def _rng(rows):
    return pd.DataFrame([dict(rng_class=c, rng=r, call=i, path=p, read_back=[0.0], eager=[0.0], equal_to_eager=e)
                         for c, r, i, p, e in rows], columns=gl.RNG_COLUMNS)


def _frames():
    return dict(
        basic_replay=_steps(("static", None), ("captured", None), ("replayed", True), ("replayed", True)),
        new_shape=_steps(("refused: size mismatch", None), ("broadcast silently", False)),
        moved_input=_steps(("x0", None), ("moved", False), ("stale read: old answer", True), ("replayed", True)),
        rng_classes=_rng([("dev", "device", 0, "eager probe", True), ("dev", "device", 1, "replay", True),
                          ("host", "host", 0, "eager probe", True), ("host", "host", 1, "replay", False)]),
    )


def test_outcome_reads_each_scenario():
    f = _frames()
    assert gl.outcome(f["basic_replay"]) == "exact"
    assert gl.outcome(f["moved_input"]) == "stale read"
    assert gl.outcome(f["new_shape"]) == "wrong"  # the refused copy and a silent broadcast: the broadcast is wrong
    assert gl.outcome(_steps(("refused: size mismatch", None))) == "refused"
    assert gl.outcome(_steps(("replayed", True), ("replayed", False))) == "wrong"
    with pytest.raises(ValueError, match="no row compares"):
        gl.outcome(_steps(("static", None)))


def test_breaks_table_has_a_row_per_rng_class():
    t = gl.breaks_table(_frames()).set_index("scenario")
    assert t.loc["basic_replay", "equal_replays"] == "2/2"
    assert t.loc["rng: dev", ["rng", "outcome"]].tolist() == ["device", "exact"]
    assert t.loc["rng: host", ["rng", "outcome", "equal_replays"]].tolist() == ["host", "wrong", "0/1"]
    with pytest.raises(ValueError, match="missing scenarios.*moved_input"):
        gl.breaks_table({k: v for k, v in _frames().items() if k != "moved_input"})


def test_record_writes_provenance_and_reads_back(tmp_path, monkeypatch):
    monkeypatch.setattr(gl, "run_all", lambda device="cuda": _frames())
    monkeypatch.setenv("CADENCELAB_COMMIT", "abc123")
    path = gl.record(tmp_path / "out", device="cpu")
    obj = json.loads(path.read_text())
    assert path.name == "graph_lesson.json" and obj["provenance"]["git_commit"] == "abc123"
    assert {"gpu", "torch", "date"} <= set(obj["provenance"]) and obj["command"] == gl.RECORD_COMMAND
    back = gl.recorded(path)
    for name in gl.SCENARIOS:
        pd.testing.assert_frame_equal(back[name], _frames()[name], check_dtype=False)
    assert len(obj["summary"]) == len(gl.breaks_table(_frames()))


def test_missing_and_bad_files_are_named(tmp_path):
    assert gl.recorded(tmp_path / "absent.json") is None
    assert "recorded H200 output not present" in gl.MISSING and gl.RECORD_COMMAND in gl.MISSING
    bad = tmp_path / "graph_lesson.json"
    bad.write_text(json.dumps({"frames": {}}))
    with pytest.raises(ValueError, match="graph_lesson.json.*provenance"):
        gl.recorded(bad)
    bad.write_text(json.dumps({"frames": {}, "provenance": {}}))
    with pytest.raises(ValueError, match="basic_replay"):
        gl.recorded(bad)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is what a CPU-only machine sees")
def test_live_lesson_refuses_a_cpu_with_the_way_out():
    with pytest.raises(RuntimeError, match="needs a CUDA device.*graph_lesson --out"):
        gl.basic_replay("cpu")
    with pytest.raises(RuntimeError, match="needs a CUDA device"):
        gl.main(["--out", "unused", "--device", "cpu"])


@pytest.mark.cuda
def test_live_lesson_on_cuda(tmp_path):
    frames = gl.run_all("cuda")
    t = gl.breaks_table(frames).set_index("scenario")
    assert t.loc["basic_replay", "outcome"] == "exact"
    assert t.loc["moved_input", "outcome"] == "stale read"
    assert frames["moved_input"]["equal_to_eager"].iloc[-1]  # the fix: copy_ into the captured address
    ns = frames["new_shape"]
    assert ns["happened"].iloc[0].startswith("refused") and ns["equal_to_eager"].iloc[1] is False
    assert t.loc[[i for i in t.index if i.startswith("rng")], "rng"].tolist() == ["device", "host"]
    dev = t[t["rng"] == "device"].iloc[0]
    assert dev["outcome"] == "exact"
    assert t[t["rng"] == "host"].iloc[0]["outcome"] in ("wrong", "refused")
    assert gl.main(["--out", str(tmp_path)]) == 0 and gl.recorded(tmp_path / "graph_lesson.json") is not None


def test_the_recorded_h200_lesson_shows_each_break():
    """The H200 recording (data/h200/graph_lesson.json): a plain replay is exact, a new shape and host-drawn
    noise give wrong bits, a moved input is read stale, device-drawn noise replays exactly."""
    rec = gl.recorded()
    assert rec is not None, gl.MISSING
    assert rec["provenance"]["gpu"].startswith("NVIDIA") and rec["provenance"]["git_commit"]
    breaks = gl.breaks_table(rec)
    table = breaks.set_index("scenario")
    assert table.loc["basic_replay", "outcome"] == "exact" and table.loc["new_shape", "outcome"] == "wrong"
    assert table.loc["moved_input", "outcome"] == "stale read"
    by_rng = breaks.dropna(subset=["rng"]).set_index("rng")["outcome"]
    assert by_rng.get("device") == "exact" and by_rng.get("host") == "wrong"
