"""Kernel events of one window, ready for a timeline: short names, the window's events, idle so far.

    short_kernel_name   'void at::native::reduce_kernel<512, 1, ...>(...)' -> 'native::reduce_kernel'
    timeline_events     the kernels launched inside one occurrence of a host range (or, on a
                        CPU-only trace, the top-level host ops), with short names
    accumulate_idle     per event: elapsed, busy and idle time (by gap category) since the first
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from .metrics import IDLE_CATEGORIES, gaps

__all__ = ["short_kernel_name", "timeline_events", "accumulate_idle"]


_TEMPLATE = re.compile(r"<[^<>]*>")


def short_kernel_name(name: str, keep: int = 2) -> str:
    """'void at::native::reduce_kernel<512, 1, ...>(...)' -> 'native::reduce_kernel'."""
    s = str(name).replace("(anonymous namespace)::", "")
    if s.startswith("void "):
        s = s[5:]
    for _ in range(8):  # strip nested template arguments
        t = _TEMPLATE.sub("", s)
        if t == s:
            break
        s = t
    s = s.split("(")[0].strip()
    parts = [p for p in s.split("::") if p and not p.startswith("{")]
    return "::".join(parts[-keep:]) if parts else str(name)[:40]


def timeline_events(trace, window: str = "chunk", occurrence: int = -1) -> tuple[pd.DataFrame, str]:
    """The events a timeline shows for one window of ``trace``, and what they are.

    With device activity: the kernels (and memcpy/memset) launched inside the host range
    ``window`` (occurrence ``occurrence``; -1 = the last). On a CPU-only trace: the top-level host
    ops inside it (what a CPU executes in place of kernels). Columns name, kernel (short name),
    start_ns, end_ns, dur_ns, launch_ns, graph, correlation, cat.
    """
    r = trace.ranges[(trace.ranges["side"] == "cpu") & (trace.ranges["name"] == window)]
    if len(r):
        w = r.sort_values("start_ns").iloc[occurrence]
        ws, we = int(w["start_ns"]), int(w["end_ns"])
    else:
        ws, we = trace.span_ns()
    if trace.has_device_activity:
        k = trace.kernels
        if "launch_ns" in k.columns and k["launch_ns"].notna().any():
            inside = k["launch_ns"].fillna(k["start_ns"]).between(ws, we)
        else:
            inside = k["start_ns"].between(ws, we)
        ev = k[inside].copy()
        what = "device kernels"
    else:
        ops = trace.cpu_ops
        ev = ops[(ops["depth"] == 0) & (ops["start_ns"] >= ws) & (ops["end_ns"] <= we)].copy()
        ev["launch_ns"] = pd.array([pd.NA] * len(ev), dtype="Int64")
        ev["graph"] = False
        ev["correlation"] = pd.array([pd.NA] * len(ev), dtype="Int64")
        ev["cat"] = "cpu_op"
        what = "top-level host ops (CPU-only trace: no kernels)"
    ev = ev.sort_values(["start_ns", "end_ns"], kind="stable").reset_index(drop=True)
    ev["kernel"] = [short_kernel_name(n) for n in ev["name"]]
    cols = ["name", "kernel", "start_ns", "end_ns", "dur_ns", "launch_ns", "graph", "correlation", "cat"]
    return ev[cols], what



def accumulate_idle(events: pd.DataFrame, idle_order=IDLE_CATEGORIES) -> dict:
    """Per event index: elapsed, busy and idle (by category) since the first event, in ns.

    ``events``: a kernel frame (start_ns, end_ns, ...) of one window. Returns arrays keyed
    start_ns, end_ns, elapsed_ns, idle_ns, busy_ns, and ``idle``: category -> idle so far;
    the categories in ``idle_order`` come first (they are always present), then any others.
    """
    k = events.reset_index(drop=True)
    g = gaps(k)
    s = k["start_ns"].to_numpy(np.int64)
    e = k["end_ns"].to_numpy(np.int64)
    t0 = int(s[0])
    reach = np.maximum.accumulate(e) - t0  # elapsed at the end of event i (device time reached)
    cats = list(idle_order) + sorted(set(g["category"]) - set(idle_order))
    idle = {}
    gend = g["end_ns"].to_numpy(np.int64)
    for c in cats:
        m = (g["category"] == c).to_numpy()
        cs = np.concatenate([[0], np.cumsum(g["gap_ns"].to_numpy(np.int64)[m])])
        idle[c] = cs[np.searchsorted(gend[m], s, side="right")]  # gaps that ended by the start of event i
    total = sum(idle.values())
    return dict(start_ns=s - t0, end_ns=e - t0, elapsed_ns=reach, idle_ns=total, busy_ns=reach - total, idle=idle)

