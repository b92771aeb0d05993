"""Grading integrity, exercise by exercise: a correct answer in another style passes (numpy scalars, another
rounding within the stated tolerance, another spelling, a Series); every planted mistake gets its own named
hint, also when given on its own scale (a percent slip typed to one decimal); garbage is refused without the
right value appearing anywhere in the feedback; no notebook names the course's answers, and the package holds none:
they live in ``course-solutions/`` (loaded here by path), no environment switch marks an answer, and the tour
types them into the notebooks' answer cells."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from course_answers import key, sol

from cadencelab.contract import Fixed
from cadencelab.course import exercises as ex
from cadencelab.course import grading
from cadencelab.course import sample_encoder as se
from cadencelab.course.exercises.machinery import tolerance_text

ROOT = Path(__file__).resolve().parents[1]
#: notebooks still naming the course's answers (none)
PENDING: set = set()
NAMES = list(sol.SOLVERS)


def _feedback_text(fb) -> str:
    """Everything a student sees of a feedback: its message, repr, table cells and the diffs' cells."""
    parts = [fb.message, repr(fb), fb.table.astype(str).to_string(index=False)]
    for d in (getattr(fb, "diffs", None) or {}).values():
        if d is not None:
            parts.append(d.astype(str).to_string(index=False))
    return "\n".join(parts)


def _forms(v) -> list[str]:
    """The ways a right value could be printed."""
    if isinstance(v, str):
        return [v]
    if isinstance(v, (list, tuple, np.ndarray)):
        return [f for x in v for f in _forms(x)]
    v = float(v)
    if v == int(v):
        return [str(int(v))]
    return sorted({f"{v:.4g}", f"{v:.3g}", f"{v:.2f}", f"{v:.3f}", repr(v)})


def _restyle(exercise, value):
    """A right answer written another way: numpy scalars, rounded within the stated tolerance, respelled."""
    if exercise.kind == "integer":
        return np.int64(value)
    if exercise.kind == "extents":
        return np.array(sorted(value, reverse=True), dtype=np.int64)
    if exercise.kind == "choice":
        return value.upper().replace("_", " ")
    v = float(value)
    tol = max(exercise.abs_tol, exercise.rel_tol * abs(v))
    digits = max(0, -math.floor(math.log10(tol)))  # the coarsest rounding that stays inside the tolerance
    while abs(round(v, digits) - v) > tol:
        digits += 1
    styled = round(v, digits) if round(v, digits) != v else v + tol / 2  # a round value: off by half the tolerance
    return np.float64(styled)


@pytest.mark.parametrize("name", NAMES)
def test_a_right_answer_in_another_style_passes(name):
    e = ex.EXERCISES[name]
    right = key(e) if e.kind == "number" else sol.solution(name)  # unrounded, to round another way
    styled = {part: _restyle(e, v) for part, v in right.items()}
    fb = e.check(styled)
    assert fb.ok, fb.table
    assert e.check(pd.Series(styled)).ok  # a Series read off a frame is a mapping of the parts


def test_spellings_of_a_choice_are_one_choice():
    right = sol.solution("graph_breaks")
    spelled = {k: {"outside_catalog": "outside catalog", "host_rng": "Host-RNG"}.get(v, f"  {v.title()} ")
               for k, v in right.items()}
    assert ex.check_graph_breaks(spelled).ok
    v = sol.solution("paired_interval_verdict")["verdict"]
    assert ex.EXERCISES["paired_interval_verdict"].check({"verdict": v.replace(" ", "_").upper()}).ok


def test_numpy_values_read_the_natural_way_pass():
    from cadencelab.contract import region_table, trajectory, verdict
    from cadencelab.adapters.token2wav.clocks import token2wav_declaration

    decl = token2wav_declaration()
    extents = {r: trajectory(decl, r)["shape_extent"].unique() for r in ex.EXTENT_REGIONS}  # numpy arrays of int64
    assert ex.check_extents(extents).ok
    v = verdict(decl)
    assert ex.check_K(dict(zip(v["operator"], v["K"]))).ok  # numpy int64 K
    t = region_table(decl).set_index("region")
    assert ex.check_rho(t.loc[list(ex.RHO_REGIONS), "rho"]).ok  # a Series of numpy floats
    summary = ex.recorded_summary()
    slack = 1 - summary.set_index("variant")["busy_us"] / summary.set_index("variant")["wall_us"]
    assert ex.check_slack(slack.round(2)).ok


