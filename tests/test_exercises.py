"""The course's graded exercises: every solution passes, every planted mistake fires its own hint,
bad answers get clear errors. CPU, the recorded H200 files, the teaching model."""

from __future__ import annotations

import pytest
from course_answers import key, sol

from cadencelab.course import exercises as ex

NAMES = [*sol.SOLVERS, "declaration"]


def _check(name):
    return ex.check_declaration if name == "declaration" else ex.EXERCISES[name].check


@pytest.mark.parametrize("name", NAMES)
def test_every_solution_passes(name):
    fb = _check(name)(sol.solution(name))
    assert fb.ok, fb.table
    assert fb.hints == [] and fb.mistakes == []


@pytest.mark.parametrize("name,mistake", [(n, m) for n in NAMES for m, _, _ in sol.planted(n)])
def test_every_planted_mistake_fires_its_hint(name, mistake):
    (inputs, wrong), = [(i, w) for m, i, w in sol.planted(name) if m == mistake]
    fb = _check(name)(wrong, **inputs)
    assert not fb.ok
    assert fb.mistakes and fb.mistakes[0] == mistake, fb.table
    assert all(h for h in fb.table.loc[~fb.table["correct"], "hint"])


def test_every_exercise_has_planted_mistakes_and_every_notebook_an_exercise():
    t = ex.exercises_table()
    assert set(t["notebook"]) == set(range(9))  # (9 and 10 grade whole functions: tests/test_grading_integrity.py)
    assert all(len(m) > 0 for m in t["mistakes"])
    assert {m for m, _, _ in sol.planted("declaration")} == set(ex.DECLARATION_MISTAKES)


def test_K_hint_names_the_slip_and_the_numbers():
    fb = ex.check_K({"flow_chunk": 2, "estimator_step": 21, "flow_encoder": 3, "vocoder_core": 2})
    t = fb.table.set_index("part")
    assert t.loc["flow_chunk", "mistake"] == "plus_one_forgotten"
    assert t.loc["flow_chunk", "hint"].startswith("flow_chunk = 2:") and "expected" not in t.loc["flow_chunk", "hint"]
    assert t.loc["estimator_step", "mistake"] == "per_step_growth" and "per call or per solver step" in \
        t.loc["estimator_step", "hint"]
    assert t.loc[["flow_encoder", "vocoder_core"], "correct"].all()


def test_expected_answers_follow_the_chosen_clocks():
    assert key(ex.EXTENTS, f_retained=150)["estimator_att_cache"] == (302, 352, 402, 452)
    assert key(ex.EXTENTS, f_chunk=40)["estimator_att_cache"] == (302, 342, 382, 402)
    assert key(ex.K_CLASSES, f_retained=150)["flow_chunk"] == 4
    assert round(key(ex.RHO)["solver_workspace"], 2) == 3.49


def test_unmatched_wrong_answer_gets_a_generic_hint():
    fb = ex.check_extents({"estimator_att_cache": [1, 2], "vocoder_mel_cache": [0, 8]})
    row = fb.table.set_index("part").loc["estimator_att_cache"]
    assert not row["correct"] and row["mistake"] == "" and "302" not in row["hint"] and "recompute" in row["hint"]


def test_bad_input_is_named():
    with pytest.raises(TypeError, match="f_retaind"):
        ex.check_K({"flow_chunk": 3}, f_retaind=150)
    with pytest.raises(ValueError, match="flowchunk"):
        ex.check_K({"flowchunk": 3})
    fb = ex.check_K({"flow_chunk": "three"})
    row = fb.table.set_index("part").loc["flow_chunk"]
    assert not row["correct"] and "'three' is not a whole number" in row["hint"]
    assert "no answer given" in fb.table.set_index("part").loc["vocoder_core", "hint"]
    fb = ex.check_graph_breaks({"new_turn": "replays"})
    assert "'replays' is not one of" in fb.table.set_index("part").loc["new_turn", "hint"]
    with pytest.raises(ValueError, match="unknown region"):
        ex.check_extents({}, regions=("nope",))
    with pytest.raises(TypeError, match="not declaration"):
        ex.check_declaration(sol.declaration_solution(ex_sizes()))


