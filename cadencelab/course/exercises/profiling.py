"""Notebook 0's exercise: busy time and slack of a chunk you profiled yourself (CPU, the teaching model).

    check_own_profile   busy ms and slack of the profiled chunk, from its innermost ops
    check_busy_slack    the same as a function the student writes, graded on their trace and on intervals drawn now
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .machinery import Exercise, Mistake

__all__ = ["BUSY_SLACK_MISTAKES", "OWN_PROFILE", "check_busy_slack", "check_own_profile"]


@dataclass
class _Profiled:
    wall_ns: int
    busy_ns: int
    ops: pd.DataFrame  # every CPU op inside the window
    hint_fields: dict = field(default_factory=dict)


def _union_ns(starts, ends, ws: int, we: int) -> int:
    """Length of the union of [start, end) intervals clipped to [ws, we)."""
    s, e = np.clip(np.asarray(starts, np.int64), ws, we), np.clip(np.asarray(ends, np.int64), ws, we)
    total, cur_s, cur_e = 0, None, None
    for a, b in sorted(zip(s, e)):
        if cur_e is None or a > cur_e:
            total += 0 if cur_e is None else cur_e - cur_s
            cur_s, cur_e = a, b
        else:
            cur_e = max(cur_e, b)
    return int(total + (0 if cur_e is None else cur_e - cur_s))


def _prepare(trace=None) -> _Profiled:
    from ...profile import Trace, summary
    from .. import handson

    t = handson.profile_teaching_chunk() if trace is None else trace
    if not isinstance(t, Trace):
        raise TypeError(f"own_profile: trace must be the cadencelab.profile.Trace you loaded, got {type(t).__name__}")
    s = summary(handson.host_ops_as_kernels(t), handson.WINDOW).iloc[-1]
    ws, we = int(s["start_ns"]), int(s["end_ns"])
    ops = t.cpu_ops[(t.cpu_ops["start_ns"] >= ws) & (t.cpu_ops["end_ns"] <= we)]
    return _Profiled(we - ws, round(s["busy_us"] * 1e3), ops)


def _parts(c: _Profiled, busy_ns: float) -> dict:
    return dict(busy_ms=busy_ns / 1e6, slack=(c.wall_ns - busy_ns) / c.wall_ns)


OWN_PROFILE = Exercise(
    "own_profile", 0,
    "Your profiled chunk, from its innermost ops (host_ops_as_kernels): the busy time in ms (the union of the "
    "ops' intervals inside the chunk window) and the slack, the idle share of the window's wall time.",
    _prepare, lambda c: _parts(c, c.busy_ns),
    mistakes=(
        Mistake("all_ops_summed", "summing every op's duration counts nested ops twice (aten::linear holds "
                "aten::addmm): take the innermost ops, and their union.",
                lambda c: {"busy_ms": c.ops["dur_ns"].sum() / 1e6}),
        Mistake("top_level_ops", "the outermost ops include the framework's dispatch around the arithmetic: busy "
                "counts only the innermost ops (where the work happens).",
                lambda c: _parts(c, _union_ns(c.ops.loc[c.ops["depth"] == 0, "start_ns"],
                                              c.ops.loc[c.ops["depth"] == 0, "end_ns"], 0, 2**62))),
        Mistake("busy_share", "that is the busy share, busy / wall; slack is the idle share, 1 - busy / wall.",
                lambda c: {"slack": c.busy_ns / c.wall_ns}),
        Mistake("percent_not_fraction", "give the slack as a fraction of the wall time (between 0 and 1).",
                lambda c: {"slack": 100 * (c.wall_ns - c.busy_ns) / c.wall_ns}),
    ),
    rel_tol=0.02, abs_tol=0.01,
)

check_own_profile = OWN_PROFILE.check


# =======================================================================================
# notebook 0, as code: busy and slack from intervals, graded on the student's trace and on intervals drawn now
# =======================================================================================

#: what a busy-and-slack function gets wrong, and what to tell the student
BUSY_SLACK_MISTAKES = {
    "durations_summed": "summing durations counts overlapping and nested intervals twice: take the length of their "
                        "union.",
    "not_clipped": "an interval that starts before the window or ends after it counts only inside it: clip each to "
                   "the window first.",
    "busy_share": "that is the busy share, busy / wall; slack is the idle share, 1 - busy / wall.",
    "percent_not_fraction": "give the slack as a fraction of the wall time (between 0 and 1).",
    "not_ms": "busy_ms is in milliseconds: the intervals are in nanoseconds (/ 1e6).",
}
#: interval sets drawn per grading
HIDDEN_SETS = 6


def _busy_slack(starts, ends, ws: int, we: int, clip: bool = True, union: bool = True) -> dict:
    s, e = np.asarray(starts, np.int64), np.asarray(ends, np.int64)
    if clip:
        busy = _union_ns(s, e, ws, we) if union else int(np.clip(e, ws, we).sum() - np.clip(s, ws, we).sum())
    else:
        busy = _union_ns(s, e, -2**62, 2**62) if union else int((e - s).sum())
    return dict(busy_ms=busy / 1e6, slack=(we - ws - busy) / (we - ws))


def _slips(starts, ends, ws, we) -> dict:
    right = _busy_slack(starts, ends, ws, we)
    return {"durations_summed": _busy_slack(starts, ends, ws, we, union=False),
            "not_clipped": _busy_slack(starts, ends, ws, we, clip=False),
            "busy_share": {"slack": 1 - right["slack"]},
            "percent_not_fraction": {"slack": 100 * right["slack"]},
            "not_ms": {"busy_ms": right["busy_ms"] * 1e6}}


def _hidden_intervals(g: np.random.Generator) -> list[tuple]:
    """Interval sets drawn now: nested ops (a parent holding children), overlaps, and ops that cross the window."""
    sets = []
    for _ in range(HIDDEN_SETS):
        ws = int(g.integers(0, 10**6))
        we = ws + int(g.integers(2 * 10**5, 5 * 10**6))
        starts, ends = [], []
        for _ in range(int(g.integers(3, 12))):
            a = int(g.integers(ws - 10**5, we))
            b = a + int(g.integers(10**3, (we - ws) // 3))
            starts.append(a), ends.append(b)
            if g.random() < 0.5:  # a nested child
                c = a + int(g.integers(0, max(1, (b - a) // 2)))
                starts.append(c), ends.append(min(b, c + int(g.integers(1, max(2, (b - a) // 2)))))
        sets.append((np.array(starts, np.int64), np.array(ends, np.int64), ws, we))
    return sets


def _grade_case(fn, case, which: str) -> dict:
    starts, ends, ws, we = case
    row = dict(part=which, answer=None, expected="(hidden)", correct=False, mistake="", hint="")
    try:
        got = fn(starts.copy(), ends.copy(), ws, we)
    except Exception as e:  # the student's function raised: say what
        return {**row, "answer": type(e).__name__, "hint": f"{which}: your function raised {type(e).__name__}: {e}"}
    if not isinstance(got, dict) or set(got) != {"busy_ms", "slack"}:
        return {**row, "answer": type(got).__name__,
                "hint": f"{which}: return dict(busy_ms=..., slack=...), got {type(got).__name__}"}
    right = _busy_slack(starts, ends, ws, we)

    def close(part, value, want):
        tol = max(0.02 * abs(want), 0.01) if part == "busy_ms" else 0.01
        try:
            return abs(float(value) - want) <= tol
        except (TypeError, ValueError):
            return False

    wrong = [p for p in ("busy_ms", "slack") if not close(p, got[p], right[p])]
    if not wrong:
        return {**row, "answer": "right", "correct": True}
    for name, slip in _slips(starts, ends, ws, we).items():
        if all(p in slip and close(p, got[p], slip[p]) for p in wrong):
            return {**row, "answer": name, "mistake": name, "hint": f"{which}: {BUSY_SLACK_MISTAKES[name]}"}
    return {**row, "answer": "wrong", "hint": f"{which}: {', '.join(wrong)} not right; none of the usual slips "
                                                f"gives it: work one small case through by hand."}


def check_busy_slack(fn, trace=None):
    """Grade ``fn(starts_ns, ends_ns, window_start_ns, window_end_ns) -> dict(busy_ms, slack)`` on the student's
    own profiled chunk (its innermost ops and window) and on interval sets drawn now (nested, overlapping, crossing
    the window): busy within 2% (or 0.01 ms), slack within 0.01. Never shows the right values."""
    from .machinery import FEEDBACK_COLUMNS, FILL_IN, Feedback, is_blank

    if is_blank(fn) or (callable(fn) and _returns_blank(fn)):
        return Feedback("busy_slack", pd.DataFrame([dict(part=p, answer=None, expected="(hidden)", correct=False,
                                                         mistake="", hint=FILL_IN.format(part=p))
                                                    for p in ("your trace", "hidden intervals")],
                                                   columns=FEEDBACK_COLUMNS))
    if not callable(fn):
        raise TypeError(f"check_busy_slack: expected a function (starts_ns, ends_ns, ws, we) -> dict, got "
                        f"{type(fn).__name__}")
    mine = _grade_case(fn, _own_case(trace), "your trace")
    hidden = dict(part="hidden intervals", answer="right", expected="(hidden)", correct=True, mistake="", hint="")
    for case in _hidden_intervals(np.random.default_rng()):  # drawn when the grader runs
        hidden = _grade_case(fn, case, "hidden intervals")
        if not hidden["correct"]:
            break
    return Feedback("busy_slack", pd.DataFrame([mine, hidden], columns=FEEDBACK_COLUMNS))


def _own_case(trace=None) -> tuple:
    """The student's chunk: its innermost ops' intervals (all of them: clipping is the student's) and its window."""
    from ...profile import Trace, windows
    from .. import handson

    t = handson.profile_teaching_chunk() if trace is None else trace
    if not isinstance(t, Trace):
        raise TypeError(f"busy_slack: trace must be the cadencelab.profile.Trace you loaded, got {type(t).__name__}")
    k = handson.host_ops_as_kernels(t).kernels
    w = windows(t, handson.WINDOW).iloc[-1]
    return (k["start_ns"].to_numpy(np.int64), k["end_ns"].to_numpy(np.int64), int(w["start_ns"]), int(w["end_ns"]))


def _returns_blank(fn) -> bool:
    from .machinery import is_blank

    try:
        return is_blank(fn(np.array([0]), np.array([1]), 0, 2))
    except Exception:  # half-written: graded, and what it raised is said there
        return False