@pytest.mark.parametrize("name,mistake", [(n, m) for n in NAMES for m, _, _ in sol.planted(n)])
def test_each_planted_mistake_names_itself_and_hides_the_right_value(name, mistake):
    e = ex.EXERCISES[name]
    (inputs, wrong), = [(i, w) for m, i, w in sol.planted(name) if m == mistake]
    fb = e.check(wrong, **inputs)
    hint = next(m.hint for m in e.mistakes if m.name == mistake)
    assert fb.mistakes and fb.mistakes[0] == mistake, fb.table
    literal = max(re.split(r"\{[^}]*\}", hint), key=len).strip()
    assert literal and literal in fb.message  # the named hint appears
    assert "expected" not in fb.message


def test_percent_slips_fire_when_typed_to_their_own_precision():
    right = sol.solution("slack")
    fb = ex.check_slack({k: round(100 * v, 1) for k, v in right.items()})  # 88.0, 10.1: a percent, one decimal
    assert fb.mistakes == ["percent_not_fraction"] * 2, fb.table
    r = sol.solution("paired_interval")
    fb = ex.PAIRED_INTERVAL.check({k: round(100 * v, 1) for k, v in r.items()})
    assert fb.mistakes == ["percent_not_fraction"] * 2, fb.table


def _garbage(e, want):
    if e.kind == "choice":
        return {p: "banana" for p in want}
    if e.kind == "extents":
        return {p: [999983] for p in want}
    if e.kind == "integer":
        return {p: 987654 for p in want}
    return {p: 98765.4321 for p in want}


@pytest.mark.parametrize("name", NAMES)
def test_garbage_is_refused_and_the_right_value_never_shown(name):
    e = ex.EXERCISES[name]
    want = key(e)
    for garbage in (_garbage(e, want), {p: "seventeen" for p in want}):
        fb = e.check(garbage)
        assert not fb.ok and not fb.mistakes and all(fb.table["expected"] == "(hidden)")
        text = _feedback_text(fb)
        if e.kind == "choice":  # an unknown choice lists every choice: none is singled out
            assert all(all(c in h for c in e.choices) for h in fb.hints), fb.hints
            continue
        for part, v in want.items():
            for form in _forms(v):
                assert not re.search(rf"(?<![\w.]){re.escape(form)}(?![\w])", text), (part, form, text)


def test_a_garbage_declaration_names_the_field_not_its_value():
    s = se.VISIBLE

    def garbage(sizes):
        return se.with_policy(sol.declaration_solution(sizes), "ctx", Fixed(sizes.context + 7919))

    fb = ex.check_declaration(garbage)
    text = _feedback_text(fb)
    from cadencelab.course.exercises.declaration import _policy_desc

    assert not fb.ok and "regions.ctx.policy" in text
    assert _policy_desc(Fixed(s.context)) not in text and _policy_desc(Fixed(se.HIDDEN.context)) not in text


def test_the_declaration_in_another_style_passes():
    def mine(sizes):  # the same declaration, built through the course's helper from another policy
        from cadencelab.contract import PromptRetained

        return se.with_policy(sol.declaration_solution(sizes), "kv", PromptRetained(sizes.sink, sizes.window))

    assert ex.check_declaration(mine).ok


def test_every_question_states_its_tolerance():
    t = ex.exercises_table()
    for e in ex.EXERCISES.values():
        assert tolerance_text(e.kind, e.rel_tol, e.abs_tol) in e.prompt
        assert e.prompt in set(t["question"])
    assert "Within 5%" in ex.LAUNCH_COST.prompt and "Within 0.01" in ex.SLACK.prompt


def test_no_notebook_names_the_answers():
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py")):
        if path.name in PENDING:
            continue
        text = path.read_text(encoding="utf-8")
        for name in ("solutions", "solution(", "SOLUTIONS", "reference_declaration", "_reference", "_REFERENCES",
                     "PLANTED_DECLARATIONS",
                     "answer_key", "declaration_solution", "course-solutions", "course_answers", "environ"):
            assert name not in text, f"{path.name} names {name!r}"


