"""The grading machinery every exercise shares.

An :class:`Exercise` computes its expected answer from the library (a derivation, a recorded
file, a run of the teaching model), never from a typed figure, and carries the slips students
make as :class:`Mistake` objects: each computes the answer that slip would produce from the same
inputs, so a wrong answer that equals it gets that slip's hint. A check returns a
:class:`Feedback` whose table has one row per part of the answer.
"""

from __future__ import annotations

import inspect
import math
import numbers
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

__all__ = ["FEEDBACK_COLUMNS", "FILL_IN", "HIDDEN", "Exercise", "Feedback", "Mistake", "choice_key", "is_blank",
           "tolerance_text"]


FEEDBACK_COLUMNS = ["part", "answer", "expected", "correct", "mistake", "hint"]
#: the hint of a part the student has not answered yet (``...`` or None in the notebook's answer cell)
FILL_IN = "{part}: fill this in (replace the ... in the answer cell with your answer, then run the cell again)."


def is_blank(value) -> bool:
    """True for an answer the student has not filled in yet: ``...`` or None."""
    return value is None or value is Ellipsis


@dataclass(frozen=True)
class Mistake:
    """A slip a student makes, and what to tell them.

    wrong: context -> {part: the answer this slip produces}; parts where it equals the right
           answer are not diagnosable by it (the slip changes nothing there).
    hint:  the feedback, formatted with {part}, {answer} and the context's ``hint_fields`` (inputs the
           notebook shows, never the right answer).
    plant: exercise inputs under which the slip changes the answer (the solutions test plants it there).
    """

    name: str
    hint: str
    wrong: Callable[[Any], Mapping]
    plant: Mapping = field(default_factory=dict)


@dataclass
class Feedback:
    """The verdict on one answer: a row per part (answer, expected, correct, the mistake it matches, hint);
    ``inputs``: what the answer was graded under, where the course's stand-in depends on it (the capstone's
    model)."""

    exercise: str
    table: pd.DataFrame
    inputs: dict = field(default_factory=dict, repr=False)

    @property
    def ok(self) -> bool:
        return bool(len(self.table)) and bool(self.table["correct"].all())

    @property
    def mistakes(self) -> list[str]:
        """Names of the mistakes the answer matched, in part order."""
        return [m for m in self.table["mistake"] if isinstance(m, str) and m]

    @property
    def hints(self) -> list[str]:
        return [h for h in self.table["hint"] if h]

    @property
    def message(self) -> str:
        if self.ok:
            return f"{self.exercise}: correct."
        return f"{self.exercise}: " + " ".join(self.hints)

    def __repr__(self) -> str:
        return f"Feedback({'correct' if self.ok else 'not yet'})\n{self.message}"

    def _repr_html_(self) -> str:
        head = "<b style='color:#2ca02c'>Correct.</b>" if self.ok else "<b style='color:#d62728'>Not yet.</b>"
        return head + self.table.to_html(index=False, border=0)


#: what a feedback table shows in the ``expected`` column of a part: the right answer stays hidden
HIDDEN = "(hidden)"


def _scalar(v):
    """A plain Python number (or the value unchanged) from numpy / pandas / torch scalars and 0-d arrays."""
    if isinstance(v, numbers.Number) and not isinstance(v, (int, float, bool)) and hasattr(v, "item"):
        return v.item()  # numpy / pandas scalars
    if hasattr(v, "item") and getattr(v, "shape", None) == () and not isinstance(v, (str, bytes)):
        return v.item()  # a 0-d numpy array or torch tensor
    return v


