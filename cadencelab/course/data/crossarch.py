"""Cross-architecture (data/h200/moshi_mimi.json, freeze_style.json)."""

from __future__ import annotations

import pandas as pd

from .files import need_key, result_of

# ---------------------------------------------------------------------------------------
# cross-architecture (data/h200/moshi_mimi.json, freeze_style.json)
# ---------------------------------------------------------------------------------------


def mimi_summary() -> dict:
    """Mimi: speedup of the vendor's CUDA graphs and of generic replay vs eager, vendor_speedup_recovered,
    peaks, exact_blocks / total_blocks."""
    obj, rel, _ = result_of("mimi")
    return dict(need_key(obj, "summary", rel))


def mimi_arms() -> pd.DataFrame:
    """One row per Mimi arm (eager, vendor_graph, replay): per-frame latency, speedup, peak, exactness."""
    obj, rel, _ = result_of("mimi")
    keep = ["arm", "latency_ms_median", "latency_ms_p95", "encode_ms_median", "decode_ms_median", "speedup_vs_eager",
            "peak_MiB_median", "exact_blocks", "blocks", "vendor_graphs_captured", "replays_per_block",
            "invalidations", "rebinding"]
    rows = [{k: a.get(k) for k in keep} for a in need_key(obj, "arms", rel).values()]
    return pd.DataFrame(rows)


def freeze_summary() -> dict:
    """The Freeze-Omni-style decoder: speedups, peaks, state bytes, exact blocks, the overlap control's max|d|."""
    obj, rel, _ = result_of("freeze")
    return dict(need_key(obj, "summary", rel))


def freeze_paths() -> pd.DataFrame:
    """One row per streaming path (overlap_recompute, carry, carry_replay, full_history): steady latency,
    peak, state bytes, exactness against the full-history reference, role."""
    obj, rel, _ = result_of("freeze")
    return pd.DataFrame(list(need_key(obj, "paths", rel).values()))