def test_no_answer_is_reachable_from_the_package_and_no_switch_marks_one(monkeypatch):
    """The five cheats of issue 37, tried: the answer keys, the solutions module, the references in the student's
    namespace, the environment switch, and a blank cell that a switch would have answered."""
    import importlib

    from cadencelab.course import capstone
    from cadencelab.course.exercises.machinery import Exercise

    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("cadencelab.course.solutions")
    assert not hasattr(Exercise, "answer_key")
    assert not hasattr(se, "reference_declaration") and not hasattr(capstone, "certified_declaration")
    assert not hasattr(capstone.capstone_model("window"), "declaration")
    assert not hasattr(capstone, "course_solutions")  # no loader of the answers in the package either
    assert not any(n.endswith("declaration") for n in dir(importlib.import_module("cadencelab.course.capstone_models")))
    blank = dict.fromkeys(key(ex.K_CLASSES), ...)
    for value in ("1", "true"):
        monkeypatch.setenv("CADENCELAB_SOLUTIONS", value)
        fb = grading.grade(ex.check_K, blank)
        assert not fb.ok and grading.verdict(fb) == "not answered yet"
        fb = grading.grade(ex.check_declaration, lambda s: ...)
        assert not fb.ok
        with pytest.raises(grading.NotCertified, match="not certified yet"):
            grading.certified(lambda s: ..., fb)
    wrong = {**sol.solution("t2w_K"), "flow_chunk": 2}
    assert grading.verdict(grading.grade(ex.check_K, wrong)) == "not solved yet"  # no bare AssertionError
    right = {**sol.solution("paired_interval"), **sol.solution("paired_interval_verdict")}
    assert grading.grade(ex.check_paired_interval, right).ok


def test_the_slack_grader_reads_the_recorded_chunk_itself():
    """Notebook 7's grader takes no frame from the student (a doctored summary cannot move what it compares to),
    and the frame the notebook shows holds no slack column."""
    assert "slack_frac" not in ex.slack_exercise_frame().columns
    with pytest.raises(TypeError, match="unknown input"):
        ex.check_slack({"eager": 0.5, "replay": 0.5}, summary=ex.recorded_summary().assign(busy_us=0.0))


def test_the_tour_types_the_answers_into_tagged_cells():
    """No switch: the tour's kernels get no answer variable; each notebook's answer cells (tagged) and the course's
    answers file beside them hold the same number of cells, and the tour's predictions cover every PREDICT_."""
    from course_answers import ANSWERS

    from cadencelab.course import tour
    from cadencelab.course.predict import TOUR_PREDICTIONS

    assert tour.COURSE_ENV == {}
    assert TOUR_PREDICTIONS.items() <= tour.COURSE_PARAMETERS.items()
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py")):
        text = path.read_text(encoding="utf-8")
        for name in re.findall(r"^(PREDICT_\w+) = (.*)$", text, flags=re.M):
            assert name[1].startswith("None"), f"{path.name}: {name[0]} starts filled in: {name[1]}"
            assert name[0] in TOUR_PREDICTIONS, f"{path.name}: the tour makes no prediction {name[0]}"
        nb = tour.read_notebook(path)
        n = tour.fill_answers(nb, path.stem, ANSWERS)
        assert n == text.count('# %% tags=["answer"]') and n > 0, path.name


# ---------------------------------------------------------------------------------------
# the graded tasks whose answers are functions: the capture wrapper (nb 9) and the capstone adapter (nb 10)
# ---------------------------------------------------------------------------------------


def test_the_capture_wrapper_is_graded_on_hidden_shapes():
    import torch

    from cadencelab.course import capture_task as task

    fb = task.check_wrapper(sol.wrapper_solution)
    assert fb.ok and fb.row["exact"] and fb.row["captures"] == fb.row["hidden_shapes"] and fb.row["replays"] > 0
    shown = {tuple(x.shape) for x in task.shown_traffic()}
    hidden = {tuple(x.shape) for x in task._hidden(torch.device("cpu"), 64)}
    assert hidden and not hidden & shown, "the grader streams shapes the notebook never shows"
    a, b = task._hidden(torch.device("cpu"), 64), task._hidden(torch.device("cpu"), 64)
    assert [x.shape for x in a] != [x.shape for x in b] or not all(torch.equal(x, y) for x, y in zip(a, b)), \
        "the hidden traffic is drawn when the grader runs, never the same twice"

    def other_style(model, graphs):  # the same wrapper written another way: zeros buffer, slice assignment
        cache = {}

        def run(x):
            if x.shape not in cache:
                buf = torch.zeros_like(x)
                buf[...] = x
                with graphs.side_stream():
                    model(buf)
                g = graphs.graph()
                with g.capture():
                    out = model(buf)
                cache[x.shape] = (buf, g, out)
            buf, graph, out = cache[x.shape]
            buf[...] = x
            graph.replay()
            return out.detach().clone()

        return run

    assert task.check_wrapper(other_style).ok
    board = task.leaderboard(fb)
    assert list(board.columns) == task.LEADERBOARD_COLUMNS and board["exact"].all() and len(board) == 2


