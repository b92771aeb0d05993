"""Notebook 6's exercise: read one arm's capacity and goodput plateau off the recorded sessions study.

    notebook 6  check_capacity   the most sessions that held the cadence, and the goodput plateau
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from .machinery import Exercise, Mistake

__all__ = ["CAPACITY", "check_capacity"]


@dataclass
class _Sweep:
    """One arm's sweep in one workload: its rows (N that ran), capacity and plateau from the library."""

    rows: pd.DataFrame
    sessions: int
    plateau: float
    hint_fields: dict = field(default_factory=dict)


def _prepare(arm: str = "SRc", workload: str = "speak_heavy", dataset: str = "sessions") -> _Sweep:
    from .. import capacity, data

    cap = data.sessions_capacity(workload, dataset=dataset)
    rows = cap[cap["arm"] == arm]
    if rows.empty:
        raise ValueError(f"unknown arm {arm!r}; the {dataset} study ran {sorted(cap['arm'].unique())} in {workload}")
    b = capacity.capacity_bounds(dataset).set_index(["arm", "workload"]).loc[(arm, workload)]
    plateau = capacity.goodput_plateau(workload, dataset).set_index("arm").loc[arm, "plateau_audio_s_per_s"]
    return _Sweep(rows.sort_values("sessions"), int(b["max_sessions"]), float(plateau),
                  dict(arm=arm, workload=workload))


def _first_break(c: _Sweep) -> dict:
    """The first N at which some session missed the cadence (nothing when the sweep never broke)."""
    broke = c.rows.loc[~c.rows["all_hold"].astype(bool), "sessions"]
    return {"sessions": int(broke.min())} if len(broke) else {}


def _at_capacity(c: _Sweep) -> dict:
    """The goodput at the capacity N (not the plateau, which may come later)."""
    at = c.rows.loc[c.rows["sessions"] == c.sessions, "goodput"]
    return {"plateau": float(at.iloc[0])} if len(at) else {}


CAPACITY = Exercise(
    "capacity", 6,
    "From data.sessions_capacity(workload), for the arm: sessions, the most sessions at which every session held "
    "the cadence (all_hold), and plateau, its goodput plateau (the most audio seconds served per wall second at "
    "any N).",
    _prepare, lambda c: {"sessions": c.sessions, "plateau": c.plateau},
    mistakes=(
        Mistake("first_break", "at that N some session's p95 chunk latency is over the cadence (all_hold is False): "
                "the capacity is the largest N at which every session held it.",
                _first_break, plant=dict(arm="B0")),
        Mistake("goodput_at_capacity", "that is the goodput at the capacity; the plateau is the most audio served per "
                "second at any N, past the capacity too (there the sessions are served, late).",
                _at_capacity, plant=dict(arm="SRc")),
    ),
    rel_tol=0.02,
)

check_capacity = CAPACITY.check