def ex_sizes():
    from cadencelab.course.sample_encoder import VISIBLE

    return VISIBLE


def test_literal_size_passes_shown_sizes_and_fails_hidden():
    fb = ex.check_declaration(sol.PLANTED_DECLARATIONS["literal_size"])
    t = fb.table.set_index("part")
    assert t.loc["shown sizes", "correct"] and not t.loc["hidden sizes", "correct"]
    assert "regions.kv.policy" in t.loc["hidden sizes", "hint"]
    diff = fb.diffs["hidden sizes"]
    assert diff["field"].tolist() == ["regions.kv.policy"]


def test_a_function_that_raises_is_reported_not_raised():
    def broken(s):
        raise RuntimeError("half written")

    fb = ex.check_declaration(broken)
    assert not fb.ok and "RuntimeError: half written" in fb.hints[0]


def test_paired_interval_checks_numbers_and_verdict_together():
    right = {**sol.solution("paired_interval"), **sol.solution("paired_interval_verdict")}
    assert right["verdict"] == "no clear difference"
    assert ex.check_paired_interval(right).ok
    fb = ex.check_paired_interval({**right, "verdict": "slower"})
    assert fb.mistakes == ["median_decides"] and "includes 0" in fb.hints[0]


@pytest.mark.parametrize("name", ["slack", "paired_interval", "declaration", "t2w_K"])
def test_a_blank_answer_asks_to_be_filled_in(name):
    """The notebooks' answer cells start as ``...``: grading them never raises, every part says fill it in."""
    check = {"paired_interval": ex.check_paired_interval}.get(name) or _check(name)
    for blank in (..., None, *([lambda s: ...] if name == "declaration" else [])):
        fb = check(blank)
        assert not fb.ok and fb.hints and all("fill this in" in h for h in fb.hints), fb.table
    if name == "paired_interval":  # one part filled, the others blank: only the blanks ask
        fb = check(dict(lo=sol.solution("paired_interval")["lo"], hi=..., verdict=...))
        t = fb.table.set_index("part")
        assert t.loc["lo", "correct"] and "fill this in" in t.loc["hi", "hint"]


def test_the_carry_exercise_grades_a_retention_written_in_place():
    """Notebook 3's carry: the answer passes on streams drawn as the grader runs (never the same twice); each
    planted slip is named; a blank asks to be filled in."""
    import torch

    assert ex.check_carry(sol.retain_solution).ok and ex.check_carry(sol.retain_solution).ok
    for mistake, retain in sol.PLANTED_RETAINS.items():
        fb = ex.check_carry(retain)
        assert not fb.ok and mistake in fb.mistakes, (mistake, fb.table)
    assert all("fill this in" in h for h in ex.check_carry(lambda buf, n, new, sink, window: ...).hints)
    g1, g2 = torch.Generator(), torch.Generator()
    g1.seed()
    g2.seed()
    from cadencelab.course.exercises.carry import _streams

    a, b = _streams(g1), _streams(g2)
    assert [(s["sink"], s["window"], s["dim"]) for s in a] != [(s["sink"], s["window"], s["dim"]) for s in b] or \
        not torch.equal(a[0]["chunks"][0], b[0]["chunks"][0])


def test_notebook_0s_function_is_graded_on_its_trace_and_on_intervals_drawn_now():
    """Notebook 0 asks for code, not a value a library call prints: busy and slack as a function, graded on the
    student's chunk and on nested, overlapping, window-crossing intervals drawn as the grader runs."""
    fb = ex.check_busy_slack(sol.busy_slack_solution)
    assert fb.ok and fb.table["part"].tolist() == ["your trace", "hidden intervals"], fb.table
    for mistake, fn in sol.PLANTED_BUSY_SLACK.items():
        fb = ex.check_busy_slack(fn)
        assert not fb.ok and mistake in fb.mistakes, (mistake, fb.table)
    assert all("fill this in" in h for h in ex.check_busy_slack(lambda s, e, a, b: ...).hints)
    fb = ex.check_busy_slack(lambda s, e, a, b: 1 / 0)
    assert not fb.ok and "ZeroDivisionError" in fb.message