@pytest.mark.parametrize("mistake", list(sol.PLANTED_WRAPPERS))
def test_each_wrapper_slip_is_named(mistake):
    from cadencelab.course import capture_task as task

    fb = task.check_wrapper(sol.PLANTED_WRAPPERS[mistake])
    assert not fb.ok and fb.mistakes == [mistake], fb.table
    assert task.WRAPPER_MISTAKES[mistake] in fb.message


def test_a_capture_that_fails_on_a_recapture_is_named_recaptured():
    """On the H100 (2026-12-06) the recapturing wrapper's second capture raised a CUDA capture error instead of
    being graded: an error after more graphs than shapes names the slip; no collection runs while it captures."""
    import gc

    from cadencelab.course import capture_task as task

    calls = []

    def failing_recapture(model, graphs):
        run = sol.PLANTED_WRAPPERS["recaptured"](model, graphs)

        def fn(x):
            calls.append(gc.isenabled())
            if len(graphs.graphs) >= 1 and len(calls) > 1:  # the CUDA failure, as a capture of the same shape again
                graphs.graph()
                raise RuntimeError("CUDA error: operation failed due to a previous error during capture")
            return run(x)
        return fn

    enabled = gc.isenabled()
    fb = task.check_wrapper(failing_recapture)
    assert not fb.ok and fb.mistakes == ["recaptured"], fb.table
    assert task.WRAPPER_MISTAKES["recaptured"] in fb.message and gc.isenabled() == enabled
    assert len(calls) == 2 and not any(calls)  # the collector was off while the submission ran


def test_the_speed_part_grades_only_an_exact_wrapper():
    """The GPU speed row, on any machine: fast and exact passes; exact and slow is the named slip; inexact is not
    graded for speed (no slip named, no error: the cut-off try's H100 run raised KeyError '' here)."""
    from cadencelab.course import capture_task as task

    above, below = task.TARGET_SPEEDUP * 1.5, task.TARGET_SPEEDUP * 0.9
    fast = task.speed_row(True, (above + 0.2, above, above + 0.4))
    slow = task.speed_row(True, (below + 0.1, below, below + 0.2))
    inexact = task.speed_row(False, (above + 0.2, above, above + 0.4))
    assert fast["correct"] and fast["hint"] == ""
    assert not slow["correct"] and slow["mistake"] == "slow" and task.WRAPPER_MISTAKES["slow"] in slow["hint"]
    assert not inexact["correct"] and inexact["mistake"] == "" and "graded once every output is exact" in inexact["hint"]
    assert all(r["expected"] == fast["expected"] for r in (slow, inexact))  # the target's interval is not given away


def test_a_wrapper_that_replays_then_calls_the_model_fails():
    """Cheat 5 of issue 37: capture per shape, replay to bump the counters, return model(x): exact, and failed."""
    from cadencelab.course import capture_task as task

    def side_call(model, graphs):
        inner = sol.wrapper_solution(model, graphs)

        def run(x):
            inner(x)
            return model.forward(x)  # past the module's own __call__: its layers still count the call

        return run

    def side_call_module(model, graphs):
        inner = sol.wrapper_solution(model, graphs)
        return lambda x: (inner(x), model(x))[1]

    def warm_every_call(model, graphs):  # the model run "as a warm-up" on every call: still a side call
        inner = sol.wrapper_solution(model, graphs)

        def run(x):
            inner(x)
            with graphs.side_stream():
                return model(x)

        return run

    fb = task.check_wrapper(side_call_module)
    assert not fb.ok and fb.mistakes == ["side_call"] and fb.row["exact"] and fb.row["side_calls"] > 0, fb.table
    assert "replayed graph" in fb.message
    for cheat in (side_call, warm_every_call):
        fb = task.check_wrapper(cheat)
        assert not fb.ok and "side_call" in fb.mistakes, fb.table


