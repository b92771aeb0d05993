"""Two kernel streams side by side: what each op is, which op matches which, and what it costs.

A steady chunk run eagerly (B0) and replayed from CUDA graphs (SRc) executes *nearly* the same
device work, not the same: inside a graph a device-to-device memcpy becomes a copy kernel
(``memcpy32_post``), a memset becomes ``memset32``, the host-to-device copies of eager inputs
vanish, and the carry replaces a concatenation by plain copies. Pairing the two streams by index
therefore drifts (the n-th kernel of one is soon a different op of the other); this module pairs
them by sequence alignment on normalised names instead, and labels every row with what it is.

    kernel_stream        the device ops launched inside one window, with op_kind / launch_via
    align_kernels        sequence alignment of two streams: equal pairs, and what one side lacks
    duration_histogram   kernel durations on log-spaced bins, per stream
    launch_cost_estimate launches x per-launch host cost against the measured idle time
    cadence_diff         two duplex seconds aligned on the cadence, per stage and clock tick

Everything returns a DataFrame; times are µs (``_us``) or ms (``_ms``) as the column says.
"""

from __future__ import annotations

import difflib
import re
from typing import Mapping

import numpy as np
import pandas as pd

from .events import short_kernel_name
from .metrics import check_graph_kernels, summary
from .trace import Trace

__all__ = [
    "OP_KINDS", "short_kernel_name", "normalise_kernel_name", "op_kind", "kernel_stream", "align_kernels",
    "duration_histogram", "launch_cost_estimate", "TickMarker", "duplex_ticks", "cadence_diff",
]

#: op kinds, in legend order
OP_KINDS = ("kernel", "copy kernel", "memcpy HtoD", "memcpy DtoH", "memcpy DtoD", "memset")
_COPY_KERNEL = re.compile(r"^(memcpy\d+(_post)?|memset\d+(_post)?)$|direct_copy_kernel|CatArrayBatchedCopy")
_MEMCPY_DIR = re.compile(r"Memcpy\s+(\w+)")


# ----------------------------------------------------------------------------------------------
# Names and kinds
# ----------------------------------------------------------------------------------------------


def op_kind(name: str, cat: str = "kernel") -> str:
    """What a device op is: kernel, copy kernel, memcpy HtoD / DtoH / DtoD, memset.

    ``cat`` is the trace's category (kernel / memcpy / memset). A kernel whose work is a copy or a
    fill (``memcpy32_post`` and ``memset32`` inside a graph, ``direct_copy_kernel``, a concatenation's
    batched copy) is a "copy kernel": the same bytes move, but as a kernel.
    """
    if cat == "memcpy":
        m = _MEMCPY_DIR.search(str(name))
        d = m.group(1) if m else "DtoD"
        return f"memcpy {d}" if f"memcpy {d}" in OP_KINDS else "memcpy DtoD"
    if cat == "memset":
        return "memset"
    return "copy kernel" if _COPY_KERNEL.search(str(name)) else "kernel"


def normalise_kernel_name(name: str, cat: str = "kernel") -> str:
    """The token two streams are aligned on.

    Kernels keep their full name (two different kernels never match). A device-to-device copy
    matches whether it ran as a memcpy or as a graph's copy kernel (``memcpy32_post``), a fill
    whether it ran as a memset or as ``memset32``; host-device copies keep their direction.
    """
    s = str(name)
    if cat == "memcpy":
        return "copy " + op_kind(s, cat).split()[1]
    if cat == "memset" or re.fullmatch(r"memset\d+(_post)?", s):
        return "fill"
    if re.fullmatch(r"memcpy\d+(_post)?", s):
        return "copy DtoD"
    return s[5:] if s.startswith("void ") else s


