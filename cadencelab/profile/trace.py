"""Load a Kineto / Chrome trace into DataFrames.

A torch profiler trace is a JSON object whose ``traceEvents`` list holds complete events
(``"ph": "X"``) with a start ``ts`` and a duration ``dur`` in microseconds (floats with
nanosecond decimals). This module reads such a file (plain or gzip), checks it, and turns the
events this project reasons about into four frames with integer nanosecond times:

- ``kernels``  : device activity (kernels, memcpy, memset), each joined to the host call that
  launched it through the shared ``correlation`` id;
- ``cpu_ops``  : operator events on host threads, with their nesting depth;
- ``launches`` : CUDA runtime / driver API calls, classified by ``kind``;
- ``ranges``   : user annotations (``torch.profiler.record_function``), host and device side.

Everything else (metadata, flow arrows, python stacks) is kept verbatim in
``Trace.extra_events`` so that an exported trace still opens with its process names.

Malformed input raises :class:`TraceError` naming the file and what is wrong.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import stat
import zlib
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np
import pandas as pd

__all__ = ["Trace", "TraceError", "load_trace", "parse_trace", "read_trace_json", "launch_kind", "KERNEL_COLUMNS",
           "CPU_OP_COLUMNS", "LAUNCH_COLUMNS", "RANGE_COLUMNS"]


class TraceError(ValueError):
    """A trace file that cannot be read; the message names the file and the problem."""


#: largest |ts| or ts + dur (microseconds) a trace may hold: 2**62 ns, so every time and sum fits int64
MAX_TRACE_US = 2**62 / 1000
#: largest trace text read (bytes, after gzip): a bigger file is refused before it fills memory
MAX_TRACE_BYTES = 2 * 2**30
_INT64 = (-(2**63), 2**63 - 1)


# ----------------------------------------------------------------------------------------------
# Event categories
# ----------------------------------------------------------------------------------------------

# Kineto categories (and the capitalised names of PyTorch 1.8-era traces) mapped to our frames.
DEVICE_CATS = {
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "gpu_memset": "memset",
    "memcpy": "memcpy",
    "memset": "memset",
}
LAUNCH_CATS = {"cuda_runtime", "cuda_driver", "runtime", "driver"}
CPU_OP_CATS = {"cpu_op", "operator"}
RANGE_CATS = {"user_annotation": "cpu", "gpu_user_annotation": "gpu"}

KERNEL_COLUMNS = [
    "name", "cat", "start_ns", "end_ns", "dur_ns", "device", "stream", "correlation",
    "launch_name", "launch_ns", "launcher", "graph", "args",
]
CPU_OP_COLUMNS = ["name", "start_ns", "end_ns", "dur_ns", "pid", "tid", "depth", "external_id", "args"]
LAUNCH_COLUMNS = [
    "name", "kind", "cat", "start_ns", "end_ns", "dur_ns", "pid", "tid", "correlation",
    "external_id", "launcher", "args",
]
RANGE_COLUMNS = ["name", "side", "start_ns", "end_ns", "dur_ns", "pid", "tid", "external_id", "args"]

_KERNEL_LAUNCH = {
    "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel",
    "cudaLaunchCooperativeKernelMultiDevice", "cuLaunchKernel", "cuLaunchKernelEx",
    "cuLaunchCooperativeKernel", "cudaLaunchDevice", "hipLaunchKernel", "hipExtLaunchKernel",
    "hipModuleLaunchKernel",
}
_GRAPH_LAUNCH = {"cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch"}
_SYNC = {
    "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaThreadSynchronize",
    "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize", "cudaStreamQuery",
    "hipStreamSynchronize", "hipDeviceSynchronize", "hipEventSynchronize",
}
_SUFFIX = re.compile(r"(_v\d+)?(_ptsz|_ptds)?(_v\d+)?$")


@functools.lru_cache(maxsize=4096)
def launch_kind(name: str) -> str:
    """Classify a runtime/driver API name: kernel_launch, graph_launch, memcpy, memset, sync, other.

    Version and per-thread suffixes (``cudaLaunchKernel_v7000``, ``cudaMemcpyAsync_ptsz``) are
    ignored.
    """
    base = _SUFFIX.sub("", name)
    if base in _KERNEL_LAUNCH:
        return "kernel_launch"
    if base in _GRAPH_LAUNCH:
        return "graph_launch"
    if base in _SYNC:
        return "sync"
    low = base.lower()
    if "memcpy" in low:
        return "memcpy"
    if "memset" in low:
        return "memset"
    return "other"


# ----------------------------------------------------------------------------------------------
# The Trace
# ----------------------------------------------------------------------------------------------


@dataclass
class Trace:
    """The frames of one trace (all times are integer nanoseconds on the trace clock).

    kernels:  name, cat (kernel/memcpy/memset), start_ns, end_ns, dur_ns, device, stream,
              correlation, launch_name, launch_ns (start of the launching API call, <NA> when
              not found), launcher (innermost host op or range around that call), graph (True when
              launched by cudaGraphLaunch), args.
    cpu_ops:  name, start_ns, end_ns, dur_ns, pid, tid, depth (0 = outermost op), external_id, args.
    launches: name, kind, cat, start_ns, end_ns, dur_ns, pid, tid, correlation, external_id,
              launcher, args.
    ranges:   name, side ("cpu" for record_function on the host, "gpu" for its device
              projection), start_ns, end_ns, dur_ns, pid, tid, external_id, args.
    """

    kernels: pd.DataFrame
    cpu_ops: pd.DataFrame
    launches: pd.DataFrame
    ranges: pd.DataFrame
    meta: dict = field(default_factory=dict)
    extra_events: list = field(default_factory=list)
    source: str = "<memory>"

    @property
    def has_device_activity(self) -> bool:
        """True when the trace holds at least one kernel, memcpy or memset."""
        return len(self.kernels) > 0

    def span_ns(self) -> tuple[int, int]:
        """(first start, last end) over every event in the four frames."""
        starts, ends = [], []
        for df in (self.kernels, self.cpu_ops, self.launches, self.ranges):
            if len(df):
                starts.append(int(df["start_ns"].min()))
                ends.append(int(df["end_ns"].max()))
        if not starts:
            raise TraceError(f"{self.source}: the trace holds no timed events")
        return min(starts), max(ends)

    def __repr__(self) -> str:  # a short repr: frames can be large
        return (
            f"Trace(source={self.source!r}, kernels={len(self.kernels)}, cpu_ops={len(self.cpu_ops)}, "
            f"launches={len(self.launches)}, ranges={len(self.ranges)})"
        )


# ----------------------------------------------------------------------------------------------
# Reading and checking
# ----------------------------------------------------------------------------------------------


def read_trace_json(path: str | os.PathLike) -> dict:
    """Read a trace file (``.json`` or gzip) into a dict with a ``traceEvents`` list.

    Raises TraceError for an unreadable, truncated or non-JSON file, or JSON of the wrong shape.
    A bare JSON array (the Chrome "array format") is accepted and wrapped.
    """
    name = os.fspath(path)
    try:
        st = os.stat(name)
    except OSError as exc:
        raise TraceError(f"{name}: cannot read trace file ({exc.strerror or exc})") from None
    if not stat.S_ISREG(st.st_mode):  # a FIFO or device would block or never end
        raise TraceError(f"{name}: not a regular file")
    if st.st_size > MAX_TRACE_BYTES:
        raise TraceError(f"{name}: {st.st_size} bytes, more than the {MAX_TRACE_BYTES} a trace may hold")
    try:
        with open(name, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise TraceError(f"{name}: cannot read trace file ({exc.strerror or exc})") from None
    if raw[:2] == b"\x1f\x8b":
        raw = _gunzip(raw, name)
    elif name.endswith(".gz"):
        raise TraceError(f"{name}: file name ends in .gz but the content is not gzip")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TraceError(f"{name}: not UTF-8 text (byte {exc.start}); is this a trace file?") from None
    if not text.strip():
        raise TraceError(f"{name}: the file is empty")
    try:
        obj = json.loads(text, parse_float=_parse_float)
    except RecursionError:
        raise TraceError(f"{name}: JSON nested too deeply to read (is this a trace file?)") from None
    except json.JSONDecodeError as exc:
        if exc.pos >= len(text.rstrip()):
            what = "truncated JSON (the text ends before the document closes)"
        else:
            what = "not valid JSON"
        raise TraceError(f"{name}: {what}: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except ValueError as exc:  # e.g. an integer with more digits than Python converts
        raise TraceError(f"{name}: not a usable JSON number ({str(exc)[:120]})") from None
    return _check_shape(obj, name)


def _gunzip(raw: bytes, name: str) -> bytes:
    """gzip data (all members) inflated, refused past :data:`MAX_TRACE_BYTES`."""
    out, data = [], raw
    total = 0
    try:
        while data:
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            while True:
                chunk = d.decompress(data, MAX_TRACE_BYTES + 1 - total)
                out.append(chunk)
                total += len(chunk)
                if total > MAX_TRACE_BYTES:
                    raise TraceError(f"{name}: inflates past the {MAX_TRACE_BYTES} bytes a trace may hold")
                data = d.unconsumed_tail
                if d.eof or not data:
                    break
            if not d.eof:
                raise EOFError("compressed data ended before the end-of-stream marker")
            data = d.unused_data
            if data and data[:2] != b"\x1f\x8b":
                break  # trailing bytes after the last member, as gzip.decompress would ignore padding
    except (OSError, EOFError, zlib.error) as exc:
        raise TraceError(f"{name}: truncated or corrupt gzip data ({exc})") from None
    return b"".join(out)


def _check_shape(obj: Any, name: str) -> dict:
    if isinstance(obj, list):
        obj = {"traceEvents": obj}
    if not isinstance(obj, dict):
        raise TraceError(f"{name}: expected a JSON object with 'traceEvents', got {type(obj).__name__}")
    if "traceEvents" not in obj:
        keys = ", ".join(sorted(map(str, obj)))[:200] or "none"
        raise TraceError(f"{name}: missing 'traceEvents' (top-level keys: {keys})")
    if not isinstance(obj["traceEvents"], list):
        raise TraceError(f"{name}: 'traceEvents' must be a list, got {type(obj['traceEvents']).__name__}")
    return obj


def _short(v: Any, n: int = 60) -> str:
    """``repr(v)`` cut to ``n`` characters (a message never carries a huge value)."""
    if isinstance(v, (str, int, float, bool)) or v is None:
        text = repr(v) if not isinstance(v, int) or abs(v) < 10**30 else f"<{v.bit_length()}-bit integer>"
    else:
        text = f"<{type(v).__name__}>"
    return text if len(text) <= n else text[: n - 3] + "..."


def _describe(i: int, ev: Any) -> str:
    if isinstance(ev, dict):
        return f"traceEvents[{i}] (name={_short(ev.get('name'))}, cat={_short(ev.get('cat'))})"
    return f"traceEvents[{i}]"


def _id_ok(v: Any) -> bool:
    """An id field (correlation, External id) that is absent or an integer within int64."""
    if v is None:
        return True
    iv = _int_or_na(v)
    return iv is not pd.NA


def _check_events(events: list, name: str) -> None:
    """Every complete ("X") event must carry finite numeric ts and dur >= 0 within
    :data:`MAX_TRACE_US`, a string ``cat``; ids that are given must be integers within int64."""
    problems: dict[str, list[int]] = {}
    for i, ev in enumerate(events):
        if not isinstance(ev, dict):
            problems.setdefault("that are not JSON objects", []).append(i)
            continue
        ph = ev.get("ph")
        if ph is not None and not isinstance(ph, str):  # a number or a list is no phase: refused, never silently dropped
            problems.setdefault(f"with a 'ph' that is not a string such as \"X\" (got {_short(ph)})", []).append(i)
            continue
        if "args" in ev and not isinstance(ev["args"], dict):
            problems.setdefault(f"with 'args' that is not a JSON object (got {type(ev['args']).__name__})", []).append(i)
        if ph != "X":
            continue
        if "name" in ev and not isinstance(ev["name"], str):
            problems.setdefault(f"with a 'name' that is not a string (got {_short(ev.get('name'))})", []).append(i)
        vals = {}
        for key in ("ts", "dur"):
            v = ev.get(key)
            if type(v) is float and -MAX_TRACE_US <= v <= MAX_TRACE_US and (key == "ts" or v >= 0):
                vals[key] = v  # the common case first (finite: NaN fails the bounds), the same verdict as below
                continue
            if v is None:
                problems.setdefault(f"without '{key}'", []).append(i)
            elif isinstance(v, bool) or not isinstance(v, (int, float)):
                problems.setdefault(f"with a non-numeric '{key}'", []).append(i)
            elif isinstance(v, float) and not math.isfinite(v):
                problems.setdefault(f"with a non-finite '{key}' (NaN or Infinity)", []).append(i)
            elif key == "dur" and v < 0:
                problems.setdefault("with a negative 'dur'", []).append(i)
            elif abs(v) > MAX_TRACE_US:
                problems.setdefault(f"with '{key}' out of range (|{key}| > {MAX_TRACE_US:.4g} us)", []).append(i)
            else:
                vals[key] = v
        if len(vals) == 2 and abs(vals["ts"] + vals["dur"]) > MAX_TRACE_US:
            problems.setdefault(f"with 'ts' + 'dur' out of range (> {MAX_TRACE_US:.4g} us)", []).append(i)
        cat = ev.get("cat")
        if cat is not None and not isinstance(cat, str):
            problems.setdefault("with a 'cat' that is not a string", []).append(i)
        a = ev.get("args")
        if isinstance(a, dict):
            for key in ("correlation", "External id"):
                v = a.get(key)
                if (type(v) is not int or not _INT64[0] <= v <= _INT64[1]) and not _id_ok(v):  # int: the fast verdict
                    problems.setdefault(f"with an 'args.{key}' that is not an int64 integer", []).append(i)
        for key in ("pid", "tid"):  # names (strings) are allowed; numbers must be int64 integers
            v = ev.get(key)
            if type(v) is str or (type(v) is int and _INT64[0] <= v <= _INT64[1]):
                continue  # the common cases first, the same verdict as below
            if isinstance(v, (int, float)) and not isinstance(v, bool) and _int_or_na(v) is pd.NA:
                problems.setdefault(f"with a '{key}' that is not an int64 integer", []).append(i)
    if problems:
        parts = []
        for what, idx in problems.items():
            parts.append(f"{len(idx)} event(s) {what} (first: {_describe(idx[0], events[idx[0]])})")
        raise TraceError(f"{name}: " + "; ".join(parts))


# ----------------------------------------------------------------------------------------------
# Events -> frames
# ----------------------------------------------------------------------------------------------


class _ExactFloat(float):
    """A JSON number too long for a double to hold to the nanosecond; keeps its text."""

    def __new__(cls, text: str):
        obj = super().__new__(cls, text)
        obj.text = text
        return obj


def _parse_float(text: str) -> float:
    # 13 integer digits + "." + 3 decimals fit a double to < 0.5 ns; longer tokens keep their text.
    return _ExactFloat(text) if len(text) > 17 else float(text)


def _decimal_us_to_ns(text: str) -> int:
    """'5091366725922.068' (us) -> 5091366725922068 (ns), exactly, rounding beyond 3 decimals."""
    from decimal import ROUND_HALF_EVEN, Decimal

    return int((Decimal(text) * 1000).to_integral_value(rounding=ROUND_HALF_EVEN))


def us_to_ns(values: Iterable[float]) -> np.ndarray:
    """Microsecond floats -> int64 nanoseconds, exact for Kineto's 3-decimal timestamps.

    ``ts * 1000`` loses the last nanosecond for timestamps near 1e12 us (the product's ulp is
    1 ns); splitting off the integer microseconds first keeps the arithmetic exact. Numbers read
    from JSON with more digits than a double holds keep their text and are converted from it.
    """
    vals = list(values) if not isinstance(values, np.ndarray) else values
    a = np.asarray(vals, dtype=np.float64)
    if a.size == 0:
        return np.zeros(0, dtype=np.int64)
    whole = np.floor(a)
    out = whole.astype(np.int64) * 1000 + np.rint((a - whole) * 1000).astype(np.int64)
    if not isinstance(vals, np.ndarray):
        for i, v in enumerate(vals):
            if isinstance(v, _ExactFloat):
                out[i] = _decimal_us_to_ns(v.text)
    return out


def _int_or_na(v: Any):
    """An integer id within int64, or NA (absent, not an integer, or out of range)."""
    if type(v) is int:  # the common case first (a JSON integer; a bool's type is bool): called per id per event
        return v if _INT64[0] <= v <= _INT64[1] else pd.NA
    if v is None or isinstance(v, bool):
        return pd.NA
    if isinstance(v, (int, np.integer)):
        iv = int(v)
    elif isinstance(v, float) and math.isfinite(v) and v.is_integer():
        iv = int(v)
    elif isinstance(v, str) and len(v) <= 20:
        try:
            iv = int(v)
        except ValueError:
            return pd.NA
    else:
        return pd.NA
    return iv if _INT64[0] <= iv <= _INT64[1] else pd.NA


def _thread_key(pid: Any, tid: Any) -> tuple[str, str]:
    """A sortable (pid, tid) key that is the same for raw event values and frame values."""
    return str(_int_or_na(pid)), str(_int_or_na(tid))


def _times(rows: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    start = us_to_ns([r["ts"] for r in rows])
    dur = us_to_ns([r["dur"] for r in rows])
    return start, dur


_NULLABLE_INT = {"pid", "tid", "device", "stream", "correlation", "external_id", "launch_ns"}


def _frame(columns: list[str], data: dict) -> pd.DataFrame:
    """Assemble a frame with stable dtypes (int64 times, nullable Int64 ids, bool graph)."""
    out = {}
    for c in columns:
        v = data[c]
        if c in _NULLABLE_INT:
            out[c] = pd.array(list(v), dtype="Int64")
        elif c.endswith("_ns") or c == "depth":
            out[c] = np.asarray(v, dtype=np.int64)
        elif c == "graph":
            out[c] = np.asarray(v, dtype=bool)
        else:
            out[c] = pd.Series(list(v), dtype=object)
    return pd.DataFrame(out, columns=columns)


def _depths(start: np.ndarray, end: np.ndarray, key: list) -> np.ndarray:
    """Nesting depth of each interval among those sharing its key (pid, tid)."""
    depth = np.zeros(len(start), dtype=np.int64)
    order = sorted(range(len(start)), key=lambda i: (key[i], start[i], -end[i]))
    stack: list[int] = []
    cur = None
    for i in order:
        if key[i] != cur:
            stack, cur = [], key[i]
        while stack and end[stack[-1]] <= start[i]:
            stack.pop()
        depth[i] = len(stack)
        stack.append(i)
    return depth


def _innermost(container_rows: list[tuple], targets: list[tuple]) -> list:
    """For each target (key, start, end) the name of the innermost container enclosing it.

    containers are (key, start, end, name); enclosing means same key, start <= t.start and
    end >= t.end; innermost means the latest-starting (then shortest) of those. One sweep per
    key with a stack of open containers: O(n log n) for properly nested host events.
    """
    out = [None] * len(targets)
    by_key: dict[Any, list[tuple]] = {}
    for c in container_rows:
        by_key.setdefault(c[0], []).append(c)
    want: dict[Any, list[tuple]] = {}
    for j, (key, s, e) in enumerate(targets):
        want.setdefault(key, []).append((s, e, j))
    for key, tgts in want.items():
        conts = sorted(by_key.get(key, []), key=lambda c: (c[1], -c[2]))
        stack: list[tuple] = []
        i = 0
        for s, e, j in sorted(tgts):
            while i < len(conts) and conts[i][1] <= s:
                c = conts[i]
                while stack and stack[-1][2] < c[1]:
                    stack.pop()
                stack.append(c)
                i += 1
            while stack and stack[-1][2] < s:
                stack.pop()
            for c in reversed(stack):
                if c[2] >= e:
                    out[j] = c[3]
                    break
    return out


def parse_trace(obj: dict | list, source: str = "<memory>") -> Trace:
    """Build a :class:`Trace` from an already-parsed trace object (dict with traceEvents or list)."""
    obj = _check_shape(obj, source)
    events = obj["traceEvents"]
    _check_events(events, source)

    dev, cpu, launch, rng, extra = [], [], [], [], []
    for ev in events:
        cat = ev.get("cat")
        low = cat.lower() if isinstance(cat, str) else None
        if ev.get("ph") != "X" or low is None:
            extra.append(ev)
        elif low in DEVICE_CATS:
            dev.append(ev)
        elif low in LAUNCH_CATS:
            launch.append(ev)
        elif low in CPU_OP_CATS:
            cpu.append(ev)
        elif low in RANGE_CATS:
            rng.append(ev)
        else:
            extra.append(ev)

    def args(ev):
        a = ev.get("args")
        return a if isinstance(a, dict) else {}

    # --- cpu ops ------------------------------------------------------------------------------
    s, d = _times(cpu)
    keys = [_thread_key(ev.get("pid"), ev.get("tid")) for ev in cpu]
    cpu_ops = _frame(CPU_OP_COLUMNS, {
        "name": [str(ev.get("name", "")) for ev in cpu],
        "start_ns": s, "end_ns": s + d, "dur_ns": d,
        "pid": [_int_or_na(ev.get("pid")) for ev in cpu], "tid": [_int_or_na(ev.get("tid")) for ev in cpu],
        "depth": _depths(s, s + d, keys),
        "external_id": [_int_or_na(args(ev).get("External id")) for ev in cpu],
        "args": [args(ev) for ev in cpu],
    })

    # --- ranges -------------------------------------------------------------------------------
    s, d = _times(rng)
    ranges = _frame(RANGE_COLUMNS, {
        "name": [str(ev.get("name", "")) for ev in rng],
        "side": [RANGE_CATS[ev["cat"].lower()] for ev in rng],
        "start_ns": s, "end_ns": s + d, "dur_ns": d,
        "pid": [_int_or_na(ev.get("pid")) for ev in rng], "tid": [_int_or_na(ev.get("tid")) for ev in rng],
        "external_id": [_int_or_na(args(ev).get("External id")) for ev in rng],
        "args": [args(ev) for ev in rng],
    })

    # --- launches (with the innermost host op or range around each call) ------------------------
    s, d = _times(launch)
    containers = [
        (_thread_key(pid, tid), int(a), int(b), n)
        for frame in (cpu_ops, ranges[ranges["side"] == "cpu"])
        for pid, tid, a, b, n in zip(frame["pid"], frame["tid"], frame["start_ns"], frame["end_ns"], frame["name"])
    ]
    targets = [(_thread_key(ev.get("pid"), ev.get("tid")), int(a), int(a + b))
               for ev, a, b in zip(launch, s, d)]
    launcher = _innermost(containers, targets)
    names = [str(ev.get("name", "")) for ev in launch]
    launches = _frame(LAUNCH_COLUMNS, {
        "name": names,
        "kind": [launch_kind(n) for n in names],
        "cat": [ev["cat"] for ev in launch],
        "start_ns": s, "end_ns": s + d, "dur_ns": d,
        "pid": [_int_or_na(ev.get("pid")) for ev in launch], "tid": [_int_or_na(ev.get("tid")) for ev in launch],
        "correlation": [_int_or_na(args(ev).get("correlation")) for ev in launch],
        "external_id": [_int_or_na(args(ev).get("External id")) for ev in launch],
        "launcher": launcher,
        "args": [args(ev) for ev in launch],
    })

    # --- device activity, joined to its launch by correlation ----------------------------------
    by_corr: dict[int, tuple] = {}
    for i, ev in enumerate(launch):
        c = _int_or_na(args(ev).get("correlation"))
        if c is pd.NA:
            continue
        rank = (0 if ev["cat"].lower() in ("cuda_runtime", "runtime") else 1, int(s[i]))
        if c not in by_corr or rank < by_corr[c][0]:
            by_corr[c] = (rank, names[i], int(s[i]), launcher[i], launch_kind(names[i]) == "graph_launch")
    s, d = _times(dev)
    corr = [_int_or_na(args(ev).get("correlation")) for ev in dev]
    hit = [by_corr.get(c) if c is not pd.NA else None for c in corr]
    kernels = _frame(KERNEL_COLUMNS, {
        "name": [str(ev.get("name", "")) for ev in dev],
        "cat": [DEVICE_CATS[ev["cat"].lower()] for ev in dev],
        "start_ns": s, "end_ns": s + d, "dur_ns": d,
        "device": [_int_or_na(args(ev).get("device", ev.get("pid"))) for ev in dev],
        "stream": [_int_or_na(args(ev).get("stream", ev.get("tid"))) for ev in dev],
        "correlation": corr,
        "launch_name": [h[1] if h else None for h in hit],
        "launch_ns": [h[2] if h else pd.NA for h in hit],
        "launcher": [h[3] if h else None for h in hit],
        "graph": [bool(h[4]) if h else False for h in hit],
        "args": [args(ev) for ev in dev],
    })
    kernels = kernels.sort_values(["start_ns", "end_ns"], kind="stable").reset_index(drop=True)

    meta = {k: v for k, v in obj.items() if k != "traceEvents"}
    return Trace(kernels=kernels, cpu_ops=cpu_ops, launches=launches, ranges=ranges,
                 meta=meta, extra_events=extra, source=source)


def load_trace(path: str | os.PathLike) -> Trace:
    """Load a Kineto/Chrome trace file (``.json`` or ``.json.gz``) into a :class:`Trace`."""
    name = os.fspath(path)
    return parse_trace(read_trace_json(name), source=name)

