"""Orchestration metrics on a trace: busy time, slack, the idle split, launches, stages.

Definitions (all on integer nanoseconds; every summary column says its unit):

- **wall** of a window ``[start_ns, end_ns)`` is its length; **busy** the length of the union of device
  intervals (kernels, and memcpy/memset unless ``include_memory=False``) clipped to it, overlapping streams
  counted once; **orchestration slack** the idle share of wall, ``(wall - busy) / wall``.
- **gaps**, the idle stretches between merged device intervals, are classified by what the device was waiting
  for when the next interval began: ``host_wait`` (the next kernel's launch call started at or after the
  previous interval ended: the host had not issued it yet), ``kernel_wait`` (it started before: launch/queue
  latency; also every gap between kernels of one ``cudaGraphLaunch``, which is device-side) and ``other`` (no
  launch call in the trace, and the stretches before the trace's first or after its last device interval).
  Under replay the launch call that counts is the ``cudaGraphLaunch`` sharing the kernel's correlation id
  (``graph_aware=False`` reproduces a reader that knows only kernel launches). In any window
  ``host_wait + kernel_wait + other == wall - busy`` exactly.
- A trace with no device activity (CPU-only) has busy, slack and the idle split NaN, never zero, with the reason
  in ``na_reason`` (and ``df.attrs["na_reason"]``).
- A window with ``cudaGraphLaunch`` calls whose kernels the trace lacks would count the replayed work as idle:
  ``summary``, ``idle_split`` and ``stages`` refuse it with :class:`GraphKernelsMissing`, which says how many
  launches lack kernels and why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from .trace import Trace

__all__ = [
    "CPU_ONLY_REASON",
    "GraphKernelsMissing",
    "check_graph_kernels",
    "IDLE_CATEGORIES",
    "device_intervals",
    "gaps",
    "windows",
    "busy_ns",
    "idle_split",
    "launch_counts",
    "summary",
    "stages",
]

IDLE_CATEGORIES = ("host_wait", "kernel_wait", "other")
CPU_ONLY_REASON = "no device activity in the trace (CPU-only): busy, slack and idle split do not apply"
SUMMARY_COLUMNS = [
    "window", "occurrence", "start_ns", "end_ns", "wall_us", "busy_us", "slack_frac",
    "host_wait_us", "kernel_wait_us", "other_idle_us", "kernel_launches", "graph_launches",
    "kernels", "na_reason",
]
STAGE_COLUMNS = [
    "range", "occurrence", "start_ns", "end_ns", "cpu_us", "wall_us", "busy_us", "slack_frac",
    "kernel_launches", "graph_launches", "kernels", "na_reason",
]


# ----------------------------------------------------------------------------------------------
# Inputs
# ----------------------------------------------------------------------------------------------


class GraphKernelsMissing(ValueError):
    """A window has CUDA graph launches but the trace holds no kernel records for them."""


def check_graph_kernels(trace_or_kernels, window=None, *, launches: pd.DataFrame | None = None,
                        where: str = "slack") -> None:
    """Refuse a window whose ``cudaGraphLaunch`` calls have no kernel records in the trace.

    A graph launch and the kernels it runs share a correlation id. When the profiler records the
    launch call but not the graph's kernels (CUPTI did not report graph-node kernels for this
    run), busy time misses the whole replay and slack reads it as idle. Raises
    :class:`GraphKernelsMissing` naming the trace, the window and the count; returns None when
    every graph launch in every window has at least one device record.
    """
    f = _frames(trace_or_kernels, launches)
    la = f.launches
    if not len(la) or "kind" not in la.columns:
        return
    g = la[la["kind"] == "graph_launch"]
    if not len(g):
        return
    have = set(f.kernels["correlation"].dropna().astype(int)) if "correlation" in f.kernels.columns else set()
    win = windows(trace_or_kernels if isinstance(trace_or_kernels, Trace) else None, window, span=f.span)
    source = trace_or_kernels.source if isinstance(trace_or_kernels, Trace) else "kernels frame"
    gs = g["start_ns"].to_numpy(np.int64)
    gc = g["correlation"].to_numpy(object)
    for name, occ, ws, we in zip(win["window"], win["occurrence"], win["start_ns"], win["end_ns"]):
        inside = (gs >= int(ws)) & (gs < int(we))
        n = int(inside.sum())
        bare = sum(1 for c in gc[inside] if c is pd.NA or int(c) not in have)
        if bare:
            raise GraphKernelsMissing(
                f"{source}: window {name!r} (occurrence {occ}) holds {n} cudaGraphLaunch call(s), {bare} of them "
                f"with no kernel records in the trace: the profiler recorded the graph launch but not the kernels "
                f"the graph ran, so busy time would miss the replay and the {where} would count it as idle. "
                f"Re-profile with a profiler that records graph kernels (torch.profiler with CUDA activity on a "
                f"CUPTI that reports graph-node kernels) before computing {where}.")


@dataclass
class _Frames:
    kernels: pd.DataFrame
    launches: pd.DataFrame
    ranges: pd.DataFrame | None
    span: tuple[int, int] | None


def _frames(trace_or_kernels, launches: pd.DataFrame | None) -> _Frames:
    if isinstance(trace_or_kernels, Trace):
        t = trace_or_kernels
        return _Frames(t.kernels, t.launches if launches is None else launches, t.ranges, t.span_ns())
    if not isinstance(trace_or_kernels, pd.DataFrame):
        raise TypeError(f"expected a Trace or a kernels DataFrame, got {type(trace_or_kernels).__name__}")
    k = trace_or_kernels
    missing = [c for c in ("name", "start_ns", "end_ns") if c not in k.columns]
    if missing:
        raise ValueError(f"kernels frame is missing columns {missing}")
    la = launches if launches is not None else pd.DataFrame(columns=["kind", "start_ns", "end_ns"])
    if "launch_ns" not in k.columns and launches is not None and "correlation" in k.columns:
        k = _join_launches(k, launches)
    starts = [int(df["start_ns"].min()) for df in (k, la) if len(df)]
    ends = [int(df["end_ns"].max()) for df in (k, la) if len(df)]
    span = (min(starts), max(ends)) if starts else None
    return _Frames(k, la, None, span)


def _join_launches(kernels: pd.DataFrame, launches: pd.DataFrame) -> pd.DataFrame:
    """Add launch_ns / graph to a bare kernels frame from a launches frame (by correlation)."""
    la = launches.dropna(subset=["correlation"]).sort_values("start_ns").drop_duplicates("correlation")
    la = la[["correlation", "start_ns", "kind"]].rename(columns={"start_ns": "launch_ns"})
    out = kernels.merge(la, on="correlation", how="left")
    out["graph"] = out["kind"].eq("graph_launch").fillna(False).astype(bool)
    return out.drop(columns="kind")


def _device_rows(kernels: pd.DataFrame, include_memory: bool) -> pd.DataFrame:
    k = kernels
    if "cat" in k.columns and not include_memory:
        k = k[k["cat"].eq("kernel")]
    return k.sort_values(["start_ns", "end_ns"], kind="stable").reset_index(drop=True)


# ----------------------------------------------------------------------------------------------
# Device intervals and gaps
# ----------------------------------------------------------------------------------------------


def device_intervals(trace_or_kernels, include_memory: bool = True) -> pd.DataFrame:
    """Merge device activity into disjoint busy intervals.

    Returns start_ns, end_ns, dur_ns, first_kernel (earliest-starting kernel of the interval),
    last_kernel (the one that ends it), first_row, last_row (row positions in the sorted device
    frame), n_events.
    """
    f = _frames(trace_or_kernels, None)
    k = _device_rows(f.kernels, include_memory)
    return _merge(k)


def _merge(k: pd.DataFrame) -> pd.DataFrame:
    cols = ["start_ns", "end_ns", "dur_ns", "first_kernel", "last_kernel", "first_row", "last_row", "n_events"]
    if len(k) == 0:
        return pd.DataFrame({c: pd.Series(dtype="int64" if c not in ("first_kernel", "last_kernel") else object)
                             for c in cols})
    s = k["start_ns"].to_numpy(np.int64)
    e = k["end_ns"].to_numpy(np.int64)
    run_end = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > run_end[:-1]          # touching intervals merge: no zero-length gaps
    group = np.cumsum(new) - 1
    first = np.flatnonzero(new)
    n = len(first)
    starts = s[first]
    ends = np.zeros(n, dtype=np.int64)
    np.maximum.at(ends, group, e)
    # the row that ends each interval: the latest end, the last such row on ties
    order = np.lexsort((np.arange(len(s)), e, group))
    last = order[np.r_[np.flatnonzero(np.diff(group[order])), len(s) - 1]]
    names = k["name"].to_numpy(object)
    return pd.DataFrame({
        "start_ns": starts, "end_ns": ends, "dur_ns": ends - starts,
        "first_kernel": names[first], "last_kernel": names[last],
        "first_row": first.astype(np.int64), "last_row": last.astype(np.int64),
        "n_events": np.bincount(group).astype(np.int64),
    })


def gaps(trace_or_kernels, launches: pd.DataFrame | None = None, *, include_memory: bool = True,
         graph_aware: bool = True) -> pd.DataFrame:
    """The idle gaps between consecutive merged device intervals, classified.

    Returns start_ns, end_ns, gap_ns, prev_kernel, next_kernel, next_launch_ns (start of the
    launch call that counts for the next kernel; <NA> when unknown), category (host_wait,
    kernel_wait or other). See the module docstring for the rules.
    """
    f = _frames(trace_or_kernels, launches)
    k = _device_rows(f.kernels, include_memory)
    return _gaps(k, graph_aware)


def _gaps(k: pd.DataFrame, graph_aware: bool) -> pd.DataFrame:
    iv = _merge(k)
    if len(iv) < 2:
        return pd.DataFrame({
            "start_ns": pd.Series(dtype="int64"), "end_ns": pd.Series(dtype="int64"),
            "gap_ns": pd.Series(dtype="int64"), "prev_kernel": pd.Series(dtype=object),
            "next_kernel": pd.Series(dtype=object), "next_launch_ns": pd.array([], dtype="Int64"),
            "category": pd.Series(dtype=object)})
    prev_row = iv["last_row"].to_numpy()[:-1]
    next_row = iv["first_row"].to_numpy()[1:]
    start = iv["end_ns"].to_numpy()[:-1]
    end = iv["start_ns"].to_numpy()[1:]

    n = len(k)
    launch = pd.array(k["launch_ns"], dtype="Int64") if "launch_ns" in k.columns else pd.array([pd.NA] * n, dtype="Int64")
    graph = k["graph"].to_numpy(bool) if "graph" in k.columns else np.zeros(n, dtype=bool)
    corr = pd.array(k["correlation"], dtype="Int64") if "correlation" in k.columns else pd.array([pd.NA] * n, dtype="Int64")
    if not graph_aware:
        launch = launch.copy()
        launch[graph] = pd.NA

    next_launch = launch[next_row]
    has_launch = ~np.asarray(next_launch.isna())
    launch_val = np.asarray(next_launch.fillna(0).to_numpy(np.int64))
    same_graph = (graph_aware & graph[prev_row] & graph[next_row]
                  & np.asarray((corr[prev_row] == corr[next_row]).fillna(False), dtype=bool))
    category = np.where(same_graph, "kernel_wait",
                        np.where(~has_launch, "other",
                                 np.where(launch_val >= start, "host_wait", "kernel_wait")))
    names = k["name"].to_numpy(object)
    return pd.DataFrame({
        "start_ns": start.astype(np.int64), "end_ns": end.astype(np.int64),
        "gap_ns": (end - start).astype(np.int64),
        "prev_kernel": names[prev_row], "next_kernel": names[next_row],
        "next_launch_ns": next_launch, "category": category.astype(object),
    })


# ----------------------------------------------------------------------------------------------
# Windows
# ----------------------------------------------------------------------------------------------


def windows(trace: Trace | None, window=None, *, span: tuple[int, int] | None = None) -> pd.DataFrame:
    """Resolve a window spec into a frame of window, occurrence, start_ns, end_ns.

    ``window`` may be None (the whole trace), a ``(start_ns, end_ns)`` pair, the name of a
    host-side range (one window per occurrence, in time order), or a DataFrame with start_ns and
    end_ns (and optionally ``window`` / ``name`` labels).
    """
    if window is None:
        if span is None:
            if trace is None:
                raise ValueError("no window given and no trace to take the span from")
            span = trace.span_ns()
        s, e = _bounds(span, "span")
        return pd.DataFrame({"window": ["trace"], "occurrence": [0], "start_ns": [s], "end_ns": [e]})
    if isinstance(window, str):
        if trace is None:
            raise ValueError(f"window {window!r} names a range; pass a Trace (a kernels frame has no ranges)")
        r = trace.ranges
        r = r[(r["side"] == "cpu") & (r["name"] == window)].sort_values("start_ns", kind="stable")
        if len(r) == 0:
            known = sorted(set(trace.ranges.loc[trace.ranges["side"] == "cpu", "name"]))
            raise ValueError(f"{trace.source}: no range named {window!r}; ranges in the trace: {known}")
        return pd.DataFrame({"window": window, "occurrence": np.arange(len(r)),
                             "start_ns": r["start_ns"].to_numpy(np.int64),
                             "end_ns": r["end_ns"].to_numpy(np.int64)})
    if isinstance(window, pd.DataFrame):
        missing = [c for c in ("start_ns", "end_ns") if c not in window.columns]
        if missing:
            raise ValueError(f"window frame is missing columns {missing}")
        label = window["window"] if "window" in window.columns else (
            window["name"] if "name" in window.columns else pd.Series(["window"] * len(window)))
        starts, ends = (_column(window, c) for c in ("start_ns", "end_ns"))
        back = np.flatnonzero(ends < starts)
        if len(back):
            i = int(back[0])
            raise ValueError(f"window frame: {len(back)} row(s) end before they start (first: row {i}, start_ns "
                             f"{starts[i]}, end_ns {ends[i]}); a window is [start_ns, end_ns) with end_ns >= start_ns")
        return pd.DataFrame({"window": list(label), "occurrence": np.arange(len(window)),
                             "start_ns": starts, "end_ns": ends})
    if isinstance(window, (tuple, list)) and len(window) == 2:
        s, e = _bounds(window, "window")
        return pd.DataFrame({"window": ["window"], "occurrence": [0], "start_ns": [s], "end_ns": [e]})
    raise TypeError(f"cannot read a window from {type(window).__name__}: use None, (start_ns, end_ns), "
                    "a range name, or a DataFrame with start_ns/end_ns")


def _bounds(pair, what: str) -> tuple[int, int]:
    """``(start_ns, end_ns)`` as integers: each a finite whole number of ns, the end not before the start."""
    out = []
    for name, v in zip(("start", "end"), pair):
        ok = isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))
        ok = ok or (isinstance(v, (float, np.floating)) and math.isfinite(v) and float(v).is_integer())
        if not ok:
            raise ValueError(f"{what}: {name} must be a whole number of ns, got {_plain(v)!r}")
        out.append(int(v))
    if out[1] < out[0]:
        raise ValueError(f"{what}: end {out[1]} ns precedes start {out[0]} ns (a window is [start, end) with "
                         f"end >= start)")
    return out[0], out[1]


def _plain(v):
    """A numpy scalar as its Python value (for messages)."""
    return v.item() if isinstance(v, np.generic) else v


def _column(frame: pd.DataFrame, col: str) -> np.ndarray:
    """A window frame's time column as int64; a missing or non-integer value is named with its row."""
    v = pd.to_numeric(frame[col], errors="coerce")
    bad = np.flatnonzero(v.isna().to_numpy() | ~np.isfinite(v.to_numpy(float)) | (v.to_numpy(float) % 1 != 0))
    if len(bad):
        i = int(bad[0])
        raise ValueError(f"window frame: {col} of row {i} is {_plain(frame[col].iloc[i])!r}, not a whole number of ns")
    return v.to_numpy(np.int64)