def _launch_via(launch_name, graph: bool) -> str:
    if graph:
        return "graph launch"
    if launch_name is None or launch_name is pd.NA or (isinstance(launch_name, float) and np.isnan(launch_name)):
        return "unknown"
    from .trace import launch_kind

    return {"kernel_launch": "kernel launch", "memcpy": "memcpy call", "memset": "memset call"}.get(
        launch_kind(str(launch_name)), "other call")


# ----------------------------------------------------------------------------------------------
# One stream
# ----------------------------------------------------------------------------------------------


def _window(trace: Trace, window: str | None, occurrence: int) -> tuple[int, int]:
    if window is None:
        return trace.span_ns()
    r = trace.ranges[(trace.ranges["side"] == "cpu") & (trace.ranges["name"] == window)]
    if not len(r):
        known = sorted(set(trace.ranges.loc[trace.ranges["side"] == "cpu", "name"]))
        raise ValueError(f"{trace.source}: no range named {window!r}; ranges in the trace: {known}")
    r = r.sort_values("start_ns", kind="stable")
    if not -len(r) <= occurrence < len(r):
        raise ValueError(f"{trace.source}: range {window!r} occurs {len(r)} time(s); occurrence {occurrence} "
                         "does not exist")
    w = r.iloc[occurrence]
    return int(w["start_ns"]), int(w["end_ns"])


def kernel_stream(trace: Trace, window: str | None = None, occurrence: int = -1) -> pd.DataFrame:
    """The device ops whose launch call started inside ``window`` (a host range name; None = the
    whole trace), in start order.

    Columns: name, kernel (short name), norm (alignment token), op_kind (see :data:`OP_KINDS`),
    launch_via (kernel launch / graph launch / memcpy call / memset call / other call / unknown),
    cat, start_ns, end_ns, dur_ns, start_us (since the window start), dur_us, correlation, graph.
    ``attrs``: source, window, window_start_ns, window_end_ns. Refuses a window whose graph
    launches have no kernel records (:func:`~cadencelab.profile.metrics.check_graph_kernels`).
    """
    if not isinstance(trace, Trace):
        raise TypeError(f"kernel_stream: expected a cadencelab.profile.Trace, got {type(trace).__name__}")
    ws, we = _window(trace, window, occurrence)
    check_graph_kernels(trace, (ws, we), where="kernel stream")
    k = trace.kernels
    start = k["start_ns"].to_numpy(np.int64)
    at = np.where(k["launch_ns"].isna().to_numpy(bool), start, k["launch_ns"].fillna(0).to_numpy(np.int64)) \
        if "launch_ns" in k.columns else start  # integer ns: a float would round near 5e15
    ev = k[(at >= ws) & (at <= we)].sort_values(["start_ns", "end_ns"], kind="stable").reset_index(drop=True)
    names, cats = ev["name"].astype(str).tolist(), ev["cat"].astype(str).tolist()
    out = pd.DataFrame({
        "name": names,
        "kernel": [short_kernel_name(n) for n in names],
        "norm": [normalise_kernel_name(n, c) for n, c in zip(names, cats)],
        "op_kind": [op_kind(n, c) for n, c in zip(names, cats)],
        "launch_via": [_launch_via(ln, g) for ln, g in zip(ev["launch_name"], ev["graph"])],
        "cat": cats,
        "start_ns": ev["start_ns"].to_numpy(np.int64),
        "end_ns": ev["end_ns"].to_numpy(np.int64),
        "dur_ns": ev["dur_ns"].to_numpy(np.int64),
        "start_us": (ev["start_ns"].to_numpy(np.int64) - ws) / 1e3,
        "dur_us": ev["dur_ns"].to_numpy(np.int64) / 1e3,
        "correlation": ev["correlation"],
        "graph": ev["graph"].to_numpy(bool),
    })
    out.attrs.update(source=trace.source, window=window or "trace", window_start_ns=ws, window_end_ns=we)
    return out


