"""Notebook 0's exercise: busy time and slack of a chunk you profiled yourself (CPU, the teaching model).

    check_own_profile   busy ms and slack of the profiled chunk, from its innermost ops
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .machinery import Exercise, Mistake

__all__ = ["OWN_PROFILE", "check_own_profile"]


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
