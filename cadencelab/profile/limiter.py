"""What limits concurrent lanes: their host time per chunk split by part, their graph launches side by side or
taking turns, and the device's share of the wall.

The lanes-limiter study (:mod:`cadencelab.bench.lanes_limiter`) records one row per chunk (its lane, its host
window ``wall_ms`` and thread CPU ``cpu_ms``, each part's ``<part>_ms`` / ``<part>_cpu_ms``, on CUDA its
device span ``dev_start_ms`` / ``dev_end_ms``) and one row per graph launch (``start_s``, ``end_s``). Read here:

* :func:`concurrency`: a set of intervals' union, sum, mean at once while any runs (sum / union) and most;
* :func:`host_split`: per session count the mean milliseconds per chunk of every part (they add up to the
  host window), and the thread's wait while runnable in the pure-Python parts (wall - CPU);
* :func:`limiter_table`: per session count the chunks per second, the launches' concurrency and their
  slow-down against one lane alone (``launch_speedup`` = concurrency / slow-down: 1 when the launches in effect
  take turns, the concurrency when they run side by side), the host window's share spent launching, the
  device spans' union share of the wall, and the reading (:func:`reading`).

Lanes served from several processes: :func:`waves` (each wave of chunks arriving at one instant, the rate it
was served at, the lane threads' CPU time per process) and :func:`device_across` (every process's kernels on one
clock: their union share of a window and how many ran at once). :func:`gil_point`: the interpreter lock's wait.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["PARTS", "PYTHON_PARTS", "concurrency", "device_across", "gil_point", "host_split", "limiter_table",
           "reading", "SATURATED", "waves"]

#: the parts of a chunk's host window (:mod:`cadencelab.bench.lanes_split`), in the order a chunk meets them
PARTS = ("lock_wait", "swap", "tokens_in", "classify", "signature", "checks", "stage", "launch", "outputs",
         "to_host", "device_wait", "other")
#: parts that run Python only: wall above CPU there is a runnable thread waiting (the interpreter lock, the cores)
PYTHON_PARTS = ("classify", "signature", "checks")
#: a share of the wall at or above this is called saturated
SATURATED = 0.9


def concurrency(starts, ends) -> dict:
    """Union (s), sum (s), mean concurrency while any interval runs (sum / union; NaN with none), the most at
    once, and the span from the first start to the last end."""
    s, e = np.asarray(starts, dtype=float), np.asarray(ends, dtype=float)
    if len(s) != len(e):
        raise ValueError(f"concurrency: {len(s)} starts but {len(e)} ends")
    if not len(s):
        return dict(intervals=0, union_s=0.0, sum_s=0.0, mean=float("nan"), max=0, span_s=0.0)
    if np.any(e < s):
        raise ValueError("concurrency: an interval ends before it starts")
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    union, cur_s, cur_e = 0.0, s[0], e[0]
    for a, b in zip(s[1:], e[1:]):
        if a > cur_e:
            union += cur_e - cur_s
            cur_s, cur_e = a, b
        else:
            cur_e = max(cur_e, b)
    union += cur_e - cur_s
    # most at once: +1 at each start, -1 at each end (an end before a start at the same instant)
    t = np.concatenate([s, e])
    d = np.concatenate([np.ones(len(s)), -np.ones(len(e))])
    k = np.lexsort((d, t))
    total = float(np.sum(e - s))
    return dict(intervals=int(len(s)), union_s=float(union), sum_s=total,
                mean=total / union if union > 0 else float("nan"), max=int(np.max(np.cumsum(d[k]))),
                span_s=float(e.max() - s.min()))


def _need(frame: pd.DataFrame, cols, what: str) -> None:
    missing = [c for c in cols if c not in frame.columns]
    if missing:
        raise ValueError(f"{what}: the frame has no column(s) {missing} (columns: {list(frame.columns)[:20]})")


def host_split(chunks: pd.DataFrame, by: str = "sessions") -> pd.DataFrame:
    """Per ``by`` (default the session count): chunks, mean ``wall_ms`` and every part's mean ms per chunk
    (``<part>_ms``; they add up to the wall, ``lock_wait`` aside: it comes before the window), their share of
    the wall (``<part>_share``), and ``python_wait_ms``: wall minus CPU in the pure-Python parts."""
    cols = [f"{p}_ms" for p in PARTS]
    _need(chunks, [by, "wall_ms", *cols], "host_split")
    rows = []
    for key, g in chunks.groupby(by, sort=True):
        r = {by: key, "chunks": int(len(g)), "wall_ms": float(g["wall_ms"].mean()),
             "wall_p50_ms": float(g["wall_ms"].median())}
        for p in PARTS:
            r[f"{p}_ms"] = float(g[f"{p}_ms"].mean())
            r[f"{p}_share"] = r[f"{p}_ms"] / r["wall_ms"] if r["wall_ms"] > 0 else float("nan")
        wait = [(g[f"{p}_ms"] - g[f"{p}_cpu_ms"]).clip(lower=0) for p in PYTHON_PARTS if f"{p}_cpu_ms" in g]
        r["python_wait_ms"] = float(sum(w.mean() for w in wait)) if wait else float("nan")
        rows.append(r)
    return pd.DataFrame(rows)


def limiter_table(chunks: pd.DataFrame, launches: pd.DataFrame, by: str = "sessions", solo: int = 1) -> pd.DataFrame:
    """One row per ``by``: the host split (:func:`host_split`) and, beside it, ``chunks_per_s`` over the window
    from the first chunk's start to the last one's end; the launches' ``launch_concurrency`` (mean, while any
    runs), ``launch_busy_share`` (their union over the window), ``launch_slowdown`` (mean launch against the
    ``by == solo`` rows'), ``launch_speedup`` (concurrency / slow-down); on CUDA ``device_share`` (the union of
    the chunks' device spans over their window) and ``device_concurrency``; and :func:`reading`."""
    split = host_split(chunks, by)
    _need(chunks, ["start_s", "end_s"], "limiter_table")
    _need(launches, [by, "start_s", "end_s", "wall_ms"], "limiter_table (launches)")
    base = launches.loc[launches[by] == solo, "wall_ms"]
    solo_ms = float(base.mean()) if len(base) else float("nan")
    out = []
    for r in split.to_dict("records"):
        g = chunks[chunks[by] == r[by]]
        window = float(g["end_s"].max() - g["start_s"].min())
        r["window_s"] = window
        r["chunks_per_s"] = len(g) / window if window > 0 else float("nan")
        lg = launches[launches[by] == r[by]]
        c = concurrency(lg["start_s"], lg["end_s"])
        r["launches"] = c["intervals"]
        r["launch_concurrency"], r["launch_max_concurrent"] = c["mean"], c["max"]
        r["launch_busy_share"] = c["union_s"] / window if window > 0 else float("nan")
        mean_ms = float(lg["wall_ms"].mean()) if len(lg) else float("nan")
        r["launch_mean_ms"], r["solo_launch_ms"] = mean_ms, solo_ms
        r["launch_slowdown"] = mean_ms / solo_ms if solo_ms > 0 else float("nan")
        r["launch_speedup"] = c["mean"] / r["launch_slowdown"] if r["launch_slowdown"] > 0 else float("nan")
        if {"dev_start_ms", "dev_end_ms"} <= set(g.columns) and g["dev_start_ms"].notna().any():
            d = g.dropna(subset=["dev_start_ms", "dev_end_ms"])
            dc = concurrency(d["dev_start_ms"] / 1e3, d["dev_end_ms"] / 1e3)
            r["device_share"] = dc["union_s"] / dc["span_s"] if dc["span_s"] > 0 else float("nan")
            r["device_concurrency"] = dc["mean"]
            r["device_span_ms"] = float((d["dev_end_ms"] - d["dev_start_ms"]).mean())
        else:
            r["device_share"] = r["device_concurrency"] = r["device_span_ms"] = float("nan")
        r["reading"] = reading(r)
        out.append(r)
    return pd.DataFrame(out)


def reading(row: dict, busy_share: float | None = None) -> str:
    """What one row of :func:`limiter_table` says limits the lanes (``busy_share``: the profiled device busy union
    over the wall, when recorded; it outranks the device spans, which count a chunk in flight as busy)."""
    dev = busy_share if busy_share is not None else row.get("device_share", float("nan"))
    launch, speed = row.get("launch_busy_share", float("nan")), row.get("launch_speedup", float("nan"))
    if dev == dev and dev >= SATURATED:
        return (f"device: busy {dev:.0%} of the wall" + (" (profiled union)" if busy_share is not None else
                                                          " (chunks in flight; not the kernels' busy union)"))
    if launch == launch and launch >= SATURATED and speed == speed and speed < 1.5:
        return (f"host launch path: launches run {launch:.0%} of the wall and, {row['launch_concurrency']:.1f} at "
                f"once, progress like {speed:.1f} alone (they take turns in effect)")
    if row.get("python_wait_ms", 0) > 0.25 * row.get("wall_ms", float("inf")):
        return f"the interpreter: {row['python_wait_ms']:.0f} ms per chunk runnable but waiting in Python parts"
    device = f"device {dev:.0%}" if dev == dev else "device not measured"
    return (f"neither saturated: {device}, launches {launch:.0%} of the wall (launch speed-up {speed:.1f}); "
            f"the lanes or the arrivals limit")


def waves(chunks: pd.DataFrame, by: str = "sessions") -> pd.DataFrame:
    """One row per ``by`` and arrival wave (chunks arriving at one instant): ``chunks``, ``span_ms`` from the arrival
    to the wave's last completion, ``chunks_per_s`` (chunks / span: the rate the wave was served at),
    ``host_cores`` (the chunks' thread CPU ``host_ms`` over the span) and, with a ``process`` column,
    ``host_cores_per_process`` (their mean over the processes). The first wave (``wave`` 0) meets no backlog."""
    _need(chunks, [by, "arrival_s", "completion_s", "host_ms"], "waves")
    rows = []
    for key, g in chunks.groupby(by, sort=True):
        at = g["arrival_s"].round(3)
        for w, (t, c) in enumerate(g.groupby(at, sort=True)):
            span = float(c["completion_s"].max() - t)
            cores = c["host_ms"].sum(min_count=1) / 1e3 / span if span > 0 else float("nan")
            r = {by: key, "wave": w, "arrival_s": float(t), "chunks": int(len(c)), "span_ms": span * 1e3,
                 "chunks_per_s": len(c) / span if span > 0 else float("nan"), "host_cores": cores}
            if "process" in c:
                per = (c.groupby("process")["host_ms"].sum(min_count=1) / 1e3 / span if span > 0
                       else pd.Series(dtype=float))
                r["processes"] = int(c["process"].nunique())
                r["host_cores_per_process"] = float(per.mean()) if len(per) else float("nan")
            rows.append(r)
    return pd.DataFrame(rows)


def device_across(kernels: pd.DataFrame, lo_ns: int, hi_ns: int) -> dict:
    """``kernels`` (``process``, ``start_ns``, ``end_ns`` on one clock, every process's) clipped to the window
    [``lo_ns``, ``hi_ns``]: ``busy_share`` (their union over the window), ``at_once`` (mean while any runs),
    ``max_at_once``, ``kernels``, and ``busy_share_by_process`` (each process's own union over the window)."""
    _need(kernels, ["process", "start_ns", "end_ns"], "device_across")
    if not hi_ns > lo_ns:
        raise ValueError(f"device_across: the window [{lo_ns}, {hi_ns}] is empty")
    k = kernels[(kernels["end_ns"] > lo_ns) & (kernels["start_ns"] < hi_ns)]
    s, e = k["start_ns"].clip(lower=lo_ns).to_numpy(float), k["end_ns"].clip(upper=hi_ns).to_numpy(float)
    wall = float(hi_ns - lo_ns)
    c = concurrency(s / 1e9, e / 1e9)
    per = {}
    for proc, g in k.groupby("process", sort=True):
        gs, ge = g["start_ns"].clip(lower=lo_ns), g["end_ns"].clip(upper=hi_ns)
        per[int(proc)] = concurrency(gs / 1e9, ge / 1e9)["union_s"] * 1e9 / wall
    return dict(window_ms=wall / 1e6, kernels=c["intervals"], busy_share=c["union_s"] * 1e9 / wall,
                at_once=float(c["mean"]), max_at_once=int(c["max"]), busy_share_by_process=per)


def gil_point(gil) -> dict:
    """A run's interpreter-lock probe (:class:`~cadencelab.profile.gil.GilProbe` summaries: one, or one per lane
    process) as a point's columns: ``gil_late_ms`` (the median wake-up lateness; over processes, their median's
    median), ``gil_late_p95_ms`` (the highest p95), ``gil_late_share`` (the mean share of the wall spent late) and
    ``gil_idle_ms`` (the wake-up latency before the run). Empty without a probe."""
    runs = [g for g in (gil if isinstance(gil, list) else [gil]) if g and g.get("probes")]
    if not runs:
        return {}
    return dict(gil_late_ms=float(np.median([g["late_ms_median"] for g in runs])),
                gil_late_p95_ms=float(max(g["late_ms_p95"] for g in runs)),
                gil_late_share=float(np.mean([g["late_share"] for g in runs])),
                gil_idle_ms=float(np.median([g["idle_late_ms"] for g in runs])))