def _clipped(starts: np.ndarray, ends: np.ndarray, ws: int, we: int) -> tuple[int, int, np.ndarray]:
    """Positions [i0, i1) of sorted disjoint intervals overlapping [ws, we) and their clipped lengths."""
    i0 = int(np.searchsorted(ends, ws, side="right"))
    i1 = int(np.searchsorted(starts, we, side="left"))
    if i1 <= i0:
        return i0, i0, np.zeros(0, dtype=np.int64)
    return i0, i1, np.minimum(ends[i0:i1], we) - np.maximum(starts[i0:i1], ws)


def busy_ns(trace_or_kernels, start_ns: int, end_ns: int, *, include_memory: bool = True) -> int:
    """Union of device intervals inside [start_ns, end_ns), in ns (the end may not precede the start)."""
    start_ns, end_ns = _bounds((start_ns, end_ns), "busy_ns")
    iv = device_intervals(trace_or_kernels, include_memory)
    _, _, lens = _clipped(iv["start_ns"].to_numpy(), iv["end_ns"].to_numpy(), start_ns, end_ns)
    return int(lens.sum())


@dataclass
class _Timeline:
    """Busy intervals and classified gaps as sorted arrays, built once per trace."""

    iv_start: np.ndarray
    iv_end: np.ndarray
    gap_start: np.ndarray
    gap_end: np.ndarray
    gap_cat: np.ndarray

    @classmethod
    def build(cls, k: pd.DataFrame, graph_aware: bool) -> "_Timeline":
        iv, gp = _merge(k), _gaps(k, graph_aware)
        return cls(iv["start_ns"].to_numpy(np.int64), iv["end_ns"].to_numpy(np.int64),
                   gp["start_ns"].to_numpy(np.int64), gp["end_ns"].to_numpy(np.int64),
                   gp["category"].to_numpy(object))

    def busy(self, ws: int, we: int) -> int:
        return int(_clipped(self.iv_start, self.iv_end, ws, we)[2].sum())

    def idle(self, ws: int, we: int) -> dict[str, int]:
        out = dict.fromkeys(IDLE_CATEGORIES, 0)
        if len(self.iv_start) == 0:
            out["other"] = we - ws
            return out
        first, last = int(self.iv_start[0]), int(self.iv_end[-1])
        out["other"] += max(0, min(we, first) - ws) + max(0, we - max(ws, last))
        i0, i1, lens = _clipped(self.gap_start, self.gap_end, ws, we)
        cats = self.gap_cat[i0:i1]
        for c in IDLE_CATEGORIES:
            out[c] += int(lens[cats == c].sum())
        return out