def _as_stream(x, where: str) -> pd.DataFrame:
    if isinstance(x, Trace):
        return kernel_stream(x)
    if not isinstance(x, pd.DataFrame):
        raise TypeError(f"{where}: expected a Trace or a kernel_stream frame, got {type(x).__name__}")
    missing = [c for c in ("name", "start_ns", "end_ns") if c not in x.columns]
    if missing:
        raise ValueError(f"{where}: missing columns {missing}; got {list(x.columns)} (use kernel_stream(trace))")
    if "norm" in x.columns and "op_kind" in x.columns:
        return x
    d = x.sort_values(["start_ns", "end_ns"], kind="stable").reset_index(drop=True).copy()
    cats = d["cat"].astype(str).tolist() if "cat" in d.columns else ["kernel"] * len(d)
    d["kernel"] = [short_kernel_name(n) for n in d["name"]]
    d["norm"] = [normalise_kernel_name(n, c) for n, c in zip(d["name"], cats)]
    d["op_kind"] = [op_kind(n, c) for n, c in zip(d["name"], cats)]
    if "launch_via" not in d.columns:
        g = d["graph"] if "graph" in d.columns else pd.Series(False, index=d.index)
        ln = d["launch_name"] if "launch_name" in d.columns else pd.Series([None] * len(d), index=d.index)
        d["launch_via"] = [_launch_via(a, bool(b)) for a, b in zip(ln, g)]
    t0 = int(d["start_ns"].min()) if len(d) else 0
    d["start_us"] = (d["start_ns"] - t0) / 1e3
    d["dur_us"] = (d["end_ns"] - d["start_ns"]) / 1e3
    return d


# ----------------------------------------------------------------------------------------------
# Alignment
# ----------------------------------------------------------------------------------------------


def _opcodes(a: list, b: list, resync: int, max_skip: int) -> list[tuple]:
    """difflib-style opcodes for two token lists that are mostly equal.

    Walks both lists while they agree. At a mismatch, difflib's SequenceMatcher aligns the next
    ``2 * max_skip`` tokens of each side, and its opcodes are taken up to the first equal run of
    ``resync`` tokens (or one that reaches the end of both lists); the walk resumes there. Where
    no such run is near, SequenceMatcher aligns the rest. Near-linear for streams that differ in
    scattered places (the eager vs replayed chunk: 12k ops in a fraction of a second, where one
    SequenceMatcher over the whole streams takes seconds).
    """
    n, m = len(a), len(b)
    i = j = 0
    ops: list[tuple] = []
    width = 2 * max_skip

    def emit(tag, i0, i1, j0, j1):
        if i1 > i0 or j1 > j0:
            if ops and ops[-1][0] == tag and ops[-1][2] == i0 and ops[-1][4] == j0:
                ops[-1] = (tag, ops[-1][1], i1, ops[-1][3], j1)
            else:
                ops.append((tag, i0, i1, j0, j1))

    while i < n and j < m:
        i0, j0 = i, j
        while i < n and j < m and a[i] == b[j]:
            i += 1
            j += 1
        emit("equal", i0, i, j0, j)
        if i >= n or j >= m:
            break
        local = difflib.SequenceMatcher(None, a[i:i + width], b[j:j + width], autojunk=False).get_opcodes()
        cut = None
        for k, (tag, a0, a1, b0, b1) in enumerate(local):
            if tag == "equal" and (a1 - a0 >= resync or (i + a1 == n and j + b1 == m)):
                cut = k
                break
        whole = i + width >= n and j + width >= m
        if cut is None and not whole:  # far apart: the general matcher takes the rest
            local = difflib.SequenceMatcher(None, a[i:], b[j:], autojunk=False).get_opcodes()
            cut = len(local)
        elif cut is None:
            cut = len(local)
        for tag, a0, a1, b0, b1 in local[:cut]:
            emit(tag, i + a0, i + a1, j + b0, j + b1)
        if cut == len(local):
            i, j = n, m
            break
        i, j = i + local[cut][1], j + local[cut][3]
    if i < n:
        emit("delete", i, n, j, j)
    if j < m:
        emit("insert", i, i, j, m)
    return ops