def test_a_garbage_wrapper_shows_no_output_value():
    from cadencelab.course import capture_task as task

    def garbage(model, graphs):
        return lambda x: x * 0 + 3.25

    fb = task.check_wrapper(garbage)
    assert not fb.ok and fb.mistakes and "3.25" not in fb.message and "tensor(" not in _feedback_text(fb)
    assert grading.verdict(task.check_wrapper(...)) == "not answered yet"


def test_the_capstone_adapter_is_certified_on_hidden_traffic_and_sizes():
    from cadencelab.course import capstone

    fb = capstone.check_adapter(sol.solution("adapter"))
    assert fb.ok and list(fb.table["part"]) == ["shown sizes", "hidden sizes"]
    declare, _ = sol.solution("adapter")

    def step_other_style(model):  # the same step, the regions' frames returned in another order and names
        def step(x, caches, last):
            y, kv_frames, samples = capstone.decode(model, x, caches["kv"], caches["tail"], last)
            return y, dict(tail=samples, kv=kv_frames)

        return step

    assert capstone.check_adapter((declare, step_other_style)).ok


@pytest.mark.parametrize("mistake", list(sol.PLANTED_ADAPTERS))
def test_each_adapter_slip_fails_with_a_named_clause_or_field(mistake):
    from cadencelab.course import capstone

    fb = capstone.check_adapter(sol.PLANTED_ADAPTERS[mistake])
    assert not fb.ok and fb.mistakes, fb.table
    assert all(h for h in fb.table.loc[~fb.table["correct"], "hint"])
    if mistake == "literal_size":
        assert fb.mistakes == ["literal_size"] and "regions.kv.policy" in fb.message
    for s in (capstone.SHOWN, capstone.HIDDEN):  # the right window never appears as a value
        assert f"SlidingWindow(window={s.window}" not in _feedback_text(fb)
    assert "frames for region" not in fb.table.set_index("part").loc["hidden sizes", "hint"]  # hidden stays hidden


def test_a_blank_adapter_gets_no_stand_in():
    from cadencelab.course import capstone

    blank = (lambda s: ..., lambda m: ...)
    fb = grading.grade(capstone.check_adapter, blank)
    assert grading.verdict(fb) == "not answered yet"
    with pytest.raises(grading.NotCertified, match="adapter"):
        grading.certified(blank, fb)


def test_the_codec_adapter_is_certified_and_its_planted_slips_named():
    """The capstone's second model, a causal codec decoder with a ring cache: the answer written as a student
    would (not derived from the grader's reference) is certified at both configurations; each slip fails with its
    clause or the field that differs, and the hidden configuration's sizes never appear."""
    from cadencelab.course import capstone

    assert capstone.check_adapter(sol.solution("adapter", model="codec"), model="codec").ok
    hints = {"window_for_ring": "regions.kv.policy", "no_flush": "operators.decode.flush",
             "literal_size": "regions.kv.policy", "ctx_not_declared": "regions.ctx",
             "ctx_kept_on_the_model": "preflight table names the line"}
    assert set(hints) == set(sol.PLANTED_CODEC_ADAPTERS)
    for mistake, inputs, adapter in sol.planted("codec_adapter"):
        fb = capstone.check_adapter(adapter, **inputs)
        assert not fb.ok and fb.mistakes and hints[mistake] in fb.message, (mistake, fb.table)
        if mistake == "literal_size":
            assert fb.mistakes == ["literal_size"]
        hidden = capstone.capstone_model("codec").hidden
        assert f"capacity={hidden.capacity}" not in _feedback_text(fb) and f"Ring({hidden.capacity})" not in fb.message


def test_a_blank_codec_adapter_names_its_model():
    from cadencelab.course import capstone

    blank = (lambda s: ..., lambda m: ...)
    fb = grading.grade(capstone.check_adapter, blank, model="codec")
    assert grading.verdict(fb) == "not answered yet" and fb.inputs == {"model": "codec"}
    with pytest.raises(ValueError, match="pick one of"):
        capstone.check_adapter(blank, model="nope")