def _is_real(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _same(kind: str, a, b, rel_tol: float, abs_tol: float, scale: float = 1.0) -> bool:
    """a equals b within the tolerance, the absolute part taken on b's scale (``scale`` x the answer's)."""
    if kind == "number":
        return abs(a - b) <= max(abs_tol * scale, rel_tol * abs(b)) * (1 + 1e-9)
    return a == b


def choice_key(value: str) -> str:
    """The spelling-free form of a choice: case, surrounding blanks, and runs of spaces / _ / - ignored."""
    return re.sub(r"[\s_\-]+", " ", value.strip().lower())


def _normalize(kind: str, value, choices=()):
    """The answer in the form it is compared in; raises ValueError naming what was typed."""
    value = _scalar(value)
    if kind == "number":
        if not _is_real(value) or not math.isfinite(value):
            raise ValueError(f"{value!r} is not a finite number")
        return float(value)
    if kind == "integer":
        if not _is_real(value) or not math.isfinite(value) or value != int(value):
            raise ValueError(f"{value!r} is not a whole number")
        return int(value)
    if kind == "extents":
        if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
            raise ValueError(f"{value!r} is not a list of extents")
        out = []
        for v in value:
            v = _scalar(v)
            if not _is_real(v) or not math.isfinite(v) or v != int(v):
                raise ValueError(f"{v!r} in the list is not a whole number of frames")
            out.append(int(v))
        return tuple(sorted(set(out)))
    if kind == "choice":
        keys = {choice_key(c): c for c in choices}
        if not isinstance(value, str) or choice_key(value) not in keys:
            raise ValueError(f"{value!r} is not one of {list(choices)}")
        return keys[choice_key(value)]
    raise ValueError(f"unknown answer kind {kind!r}")


def _as_mapping(answer):
    """A pandas Series (or a one-row frame) as the mapping part -> value it stands for."""
    if isinstance(answer, pd.DataFrame) and len(answer) == 1:
        return answer.iloc[0].to_dict()
    if isinstance(answer, pd.Series):
        return answer.to_dict()
    return answer


def tolerance_text(kind: str, rel_tol: float = 0.0, abs_tol: float = 0.0) -> str:
    """How close an answer must be, in words (the sentence every numeric question ends with)."""
    if kind == "integer":
        return "Whole numbers."
    if kind == "extents":
        return "Lists of whole numbers of frames, in any order."
    if kind == "choice":
        return "One of the choices per part (case, spaces, _ and - do not matter)."
    if rel_tol and abs_tol:
        return f"Within {rel_tol:.0%} or {abs_tol:g}, whichever is larger."
    if rel_tol:
        return f"Within {rel_tol:.0%} of the right value."
    return f"Within {abs_tol:g} of the right value." if abs_tol else "Exact."


@dataclass(frozen=True)
class Exercise:
    """One graded exercise.

    prepare:  inputs (keyword arguments of the check) -> a context the answers are computed from.
    expected: context -> {part: right answer}.
    parts:    context -> the parts an answer must give (default: every expected part).
    kind:     "number" (within rel_tol / abs_tol), "integer", "extents" (a set of whole numbers), "choice".
    """

    name: str
    notebook: int
    question: str
    prepare: Callable[..., Any]
    expected: Callable[[Any], dict]
    mistakes: tuple = ()
    kind: str = "number"
    rel_tol: float = 0.0
    abs_tol: float = 0.0
    choices: tuple = ()
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    def context(self, **inputs):
        """The prepared context (cached per hashable inputs); unknown inputs are named."""
        params = inspect.signature(self.prepare).parameters
        unknown = sorted(set(inputs) - set(params))
        if unknown:
            raise TypeError(f"{self.name}: unknown input(s) {unknown}; this exercise takes {sorted(params)}")
        try:
            key = tuple(sorted(inputs.items()))
            hash(key)
        except TypeError:
            return self.prepare(**inputs)
        if key not in self._cache:
            self._cache[key] = self.prepare(**inputs)
        return self._cache[key]

    @property
    def prompt(self) -> str:
        """The question with the tolerance it is graded to (what a notebook shows)."""
        return f"{self.question} {tolerance_text(self.kind, self.rel_tol, self.abs_tol)}"

    def _slip_scale(self, wrong, exp) -> float:
        """How a slip rescales the answer (x 100 for a percent slip): its tolerance is taken on that scale."""
        if self.kind != "number" or not exp or not wrong:
            return 1.0
        return abs(wrong / exp)

    def _row(self, part, value, exp, slips, ctx) -> dict:
        """One part graded: correct, a named slip with its hint, or a hint that names no value."""
        try:
            got = _normalize(self.kind, value, self.choices)
        except ValueError as e:
            return dict(part=part, answer=value, expected=HIDDEN, correct=False, mistake="", hint=f"{part}: {e}.")
        if _same(self.kind, got, exp, self.rel_tol, self.abs_tol):
            return dict(part=part, answer=got, expected=got, correct=True, mistake="", hint="")
        best = None  # the slip the answer is closest to, in units of that slip's tolerance
        for m, wrong in slips:
            if part not in wrong:
                continue
            w = _normalize(self.kind, wrong[part], self.choices)
            scale = self._slip_scale(w, exp)
            if _same(self.kind, w, exp, self.rel_tol, self.abs_tol) or \
                    not _same(self.kind, got, w, self.rel_tol, self.abs_tol, scale):
                continue
            tol = max(self.abs_tol * scale, self.rel_tol * abs(w)) if self.kind == "number" else 0.0
            off = abs(got - w) / tol if tol else 0.0
            if best is None or off < best[0]:
                best = (off, m)
        if best is not None:
            m = best[1]
            hint = m.hint.format(part=part, answer=_show(got), **_fields(ctx))
            return dict(part=part, answer=got, expected=HIDDEN, correct=False, mistake=m.name,
                        hint=f"{part} = {_show(got)}: {hint}")
        return dict(part=part, answer=got, expected=HIDDEN, correct=False, mistake="",
                    hint=f"{part} = {_show(got)} is not right: none of the usual slips gives it; "
                         f"recompute it step by step. {tolerance_text(self.kind, self.rel_tol, self.abs_tol)}")

    def check(self, answer, **inputs) -> Feedback:
        """Grade ``answer`` (a mapping or Series part -> value, or a bare value for a one-part exercise).

        The feedback names the slip an answer matches and how to fix it; it never shows the right value.
        """
        ctx = self.context(**inputs)
        want = self.expected(ctx)
        answer = _as_mapping(answer)
        if is_blank(answer):  # nothing filled in yet: every part asks for an answer
            answer = dict.fromkeys(want, ...)
        if not isinstance(answer, Mapping):
            if len(want) != 1:
                raise ValueError(f"{self.name}: give a mapping of the parts {list(want)}, got {type(answer).__name__}")
            answer = {next(iter(want)): answer}
        unknown = [p for p in answer if p not in want]
        if unknown:
            raise ValueError(f"{self.name}: unknown part(s) {unknown}; the parts are {list(want)}")
        slips = [(m, m.wrong(ctx)) for m in self.mistakes]
        rows = []
        for part, exp in want.items():
            if part not in answer:
                rows.append(dict(part=part, answer=None, expected=HIDDEN, correct=False, mistake="",
                                 hint=f"{part}: no answer given."))
            elif is_blank(answer[part]):
                rows.append(dict(part=part, answer=None, expected=HIDDEN, correct=False,
                                 mistake="", hint=FILL_IN.format(part=part)))
            else:
                rows.append(self._row(part, answer[part], exp, slips, ctx))
        if self.kind == "choice" and len(want) > 1:
            rows = self._as_a_whole(rows, answer, want, slips, ctx)
        return Feedback(self.name, pd.DataFrame(rows, columns=FEEDBACK_COLUMNS))

    def _as_a_whole(self, rows: list, answer: Mapping, want: dict, slips: list, ctx) -> list:
        """A choice question of several parts graded as one answer: right or not, no part marked on its own (per
        part, n parts of k choices fall to n x k tries; as a whole, to k ** n). A part not answered or not one of
        the choices is still named (that says nothing of the right answer); a slip is named only when the answer
        is the right one with that slip alone in it."""
        if any(r["mistake"] == "" and not r["correct"] and r["answer"] is None or "is not one of" in r["hint"]
               for r in rows):
            return [r for r in rows if not r["correct"] and (r["answer"] is None or "is not one of" in r["hint"])]
        if all(r["correct"] for r in rows):
            return [dict(part="answer", answer=dict(answer), expected=dict(answer), correct=True, mistake="", hint="")]
        got = {r["part"]: r["answer"] for r in rows}
        named = next((m for m, wrong in slips if wrong and {**want, **wrong} == got and
                      any(wrong[p] != want[p] for p in wrong)), None)
        hint = (f"answer: {named.hint.format(part='answer', answer='', **_fields(ctx))}" if named else
                f"answer: not every part is right. The grade is for the whole answer ({len(want)} parts): no part "
                f"is marked on its own, so think each one through again.")
        return [dict(part="answer", answer=got, expected=HIDDEN, correct=False, mistake=named.name if named else "",
                     hint=hint)]

    def planted(self, mistake: str, **inputs) -> dict:
        """The answer ``mistake`` produces under its plant inputs (and ``inputs``), for the solutions test."""
        m = next((m for m in self.mistakes if m.name == mistake), None)
        if m is None:
            raise KeyError(f"{self.name}: no mistake {mistake!r}; known: {[x.name for x in self.mistakes]}")
        ctx = self.context(**{**m.plant, **inputs})
        right, wrong = self.expected(ctx), m.wrong(ctx)
        return {p: wrong.get(p, v) for p, v in right.items()}


def _show(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, tuple):
        return "{" + ", ".join(map(str, v)) + "}"
    return str(v)


def _fields(ctx) -> dict:
    """Values a hint may quote ({f_chunk}, {bound}, ...): a context's ``hint_fields``."""
    return dict(getattr(ctx, "hint_fields", {}) or {})