def align_kernels(a, b, labels: tuple[str, str] = ("a", "b"), *, resync: int = 4, max_skip: int = 64) -> pd.DataFrame:
    """Align two kernel streams by sequence matching on normalised names (never by index).

    ``a``, ``b``: :func:`kernel_stream` frames (or Traces: their whole span). Returns one row per
    aligned pair and one per op that only one side has, in stream order:

    - ``op``: "equal" (the same op on both sides), "replace" (a stretch one side runs in place of
      the other's: e.g. a concatenation kernel the carry replaces by copies; its rows are NOT
      paired), "delete" (only in a: e.g. a host-to-device copy the replay no longer makes),
      "insert" (only in b);
    - ``block``: the opcode block the row belongs to;
    - per side ``x`` in labels: ``i_x`` (position in its stream, <NA> when absent), ``kernel_x``,
      ``op_kind_x``, ``launch_via_x``, ``start_us_x`` (since its stream's window start), ``dur_us_x``;
    - ``norm``: the shared alignment token on equal rows.

    ``attrs["counts"]``: ops per side and rows per op, to quote ("10,829 vs 10,648 kernels: 10,640
    paired, ...").
    """
    la, lb = labels
    if la == lb:
        raise ValueError(f"align_kernels: the two labels must differ, got {labels!r}")
    sa, sb = _as_stream(a, "align_kernels a"), _as_stream(b, "align_kernels b")
    ta, tb = sa["norm"].tolist(), sb["norm"].tolist()
    ids: dict[str, int] = {}
    ia = [ids.setdefault(x, len(ids)) for x in ta]
    ib = [ids.setdefault(x, len(ids)) for x in tb]
    ops = _opcodes(ia, ib, resync, max_skip)
    rows_op, rows_block, pa, pb = [], [], [], []
    for blk, (tag, i0, i1, j0, j1) in enumerate(ops):
        if tag == "equal":
            pa.extend(range(i0, i1))
            pb.extend(range(j0, j1))
            rows_op.extend(["equal"] * (i1 - i0))
            rows_block.extend([blk] * (i1 - i0))
        else:
            pa.extend(list(range(i0, i1)) + [-1] * (j1 - j0))
            pb.extend([-1] * (i1 - i0) + list(range(j0, j1)))
            rows_op.extend([tag] * ((i1 - i0) + (j1 - j0)))
            rows_block.extend([blk] * ((i1 - i0) + (j1 - j0)))
    pa_arr, pb_arr = np.asarray(pa, dtype=np.int64), np.asarray(pb, dtype=np.int64)
    out = pd.DataFrame({"op": rows_op, "block": np.asarray(rows_block, dtype=np.int64)})
    for lab, s, p in ((la, sa, pa_arr), (lb, sb, pb_arr)):
        have = p >= 0
        idx = np.where(have, p, 0)
        out[f"i_{lab}"] = pd.array(np.where(have, p, 0), dtype="Int64")
        out.loc[~have, f"i_{lab}"] = pd.NA
        for col in ("kernel", "op_kind", "launch_via"):
            v = s[col].to_numpy(object)[idx] if len(s) else np.array([None] * len(p), dtype=object)
            out[f"{col}_{lab}"] = np.where(have, v, None)
        for col in ("start_us", "dur_us"):
            v = s[col].to_numpy(float)[idx] if len(s) else np.zeros(len(p))
            out[f"{col}_{lab}"] = np.where(have, v, np.nan)
    norm_a = sa["norm"].to_numpy(object)
    out["norm"] = np.where(out["op"] == "equal", norm_a[np.where(pa_arr >= 0, pa_arr, 0)] if len(sa) else None, None)
    out.attrs["labels"] = (la, lb)
    out.attrs["counts"] = {
        f"ops_{la}": len(sa), f"ops_{lb}": len(sb),
        f"kernels_{la}": int((sa["cat"] == "kernel").sum()) if "cat" in sa.columns else len(sa),
        f"kernels_{lb}": int((sb["cat"] == "kernel").sum()) if "cat" in sb.columns else len(sb),
        **{f"rows_{t}": int((out["op"] == t).sum()) for t in ("equal", "replace", "delete", "insert")},
    }
    return out


