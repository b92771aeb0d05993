"""Exercises on the recorded H200 data: notebook 1's launch cost, notebook 5's paired interval,
notebook 7's orchestration slack.

    notebook 1  check_launch_cost        idle per launch from the recorded duplex second
    notebook 5  check_paired_interval    read an interval of the factorial over processes and blocks
    notebook 7  check_slack              orchestration slack from a chunk summary frame
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import pandas as pd

from ..predict import NO_CLEAR_DIFFERENCE, interval_verdict
from .machinery import Exercise, Feedback, Mistake, is_blank

__all__ = ["INTERVAL_VERDICT", "LAUNCH_COST", "PAIRED_INTERVAL", "SLACK", "VERDICTS", "check_launch_cost",
           "check_paired_interval", "check_slack", "recorded_summary", "slack_exercise_frame"]


# =======================================================================================
# notebook 1: launches x per-launch cost vs measured idle
# =======================================================================================


@dataclass
class _Second:
    b0: pd.Series  # the profiled second's synthesis range, B0 (wall_ms, slack_frac, launches)
    src: pd.Series  # the same, SRc
    b0_median_ms: float  # B0's unprofiled median synthesis (what the slip multiplies by)
    hint_fields: dict


def _data():
    from .. import data

    return data


def _prepare_second(condition: str = "exact") -> _Second:
    from ..anatomy import profiled_window

    w = profiled_window(condition).set_index(["arm", "range"])
    b0, src = w.loc[("B0", "synthesis")], w.loc[("SRc", "synthesis")]
    median = float(_data().duplex_summary(condition).loc["B0", "synthesis_ms_median"])
    return _Second(b0, src, median, dict(b0_launches=int(b0["launches"]), src_launches=int(src["launches"])))


def _launch_parts(idle_ms: float, b0: pd.Series, src_launches: float) -> dict:
    per_us = 1e3 * idle_ms / float(b0["launches"])
    return dict(b0_idle_ms=idle_ms, per_launch_us=per_us, src_predicted_idle_ms=src_launches * per_us / 1e3)


def _launch_expected(c: _Second) -> dict:
    idle = float(c.b0["wall_ms"]) * float(c.b0["slack_frac"])  # both of the profiled second
    return _launch_parts(idle, c.b0, float(c.src["launches"]))


LAUNCH_COST = Exercise(
    "launch_cost", 1,
    "From the profiled second's synthesis range (anatomy.profiled_window: wall_ms, slack_frac, launches): B0's "
    "synthesis idle in ms (its wall time x its slack), the host cost per kernel launch that idle implies (us), and "
    "the idle SRc's launches alone would predict (ms).",
    _prepare_second, _launch_expected,
    mistakes=(
        Mistake("busy_not_idle", "slack_frac is the idle share; {answer} is the busy part (x (1 - slack)).",
                lambda c: _launch_parts(float(c.b0["wall_ms"]) * (1 - float(c.b0["slack_frac"])),
                                        c.b0, float(c.src["launches"]))),
        Mistake("unprofiled_wall", "that multiplies the profiled second's slack by an unprofiled median: the "
                "profiler slows the second it watches (notebook 7 measures by how much), so a share of the "
                "profiled wall time belongs with the profiled wall time (wall_ms).",
                lambda c: _launch_parts(c.b0_median_ms * float(c.b0["slack_frac"]), c.b0,
                                        float(c.src["launches"]))),
        Mistake("ms_per_launch", "that is milliseconds per launch; the part asks for microseconds (x 1000).",
                lambda c: {"per_launch_us": _launch_expected(c)["per_launch_us"] / 1e3}),
        Mistake("b0_launches_for_src", "that is B0's own idle: predict SRc with SRc's {src_launches} launches "
                "(a graph launch counts once).",
                lambda c: {"src_predicted_idle_ms": _launch_expected(c)["b0_idle_ms"]}),
        Mistake("measured_not_predicted", "that is SRc's measured idle; the part asks what its launches alone predict "
                "(the difference is idle that no launch causes: gaps inside the graphs).",
                lambda c: {"src_predicted_idle_ms": float(c.src["wall_ms"]) * float(c.src["slack_frac"])}),
    ),
    rel_tol=0.05,
)


# =======================================================================================
# notebook 5: read an interval of the factorial
# =======================================================================================

#: what a latency interval says (the paired-interval exercise's verdict choices)
VERDICTS = ("faster", "slower", NO_CLEAR_DIFFERENCE)


@dataclass
class _Interval:
    row: pd.Series
    hint_fields: dict


def _prepare_interval(arm: str = "S", condition: str = "exact") -> _Interval:
    f = _data().factorial(condition).set_index("arm")
    if arm not in f.index:
        raise ValueError(f"unknown arm {arm!r}; the {condition} factorial has {list(f.index)}")
    return _Interval(f.loc[arm], dict(arm=arm, median=float(f.loc[arm, "latency_delta"])))


def _interval_expected(c: _Interval) -> dict:
    lo, hi = float(c.row["latency_delta_lo"]), float(c.row["latency_delta_hi"])
    return dict(lo=lo, hi=hi, verdict=interval_verdict(lo, hi, "faster", "slower"))


PAIRED_INTERVAL = Exercise(
    "paired_interval", 5,
    "From data.factorial: the arm's 95% interval (over processes and blocks) of its latency change against B0 "
    "(latency_delta_lo, latency_delta_hi, as fractions) and what it says: faster, slower or no clear difference.",
    _prepare_interval, lambda c: {k: v for k, v in _interval_expected(c).items() if k != "verdict"},
    mistakes=(
        Mistake("percent_not_fraction", "the deltas are fractions of B0's latency (0.10 means +10%).",
                lambda c: {k: 100 * v for k, v in _interval_expected(c).items() if k != "verdict"}),
        Mistake("peak_interval", "that is the peak-memory interval (peak_delta_*); the question is about latency.",
                lambda c: dict(lo=float(c.row["peak_delta_lo"]), hi=float(c.row["peak_delta_hi"]))),
        Mistake("ends_swapped", "lo is the lower end of the interval.",
                lambda c: dict(lo=_interval_expected(c)["hi"], hi=_interval_expected(c)["lo"])),
    ),
    abs_tol=0.005,
)

INTERVAL_VERDICT = Exercise(
    "paired_interval_verdict", 5,
    "What the arm's latency interval against B0 says: faster, slower or no clear difference.",
    _prepare_interval, lambda c: dict(verdict=_interval_expected(c)["verdict"]),
    mistakes=(
        Mistake("median_decides", "the median change is {median:+.1%}, but the interval includes 0: the data "
                "cannot tell the arms apart.",
                lambda c: dict(verdict="faster" if float(c.row["latency_delta"]) < 0 else "slower")),
        Mistake("sign_flipped", "a negative delta is a lower latency, i.e. faster.",
                lambda c: dict(verdict={"faster": "slower", "slower": "faster"}.get(_interval_expected(c)["verdict"],
                                                                                   _interval_expected(c)["verdict"])),
                plant=dict(arm="SRc")),
    ),
    kind="choice", choices=VERDICTS,
)


# =======================================================================================
# notebook 7: orchestration slack from a trace frame
# =======================================================================================


@dataclass
class _Slack:
    summary: pd.DataFrame
    hint_fields: dict = field(default_factory=dict)


_RECORDED = {}


def recorded_summary() -> pd.DataFrame:
    """One steady chunk's summary per variant (eager = B0, replay = SRc) from the recorded H200 traces."""
    if "summary" not in _RECORDED:
        from ...profile import summary

        rows = []
        for variant, arm in (("eager", "B0"), ("replay", "SRc")):
            s = summary(_data().recorded_trace(arm), "chunk").iloc[[-1]].copy()
            s.insert(0, "variant", variant)
            rows.append(s)
        _RECORDED["summary"] = pd.concat(rows, ignore_index=True)
    return _RECORDED["summary"]


