"""Write traces where other viewers can read them: Perfetto, HTA, TensorBoard.

- :func:`export_chrome_trace` writes a :class:`Trace` (or a :class:`Profile`) back to Chrome-trace
  JSON from its frames, so a trace you filtered or built by hand opens in Perfetto / chrome://tracing.
  Times are written as exact 3-decimal microseconds: loading the file gives the same frames.
- :func:`export_hta_folder` lays out a folder that Holistic Trace Analysis
  (``traceinsight``: ``TraceAnalysis(trace_dir=folder)``) loads: one file per rank with the rank
  in ``distributedInfo``.
- :func:`export_tensorboard_logdir` lays out ``logdir/<run>/<worker>.<span>.pt.trace.json.gz``,
  the layout torch-tb-profiler scans.

None of these need the viewers installed.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import time
from typing import Any

import pandas as pd

from .outputs import write_atomic
from .trace import Trace, read_trace_json

__all__ = ["trace_to_dict", "export_chrome_trace", "export_hta_folder", "export_tensorboard_logdir"]

_DEVICE_CAT_OUT = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset"}
_NUM = "@@cadencelab-num:"
_NUM_RE = re.compile(r'"' + re.escape(_NUM) + r'(-?[0-9]+\.[0-9]{3})"')


# ----------------------------------------------------------------------------------------------
# Chrome trace
# ----------------------------------------------------------------------------------------------


_DOUBLE_EXACT_NS = (1 << 43) * 1000   # below 2**43 us a double holds every 3-decimal value


def _us(ns: int) -> float | str:
    """Integer ns -> microseconds that load back to the same ns.

    A float where a double is exact enough; beyond that a placeholder for the exact decimal
    text (e.g. '12345678901234.567'), which :func:`_dumps` writes as a bare JSON number.
    """
    ns = int(ns)
    if -_DOUBLE_EXACT_NS < ns < _DOUBLE_EXACT_NS:
        return ns / 1000
    sign = "-" if ns < 0 else ""
    q, r = divmod(abs(ns), 1000)
    return f"{_NUM}{sign}{q}.{r:03d}"


def _id(v: Any):
    return None if v is None or v is pd.NA or (isinstance(v, float) and v != v) else int(v)


def _args(row_args: Any, **fill) -> dict:
    """The stored args, plus key fields from the frame's columns where the args lack them."""
    a = dict(row_args) if isinstance(row_args, dict) else {}
    for k, v in fill.items():
        if k not in a and _id(v) is not None:
            a[k] = _id(v)
    return a


def _as_trace(obj) -> Trace:
    if isinstance(obj, Trace):
        return obj
    t = getattr(obj, "trace", None)
    if isinstance(t, Trace):
        return t
    raise TypeError(f"expected a Trace or a Profile, got {type(obj).__name__}")


def trace_to_dict(trace_or_profile) -> dict:
    """Rebuild a Chrome-trace dict from a trace's frames (times as exact-decimal placeholders).

    Use :func:`export_chrome_trace` to write it; the placeholders become JSON numbers there.
    """
    t = _as_trace(trace_or_profile)
    events: list[dict] = [e for e in t.extra_events if e.get("ph") == "M"]
    for r in t.ranges.itertuples(index=False):
        events.append({"ph": "X", "cat": "user_annotation" if r.side == "cpu" else "gpu_user_annotation",
                       "name": r.name, "pid": _id(r.pid), "tid": _id(r.tid), "ts": _us(r.start_ns),
                       "dur": _us(r.dur_ns), "args": _args(r.args, **{"External id": r.external_id})})
    for r in t.cpu_ops.itertuples(index=False):
        events.append({"ph": "X", "cat": "cpu_op", "name": r.name, "pid": _id(r.pid), "tid": _id(r.tid),
                       "ts": _us(r.start_ns), "dur": _us(r.dur_ns),
                       "args": _args(r.args, **{"External id": r.external_id})})
    for r in t.launches.itertuples(index=False):
        events.append({"ph": "X", "cat": r.cat, "name": r.name, "pid": _id(r.pid), "tid": _id(r.tid),
                       "ts": _us(r.start_ns), "dur": _us(r.dur_ns),
                       "args": _args(r.args, correlation=r.correlation, **{"External id": r.external_id})})
    for r in t.kernels.itertuples(index=False):
        events.append({"ph": "X", "cat": _DEVICE_CAT_OUT[r.cat], "name": r.name, "pid": _id(r.device),
                       "tid": _id(r.stream), "ts": _us(r.start_ns), "dur": _us(r.dur_ns),
                       "args": _args(r.args, correlation=r.correlation, device=r.device, stream=r.stream)})
    events += [e for e in t.extra_events if e.get("ph") != "M"]
    out = {k: v for k, v in t.meta.items()}
    out.setdefault("schemaVersion", 1)
    out.setdefault("displayTimeUnit", "ms")
    out["traceEvents"] = events
    return out


