"""Memory views: over-reservation per region (rho), allocator peaks, allocator timelines.

- :func:`rho_table` prices a region's reservation against its declared live extent:
  ``rho = reserved_bytes / live_bytes`` (the paper's over-reservation ratio), and the bytes
  wasted, ``reserved_bytes - live_bytes``.
- :func:`allocator_peak` reads the CUDA caching allocator's counters.
- :func:`memory_timeline` turns a ``torch.cuda.memory._snapshot()`` dict into one row per
  allocator event with running allocated and reserved bytes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import torch

__all__ = ["MiB", "rho_table", "allocator_peak", "reset_allocator_peak", "memory_timeline"]

MiB = 1024 * 1024


# ----------------------------------------------------------------------------------------------
# rho per region
# ----------------------------------------------------------------------------------------------


def rho_table(regions_df: pd.DataFrame) -> pd.DataFrame:
    """Add rho, waste_bytes and MiB columns to a frame of region, reserved_bytes, live_bytes.

    live_bytes is the declared live extent (what the retention policy says is ever read).
    rho = reserved / live (inf when live is 0 and something is reserved, NaN when both are 0);
    waste_bytes = reserved - live. Rows are sorted by waste_bytes, largest first. Other columns
    pass through.
    """
    need = ["region", "reserved_bytes", "live_bytes"]
    missing = [c for c in need if c not in regions_df.columns]
    if missing:
        raise ValueError(f"rho_table: missing columns {missing}; got {list(regions_df.columns)}")
    df = regions_df.copy()
    for c in ("reserved_bytes", "live_bytes"):
        v = pd.to_numeric(df[c], errors="coerce")
        if v.isna().any() or (v < 0).any():
            bad = df.loc[v.isna() | (v < 0), "region"].tolist()
            raise ValueError(f"rho_table: {c} must be non-negative numbers (regions {bad})")
        df[c] = v.astype("int64") if (v == v.round()).all() else v
    reserved = df["reserved_bytes"].to_numpy(np.float64)
    live = df["live_bytes"].to_numpy(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        df["rho"] = reserved / live
    df["waste_bytes"] = df["reserved_bytes"] - df["live_bytes"]
    df["reserved_MiB"] = reserved / MiB
    df["live_MiB"] = live / MiB
    df["waste_MiB"] = df["waste_bytes"] / MiB
    return df.sort_values(["waste_bytes", "region"], ascending=[False, True], kind="stable").reset_index(drop=True)


# ----------------------------------------------------------------------------------------------
# CUDA allocator counters
# ----------------------------------------------------------------------------------------------


def _cuda_device(device) -> torch.device:
    if not torch.cuda.is_available():
        raise RuntimeError("allocator_peak reads the CUDA caching allocator, and torch.cuda is not available")
    d = torch.device("cuda") if device is None else torch.device(device)
    if d.type != "cuda":
        raise ValueError(f"allocator_peak needs a cuda device, got {d}")
    return d


def allocator_peak(device: Any = None) -> pd.Series:
    """The caching allocator's current and peak bytes on ``device`` (default: current CUDA device).

    Index: allocated_bytes, reserved_bytes, peak_allocated_bytes, peak_reserved_bytes,
    peak_allocated_MiB, peak_reserved_MiB. Pair with :func:`reset_allocator_peak` before the
    code you measure. Raises RuntimeError without CUDA.
    """
    d = _cuda_device(device)
    s = pd.Series({
        "allocated_bytes": int(torch.cuda.memory_allocated(d)),
        "reserved_bytes": int(torch.cuda.memory_reserved(d)),
        "peak_allocated_bytes": int(torch.cuda.max_memory_allocated(d)),
        "peak_reserved_bytes": int(torch.cuda.max_memory_reserved(d)),
    }, dtype="int64", name=str(d))
    out = s.astype("float64")
    out["peak_allocated_MiB"] = s["peak_allocated_bytes"] / MiB
    out["peak_reserved_MiB"] = s["peak_reserved_bytes"] / MiB
    return out


def reset_allocator_peak(device: Any = None) -> None:
    """Synchronize and reset the peak counters so the next :func:`allocator_peak` measures from here."""
    d = _cuda_device(device)
    torch.cuda.synchronize(d)
    torch.cuda.reset_peak_memory_stats(d)


# ----------------------------------------------------------------------------------------------
# Snapshot timeline
# ----------------------------------------------------------------------------------------------

_ALLOC = {"alloc"}
_SEG_UP = {"segment_alloc", "segment_map"}
_SEG_DOWN = {"segment_free", "segment_unmap"}
TIMELINE_COLUMNS = ["device", "seq", "time_us", "action", "addr", "size_bytes", "stream",
                    "cumulative_allocated_bytes", "cumulative_reserved_bytes"]


def memory_timeline(snapshot: dict, *, free_on: str = "requested", initial_allocated_bytes: int = 0,
                    initial_reserved_bytes: int = 0) -> pd.DataFrame:
    """One row per allocator trace entry of a ``torch.cuda.memory._snapshot()`` dict.

    Columns: device, seq (order within the device), time_us (NaN when the snapshot has no
    times), action, addr, size_bytes, stream, cumulative_allocated_bytes (+size on ``alloc``,
    -size on ``free_requested``/``free``; ``free_completed`` only returns the block to the
    cache), cumulative_reserved_bytes (+ on segment_alloc/segment_map, - on
    segment_free/segment_unmap).

    History starts when recording started, so the running totals are relative to that moment;
    pass ``initial_*_bytes`` to anchor them.
    """
    if not isinstance(snapshot, dict) or "device_traces" not in snapshot:
        got = sorted(snapshot) if isinstance(snapshot, dict) else type(snapshot).__name__
        raise ValueError(f"memory_timeline: expected a snapshot dict with 'device_traces', got {got}")
    if free_on not in ("requested", "completed"):
        raise ValueError(f"memory_timeline: free_on must be 'requested' or 'completed', got {free_on!r}")
    frees = {"free", "free_requested" if free_on == "requested" else "free_completed"}
    rows = []
    for dev, entries in enumerate(snapshot["device_traces"] or []):
        alloc, reserved = int(initial_allocated_bytes), int(initial_reserved_bytes)
        for seq, e in enumerate(entries or []):
            action = str(e.get("action", ""))
            size = int(e.get("size", 0) or 0)
            if action in _ALLOC:
                alloc += size
            elif action in frees:
                alloc -= size
            elif action in _SEG_UP:
                reserved += size
            elif action in _SEG_DOWN:
                reserved -= size
            t = e.get("time_us", e.get("time"))
            rows.append((dev, seq, float(t) if t is not None else np.nan, action, e.get("addr"), size,
                         e.get("stream"), alloc, reserved))
    df = pd.DataFrame(rows, columns=TIMELINE_COLUMNS)
    for c in ("device", "seq", "size_bytes", "cumulative_allocated_bytes", "cumulative_reserved_bytes"):
        df[c] = df[c].astype("int64")
    df["time_us"] = df["time_us"].astype("float64")
    return df