def idle_split(trace_or_kernels, window=None, *, launches: pd.DataFrame | None = None,
               include_memory: bool = True, graph_aware: bool = True) -> pd.DataFrame:
    """Idle time per window split into host_wait_ns, kernel_wait_ns, other_ns (plus idle_ns)."""
    f = _frames(trace_or_kernels, launches)
    win = windows(trace_or_kernels if isinstance(trace_or_kernels, Trace) else None, window, span=f.span)
    check_graph_kernels(trace_or_kernels, win, launches=launches, where="idle split")
    tl = _Timeline.build(_device_rows(f.kernels, include_memory), graph_aware)
    rows = []
    for ws, we in zip(win["start_ns"], win["end_ns"]):
        p = tl.idle(int(ws), int(we))
        rows.append({"host_wait_ns": p["host_wait"], "kernel_wait_ns": p["kernel_wait"], "other_ns": p["other"],
                     "idle_ns": sum(p.values())})
    return pd.concat([win, pd.DataFrame(rows, index=win.index)], axis=1)


# ----------------------------------------------------------------------------------------------
# Launch counts
# ----------------------------------------------------------------------------------------------

_LAUNCH_KINDS = {"kernel_launch": "kernel_launches", "graph_launch": "graph_launches",
                 "memcpy": "memcpy_calls", "memset": "memset_calls", "sync": "syncs", "other": "other_calls"}
