"""Graded exercises with diagnostic feedback, one or more per notebook.

Each :class:`Exercise` computes its expected answer from the library (a derivation, a recorded file, a run of the
teaching model), never from a typed figure, and carries the slips students make as :class:`Mistake` objects: each
computes the answer that slip would produce from the same inputs, so a wrong answer equal to it gets that slip's
hint ("K = 2, expected 3: K counts the extents, the first included"). A check returns a :class:`Feedback` whose
table has one row per part of the answer. The checkers, by notebook:

    0  check_busy_slack (check_own_profile: the values, for the tests)   5  check_paired_interval
    1  check_launch_cost                                                6  check_capacity
    2  check_extents, check_K, check_rho                                7  check_slack
    3  check_audit_catch, check_carry                                   8  check_declaration
    4  check_graph_breaks

The machinery (Exercise, Mistake, Feedback) is :mod:`.machinery`; the checkers live in one module per notebook
group (:mod:`.clocks`, :mod:`.carry`, :mod:`.carry_replay`, :mod:`.recorded`, :mod:`.sessions`,
:mod:`.declaration`), all importable from here. The course's answers and planted mistakes are not in the
package: ``course-solutions/solutions.py`` beside the notebooks (the tests load it by path).
"""

from __future__ import annotations

import pandas as pd

from ..predict import NO_CLEAR_DIFFERENCE
from .carry import CARRY_MISTAKES, CARRY_SHOWN, check_carry, stock_retain
from .carry_replay import AUDIT_CATCH, GRAPH_BREAKS, OUTCOMES, check_audit_catch, check_graph_breaks
from .clocks import EXTENT_REGIONS, EXTENTS, K_CLASSES, RHO, RHO_REGIONS, check_extents, check_K, check_rho
from .declaration import DECLARATION_MISTAKES, check_declaration, declaration_diff
from .machinery import FEEDBACK_COLUMNS, FILL_IN, Exercise, Feedback, Mistake, is_blank
from .profiling import BUSY_SLACK_MISTAKES, OWN_PROFILE, check_busy_slack, check_own_profile
from .recorded import (
    INTERVAL_VERDICT,
    LAUNCH_COST,
    PAIRED_INTERVAL,
    SLACK,
    VERDICTS,
    check_launch_cost,
    check_paired_interval,
    check_slack,
    recorded_summary,
    slack_exercise_frame,
)
from .sessions import CAPACITY, check_capacity

__all__ = [
    "AUDIT_CATCH",
    "BUSY_SLACK_MISTAKES",
    "CARRY_MISTAKES",
    "CARRY_SHOWN",
    "CAPACITY",
    "DECLARATION_MISTAKES",
    "EXERCISES",
    "EXTENTS",
    "EXTENT_REGIONS",
    "FEEDBACK_COLUMNS",
    "FILL_IN",
    "GRAPH_BREAKS",
    "INTERVAL_VERDICT",
    "K_CLASSES",
    "LAUNCH_COST",
    "NO_CLEAR_DIFFERENCE",
    "OWN_PROFILE",
    "OUTCOMES",
    "PAIRED_INTERVAL",
    "RHO",
    "RHO_REGIONS",
    "SLACK",
    "VERDICTS",
    "Exercise",
    "Feedback",
    "Mistake",
    "check_K",
    "check_audit_catch",
    "check_busy_slack",
    "check_capacity",
    "check_carry",
    "check_declaration",
    "check_extents",
    "check_graph_breaks",
    "check_launch_cost",
    "check_own_profile",
    "check_paired_interval",
    "check_rho",
    "check_slack",
    "declaration_diff",
    "exercises_table",
    "is_blank",
    "recorded_summary",
    "slack_exercise_frame",
    "stock_retain",
]

EXERCISES: dict[str, Exercise] = {e.name: e for e in (
    OWN_PROFILE, LAUNCH_COST, EXTENTS, K_CLASSES, RHO, AUDIT_CATCH, GRAPH_BREAKS, PAIRED_INTERVAL, INTERVAL_VERDICT,
    CAPACITY, SLACK)}


def exercises_table() -> pd.DataFrame:
    """One row per exercise: name, notebook, question, the mistakes it diagnoses."""
    rows = [dict(name=e.name, notebook=e.notebook, question=e.prompt, mistakes=[m.name for m in e.mistakes])
            for e in EXERCISES.values()]
    rows.append(dict(name="declaration", notebook=8, question=check_declaration.__doc__.splitlines()[0],
                     mistakes=list(DECLARATION_MISTAKES)))
    return pd.DataFrame(rows).sort_values("notebook", kind="stable").reset_index(drop=True)
