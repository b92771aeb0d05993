"""Hands-on profiling on a CPU: one chunk of the teaching model under ``torch.profiler``, read with the
library's own busy and slack.

A CPU-only trace has no device activity, so :func:`cadencelab.profile.summary` leaves busy and slack
blank (NaN, with the reason). On a CPU the *innermost* ops stand in for kernels: they are where the
arithmetic happens, and everything between them (Python, the framework's dispatch, the runtime's
bookkeeping) is the host orchestrating. :func:`host_ops_as_kernels` turns a CPU trace into one whose
"device" work is those innermost ops, so the same ``summary`` gives busy time and slack for the CPU.

    teaching_chunk()          a warmed-up teaching runtime and the chunk to profile next
    profile_teaching_chunk()  that chunk under torch.profiler, as a Trace (what the notebook has you write)
    host_ops_as_kernels(t)    the trace with its innermost CPU ops as the "kernels"
    busy_idle_figure(s)       wall split into busy and idle per variant, from summary rows
    allclose_table(ref, run)  per call: bitwise equal, max |diff|, and |diff| over torch.allclose's own bound
"""

from __future__ import annotations

import dataclasses
import os
import tempfile

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from ..profile import Trace, load_trace
from ..profile.trace import KERNEL_COLUMNS, LAUNCH_COLUMNS

__all__ = ["teaching_chunk", "profile_teaching_chunk", "host_ops_as_kernels", "busy_idle_figure", "allclose_table",
           "WINDOW"]

#: the record_function range a profiled chunk sits in
WINDOW = "chunk"


def teaching_chunk(state_rule: bool = True, warm: int = 3, seed: int = 1):
    """(runtime, chunk): the teaching model's runtime after ``warm`` chunks of a turn, and its next chunk."""
    from ..adapters import teaching

    cfg = teaching.TeachingConfig()
    rt = teaching.TeachingRuntime(teaching.TinyStreamer(cfg), state_rule=state_rule)
    stream = teaching.make_stream(cfg, seed=seed)
    rt.set_prompt(stream.prompt)
    chunks = stream.turns[0]
    for x in chunks[:warm]:
        rt.stream(x)
    return rt, chunks[warm]


def profile_teaching_chunk(state_rule: bool = True) -> Trace:
    """One steady chunk of the teaching model under torch.profiler (CPU), in a ``chunk`` range."""
    import torch

    rt, x = teaching_chunk(state_rule)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        with torch.profiler.record_function(WINDOW):
            rt.stream(x)
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        return load_trace(path)
    finally:
        os.unlink(path)


def _innermost(ops: pd.DataFrame) -> pd.DataFrame:
    """The ops with no other op inside them on the same thread (the leaves of each thread's op tree)."""
    keep = []
    for _, g in ops.groupby(["pid", "tid"], sort=False):
        g = g.sort_values(["start_ns", "depth"])
        s, e, d = g["start_ns"].to_numpy(), g["end_ns"].to_numpy(), g["depth"].to_numpy()
        nxt_inside = np.zeros(len(g), bool)
        nxt_inside[:-1] = (d[1:] > d[:-1]) & (s[1:] < e[:-1])  # the next op starts inside this one, deeper
        keep.append(g[~nxt_inside])
    return pd.concat(keep) if keep else ops.iloc[:0]


def host_ops_as_kernels(trace: Trace) -> Trace:
    """``trace`` with its innermost CPU ops as the device work (cat "kernel"), so that
    :func:`cadencelab.profile.summary` reports busy time and slack on a CPU-only trace."""
    if not isinstance(trace, Trace):
        raise TypeError(f"host_ops_as_kernels: expected a cadencelab.profile.Trace, got {type(trace).__name__}")
    if trace.has_device_activity:
        raise ValueError("host_ops_as_kernels: this trace has device kernels already; read it with profile.summary")
    leaves = _innermost(trace.cpu_ops)
    k = pd.DataFrame({c: pd.Series([pd.NA] * len(leaves), dtype=object) for c in KERNEL_COLUMNS})
    for c in ("name", "start_ns", "end_ns", "dur_ns"):
        k[c] = leaves[c].to_numpy()
    k["cat"], k["graph"] = "kernel", False
    return dataclasses.replace(trace, kernels=k.sort_values("start_ns").reset_index(drop=True),
                               launches=pd.DataFrame(columns=LAUNCH_COLUMNS))


def busy_idle_figure(summaries: dict) -> go.Figure:
    """Per variant (label -> a summary row or frame), its window's wall time split into busy and idle."""
    from ..viz.options import FigureOptions, set_caption

    rows = {k: (v.iloc[-1] if isinstance(v, pd.DataFrame) else v) for k, v in summaries.items()}
    labels = list(rows)
    busy = [rows[k]["busy_us"] / 1e3 for k in labels]
    idle = [(rows[k]["wall_us"] - rows[k]["busy_us"]) / 1e3 for k in labels]
    fig = go.Figure([go.Bar(x=labels, y=busy, name="busy (inside an op)", marker_color="#2ca02c"),
                     go.Bar(x=labels, y=idle, name="idle (between ops: orchestration)", marker_color="#7f7f7f",
                            text=[f"slack {rows[k]['slack_frac']:.0%}" for k in labels], textposition="outside")])
    fig.update_layout(barmode="stack", yaxis_title="ms", xaxis_title=None)
    fig = FigureOptions().apply(fig, "One chunk's wall time: busy inside ops, idle between them")
    return set_caption(fig, "Each bar is one profiled chunk's window; busy is the union of the innermost ops' "
                            "intervals (on a CPU they stand in for kernels), idle the rest of its wall time. One "
                            "profiled chunk each: a single measurement, run it again to see it move.")


def allclose_table(reference, candidate, rtol: float = 1e-5, atol: float = 1e-8) -> pd.DataFrame:
    """Per call of two stream runs: equal (torch.equal), max_abs_diff, allclose_ratio (the worst element's
    |diff| over ``atol + rtol * |candidate|``, the bound of ``torch.allclose(reference, candidate)``: it passes
    exactly when the ratio is <= 1), allclose."""
    import torch

    if len(reference.outputs) != len(candidate.outputs):
        raise ValueError(f"allclose_table: {len(reference.outputs)} reference calls vs {len(candidate.outputs)}")
    rows = []
    for i, (a, b) in enumerate(zip(reference.outputs, candidate.outputs)):
        diff = (b.double() - a.double()).abs()
        ratio = float((diff / (atol + rtol * b.double().abs())).max())
        rows.append(dict(call=i, equal=bool(torch.equal(a, b)), max_abs_diff=float(diff.max()), allclose_ratio=ratio,
                         allclose=bool(torch.allclose(a, b, rtol=rtol, atol=atol))))
    return pd.DataFrame(rows)