_DEVICE_KINDS = {"kernel": "kernels", "memcpy": "memcpys", "memset": "memsets"}


def _count_in(sorted_starts: np.ndarray, ws: int, we: int) -> int:
    return int(np.searchsorted(sorted_starts, we, "left") - np.searchsorted(sorted_starts, ws, "left"))


def launch_counts(trace_or_kernels, window=None, *, launches: pd.DataFrame | None = None) -> pd.DataFrame:
    """Host API calls and device events per window, counted by start time in [start_ns, end_ns).

    Columns: window, occurrence, start_ns, end_ns, kernel_launches, graph_launches, memcpy_calls,
    memset_calls, syncs, other_calls (host side, from ``launches``), kernels, memcpys, memsets
    (device side: a graph launch executes many kernels from one call).
    """
    f = _frames(trace_or_kernels, launches)
    win = windows(trace_or_kernels if isinstance(trace_or_kernels, Trace) else None, window, span=f.span)
    la, k = f.launches, f.kernels
    host = {col: np.sort(la.loc[la["kind"] == kind, "start_ns"].to_numpy(np.int64)) if len(la) else np.zeros(0, np.int64)
            for kind, col in _LAUNCH_KINDS.items()}
    kcat = k["cat"] if "cat" in k.columns else pd.Series(["kernel"] * len(k), index=k.index)
    dev = {col: np.sort(k.loc[kcat == cat, "start_ns"].to_numpy(np.int64)) for cat, col in _DEVICE_KINDS.items()}
    rows = []
    for ws, we in zip(win["start_ns"], win["end_ns"]):
        row = {col: _count_in(a, int(ws), int(we)) for col, a in host.items()}
        row.update({col: _count_in(a, int(ws), int(we)) for col, a in dev.items()})
        rows.append(row)
    return pd.concat([win, pd.DataFrame(rows, index=win.index)], axis=1)


