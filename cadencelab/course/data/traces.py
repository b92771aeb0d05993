"""Recorded Chrome traces of one chunk per arm."""

from __future__ import annotations

import dataclasses
import functools

from .files import data_path

# ---------------------------------------------------------------------------------------
# recorded traces
# ---------------------------------------------------------------------------------------

_TRACE_FILES = {
    "chunk": ("h200/trace_{arm}_chunk.json.gz",
              "python -m cadencelab.bench token2wav --device cuda --arms B0,SRc --out DIR (it keeps "
              "DIR/trace_<arm>.json.gz); trim it to one steady chunk "
              "(cadencelab.profile.trim.write_trimmed_trace(load_trace(...), PATH, window='chunk', occurrence=1)) "
              "and save it as {path}"),
    "lanes": ("h200/trace_{arm}_lanes.json.gz",
              "python -m cadencelab.bench sessions --device cuda --arms SRl,SRc,SRb,B0 --out DIR (the SRl arm writes "
              "DIR/trace_SRl_lanes.json.gz: one steady round of two lanes at once); copy it to {path}"),
    "duplex": ("h200/trace_duplex_{arm}.json.gz",
               "python -m cadencelab.bench duplex --device cuda --preset h200 --arms B0,SRc --out DIR "
               "(it writes DIR/trace_duplex_<arm>.json.gz, already trimmed to one second); copy it to {path}"),
}


def recorded_trace(arm: str = "B0", kind: str = "chunk"):
    """A recorded, trimmed Chrome trace as a :class:`cadencelab.profile.Trace`.

    kind "chunk": one steady Token2wav chunk (``data/h200/trace_<arm>_chunk.json.gz``);
    kind "duplex": one duplex second (``data/h200/trace_duplex_<arm>.json.gz``);
    kind "lanes": one steady round of two lanes replaying at once (arm "SRl", ``data/h200/trace_SRl_lanes.json.gz``).
    """
    if kind not in _TRACE_FILES:
        raise ValueError(f"recorded_trace: kind must be one of {sorted(_TRACE_FILES)}, got {kind!r}")
    pattern, how = _TRACE_FILES[kind]
    rel = pattern.format(arm=arm)
    path = data_path(rel, how.format(path=f"data/{rel}"))
    t = _load_trace_cached(str(path), path.stat().st_mtime_ns)
    # a copy per call: the parse is shared, the frames a caller may change are its own
    return dataclasses.replace(t, kernels=t.kernels.copy(), cpu_ops=t.cpu_ops.copy(), launches=t.launches.copy(),
                               ranges=t.ranges.copy(), meta=dict(t.meta))


@functools.lru_cache(maxsize=8)
def _load_trace_cached(path: str, mtime_ns: int):
    from ...profile.trace import load_trace

    return load_trace(path)
