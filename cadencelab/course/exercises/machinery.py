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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

__all__ = ["FEEDBACK_COLUMNS", "FILL_IN", "Exercise", "Feedback", "Mistake", "is_blank"]


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
    hint:  the feedback, formatted with {part}, {answer} and {expected}.
    plant: exercise inputs under which the slip changes the answer (the solutions test plants it there).
    """

    name: str
    hint: str
    wrong: Callable[[Any], Mapping]
    plant: Mapping = field(default_factory=dict)


@dataclass
class Feedback:
    """The verdict on one answer: a row per part (answer, expected, correct, the mistake it matches, hint)."""

    exercise: str
    table: pd.DataFrame

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


def _same(kind: str, a, b, rel_tol: float, abs_tol: float) -> bool:
    if kind == "number":
        return abs(a - b) <= max(abs_tol, rel_tol * abs(b))
    return a == b


def _normalize(kind: str, value, choices=()):
    """The answer in the form it is compared in; raises ValueError naming what was typed."""
    if kind == "number":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"{value!r} is not a finite number")
        return float(value)
    if kind == "integer":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
            raise ValueError(f"{value!r} is not a whole number")
        return int(value)
    if kind == "extents":
        if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
            raise ValueError(f"{value!r} is not a list of extents")
        out = []
        for v in value:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v != int(v):
                raise ValueError(f"{v!r} in {value!r} is not a whole number of frames")
            out.append(int(v))
        return tuple(sorted(set(out)))
    if kind == "choice":
        if not isinstance(value, str) or value.strip().lower() not in choices:
            raise ValueError(f"{value!r} is not one of {list(choices)}")
        return value.strip().lower()
    raise ValueError(f"unknown answer kind {kind!r}")


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

    def answer_key(self, **inputs) -> dict:
        """{part: right answer} for these inputs."""
        return self.expected(self.context(**inputs))

    def check(self, answer, **inputs) -> Feedback:
        """Grade ``answer`` (a mapping part -> value, or a bare value for a one-part exercise)."""
        ctx = self.context(**inputs)
        want = self.expected(ctx)
        if is_blank(answer):  # nothing filled in yet: every part asks for an answer
            answer = dict.fromkeys(want, ...)
        if not isinstance(answer, Mapping):
            if len(want) != 1:
                raise ValueError(f"{self.name}: give a mapping of the parts {list(want)}, got {answer!r}")
            answer = {next(iter(want)): answer}
        unknown = [p for p in answer if p not in want]
        if unknown:
            raise ValueError(f"{self.name}: unknown part(s) {unknown}; the parts are {list(want)}")
        slips = [(m, m.wrong(ctx)) for m in self.mistakes]
        rows = []
        for part, exp in want.items():
            if part not in answer:
                rows.append(dict(part=part, answer=None, expected=exp, correct=False, mistake="",
                                 hint=f"{part}: no answer given."))
                continue
            if is_blank(answer[part]):
                rows.append(dict(part=part, answer=None, expected="(hidden until answered)", correct=False,
                                 mistake="", hint=FILL_IN.format(part=part)))
                continue
            try:
                got = _normalize(self.kind, answer[part], self.choices)
            except ValueError as e:
                rows.append(dict(part=part, answer=answer[part], expected=exp, correct=False, mistake="",
                                 hint=f"{part}: {e}."))
                continue
            if _same(self.kind, got, exp, self.rel_tol, self.abs_tol):
                rows.append(dict(part=part, answer=got, expected=exp, correct=True, mistake="", hint=""))
                continue
            name, hint = "", f"{part} = {_show(got)}, expected {_show(exp)}: recompute it step by step."
            for m, wrong in slips:
                if part not in wrong:
                    continue
                w = _normalize(self.kind, wrong[part], self.choices)
                if not _same(self.kind, w, exp, self.rel_tol, self.abs_tol) and \
                        _same(self.kind, got, w, self.rel_tol, self.abs_tol):
                    name = m.name
                    hint = f"{part} = {_show(got)}, expected {_show(exp)}: " + m.hint.format(
                        part=part, answer=_show(got), expected=_show(exp), **_fields(ctx))
                    break
            rows.append(dict(part=part, answer=got, expected=exp, correct=False, mistake=name, hint=hint))
        return Feedback(self.name, pd.DataFrame(rows, columns=FEEDBACK_COLUMNS))

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
