"""Grading a notebook's exercise cell: blanks get "fill this in", answers go to the checker.

A student's exercise cell starts with ``...`` (or None) in every part. :func:`grade` turns an
all-blank answer into a :class:`~cadencelab.course.exercises.Feedback` that says which parts to
fill in (never an exception, so Run All goes through), drops the parts still blank from a partly
filled answer (the checker then says "no answer given" for them) and grades the rest.

Nothing here knows the answers, and nothing switches them on: the tour fills the exercise cells in from a
folder outside the package (``course-solutions/``, read by path), the way a student types them, and the
check cell's :func:`record` writes what each exercise's feedback says to the gradebook
(:mod:`cadencelab.course.gradebook`), which the tour then reads.
"""

from __future__ import annotations

from typing import Callable, Mapping

import pandas as pd

from .exercises import FEEDBACK_COLUMNS, Feedback
from .exercises.machinery import HIDDEN
from .gradebook import record, state

__all__ = ["is_blank", "grade", "verdict", "certified", "record", "FILL_IN", "NotCertified"]

FILL_IN = "fill this in: replace the ... with your answer and run the cell again."


class NotCertified(RuntimeError):
    """Raised by :func:`certified` when the cells below an adapter exercise would need the student's adapter
    and it is not certified yet (the course supplies no stand-in: it would be the answer)."""


def is_blank(value) -> bool:
    """True for an answer not given yet: ``...`` or None."""
    return value is None or value is Ellipsis


def _name(check: Callable) -> str:
    owner = getattr(check, "__self__", None)
    return getattr(owner, "name", None) or getattr(check, "__name__", "exercise").removeprefix("check_")


def grade(check: Callable, answer, **inputs) -> Feedback:
    """``check(answer, **inputs)``, or a fill-in Feedback naming the parts when the answer is blank."""
    if not callable(check):
        raise TypeError(f"grade: expected a check_... function, got {type(check).__name__}")
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


def verdict(feedback: Feedback) -> str:
    """The check cell's word on an exercise: "solved", "not answered yet" or "not solved yet" (never raises for
    a wrong answer: it is the student's to fix)."""
    if not isinstance(feedback, Feedback):
        raise TypeError(f"verdict: expected the Feedback of a graded exercise, got {type(feedback).__name__}")
    return {"solved": "solved", "blank": "not answered yet", "attempted": "not solved yet"}[state(feedback)]


def certified(answer, feedback: Feedback):
    """``answer`` when its feedback certifies it; else :class:`NotCertified`, naming the exercise: the cells
    after an adapter exercise run on the student's own adapter, never on one the course hands out."""
    if feedback.ok:
        return answer
    raise NotCertified(f"the cells below run on your {feedback.exercise}, and it is not certified yet: "
                       f"{feedback.message} Fix it above, then run on from there.")