# ----------------------------------------------------------------------------------------------
# Summary
# ----------------------------------------------------------------------------------------------


def summary(trace_or_kernels, window=None, *, launches: pd.DataFrame | None = None,
            include_memory: bool = True, graph_aware: bool = True) -> pd.DataFrame:
    """One row per window: wall, busy, slack, the idle split, launches and kernels.

    ``trace_or_kernels`` is a :class:`Trace`, or a kernels frame (then pass ``launches`` for the
    counts and the launch join). ``window``: see :func:`windows`.

    Columns: window, occurrence, start_ns, end_ns, wall_us, busy_us, slack_frac, host_wait_us,
    kernel_wait_us, other_idle_us, kernel_launches, graph_launches, kernels, na_reason.
    ``host_wait_us + kernel_wait_us + other_idle_us == wall_us - busy_us``. On a trace without
    device activity the busy/slack/idle columns are NaN and ``na_reason`` (also in
    ``df.attrs["na_reason"]``) says why.
    """
    f = _frames(trace_or_kernels, launches)
    win = windows(trace_or_kernels if isinstance(trace_or_kernels, Trace) else None, window, span=f.span)
    k = _device_rows(f.kernels, include_memory)
    check_graph_kernels(trace_or_kernels, win, launches=launches, where="slack")
    counts = launch_counts(trace_or_kernels, win, launches=launches)
    applicable = len(k) > 0
    tl = _Timeline.build(k, graph_aware)
    rows = []
    for ws, we in zip(win["start_ns"], win["end_ns"]):
        ws, we = int(ws), int(we)
        wall = we - ws
        if applicable:
            busy = tl.busy(ws, we)
            p = tl.idle(ws, we)
            if sum(p.values()) != wall - busy:  # the idle split is a partition of the idle time
                raise RuntimeError(f"summary: window [{ws}, {we}) ns: idle split {p} does not add up to "
                                   f"wall - busy = {wall - busy} ns")
            rows.append({"wall_us": wall / 1e3, "busy_us": busy / 1e3,
                         "slack_frac": (wall - busy) / wall if wall else np.nan,
                         "host_wait_us": p["host_wait"] / 1e3, "kernel_wait_us": p["kernel_wait"] / 1e3,
                         "other_idle_us": p["other"] / 1e3, "na_reason": ""})
        else:
            rows.append({"wall_us": wall / 1e3, "busy_us": np.nan, "slack_frac": np.nan,
                         "host_wait_us": np.nan, "kernel_wait_us": np.nan, "other_idle_us": np.nan,
                         "na_reason": CPU_ONLY_REASON})
    out = pd.concat([win, pd.DataFrame(rows, index=win.index),
                     counts[["kernel_launches", "graph_launches", "kernels"]]], axis=1)
    out = out[SUMMARY_COLUMNS]
    out.attrs["na_reason"] = "" if applicable else CPU_ONLY_REASON
    return out


