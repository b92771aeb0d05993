"""course.gradebook: every check cell records each exercise's state and each revealed prediction to a local file,
and prints the truth; the tour's report shows it."""

from __future__ import annotations

import json

from course_answers import sol

from cadencelab.course import exercises as ex
from cadencelab.course import gradebook, grading, predict
from cadencelab.course.report import gradebook_html


def test_a_check_cell_records_solved_attempted_and_blank(tmp_path, monkeypatch):
    book = tmp_path / "gb.json"
    monkeypatch.setenv(gradebook.GRADEBOOK_ENV, str(book))
    solved = grading.grade(ex.check_K, sol.solution("t2w_K"))
    attempted = grading.grade(ex.check_rho, {"solver_workspace": 9.99, "estimator_att_cache": ...})
    blank = grading.grade(ex.check_extents, {"estimator_att_cache": ..., "vocoder_mel_cache": ...})
    line = grading.record(2, blank, solved, attempted)
    assert line.startswith("gradebook: 1 of 3 solved (1 attempted, 1 blank)") and gradebook.shown_path(book) in line
    entry = json.loads(book.read_text())["2"]
    assert entry["exercises"] == {"t2w_extents": "blank", "t2w_K": "solved", "t2w_rho": "attempted"}
    grading.record(3, grading.grade(ex.check_audit_catch, ...))  # another notebook: kept beside the first
    states, _ = gradebook.read(book)
    assert set(states["notebook"]) == {2, 3} and states.set_index("exercise").loc["audit_catch", "state"] == "blank"


def test_predictions_are_scored_after_their_reveal_in_the_question_units(tmp_path):
    book = tmp_path / "gb.json"
    guess = predict.Prediction("launches per chunk", unit="launches", value={"B0": 800, "SRc": 2}, parts=["B0", "SRc"])
    predict.reveal(guess, {"B0": 1000, "SRc": 2})
    predict.reveal(guess, {"B0": 1000, "SRc": 2})  # a table, then its figure: scored once
    after = predict.Prediction("launches per chunk", unit="launches", value={"B0": 1000, "SRc": 2}, parts=["B0", "SRc"])
    predict.reveal(after, {"B0": 1000, "SRc": 2})  # changed after the measurement was shown: the first one stands
    blank = predict.Prediction("slack", unit="fraction", value=None)
    predict.reveal(blank, 0.5)
    line = gradebook.record(1, path=book)
    assert "predictions: 1 of 3 close or right (1 not made)" in line
    _, preds = gradebook.read(book)
    b0 = preds.set_index("part").loc["B0"]
    assert b0["off"] == -200 and b0["unit"] == "launches" and b0["verdict"] == "under" and b0["measured"] == 1000
    assert preds.set_index("question").loc["slack", "verdict"] == predict.NOT_PREDICTED
    again = predict.Prediction("launches per chunk", unit="launches", value={"B0": 1000, "SRc": 2}, parts=["B0", "SRc"])
    predict.reveal(again, {"B0": 1000, "SRc": 2})  # a re-run after the reveal was seen: the earlier score stands
    assert "predictions: 1 of 2 close or right" in gradebook.record(1, path=book)  # B0 still 800: under
    html = gradebook_html(json.loads(book.read_text())["1"])
    assert "Gradebook" in html and "0 of 0 solved" in html and "under" in html


def test_the_check_line_names_the_gradebook_without_this_machines_folders(tmp_path, monkeypatch):
    """A check cell's line lands in shared reports: the gradebook is named relative to the working folder (or
    under ~), never by an absolute path such as a temporary checkout's."""
    book = tmp_path / "out" / "tour" / "gradebook.json"
    (tmp_path / "notebooks").mkdir()
    monkeypatch.chdir(tmp_path / "notebooks")
    line = gradebook.record(0, grading.grade(ex.check_K, ...), path=book)
    assert line.endswith("(written to ../out/tour/gradebook.json)") and str(tmp_path) not in line, line
    monkeypatch.setenv("HOME", str(tmp_path))
    assert gradebook.shown_path(book) == "~/out/tour/gradebook.json"
