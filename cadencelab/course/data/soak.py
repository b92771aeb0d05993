"""The soak (data/h200/soak.json + soak_chunks.csv.gz)."""

from __future__ import annotations

import pandas as pd

from .files import beside, need_key, read_csv, result_of

# ---------------------------------------------------------------------------------------
# the soak (data/h200/soak.json + soak_chunks.csv.gz)
# ---------------------------------------------------------------------------------------


def soak_result() -> dict:
    """The whole recorded soak result (summary, config, turns, arms, failures, provenance)."""
    return result_of("soak")[0]


def soak_summary() -> dict:
    """The soak's gates and headline numbers: chunks, exact_chunks, peak_growth_bytes_after_warmup,
    fallbacks_after_warmup, declared eager cases, latency medians (with ``latency_comparable``)."""
    obj, rel, _ = result_of("soak")
    return dict(need_key(obj, "summary", rel))


def soak_turns() -> pd.DataFrame:
    """One row per turn of the soak: start chunk, calls, flush tokens, seed, exact chunks, fallbacks, peak."""
    obj, rel, _ = result_of("soak")
    return pd.DataFrame(need_key(obj, "turns", rel))


def soak_chunks() -> pd.DataFrame:
    """One row per soak chunk, arm and B0 side by side: turn, call, kind (first / steady / flush), frames,
    warmup, exact_i16 / exact_f32, both SHA-256, latency_ms / latency_ms_ref, allocator bytes
    (allocated, peak, reserved), replays, fallbacks, declared_eager."""
    obj, rel, how = result_of("soak")
    name = need_key(obj, "chunks_csv", rel)  # the name the study wrote; recording gzips it beside the JSON
    p = beside(rel, "chunks_csv", name, how, gz=True)
    df = read_csv(p)
    missing = [c for c in ("chunk", "turn", "kind", "warmup", "exact_i16", "latency_ms", "peak_bytes")
               if c not in df.columns]
    if missing:
        raise ValueError(f"{p}: missing columns {missing}")
    return df
