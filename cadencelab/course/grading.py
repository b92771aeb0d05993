"""Grading a notebook's exercise cell: blanks get "fill this in", answers go to the checker.

A student's exercise cell starts with ``...`` (or None) in every part. :func:`grade` turns an
all-blank answer into a :class:`~cadencelab.course.exercises.Feedback` that says which parts to
fill in (never an exception, so Run All goes through), drops the parts still blank from a partly
filled answer (the checker then says "no answer given" for them) and grades the rest.
"""

from __future__ import annotations

from typing import Callable, Mapping

import pandas as pd

from .exercises import FEEDBACK_COLUMNS, Feedback

__all__ = ["is_blank", "grade", "FILL_IN"]

FILL_IN = "fill this in: replace the ... with your answer and run the cell again."


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
    rows = [dict(part=p, answer=None, expected="(hidden)", correct=False, mistake="", hint=f"{p}: {FILL_IN}")
            for p in parts]
    return Feedback(_name(check), pd.DataFrame(rows, columns=FEEDBACK_COLUMNS))