def test_the_capstone_diagnosis_reads_every_part_of_a_certificate(capsys):
    """``python -m cadencelab.course.capstone`` (what the lead runs on a GPU): the course's adapter of each model
    through the grader and one certificate, with the tables a failure is read from; exit 1 when one fails."""
    from cadencelab.course import capstone

    d = capstone.diagnose(sol.ADAPTER_SOLUTIONS["codec"], "codec", backend="eager", device="cpu")
    assert d["ok"] and set(d["clauses"]["passed"]) == {True} and d["mismatches"].empty
    assert (d["counters"]["replays"] > 0).any() and (d["events"]["kind"] == "capture").any()
    assert capstone.main(["--device", "cpu", "--model", "codec"]) == 0
    out = capsys.readouterr().out
    assert "== codec" in out and "CERTIFIED" in out and "-- clauses" in out and "== window" not in out
    if not __import__("torch").cuda.is_available():
        assert capstone.main(["--device", "cuda"]) == 2 and "cannot be used" in capsys.readouterr().err


def test_capstone_calls_are_their_own_tensors():
    """The grader's calls are not views into a turn: a stock run and a replay read inputs at one alignment."""
    from cadencelab.course import capstone

    for name in capstone.MODELS:
        traffic = capstone.shown_traffic(name)
        xs = [x for turn in traffic.turns for x in turn]
        assert all(x.storage_offset() == 0 and x.is_contiguous() for x in xs)
        assert len({x.untyped_storage().data_ptr() for x in xs}) == len(xs)


@pytest.mark.cuda
def test_the_capture_task_and_the_capstone_on_a_gpu():
    """Live: the wrapper replays real CUDA graphs (exact, one capture per shape, faster than eager), and the
    capstone's adapter is certified with real graphs."""
    from cadencelab.course import capstone
    from cadencelab.course import capture_task as task

    fb = task.check_wrapper(sol.wrapper_solution, device="cuda")
    assert fb.ok and fb.row["device"].startswith("cuda") and fb.row["speedup_lo"] > task.TARGET_SPEEDUP, fb.row
    assert fb.table.set_index("part").loc["speed", "correct"], fb.table
    for mistake, wrong in sol.PLANTED_WRAPPERS.items():
        assert mistake in task.check_wrapper(wrong, device="cuda").mistakes
    slow = task.check_wrapper(sol.slow_wrapper, device="cuda")  # exact, replayed, a host round trip per call
    assert not slow.ok and slow.row["exact"] and slow.mistakes == ["slow"], slow.table
    inexact = task.check_wrapper(sol.PLANTED_WRAPPERS["stale_input"], device="cuda")
    assert not inexact.ok and not inexact.row["exact"], inexact.table
    for model in capstone.MODELS:  # graded for exactness and speed on the GPU
        fb = capstone.check_adapter(sol.ADAPTER_SOLUTIONS[model], backend="cuda", device="cuda", model=model)
        assert fb.ok and fb.graded == "exactness and speed", fb.table.to_string()
    slow = capstone.check_adapter(sol.slow_adapter, backend="cuda", device="cuda")
    assert not slow.ok and slow.mistakes == ["slow"], slow.table.to_string()
    inexact = capstone.check_adapter(sol.PLANTED_ADAPTERS["whole_cache_returned"], backend="cuda", device="cuda")
    assert not inexact.ok and "slow" not in inexact.mistakes, inexact.table.to_string()
    for model in capstone.MODELS:  # every model a student may pick, certified with real graphs
        d = capstone.diagnose(sol.ADAPTER_SOLUTIONS[model], model, backend="cuda", device="cuda")
        said = "\n".join(f"{k}:\n{d[k].to_string()}" for k in ("feedback", "clauses", "preflight", "events",
                                                                 "mismatches") if len(d[k]))
        assert d["ok"], f"{model} not certified on CUDA:\n{said}"
        assert (d["counters"]["replays"] > 0).any() and (d["counters"]["backend"] == "cuda").all(), said


def test_a_choice_question_is_graded_as_a_whole():
    """Issue 37: per-part feedback lets a student enumerate the choices part by part; graded as one answer, a wrong
    part is never singled out (a slip is named only when it is the answer's one misconception)."""
    right = sol.solution("graph_breaks")
    for wrong in ({**right, "new_turn": "outside_catalog"},
                  {**right, "host_noise": "invalidated", "new_turn": "host_rng"}):
        fb = ex.check_graph_breaks(wrong)
        assert not fb.ok and fb.table["part"].tolist() == ["answer"] and fb.mistakes == [], fb.table
        assert not any(p in fb.message for p in right), fb.message  # no scenario named
    assert ex.check_graph_breaks(right).table["part"].tolist() == ["answer"]
    fb = ex.check_graph_breaks({**right, "host_noise": "replay"})  # the slip alone: named, its concept explained
    assert fb.mistakes == ["host_noise_replays"]
