"""Device work per CUDA stream: how much of two or more streams' kernels overlap in time.

Lanes (several sessions' graph sets replaying at once, one stream each) only pay off when their
kernels run at the same time. From a trace's device records, :func:`stream_busy` gives each
stream's busy time and span, and :func:`stream_overlap` the union of all streams' busy intervals
against their sum: ``overlap`` = sum / union is 1.0 when the streams take turns and approaches the
number of streams when they run fully side by side.
"""

from __future__ import annotations

import pandas as pd

from .metrics import device_intervals

__all__ = ["stream_busy", "stream_overlap"]


def _device_ops(trace, window: tuple[int, int] | None) -> pd.DataFrame:
    k = trace.kernels
    if k.empty:
        raise ValueError("stream_busy: the trace has no device records (was CUDA activity profiled?)")
    if k["stream"].isna().all():
        raise ValueError("stream_busy: the trace's device records carry no stream ids")
    if window is not None:
        lo, hi = window
        k = k[(k["end_ns"] > lo) & (k["start_ns"] < hi)]
    return k.dropna(subset=["stream"])


def _union_ms(ops: pd.DataFrame) -> float:
    """Busy time of ``ops`` (their merged intervals, :func:`~cadencelab.profile.metrics.device_intervals`), in ms."""
    return float(device_intervals(ops)["dur_ns"].sum()) / 1e6


def stream_busy(trace, window: tuple[int, int] | None = None) -> pd.DataFrame:
    """One row per stream: ops, busy_ms (union of its ops), first_ms / last_ms from the earliest op, span_ms."""
    k = _device_ops(trace, window)
    t0 = int(k["start_ns"].min())
    rows = []
    for stream, g in k.groupby("stream", sort=True):
        first, last = int(g["start_ns"].min()), int(g["end_ns"].max())
        rows.append(dict(stream=int(stream), ops=int(len(g)), busy_ms=_union_ms(g), first_ms=(first - t0) / 1e6,
                         last_ms=(last - t0) / 1e6, span_ms=(last - first) / 1e6))
    return pd.DataFrame(rows)


def stream_overlap(trace, window: tuple[int, int] | None = None) -> pd.DataFrame:
    """One row: streams, sum of their busy time, the union over all streams, wall from first to last op,
    ``overlap`` = sum / union (1: the streams took turns; n: n streams fully side by side)."""
    k = _device_ops(trace, window)
    per = stream_busy(trace, window)
    union = _union_ms(k)
    wall = (int(k["end_ns"].max()) - int(k["start_ns"].min())) / 1e6
    total = float(per["busy_ms"].sum())
    return pd.DataFrame([dict(streams=int(len(per)), busy_sum_ms=total, busy_union_ms=union, wall_ms=wall,
                              overlap=total / union if union else float("nan"))])
