"""course.grading: a blank exercise cell says what to fill in; answers reach the checker."""

from __future__ import annotations

import pytest
from course_answers import key, sol

from cadencelab.course import exercises as ex
from cadencelab.course import grading


def test_blank_answers_ask_to_fill_in_and_name_the_parts():
    fb = grading.grade(ex.check_K, {"flow_chunk": ..., "vocoder_core": None})
    assert not fb.ok and fb.exercise == "t2w_K" and list(fb.table["part"]) == ["flow_chunk", "vocoder_core"]
    assert all(grading.FILL_IN in h for h in fb.hints) and set(fb.table["expected"]) == {"(hidden)"}
    assert grading.grade(ex.check_graph_breaks, ...).table["part"].tolist() == ["answer"]


def test_partly_filled_answer_is_graded_and_blanks_are_named():
    want = key(ex.K_CLASSES)
    fb = grading.grade(ex.check_K, {**{k: ... for k in want}, "flow_chunk": want["flow_chunk"]})
    t = fb.table.set_index("part")
    assert t.loc["flow_chunk", "correct"] and not fb.ok
    assert "no answer given" in t.loc["vocoder_core", "hint"]


def test_a_solution_passes_through_grade():
    assert grading.grade(ex.check_K, sol.solution("t2w_K")).ok
    with pytest.raises(TypeError, match="check_"):
        grading.grade("check_K", {})
