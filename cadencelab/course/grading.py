"""Grading a notebook's exercise cell: blanks get "fill this in", answers go to the checker.

A student's exercise cell starts with ``...`` (or None) in every part. :func:`grade` turns an
all-blank answer into a :class:`~cadencelab.course.exercises.Feedback` that says which parts to
fill in (never an exception, so Run All goes through), drops the parts still blank from a partly
filled answer (the checker then says "no answer given" for them) and grades the rest.

The notebooks never name the course's answers. The tour and CI switch them on from outside, with
the environment variable :data:`SOLUTIONS_ENV` (``CADENCELAB_SOLUTIONS=1``) set for the kernel:
then :func:`grade` answers a still-blank cell itself, the way a student is meant to, and
:func:`verdict` (the check cell's line) fails loudly if that answer is not graded correct, so every
exercise stays solvable. A student's own answer is never replaced.
"""

from __future__ import annotations

import os
from typing import Callable, Mapping

import pandas as pd

from .switches import SOLUTIONS_ENV

from .exercises import FEEDBACK_COLUMNS, Feedback
from .exercises.machinery import HIDDEN

__all__ = ["is_blank", "grade", "verdict", "certified", "answers_on", "FILL_IN", "SOLUTIONS_ENV", "NotSolved"]

FILL_IN = "fill this in: replace the ... with your answer and run the cell again."
#: the environment variable the tour and CI set ("1") so blank exercise cells take the course's answers


class NotSolved(AssertionError):
    """Raised by :func:`verdict` when the course's own answer to an exercise is not graded correct."""


def answers_on() -> bool:
    """True when the tour or CI switched the course's answers on (``$CADENCELAB_SOLUTIONS`` is 1)."""
    return os.environ.get(SOLUTIONS_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def is_blank(value) -> bool:
    """True for an answer not given yet: ``...`` or None."""
    return value is None or value is Ellipsis


def _name(check: Callable) -> str:
    owner = getattr(check, "__self__", None)
    return getattr(owner, "name", None) or getattr(check, "__name__", "exercise").removeprefix("check_")


def _all_blank(answer) -> bool:
    if isinstance(answer, Mapping):
        return not any(not is_blank(v) for v in answer.values())
    return is_blank(answer)


def _course_answer(name: str, inputs: dict):
    """The course's answer to exercise ``name`` (several graded together: their answers merged)."""
    from . import solutions

    if name == "paired_interval":
        return {**solutions.solution("paired_interval", **inputs),
                **solutions.solution("paired_interval_verdict", **inputs)}
    return solutions.solution(name, **inputs)


def grade(check: Callable, answer, **inputs) -> Feedback:
    """``check(answer, **inputs)``, or a fill-in Feedback naming the parts when the answer is blank.

    With the answers switched on from outside (:func:`answers_on`), a blank answer is replaced by the
    course's own; the feedback then records ``course_answer = True``.
    """
    if not callable(check):
        raise TypeError(f"grade: expected a check_... function, got {type(check).__name__}")
    blank = _all_blank(answer) or _returns_blank(_name(check), answer, inputs)
    if answers_on() and blank:
        fb = check(_course_answer(_name(check), inputs), **inputs)
        fb.course_answer = True
        return fb
    if isinstance(answer, Mapping):
        given = {k: v for k, v in answer.items() if not is_blank(v)}
        if given:
            return check(given, **inputs)
        parts = list(answer) or ["answer"]
    elif is_blank(answer):
        parts = ["answer"]
    else:
        return check(answer, **inputs)
    rows = [dict(part=p, answer=None, expected=HIDDEN, correct=False, mistake="", hint=f"{p}: {FILL_IN}")
            for p in parts]
    return Feedback(_name(check), pd.DataFrame(rows, columns=FEEDBACK_COLUMNS))


def _returns_blank(name: str, fn, inputs: Mapping | None = None) -> bool:
    """A function answer (a declaration, a wrapper, an adapter's pair) whose body still returns the blank."""
    try:
        if name == "declaration" and callable(fn):
            from . import sample_encoder as se

            return is_blank(fn(se.VISIBLE))
        if name == "wrapper" and callable(fn):
            return is_blank(fn(None, None))
        if name == "adapter" and isinstance(fn, tuple) and len(fn) == 2:
            from . import capstone

            shown = capstone.capstone_model((inputs or {}).get("model", capstone.DEFAULT_MODEL)).shown
            return is_blank(fn[0]) or is_blank(fn[1]) or is_blank(fn[0](shown)) or is_blank(fn[1](None))
    except Exception:  # a half-written function: the checker reports what it raised
        return False
    return False


def verdict(feedback: Feedback) -> str:
    """The check cell's word on an exercise: "solved", "not answered yet" or "not solved yet".

    Never fails for a student (a wrong answer is theirs to fix, and the check cell still says what the
    notebook taught); raises :class:`NotSolved` with the feedback when the course's own answer, switched
    on by the tour or CI, is not graded correct.
    """
    if not isinstance(feedback, Feedback):
        raise TypeError(f"verdict: expected the Feedback of a graded exercise, got {type(feedback).__name__}")
    if getattr(feedback, "course_answer", False) and not feedback.ok:
        raise NotSolved(f"the course's answer to {feedback.exercise} is not graded correct: {feedback.message}")
    if feedback.ok:
        return "solved"
    hints = feedback.hints
    blank = bool(hints) and all("fill this in" in h for h in hints)
    return "not answered yet" if blank else "not solved yet"


def certified(answer, feedback: Feedback):
    """``answer`` when its feedback certifies it, else the course's stand-in (printed as such), so the cells
    after an adapter exercise (notebook 8's declaration, notebook 10's adapter) run either way."""
    if feedback.ok and not getattr(feedback, "course_answer", False):
        return answer
    print("the cells below use the course's own " + ("declaration" if feedback.exercise == "declaration" else
                                                     "adapter")
          + (" (yours is not certified yet)" if not feedback.ok else " (the exercise cell was left blank)"))
    if feedback.exercise == "declaration":
        from . import sample_encoder as se

        return se.reference_declaration
    return _course_answer(feedback.exercise, dict(feedback.inputs))