# ----------------------------------------------------------------------------------------------
# Durations and launch cost
# ----------------------------------------------------------------------------------------------


def _streams(streams, where: str) -> dict[str, pd.DataFrame]:
    if isinstance(streams, pd.DataFrame):
        if "variant" in streams.columns:
            return {str(v): _as_stream(d, where) for v, d in streams.groupby("variant", sort=False)}
        return {"stream": _as_stream(streams, where)}
    if isinstance(streams, Mapping):
        if not streams:
            raise ValueError(f"{where}: no streams given")
        return {str(k): _as_stream(v, where) for k, v in streams.items()}
    raise TypeError(f"{where}: expected a dict of label -> kernel_stream frame (or one frame), "
                    f"got {type(streams).__name__}")


def duration_histogram(streams, bins_per_decade: int = 4, kinds: tuple[str, ...] | None = None) -> pd.DataFrame:
    """Device-op durations on log-spaced bins (``bins_per_decade`` per factor of 10), per stream.

    ``streams``: {label: kernel_stream frame} (or one frame, with an optional ``variant`` column).
    ``kinds``: op kinds to count (default all). One row per (variant, bin), empty bins included
    between the shortest and the longest op: variant, bin_lo_us, bin_hi_us, ops, busy_us (the
    summed durations in the bin), share_of_ops, share_of_busy. Bin edges are the same for every
    variant so that the bars compare.
    """
    if int(bins_per_decade) < 1:
        raise ValueError(f"duration_histogram: bins_per_decade must be >= 1, got {bins_per_decade!r}")
    ss = _streams(streams, "duration_histogram")
    durs = {}
    for k, s in ss.items():
        d = s if kinds is None else s[s["op_kind"].isin(kinds)]
        durs[k] = d["dur_us"].to_numpy(float)
    allv = np.concatenate([v[v > 0] for v in durs.values()]) if durs else np.zeros(0)
    if not len(allv):
        raise ValueError("duration_histogram: no op with a positive duration"
                         + (f" among kinds {list(kinds)}" if kinds else ""))
    lo = np.floor(np.log10(allv.min()) * bins_per_decade) / bins_per_decade
    hi = np.ceil(np.log10(allv.max()) * bins_per_decade) / bins_per_decade
    hi = max(hi, lo + 1 / bins_per_decade)
    edges = 10 ** np.linspace(lo, hi, int(round((hi - lo) * bins_per_decade)) + 1)
    rows = []
    for k, v in durs.items():
        v = np.clip(v[v > 0], edges[0], edges[-1])
        idx = np.clip(np.searchsorted(edges, v, side="right") - 1, 0, len(edges) - 2)
        n = np.bincount(idx, minlength=len(edges) - 1)
        t = np.bincount(idx, weights=v, minlength=len(edges) - 1)
        for b in range(len(edges) - 1):
            rows.append(dict(variant=k, bin_lo_us=float(edges[b]), bin_hi_us=float(edges[b + 1]), ops=int(n[b]),
                             busy_us=float(t[b]), share_of_ops=float(n[b] / max(1, len(v))),
                             share_of_busy=float(t[b] / v.sum()) if v.sum() else 0.0))
    return pd.DataFrame(rows)