def _dumps(obj: dict) -> str:
    text = json.dumps(obj)
    return _NUM_RE.sub(r"\1", text) if _NUM in text else text


def _write_text(text: str, path: str) -> str:
    """``text`` at ``path`` (gzip when it ends with .gz), written atomically, never into the recorded data."""
    data = text.encode("utf-8")
    if path.endswith(".gz"):
        data = gzip.compress(data, compresslevel=6, mtime=0)
    write_atomic(path, data)
    return path


def export_chrome_trace(trace_or_profile, path: str | os.PathLike) -> str:
    """Write a Trace / Profile as Chrome-trace JSON (gzip when ``path`` ends with .gz).

    The file is a JSON object with ``traceEvents`` and ``displayTimeUnit``; Perfetto and
    chrome://tracing open it, and :func:`load_trace` reads back the same frames. Returns the path.
    """
    return _write_text(_dumps(trace_to_dict(trace_or_profile)), os.fspath(path))


# ----------------------------------------------------------------------------------------------
# HTA folder
# ----------------------------------------------------------------------------------------------


def _source_text(src) -> tuple[str, dict]:
    """(JSON text, parsed dict) for a trace path, Trace or Profile."""
    if isinstance(src, (str, os.PathLike)):
        name = os.fspath(src)
        obj = read_trace_json(name)   # validates; raises TraceError naming the file
        with open(name, "rb") as fh:
            raw = fh.read()
        text = (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode("utf-8")
        if not text.lstrip().startswith("{"):
            text = _dumps(obj)        # a bare event array: wrap it
        return text, obj
    d = trace_to_dict(src)
    return _dumps(d), d


def _with_rank(text: str, obj: dict, rank: int) -> str:
    info = obj.get("distributedInfo")
    if isinstance(info, dict) and info.get("rank") == rank:
        return text
    if info is None:
        i = text.index("{")
        body = text[i + 1:].lstrip()
        sep = "" if body.startswith("}") else ", "
        return text[: i + 1] + f'"distributedInfo": {{"rank": {rank}}}' + sep + text[i + 1:]
    obj = dict(obj)
    obj["distributedInfo"] = {**(info if isinstance(info, dict) else {}), "rank": rank}
    return json.dumps(obj)


def export_hta_folder(trace_path, folder: str | os.PathLike, rank: int | None = None) -> str:
    """Write ``folder/rank-<rank>.json.gz`` for ``TraceAnalysis(trace_dir=folder)``.

    ``trace_path`` is a trace file (copied unchanged apart from the rank), a Trace or a Profile.
    ``rank=None`` keeps the rank the trace declares and inserts ``distributedInfo: {rank: 0}``
    when it declares none; an explicit rank is written into ``distributedInfo``. HTA keys files
    by that rank, so a folder of several traces needs one rank each. Returns the file path.
    """
    text, obj = _source_text(trace_path)
    info = obj.get("distributedInfo")
    declared = info.get("rank") if isinstance(info, dict) else None
    r = int(rank) if rank is not None else (int(declared) if isinstance(declared, int) else 0)
    out = os.path.join(os.fspath(folder), f"rank-{r}.json.gz")
    return _write_text(_with_rank(text, obj, r), out)


# ----------------------------------------------------------------------------------------------
# TensorBoard log dir
# ----------------------------------------------------------------------------------------------


def export_tensorboard_logdir(trace_path, logdir: str | os.PathLike, run: str = "cadencelab",
                              worker: str = "worker0", span: int | None = None) -> str:
    """Write ``logdir/<run>/<worker>.<span>.pt.trace.json.gz`` for torch-tb-profiler.

    ``span`` is the integer the plugin orders a worker's profiles by (default: now in ms, as
    torch's own tensorboard handler does). ``trace_path`` is a trace file, a Trace or a Profile.
    Returns the file path; open with ``tensorboard --logdir <logdir>``.
    """
    if not worker or re.search(r"\.\d+$", worker) or os.sep in worker or worker.endswith(".pt.trace.json"):
        raise ValueError(f"worker name {worker!r} would not parse as a torch-tb-profiler worker")
    if not run or os.sep in run:
        raise ValueError(f"run name {run!r} must be a single directory name")
    text, _ = _source_text(trace_path)
    span = int(time.time() * 1000) if span is None else int(span)
    out = os.path.join(os.fspath(logdir), run, f"{worker}.{span}.pt.trace.json.gz")
    return _write_text(text, out)