def _prepare_slack() -> _Slack:
    """The recorded chunk, read by the grader itself (never a frame the student passes: one could be doctored)."""
    return _Slack(recorded_summary().set_index("variant"))


def slack_exercise_frame() -> pd.DataFrame:
    """What the slack exercise shows: the recorded chunk's times per variant, the slack columns left out."""
    return recorded_summary()[["variant", "wall_us", "busy_us", "host_wait_us", "kernel_wait_us", "other_idle_us"]]


def _slack_parts(c: _Slack, f: Callable) -> dict:
    return {v: float(f(r)) for v, r in c.summary.iterrows()}


SLACK = Exercise(
    "slack", 7,
    "Orchestration slack per variant (eager, replay) of the chunk summary: the idle share of the chunk's wall time.",
    _prepare_slack, lambda c: _slack_parts(c, lambda r: (r["wall_us"] - r["busy_us"]) / r["wall_us"]),
    mistakes=(
        Mistake("busy_share", "that is the busy share (busy / wall); slack is the idle share, 1 - busy / wall.",
                lambda c: _slack_parts(c, lambda r: r["busy_us"] / r["wall_us"])),
        Mistake("host_wait_only", "slack counts all idle time (host_wait + kernel_wait + other), not host_wait alone.",
                lambda c: _slack_parts(c, lambda r: r["host_wait_us"] / r["wall_us"])),
        Mistake("percent_not_fraction", "give slack as a fraction of the wall time (a share between 0 and 1: 0.25, not 25).",
                lambda c: _slack_parts(c, lambda r: 100 * (r["wall_us"] - r["busy_us"]) / r["wall_us"])),
    ),
    abs_tol=0.01,
)


check_launch_cost = LAUNCH_COST.check
check_slack = SLACK.check


def check_paired_interval(answer: Mapping, **inputs) -> Feedback:
    """Grade the interval (lo, hi) and the verdict of an arm's paired latency change against B0."""
    if is_blank(answer):
        answer = dict(lo=..., hi=..., verdict=...)
    if not isinstance(answer, Mapping):
        raise ValueError(f"paired_interval: give a mapping with lo, hi and verdict, got {answer!r}")
    nums = {k: v for k, v in answer.items() if k != "verdict"}
    a = PAIRED_INTERVAL.check(nums, **inputs)
    b = INTERVAL_VERDICT.check({"verdict": answer["verdict"]} if "verdict" in answer else {}, **inputs)
    return Feedback("paired_interval", pd.concat([a.table, b.table], ignore_index=True))