def launch_cost_estimate(traces: Mapping[str, Trace], window: str | None = None, occurrence: int = -1,
                         per_launch_us: float | None = None,
                         unprofiled_wall_us: Mapping[str, float] | None = None) -> pd.DataFrame:
    """Back of the envelope: host launch calls x per-launch cost, against the measured idle.

    Per trace (one row each): host_calls (kernel launches + graph launches + memcpy / memset
    calls issued inside the window), per_launch_us (the median duration of those calls in the
    trace, or ``per_launch_us`` when given: one number for every row), est_launch_ms
    (host_calls x per_launch_us), wall_ms, busy_ms, idle_ms (wall - busy), host_wait_ms (idle
    where the next launch had not been issued), est_over_idle (est_launch_ms / idle_ms: near 1 =
    launching alone explains the idle time; well below 1 = the host spends most of its time
    elsewhere between launches), wall_per_call_us (wall / host_calls: the host time each call
    really costs, Python and dispatch included).

    The calls are timed under the profiler, which lengthens each one (CUPTI callbacks): with
    ``unprofiled_wall_us`` ({label: host wall of the same window measured without the profiler})
    the row adds unprofiled_wall_ms, profiler_overhead (profiled wall / unprofiled wall),
    profiled_slack and unprofiled_slack (1 - busy / unprofiled wall: the slack the same device work
    leaves when the host is not slowed by the profiler).
    """
    if not isinstance(traces, Mapping) or not traces:
        raise TypeError("launch_cost_estimate: give a dict of label -> Trace")
    if per_launch_us is not None and not (np.isfinite(per_launch_us) and per_launch_us >= 0):
        raise ValueError(f"launch_cost_estimate: per_launch_us must be a finite number >= 0, got {per_launch_us!r}")
    rows = []
    for label, t in traces.items():
        if not isinstance(t, Trace):
            raise TypeError(f"launch_cost_estimate: {label!r} is a {type(t).__name__}, not a Trace")
        ws, we = _window(t, window, occurrence)
        s = summary(t, (ws, we)).iloc[0]
        la = t.launches
        calls = la[la["kind"].isin(["kernel_launch", "graph_launch", "memcpy", "memset"])
                   & (la["start_ns"] >= ws) & (la["start_ns"] < we)]
        measured = float(calls["dur_ns"].median()) / 1e3 if len(calls) else float("nan")
        per = float(per_launch_us) if per_launch_us is not None else measured
        idle_ms = (s.wall_us - s.busy_us) / 1e3
        est = len(calls) * per / 1e3
        row = dict(variant=str(label), host_calls=int(len(calls)),
                   kernel_launches=int((calls["kind"] == "kernel_launch").sum()),
                   graph_launches=int((calls["kind"] == "graph_launch").sum()),
                   per_launch_us=per, per_launch_source="given" if per_launch_us is not None else "median in trace",
                   est_launch_ms=est, wall_ms=s.wall_us / 1e3, busy_ms=s.busy_us / 1e3, idle_ms=idle_ms,
                   host_wait_ms=s.host_wait_us / 1e3,
                   est_over_idle=est / idle_ms if idle_ms > 0 else float("nan"),
                   wall_per_call_us=s.wall_us / len(calls) if len(calls) else float("nan"))
        if unprofiled_wall_us is not None and label in unprofiled_wall_us:
            u = float(unprofiled_wall_us[label])
            row["unprofiled_wall_ms"] = u / 1e3
            row["profiler_overhead"] = (s.wall_us / u) if u > 0 else float("nan")
            row["profiled_slack"] = float(s.slack_frac)
            # the device work does not change without the profiler; the host's share does
            row["unprofiled_slack"] = max(0.0, (u - s.busy_us) / u) if u > 0 else float("nan")
        rows.append(row)
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------------------------
# Two duplex seconds on the cadence
# ----------------------------------------------------------------------------------------------


