"""Multi-session capacity (data/h200/sessions.json + sessions.csv.gz)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .files import data_path, need_key, pick_rows, read_csv, result_of

# ---------------------------------------------------------------------------------------
# multi-session capacity (data/h200/sessions.json + sessions.csv.gz)
# ---------------------------------------------------------------------------------------


def sessions_summary(dataset: str = "sessions") -> dict:
    """The capacity study's headline: max_sessions_at_cadence_<arm> per workload (with
    ``capacity_bound``: "exact" or "lower_bound"), their ratio, peak bytes per added session against
    the declared state bytes, exactness counts, swap cost. Other ``dataset``s:
    ``"sessions_srb_mixed"`` (the experimental SRb arm alone in the mixed workload, past N = 64),
    ``"sessions_staggered"`` (every arm with arrivals spread over each second) and
    ``"sessions_srb_staggered"`` (SRb alone, staggered, past the budget of the previous one)."""
    obj, rel, _ = result_of(dataset)
    return dict(need_key(obj, "summary", rel))


def sessions_capacity(workload: str | None = None, dataset: str = "sessions") -> pd.DataFrame:
    """One row per (arm, workload, N): sessions_holding, all_hold, p95_chunk_ms, goodput, peak_MiB,
    oom, skipped, exact_chunks/checked_chunks, swaps. ``workload`` filters ("mixed", "speak_heavy")."""
    obj, rel, _ = result_of(dataset)
    return pick_rows(pd.DataFrame(need_key(obj, "capacity", rel)), "workload", workload, rel)


def sessions_table(dataset: str = "sessions") -> pd.DataFrame:
    """One row per arm: sessions holding the cadence per workload ("(lower bound)" where the sweep
    ended without a break), peak and declared MiB per added session, the exactness reference its
    chunks were gated on, and how many chunks equal the session run alone through B0.
    ``dataset``: as in :func:`sessions_summary`."""
    s = sessions_summary(dataset)
    rows = []
    for arm, per in ((k[len("max_sessions_at_cadence_"):], v) for k, v in s.items()
                     if k.startswith("max_sessions_at_cadence_")):
        bound = s.get("capacity_bound", {}).get(arm, {})
        row = {"arm": arm + (" (experimental)" if arm in s.get("experimental_arms", []) else "")}
        for w, n in per.items():
            row[f"max sessions ({w})"] = f"{n}" + (" (lower bound)" if bound.get(w) == "lower_bound" else "")
        peak = s.get("peak_bytes_per_added_session", {}).get(arm)
        declared = s.get("declared_state_bytes_per_session", {}).get(arm)
        same = s.get("identical_to_solo_B0", {}).get(arm, {})
        row.update({"peak MiB per added session": round(peak / 2**20) if peak else None,
                    "declared state MiB per session": round(declared / 2**20) if declared else None,
                    "gated on": ", ".join(s.get("exactness_reference", {}).get(arm, ["solo_B0"])),
                    "identical to solo B0 (mel and PCM)": (f"{same['mel_and_pcm']} / {same['compared']}"
                                                           if same else None)})
        rows.append(row)
    return pd.DataFrame(rows).set_index("arm")


def sessions_chunks(dataset: str = "sessions") -> pd.DataFrame:
    """One row per chunk served in ``dataset``'s sweep: arm, session count, session, chunk, its arrival,
    completion, latency, the lane thread's CPU time (``host_ms``), its lane and process, and its exactness."""
    _, rel, how = result_of(dataset)
    return read_csv(data_path(Path(rel).with_name(Path(rel).stem + "_chunks.csv.gz"), how))


def sessions_per_session() -> pd.DataFrame:
    """One row per (arm, workload, N, session): chunks, p50/p95/max chunk ms, holds_cadence, exactness."""
    _, rel, how = result_of("sessions")
    return read_csv(data_path(Path(rel).parent / "sessions.csv.gz", how))


# ---------------------------------------------------------------------------------------
# what limits the lanes (data/h100/lanes_limiter.json + its chunks CSV)
# ---------------------------------------------------------------------------------------


def lanes_limiter() -> pd.DataFrame:
    """The lanes-limiter study's table: one row per session count (1 alone, then the counts around the lanes'
    break), the host split of a chunk (``<part>_ms``), the graph launches' concurrency and slow-down, the device
    spans' share of the wall and the ``reading``. ``attrs``: ``provenance``, ``points`` (hold or break per
    count, timed and untimed), ``profiled`` (one second under the profiler: busy union, overlap across
    streams; None where it was not recorded) and ``server`` (lanes, captures, eager sections)."""
    obj, rel, _ = result_of("lanes_limiter")
    df = pd.DataFrame(need_key(obj, "table", rel))
    for key in ("provenance", "points", "profiled", "server"):
        df.attrs[key] = obj.get(key)
    return df


def lanes_limiter_chunks(dataset: str = "lanes_limiter") -> pd.DataFrame:
    """One row per chunk of a lanes-limiter recording: its session count, lane, host window and every part (one
    process, timed), or, from processes (``lanes_limiter_mps4``), the served rows: launch, service, thread CPU."""
    _, rel, how = result_of(dataset)
    return read_csv(data_path(Path(rel).with_name(Path(rel).stem + "_chunks.csv.gz"), how))
