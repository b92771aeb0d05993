"""A trace cut to one occurrence of a named host range, and a profile of one call cut the same way.

    trim_trace           the part of a trace inside one occurrence of a host range (the name is
                         required: the analysis does not know who wrote the trace)
    write_trimmed_trace  trim_trace, then write Chrome-trace JSON
    profile_window       run a call under torch.profiler inside a named range; the profile's trace
                         trimmed to that range
"""

from __future__ import annotations

from typing import Any, Callable

import pandas as pd
import torch

from .capture import Profile, profiled
from .export import export_chrome_trace
from .metrics import windows
from .trace import Trace

__all__ = ["trim_trace", "write_trimmed_trace", "profile_window"]


def trim_trace(trace: Trace, window: str, occurrence: int = 0,
               max_cpu_depth: int | None = None) -> Trace:
    """The part of ``trace`` inside one occurrence of the host range ``window``.

    Keeps host ops, ranges and launch calls that start inside the window, the device activity
    those launches issued (plus uncorrelated device events starting inside, and kernels that run
    on after the window closes), and only the metadata events ("ph": "M"); drops every event's
    args (the ids the frames need are columns and are written back by
    :func:`~cadencelab.profile.export.export_chrome_trace`). ``max_cpu_depth`` also drops host
    ops nested deeper than that (0 = outermost only): a smaller file whose launches are then
    attributed to the innermost op kept. ``occurrence`` counts from 0 in time order; a negative one
    (or one that is not an integer) is refused with a ValueError naming the field, never read from the end.
    """
    occurrence = _count("occurrence", occurrence)
    if max_cpu_depth is not None:
        max_cpu_depth = _count("max_cpu_depth", max_cpu_depth)
    w = windows(trace, window)
    if len(w) <= occurrence:
        raise ValueError(f"{trace.source}: no occurrence {occurrence} of the range {window!r} (found {len(w)})")
    ws, we = int(w["start_ns"].iloc[occurrence]), int(w["end_ns"].iloc[occurrence])

    def inside(df: pd.DataFrame) -> pd.DataFrame:
        keep = (df["start_ns"] >= ws) & (df["start_ns"] <= we)
        out = df[keep].reset_index(drop=True).copy()
        out["args"] = [{} for _ in range(len(out))]
        return out

    launches = inside(trace.launches)
    corr = set(launches["correlation"].dropna().astype(int))
    k = trace.kernels
    kc = k["correlation"]
    by_launch = kc.notna() & kc.isin(corr)
    loose = kc.isna() & (k["start_ns"] >= ws) & (k["start_ns"] <= we)
    kernels = k[by_launch | loose].reset_index(drop=True).copy()
    kernels["args"] = [{} for _ in range(len(kernels))]
    cpu_ops = inside(trace.cpu_ops)
    if max_cpu_depth is not None:
        cpu_ops = cpu_ops[cpu_ops["depth"] <= int(max_cpu_depth)].reset_index(drop=True)
    return Trace(kernels=kernels, cpu_ops=cpu_ops, launches=launches, ranges=inside(trace.ranges),
                 meta=dict(trace.meta), extra_events=[e for e in trace.extra_events if e.get("ph") == "M"],
                 source=f"{trace.source} [{window} #{occurrence}]")


def _count(field: str, value: Any) -> int:
    """``value`` as a non-negative int (an int or numpy integer, not a bool); ValueError naming ``field``."""
    import numbers

    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ValueError(f"trim_trace: {field} must be an integer >= 0 (0: the first), got {value!r}")
    return int(value)


def write_trimmed_trace(trace: Trace, path: str, window: str, occurrence: int = 0,
                        max_cpu_depth: int | None = None) -> str:
    """:func:`trim_trace` then write Chrome-trace JSON (gzip for .gz): the path."""
    return export_chrome_trace(trim_trace(trace, window, occurrence, max_cpu_depth), path)


def profile_window(fn: Callable[[], Any], device: str | torch.device, window: str, *, trace_path: str | None = None,
                   trim: bool = True, max_cpu_depth: int | None = None, open_range: bool = True,
                   **profile_kw) -> Profile:
    """Run ``fn()`` once under ``torch.profiler`` inside the host range ``window``: its :class:`Profile`.

    ``Profile.result`` is what ``fn`` returned. With ``trim`` the trace is cut to that range (see
    :func:`trim_trace`; ``max_cpu_depth`` thins the host ops) and, with ``trace_path``, written there
    (gzip when it ends in .gz); without ``trim`` the raw profiler trace is kept at ``trace_path``.
    ``open_range=False`` when ``fn`` opens the range ``window`` itself (one occurrence, not two nested).
    The device is synchronized before the profiler starts and before it stops.
    """
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(torch.device(device))
    with profiled(device, trace_path=None if trim else trace_path, window=window, **profile_kw) as p:
        if open_range:
            with torch.profiler.record_function(window):
                p.result = fn()
        else:
            p.result = fn()
    if trim:
        p.trace = trim_trace(p.trace, window, max_cpu_depth=max_cpu_depth)
        if trace_path is not None:
            p.path = export_chrome_trace(p.trace, trace_path)
    return p
