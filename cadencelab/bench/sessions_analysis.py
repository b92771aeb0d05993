"""Analysis of the ``sessions`` study's rows (DataFrames): every chunk with its exactness against its
reference, one row per session, one per (arm, workload, N) with the cadence verdict, memory and the
continuity figures, and the study's summary. ``cfg`` is a :class:`~cadencelab.bench.sessions.SessionsConfig`."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..serving import LANES_TARGET
from .session_serving import horizon
from .sessions_verify import GATED_ARM

__all__ = ["chunk_frame", "session_frame", "capacity_frame", "peak_slope", "capacity_bounds", "capacity_brackets",
           "summarise", "analyse"]


def chunk_frame(entries: dict) -> pd.DataFrame:
    """Every served chunk of every run, with its exactness against its arm's reference (None: unchecked).

    The reference (``reference``) is the session run alone through B0 (``solo_B0``), except
    for the experimental batched arm ``SRb``, whose reference is the same batch on the batched
    eager path (``batched_eager``): its rows' ``gate_sha_*``, or the ``gate`` entries of the
    verification phase (a run's key and its rows). ``SRbi`` (batched, batch-invariant) has a
    ``batch_size`` too but is gated on solo B0. ``exact_solo`` compares every row with the solo B0
    reference where there is one: for ``SRb`` it is reported, not gated.
    """
    rows = [r for es in entries.values() for e in es if e.get("kind") == "run" for r in e["rows"]]
    cols = ["arm", "workload", "sessions", "session", "chunk", "arrival_s", "start_s", "completion_s", "latency_ms",
            "service_ms", "queue_ms", "launch_ms", "host_ms", "lane", "audio_s", "swap_bytes", "swap_ms", "batch", "batch_size",
            "sha_i16", "sha_mel", "gate_sha_i16", "gate_sha_mel"]
    if any("process" in r for r in rows):  # SRl from several processes (--lane-processes): the one serving the row
        cols.insert(cols.index("lane") + 1, "process")
    df = pd.DataFrame(rows, columns=cols)
    keys = ["arm", "workload", "sessions", "session", "chunk"]
    gates = pd.DataFrame([dict(arm=e["arm"], workload=e["workload"], sessions=e["sessions"], **r)
                          for es in entries.values() for e in es if e.get("kind") == "gate" for r in e.get("rows", [])],
                         columns=[*keys, "gate_sha_i16", "gate_sha_mel"]).drop_duplicates(keys)
    if len(gates):
        got = df[keys].merge(gates, on=keys, how="left")
        for c in ("gate_sha_i16", "gate_sha_mel"):
            df[c] = df[c].where(df[c].notna(), got[c].to_numpy())
    refs = pd.DataFrame([e for es in entries.values() for e in es if e.get("kind") == "reference"],
                        columns=["kind", "session", "chunk", "ref_sha_i16", "ref_sha_mel"]).drop(columns="kind")
    refs = refs.drop_duplicates(["session", "chunk"])
    df = df.merge(refs, on=["session", "chunk"], how="left")
    solo = df["ref_sha_i16"].notna()
    df["exact_solo_mel"] = (df["sha_mel"] == df["ref_sha_mel"]).where(solo)
    df["exact_solo"] = ((df["sha_i16"] == df["ref_sha_i16"]) & (df["sha_mel"] == df["ref_sha_mel"])).where(solo)
    single = (df["batch_size"].fillna(1) == 1).astype(int)
    keys = ["arm", "workload", "sessions", "session"]
    df["never_batched"] = (df.assign(_s=single).sort_values(keys + ["chunk"]).groupby(keys, sort=False)["_s"]
                           .cummin().reindex(df.index).astype(bool))  # this chunk and every earlier one alone
    batched = df["arm"] == GATED_ARM  # gated on the batched eager path, never on the solo reference
    gated = df["gate_sha_i16"].notna()
    df["reference"] = np.where(batched, np.where(gated, "batched_eager", ""), np.where(solo, "solo_B0", ""))
    want_i16 = df["gate_sha_i16"].where(batched, df["ref_sha_i16"])
    want_mel = df["gate_sha_mel"].where(batched, df["ref_sha_mel"])
    checked = want_i16.notna()
    df["checked"] = checked
    df["exact_i16"] = (df["sha_i16"] == want_i16).where(checked)
    df["exact_mel"] = (df["sha_mel"] == want_mel).where(checked)
    df["exact"] = (df["exact_i16"].astype("boolean") & df["exact_mel"].astype("boolean"))
    return df


def session_frame(chunks: pd.DataFrame, cadence_s: float = 1.0) -> pd.DataFrame:
    """One row per (arm, workload, N, session): chunks, p50 / p95 / max latency, cadence held, exactness."""
    cols = ["arm", "workload", "sessions", "session", "chunks", "p50_chunk_ms", "p95_chunk_ms", "max_chunk_ms",
            "holds_cadence", "audio_s", "checked_chunks", "exact_chunks"]
    if chunks.empty:
        return pd.DataFrame(columns=cols)
    g = chunks.groupby(["arm", "workload", "sessions", "session"], sort=False)
    df = g.agg(chunks=("chunk", "size"), p50_chunk_ms=("latency_ms", "median"),
               p95_chunk_ms=("latency_ms", lambda v: float(np.percentile(v, 95))),
               max_chunk_ms=("latency_ms", "max"), audio_s=("audio_s", "sum"),
               checked_chunks=("checked", "sum"),
               exact_chunks=("exact", lambda v: int(v.fillna(False).sum()))).reset_index()
    df["holds_cadence"] = df["p95_chunk_ms"] <= cadence_s * 1e3
    return df[cols]


def capacity_frame(cfg, entries: dict, sessions: pd.DataFrame, chunks: pd.DataFrame) -> pd.DataFrame:
    """One row per (arm, workload, N): sessions holding the cadence, worst p95, goodput, peak, OOM / skipped."""
    rows = []
    for arm, es in entries.items():
        for e in es:
            if e.get("kind") != "run":
                continue
            w, n = e["workload"], e["sessions"]
            s = sessions[(sessions["arm"] == arm) & (sessions["workload"] == w) & (sessions["sessions"] == n)]
            c = chunks[(chunks["arm"] == arm) & (chunks["workload"] == w) & (chunks["sessions"] == n)]
            ran = bool(len(c)) and not e.get("oom") and not e.get("skipped")
            span = max(float(c["completion_s"].max()), float(horizon(cfg, w))) if len(c) else float("nan")
            swaps = c[c["swap_bytes"] > 0]
            late = int((c["latency_ms"] > cfg.cadence_s * 1e3).sum()) if ran else 0
            session_min = n * horizon(cfg, w) / 60.0
            rows.append(dict(
                arm=arm, workload=w, sessions=n, oom=bool(e.get("oom")), skipped=e.get("skipped") or "",
                error=e.get("error", ""), chunks=int(len(c)),
                sessions_holding=int(s["holds_cadence"].sum()) if ran else 0,
                all_hold=bool(ran and len(s) and s["holds_cadence"].all()),
                p95_chunk_ms=float(s["p95_chunk_ms"].max()) if ran else float("nan"),
                median_chunk_ms=float(c["latency_ms"].median()) if ran else float("nan"),
                service_ms_median=float(c["service_ms"].median()) if ran else float("nan"),
                goodput=float(c["audio_s"].sum() / span) if ran else float("nan"),
                audio_s=float(c["audio_s"].sum()),
                peak_bytes=e.get("peak_bytes"),
                peak_MiB=e["peak_bytes"] / 2**20 if e.get("peak_bytes") else float("nan"),
                state_bytes_per_session=e.get("state_bytes_per_session"),
                swaps=int(len(swaps)), swap_ms_median=float(swaps["swap_ms"].median()) if len(swaps) else 0.0,
                swap_bytes_median=float(swaps["swap_bytes"].median()) if len(swaps) else 0.0,
                checked_chunks=int(c["checked"].sum()), exact_chunks=int(c["exact"].fillna(False).sum()),
                captures=e.get("captures"), invalidations=e.get("invalidations"), wall_s=e.get("wall_s"),
                batches=e.get("batches"),
                on_time_share=float(1 - late / len(c)) if ran else float("nan"),
                underruns_per_session_min=float(late / session_min) if ran else float("nan"),
                lanes_used=e.get("lanes_used"),
                host_share=(float(c["host_ms"].sum() / (span * 1e3)) if ran and c["host_ms"].notna().any() else None),
                launch_share=(float(c["launch_ms"].sum() / (span * 1e3)) if ran and c["launch_ms"].notna().any()
                              else None),
                launch_ms_median=(float(c["launch_ms"].median()) if ran and c["launch_ms"].notna().any() else None),
                eager_sections=e.get("eager_sections"),
                mean_batch_size=float(c["batch_size"].mean()) if ran and c["batch_size"].notna().any() else None,
            ))
    return pd.DataFrame(rows)


def peak_slope(cap: pd.DataFrame) -> float | None:
    """Least-squares slope of peak bytes vs N over runs with a measured peak (None under two points)."""
    d = cap[cap["peak_bytes"].notna() & ~cap["oom"]]
    if d["sessions"].nunique() < 2:
        return None
    return float(np.polyfit(d["sessions"].astype(float), d["peak_bytes"].astype(float), 1)[0])


def capacity_bounds(cap: pd.DataFrame, max_at: dict, workloads) -> dict:
    """Per arm and workload: "exact" when a run above the maximum was measured and broke (some
    session missed the cadence, or out of memory), "lower_bound" when the sweep ended without a
    break (grid exhausted, or the next N skipped for the time budget)."""
    out: dict = {}
    for a, per in max_at.items():
        out[a] = {}
        for w in workloads:
            d = cap[(cap["arm"] == a) & (cap["workload"] == w) & (cap["sessions"] > per.get(w, 0))]
            broke = d[(d["oom"]) | ((d["skipped"].fillna("") == "") & ~d["all_hold"].fillna(False).astype(bool))]
            out[a][w] = "exact" if len(broke) else "lower_bound"
    return out


def capacity_brackets(cap: pd.DataFrame, max_at: dict, workloads) -> dict:
    """Per arm and workload: [holds, breaks], the largest N that held the cadence and the smallest N above it
    that broke (cadence or memory); breaks is None where nothing above broke (a lower bound)."""
    out: dict = {}
    for a, per in max_at.items():
        out[a] = {}
        for w in workloads:
            lo = per.get(w, 0)
            d = cap[(cap["arm"] == a) & (cap["workload"] == w) & (cap["sessions"] > lo)]
            broke = d[(d["oom"]) | ((d["skipped"].fillna("") == "") & ~d["all_hold"].fillna(False).astype(bool))]
            out[a][w] = [lo, int(broke["sessions"].min()) if len(broke) else None]
    return out


def summarise(cfg, cap: pd.DataFrame, chunks: pd.DataFrame, infos: dict) -> dict:
    granule = 2 * 2**20
    arms = list(dict.fromkeys(cap["arm"])) if len(cap) else []
    s: dict = {}
    max_at = {a: {} for a in arms}
    for a in arms:
        for w in cfg.workloads:
            d = cap[(cap["arm"] == a) & (cap["workload"] == w) & cap["all_hold"]]
            max_at[a][w] = int(d["sessions"].max()) if len(d) else 0
        s[f"max_sessions_at_cadence_{a}"] = max_at[a]
    s["capacity_bound"] = capacity_bounds(cap, max_at, cfg.workloads)
    s["capacity_bracket"] = capacity_brackets(cap, max_at, cfg.workloads)
    if "B0" in max_at and "SRc" in max_at:
        ratio = {w: (max_at["SRc"][w] / max_at["B0"][w] if max_at["B0"].get(w) else None) for w in cfg.workloads}
        s["sessions_ratio_SRc_over_B0"] = ratio
        vals = [r for r in ratio.values() if r is not None]
        s["target_ratio_3x_met"] = bool(vals and len(vals) == len(ratio) and min(vals) >= 3.0)
    slopes = {a: {w: peak_slope(cap[(cap["arm"] == a) & (cap["workload"] == w)]) for w in cfg.workloads} for a in arms}
    s["peak_bytes_per_added_session"] = {a: max([v for v in slopes[a].values() if v is not None], default=None)
                                        for a in arms}
    s["peak_bytes_per_added_session_by_workload"] = slopes
    s["state_bytes_per_session"] = {a: (int(cap[cap["arm"] == a]["state_bytes_per_session"].dropna().max())
                                        if cap[cap["arm"] == a]["state_bytes_per_session"].notna().any() else None)
                                    for a in arms}
    s["declared_state_bytes_per_session"] = {a: infos.get(a, {}).get("declared_state_bytes") for a in arms}
    within = {}
    for a in arms:
        slope, declared = s["peak_bytes_per_added_session"][a], s["declared_state_bytes_per_session"][a]
        if slope is not None and declared:
            within[a] = bool(slope <= declared + granule)
    s["added_session_within_declared_state"] = within
    checked = chunks[chunks["checked"]] if len(chunks) else chunks
    s["chunks"] = int(len(chunks))
    s["chunks_checked"] = int(len(checked))
    s["chunks_exact"] = int(checked["exact"].fillna(False).sum()) if len(checked) else 0
    s["all_checked_chunks_exact"] = bool(len(checked) and s["chunks_exact"] == len(checked))
    s["non_exact_by_arm"] = ({a: int((~g["exact"].fillna(True)).sum()) for a, g in checked.groupby("arm")}
                             if len(checked) else {})
    # what the gate covered: SRb's runs are gated as far as the verification's time went (capacity points first)
    s["checked_chunks_by_arm"] = ({a: dict(checked=int(g["checked"].sum()), chunks=int(len(g)))
                                   for a, g in chunks.groupby("arm")} if len(chunks) else {})
    srcs = chunks[(chunks["arm"] == "SRc") & (chunks["swap_bytes"] > 0)] if len(chunks) else chunks
    s["swap_ms_median_SRc"] = float(srcs["swap_ms"].median()) if len(srcs) else None
    s["swap_bytes_median_SRc"] = float(srcs["swap_bytes"].median()) if len(srcs) else None
    s["exactness_reference"] = ({a: sorted(set(g["reference"]) - {""}) for a, g in chunks.groupby("arm")}
                                if len(chunks) else {})
    solo = chunks[chunks["exact_solo"].notna()] if len(chunks) else chunks
    # compared where a solo reference exists: every session of the arms gated on them, SRb's only where it
    # used one of those sessions (chunks: the arm's chunks in all)
    totals = chunks.groupby("arm").size() if len(chunks) else {}
    s["identical_to_solo_B0"] = ({a: dict(mel_and_pcm=int(g["exact_solo"].astype(bool).sum()),
                                         mel=int(g["exact_solo_mel"].astype(bool).sum()), compared=int(len(g)),
                                         chunks=int(totals[a]),
                                         mel_iff_never_batched=bool((g["exact_solo_mel"].astype(bool)
                                                                     == g["never_batched"]).all()))
                                  for a, g in solo.groupby("arm")} if len(solo) else {})
    experimental = [a for a in ("SRb", "SRbi") if a in max_at]
    if experimental:
        s["experimental_arms"] = experimental
    for a in experimental:
        if "SRc" in max_at:
            s[f"sessions_ratio_{a}_over_SRc"] = {w: (max_at[a][w] / max_at["SRc"][w] if max_at["SRc"].get(w)
                                                     else None) for w in cfg.workloads}
    if "SRl" in max_at:
        for other in ("SRc", "SRb", "SRbi"):
            if other in max_at:
                s[f"sessions_ratio_SRl_over_{other}"] = {w: (max_at["SRl"][w] / max_at[other][w]
                                                             if max_at[other].get(w) else None) for w in cfg.workloads}
        r = s.get("sessions_ratio_SRl_over_SRc")
        if r is not None:
            vals = [v for v in r.values() if v is not None]
            s["target_lanes_2_5x_met"] = bool(vals and len(vals) == len(r) and min(vals) >= LANES_TARGET)
        info = infos.get("SRl", {})
        s["lanes"] = info.get("lanes")
        s["lane_bytes"] = info.get("lane_bytes")
        s["eager_sections_after_warmup_SRl"] = info.get("eager_sections_after_warmup")
    s["recaptures_after_warmup"] = {a: (i["captures_end"] - i["captures_after_warmup"]) for a, i in infos.items()}
    s["invalidations"] = {a: i["invalidations_end"] for a, i in infos.items()}
    return s


def analyse(cfg, entries: dict, infos: dict, failures: dict) -> dict:
    chunks = chunk_frame(entries)
    sessions = session_frame(chunks, cfg.cadence_s)
    cap = capacity_frame(cfg, entries, sessions, chunks)
    return dict(summary=summarise(cfg, cap, chunks, infos), capacity=cap.to_dict("records"),
                arms=infos, failures=failures, _sessions=sessions, _chunks=chunks)