# ----------------------------------------------------------------------------------------------
# Stages (named ranges)
# ----------------------------------------------------------------------------------------------


def stages(trace: Trace, names: Sequence[str] | str | None = None, *, by_name: bool = False,
           include_memory: bool = True, same_thread: bool = True) -> pd.DataFrame:
    """Attribute device work to named host ranges (e.g. backbone, cfm_loop, vocoder_core).

    A kernel belongs to a range occurrence when the API call that launched it (same correlation
    id; the cudaGraphLaunch for graph kernels) started inside the range, on the range's thread
    unless ``same_thread=False``. Nested ranges each count the work inside them.

    Per occurrence: cpu_us (the range's own duration), wall_us (range start to the later of range
    end and its last kernel's end: device work runs asynchronously), busy_us (union of its
    kernels), slack_frac = (wall - busy) / wall, kernel_launches, graph_launches, kernels.
    ``by_name=True`` sums occurrences per name (slack recomputed from the sums) and adds count.
    Rows follow the order of ``names`` (default: every host range name, by first start).
    """
    r = trace.ranges[trace.ranges["side"] == "cpu"].sort_values("start_ns", kind="stable")
    if names is None:
        names = list(dict.fromkeys(r["name"]))
    elif isinstance(names, str):
        names = [names]
    missing = [n for n in names if n not in set(r["name"])]
    if missing:
        raise ValueError(f"{trace.source}: no range named {missing}; ranges in the trace: {sorted(set(r['name']))}")

    k = _device_rows(trace.kernels, include_memory)
    applicable = len(k) > 0
    rr = r[r["name"].isin(names)]
    check_graph_kernels(trace, rr.assign(window=rr["name"])[["window", "start_ns", "end_ns"]], where="stage slack")
    la = trace.launches.sort_values("start_ns", kind="stable").reset_index(drop=True)
    la_start = la["start_ns"].to_numpy(np.int64)
    la_pid, la_tid = la["pid"].to_numpy(object), la["tid"].to_numpy(object)
    la_corr, la_kind = la["correlation"].to_numpy(object), la["kind"].to_numpy(object)
    k_rows = {c: np.asarray(ix) for c, ix in k.groupby("correlation").indices.items()} if len(k) else {}
    rows = []
    for name in names:
        for occ, rg in enumerate(r[r["name"] == name].itertuples(index=False)):
            rs, re_ = int(rg.start_ns), int(rg.end_ns)
            lo, hi = np.searchsorted(la_start, rs, "left"), np.searchsorted(la_start, re_, "right")
            sel = np.arange(lo, hi)
            if same_thread:
                sel = sel[[(la_pid[i] is not pd.NA and la_pid[i] == rg.pid and la_tid[i] is not pd.NA
                            and la_tid[i] == rg.tid) for i in sel]]
            kinds = la_kind[sel]
            hits = [k_rows[c] for c in dict.fromkeys(la_corr[sel]) if c is not pd.NA and c in k_rows]
            kk = k.iloc[np.sort(np.concatenate(hits))] if hits else k.iloc[0:0]
            busy = int(_merge(kk)["dur_ns"].sum())
            last_end = int(kk["end_ns"].max()) if len(kk) else re_
            wall = max(re_, last_end) - rs
            kernels_n = int((kk["cat"] == "kernel").sum()) if "cat" in kk.columns else len(kk)
            rows.append({
                "range": name, "occurrence": occ, "start_ns": rs, "end_ns": re_,
                "cpu_us": (re_ - rs) / 1e3, "wall_us": wall / 1e3,
                "busy_us": busy / 1e3 if applicable else np.nan,
                "slack_frac": ((wall - busy) / wall if wall else np.nan) if applicable else np.nan,
                "kernel_launches": int((kinds == "kernel_launch").sum()),
                "graph_launches": int((kinds == "graph_launch").sum()),
                "kernels": kernels_n,
                "na_reason": "" if applicable else CPU_ONLY_REASON,
                "_wall_ns": wall, "_busy_ns": busy,
            })
    out = pd.DataFrame(rows, columns=STAGE_COLUMNS + ["_wall_ns", "_busy_ns"])
    if by_name:
        g = out.groupby("range", sort=False)
        agg = g.agg(count=("occurrence", "size"), cpu_us=("cpu_us", "sum"), wall_us=("wall_us", "sum"),
                    busy_us=("busy_us", lambda s: s.sum(min_count=1)),
                    kernel_launches=("kernel_launches", "sum"), graph_launches=("graph_launches", "sum"),
                    kernels=("kernels", "sum"), _wall_ns=("_wall_ns", "sum"),
                    _busy_ns=("_busy_ns", "sum")).reset_index()
        agg["slack_frac"] = (agg["_wall_ns"] - agg["_busy_ns"]) / agg["_wall_ns"]
        if not applicable:
            agg["slack_frac"] = np.nan
        agg["na_reason"] = "" if applicable else CPU_ONLY_REASON
        out = agg[["range", "count", "cpu_us", "wall_us", "busy_us", "slack_frac", "kernel_launches",
                   "graph_launches", "kernels", "na_reason"]]
    else:
        out = out[STAGE_COLUMNS]
    out.attrs["na_reason"] = "" if applicable else CPU_ONLY_REASON
    return out