class TickMarker:
    """How to find one stage's clock ticks in its kernel stream.

    ``pattern`` (a regex on the full kernel name) matches one kernel per tick; ``at`` says
    whether that kernel ``"ends"`` its tick (a decode step ends at its argmax) or ``"starts"``
    it (a solver step starts with its time embedding). ``ticks``: how many the declaration says
    the stage has per second; a trace that shows another number is refused.
    """

    def __init__(self, stage: str, pattern: str, at: str, ticks: int, clock: str):
        if at not in ("starts", "ends"):
            raise ValueError(f"TickMarker {stage!r}: at must be 'starts' or 'ends', got {at!r}")
        if int(ticks) < 1:
            raise ValueError(f"TickMarker {stage!r}: ticks must be >= 1, got {ticks!r}")
        self.stage, self.pattern, self.at, self.ticks, self.clock = stage, re.compile(pattern), at, int(ticks), clock

    def __repr__(self) -> str:
        return (f"TickMarker({self.stage!r}, {self.pattern.pattern!r}, at={self.at!r}, ticks={self.ticks}, "
                f"clock={self.clock!r})")


def duplex_ticks(cfg) -> list[TickMarker]:
    """The tick markers of a duplex second, their counts taken from its declared config.

    ``cfg``: the duplex config the second ran under (anything with ``text_tokens``, ``speech_tokens``
    and ``n_timesteps``, e.g. ``cadencelab.adapters.duplex.models.H200``; the analysis does not
    know the producer). backbone: one tick per text token (a decode step ends at its argmax);
    speech_decoder: one per speech token (same); flow: one per solver step (the step's time
    embedding starts it, a sin kernel); vocoder: one tick per chunk.
    """
    need = ("text_tokens", "speech_tokens", "n_timesteps")
    missing = [k for k in need if not isinstance(getattr(cfg, k, None), int)]
    if missing:
        raise ValueError(f"duplex_ticks: cfg must give {need} as ints (the duplex config the second ran under); "
                         f"{type(cfg).__name__} lacks {missing}")
    c = cfg
    argmax = r"ArgMaxOps"
    return [
        TickMarker("backbone", argmax, "ends", c.text_tokens, "text token"),
        TickMarker("speech_decoder", argmax, "ends", c.speech_tokens, "speech token"),
        TickMarker("flow", r"sin_kernel", "starts", c.n_timesteps, "solver step"),
        TickMarker("vocoder", r".", "starts", 1, "chunk"),
    ]


def _tick_index(stream: pd.DataFrame, m: TickMarker, source: str) -> np.ndarray:
    hit = np.flatnonzero(stream["name"].astype(str).map(lambda n: bool(m.pattern.search(n))).to_numpy(bool))
    if m.ticks == 1 and m.pattern.pattern == ".":
        return np.zeros(len(stream), dtype=np.int64)
    if len(hit) != m.ticks:
        raise ValueError(f"cadence_diff: {source}: stage {m.stage!r} shows {len(hit)} kernel(s) matching "
                         f"{m.pattern.pattern!r} where its declaration has {m.ticks} {m.clock} tick(s) per second; "
                         "the ticks cannot be told apart (pass markers= for this trace)")
    pos = np.arange(len(stream))
    if m.at == "ends":
        t = np.searchsorted(hit, pos, side="left")  # the op at hit[k] closes tick k
        return np.minimum(t, m.ticks - 1)
    return np.maximum(np.searchsorted(hit, pos, side="right") - 1, 0)  # ops before the first marker: tick 0


