"""The course's answers for the tests: ``course-solutions/solutions.py``, loaded by path (it is not part of the
package, so no notebook can import it), and ``key``: an exercise's expected parts, as its checker computes them."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "course-solutions" / "solutions.py"
ANSWERS = ROOT / "course-solutions" / "answers"


def _load():
    spec = importlib.util.spec_from_file_location("course_solutions_for_tests", SOLUTIONS)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


sol = _load()


def key(exercise, **inputs) -> dict:
    """{part: right answer} of ``exercise`` under ``inputs`` (what its checker compares against)."""
    return exercise.expected(exercise.context(**inputs))