def _second_rows(trace: Trace, markers: list[TickMarker], second_range: str) -> pd.DataFrame:
    origin = _window(trace, second_range, 0)[0]
    rows = []
    for m in markers:
        s = kernel_stream(trace, m.stage, 0)
        if not len(s):
            raise ValueError(f"cadence_diff: {trace.source}: stage {m.stage!r} launched no device work")
        tick = _tick_index(s, m, trace.source)
        rs, re_ = s.attrs["window_start_ns"], s.attrs["window_end_ns"]
        launches = trace.launches
        la = launches[(launches["start_ns"] >= rs) & (launches["start_ns"] <= re_)]
        for t in range(m.ticks):
            d = s[tick == t]
            if not len(d):
                continue
            st, en = int(d["start_ns"].min()), int(d["end_ns"].max())
            # busy: union of the tick's device intervals
            a = d.sort_values("start_ns")
            e = np.maximum.accumulate(a["end_ns"].to_numpy(np.int64))
            sa = a["start_ns"].to_numpy(np.int64)
            new = np.r_[True, sa[1:] > e[:-1]]
            busy = int((np.maximum.reduceat(e, np.flatnonzero(new)) - sa[new]).sum())
            corr = set(d["correlation"].dropna().astype(int))
            calls = la[la["correlation"].isin(corr)] if len(corr) else la.iloc[0:0]
            rows.append(dict(stage=m.stage, clock=m.clock, tick=t, start_ms=(st - origin) / 1e6,
                             end_ms=(en - origin) / 1e6, busy_ms=busy / 1e6, ops=len(d),
                             kernels=int((d["cat"] == "kernel").sum()),
                             host_calls=int(calls["correlation"].nunique()) if len(calls) else 0,
                             graph_kernels=int(d["graph"].sum())))
    return pd.DataFrame(rows)


def cadence_diff(second_a: Trace, second_b: Trace, labels: tuple[str, str] = ("B0", "SRc"), *, cfg=None,
                 markers: list[TickMarker] | None = None, second_range: str = "duplex_second",
                 cadence_ms: float = 1000.0) -> pd.DataFrame:
    """Two profiled duplex seconds side by side, per stage and clock tick, on the cadence.

    Both seconds are put on the same clock: 0 ms is each one's ``second_range`` start, so the
    rows read as "where in its second did this tick's device work run". Ticks are found by
    ``markers`` (or :func:`duplex_ticks` of ``cfg``, the duplex config: text tokens, speech tokens, solver steps,
    the vocoder's chunk); a stage whose trace shows another tick count than declared is refused.

    One row per (stage, tick): stage, clock, tick, and per side x: start_ms_x, end_ms_x (device
    time of the tick's first start and last end), dur_ms_x, busy_ms_x, ops_x, kernels_x,
    host_calls_x (launch calls issued for it: graph launches count once), graph_kernels_x; then
    d_end_ms (end_ms_b - end_ms_a: how much earlier b finishes this tick in its second),
    d_busy_ms. ``attrs``: labels, cadence_ms, second_end_ms (per side: the last tick's end).
    """
    la, lb = labels
    for lab, t in ((la, second_a), (lb, second_b)):
        if not isinstance(t, Trace):
            raise TypeError(f"cadence_diff: second {lab!r} is a {type(t).__name__}, not a Trace")
    if markers is None and cfg is None:
        raise ValueError("cadence_diff: pass cfg= (the duplex config the seconds ran under) or markers=")
    mk = markers if markers is not None else duplex_ticks(cfg)
    ra = _second_rows(second_a, mk, second_range)
    rb = _second_rows(second_b, mk, second_range)
    keys = ["stage", "clock", "tick"]
    out = ra.merge(rb, on=keys, how="outer", suffixes=(f"_{la}", f"_{lb}"), sort=False)
    order = {m.stage: i for i, m in enumerate(mk)}
    out = out.sort_values(["stage", "tick"], key=lambda c: c.map(order) if c.name == "stage" else c,
                          kind="stable").reset_index(drop=True)
    for lab in (la, lb):
        out[f"dur_ms_{lab}"] = out[f"end_ms_{lab}"] - out[f"start_ms_{lab}"]
    out["d_end_ms"] = out[f"end_ms_{lb}"] - out[f"end_ms_{la}"]
    out["d_busy_ms"] = out[f"busy_ms_{lb}"] - out[f"busy_ms_{la}"]
    out.attrs.update(labels=(la, lb), cadence_ms=float(cadence_ms),
                     second_end_ms={la: float(out[f"end_ms_{la}"].max()), lb: float(out[f"end_ms_{lb}"].max())})
    return out
