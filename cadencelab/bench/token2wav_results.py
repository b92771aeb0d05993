"""The Token2wav factorial's result from its blocks: per-arm latencies with intervals, exactness against each
arm's reference, profiles and the summary (``cfg``: the study's :class:`~cadencelab.bench.token2wav.StudyConfig`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ..replay.determinism import split_arm
from .common import write_csv, write_json
from .measure import a_a_check, arm_processes, direction, point, ratio_interval, relative_spread
from .token2wav_analysis import (
    UNSTABLE_SPREAD,
    b0_split,
    busy_floor,
    cross_process_exact,
    exact_by_hash,
    fairness,
    gated,
    host_summary,
    reference_of,
    staging_effect,
)

__all__ = ["analyse", "profile_fields", "write_results"]


def analyse(cfg, blocks: list[dict], profiles: dict, failures: dict, processes: list[dict]) -> dict:
    """The study's result from its blocks (each tagged with its ``process``, the round it ran in),
    the first round's profiles, the failures and the per-process records."""
    chunks = pd.DataFrame([dict(r, process=b["process"], warmup=b["warmup"]) for b in blocks for r in b["rows"]])
    by_key = {(b["arm"], b["process"], b["block"]): b for b in blocks}
    block_rows = []
    for b in blocks:
        ref_arm = reference_of(b["arm"], cfg.arms, cfg.condition)
        r = by_key.get((ref_arm, b["process"], b["block"]))  # a B0 is its own reference: trivially exact
        steady = [x["latency_ms"] for x in b["rows"] if x["kind"] == "steady"]
        steady_wall = [x["wall_ms"] for x in b["rows"] if x["kind"] == "steady"]
        block_rows.append(dict(
            arm=b["arm"], process=b["process"], block=b["block"], warmup=b["warmup"], peak_bytes=b["peak_bytes"],
            reference=ref_arm, staging=bool(b.get("staging", False)),
            steady_latency_ms_median=float(np.median(steady)) if steady else float("nan"),
            steady_latency_ms_p95=float(np.percentile(steady, 95)) if steady else float("nan"),
            steady_wall_ms_median=float(np.median(steady_wall)) if steady_wall else float("nan"),
            all_latency_ms_mean=float(np.mean([x["latency_ms"] for x in b["rows"]])),
            sha_mel=b["sha_mel"], sha_f32=b["sha_f32"], sha_i16=b["sha_i16"],
            exact_mel=bool(r and r["sha_mel"] == b["sha_mel"]), exact_f32=bool(r and r["sha_f32"] == b["sha_f32"]),
            exact_i16=bool(r and r["sha_i16"] == b["sha_i16"]),
            primings=b["primings"], summaries=b["summaries"], vendor_graph_fires=b["vendor_graph_fires"],
        ))
    bdf = pd.DataFrame(block_rows)
    if not bdf.empty:
        bdf["exact"] = bdf["exact_mel"] & bdf["exact_f32"] & bdf["exact_i16"]
    timed = bdf[~bdf["warmup"]] if not bdf.empty else bdf
    lat = arm_processes(timed, "steady_latency_ms_median")
    peak = arm_processes(timed, "peak_bytes") if not timed.empty and timed["peak_bytes"].notna().all() else {}
    arms = {}
    for a in cfg.arms:
        ref_arm = reference_of(a, cfg.arms, cfg.condition)
        meta = dict(arm=a, condition=split_arm(a, cfg.condition)[1], reference=ref_arm,
                    gated=gated(a, cfg.arms, cfg.condition))
        if a in failures and a not in lat:
            arms[a] = dict(meta, failed=failures[a])
            continue
        t = timed[timed["arm"] == a] if not timed.empty else timed
        steady = chunks[(chunks["arm"] == a) & (~chunks["warmup"]) & (chunks["kind"] == "steady")] if len(chunks) else chunks
        ms = steady["latency_ms"] if len(steady) else pd.Series(dtype=float)
        wall = steady["wall_ms"] if len(steady) else pd.Series(dtype=float)
        row = dict(meta, processes=len(lat.get(a, [])), blocks=len(t), exact_blocks=int(t["exact"].sum()) if len(t) else 0,
                   exact=bool(len(t) and t["exact"].all()),
                   steady_latency_ms_median=float(ms.median()) if len(ms) else float("nan"),
                   steady_latency_ms_p95=float(ms.quantile(0.95)) if len(ms) else float("nan"),
                   steady_wall_ms_median=float(wall.median()) if len(wall) else float("nan"),
                   latency_ms=point(lat.get(a, [])),
                   latency_ms_process_means=[float(np.mean(v)) for v in lat.get(a, [])],
                   peak_MiB_median=float(t["peak_bytes"].median() / 2**20) if len(t) and t["peak_bytes"].notna().all()
                   else float("nan"))
        pt, lo, hi = (0.0, 0.0, 0.0) if a == "B0" else ratio_interval(lat.get(a, []), lat.get("B0", []), seed=cfg.seed)
        row.update(latency_delta=pt, latency_delta_lo=lo, latency_delta_hi=hi,
                   latency_direction="reference" if a == "B0" else direction(lo, hi))
        if a in peak and "B0" in peak and a != "B0":
            pt, lo, hi = ratio_interval(peak[a], peak["B0"], seed=cfg.seed)
            row.update(peak_delta=pt, peak_delta_lo=lo, peak_delta_hi=hi)
        rates = [p["host"]["tiny_ops_per_s"] for p in processes if p["arm"] == a and p.get("host")]
        if rates:
            row["host_tiny_ops_per_s_median"] = float(np.median(rates))
        row.update(profile_fields(profiles.get(a)))
        if row.get("wall_ms_median") and row["steady_wall_ms_median"] == row["steady_wall_ms_median"]:
            row["profiler_wall_ratio"] = row["wall_ms_median"] / row["steady_wall_ms_median"]
        if len(t):
            last = t.iloc[-1]
            row["replay"] = last["summaries"]
            row["vendor_graph_fires"] = last["vendor_graph_fires"]
        arms[a] = row
    summary = _summary(cfg, arms, bdf, lat, processes)
    return dict(summary=summary, arms=arms, failures=failures, processes=processes,
                blocks=bdf.to_dict("records"), chunks=chunks.to_dict("records"), profiles=profiles)


def profile_fields(prof: dict | None) -> dict:
    """Steady-chunk medians of a profiled block: device-busy, wall, wall/busy, slack, launches."""
    if not prof or not prof.get("chunks"):
        return {}
    p = pd.DataFrame(prof["chunks"])
    kinds = prof.get("kinds", [])
    if len(kinds) == len(p):
        p["kind"] = kinds
        p = p[p["kind"] == "steady"]
    return dict(busy_ms_median=float(p["busy_us"].median() / 1e3), wall_ms_median=float(p["wall_us"].median() / 1e3),
                wall_over_busy=float((p["wall_us"] / p["busy_us"]).median()),
                # the idle split: device idle waiting on the host, and gaps between kernels the device
                # already has (inside a graph replay: its own dispatch, which no host work can remove)
                host_wait_ms_median=float(p["host_wait_us"].median() / 1e3),
                kernel_wait_ms_median=float(p["kernel_wait_us"].median() / 1e3),
                host_wall_over_busy=float(((p["busy_us"] + p["host_wait_us"]) / p["busy_us"]).median()),
                slack_frac_median=float(p["slack_frac"].median()),
                kernel_launches_per_chunk=float(p["kernel_launches"].median()),
                graph_launches_per_chunk=float(p["graph_launches"].median()))


def _summary(cfg, arms: dict, bdf: pd.DataFrame, lat: dict, processes: list[dict]) -> dict:
    def ratio(a, b, key):
        x, y = arms.get(a, {}).get(key), arms.get(b, {}).get(key)
        return (y / x) if (x and y and x == x and y == y) else None

    def reduction(a, b, key):
        x, y = arms.get(a, {}).get(key), arms.get(b, {}).get(key)
        return (1 - x / y) if (x and y and x == x and y == y) else None

    def speedup(a, b="B0"):
        """``b / a`` (how many times faster ``a`` is) and its interval, from the hierarchical ratio."""
        pt, lo, hi = ratio_interval(lat.get(b, []), lat.get(a, []), seed=cfg.seed)
        return (None, None) if pt != pt else (1 + pt, [1 + lo, 1 + hi])

    timed = bdf[~bdf["warmup"]] if not bdf.empty else bdf
    gate = {a for a, r in arms.items() if r.get("gated")}
    a_a = a_a_check(lat, seed=cfg.seed)
    live = [a for a, r in arms.items() if "failed" not in r]
    sp, sp_ci = speedup("SRc")
    sv, sv_ci = speedup("SRc", "vendor_graph_50")
    s = dict(
        speedup_SRc_vs_B0=sp, speedup_SRc_vs_B0_ci=sp_ci,
        a_a=a_a, unstable=bool(a_a is not None and not a_a["holds"]),
        processes_per_arm=min((arms[a].get("processes", 0) for a in live), default=0),
        processes_by_arm={a: arms[a].get("processes", 0) for a in live},
        # pyperf's warning: the process means of an arm spread by more than 10% of their mean
        spread_across_processes={a: relative_spread(lat[a]) for a in live if a in lat},
        unstable_arms=sorted(a for a in live if a in lat and relative_spread(lat[a]) > UNSTABLE_SPREAD),
        method=cfg.method().record(),
        host=host_summary(processes),
        peak_reduction_SRc_vs_B0=reduction("SRc", "B0", "peak_MiB_median"),
        wall_over_busy_SRc=arms.get("SRc", {}).get("wall_over_busy"),
        host_wall_over_busy_SRc=arms.get("SRc", {}).get("host_wall_over_busy"),
        speedup_SRc_vs_vendor_graph_50=sv, speedup_SRc_vs_vendor_graph_50_ci=sv_ci,
        peak_reduction_SRc_vs_vendor_graph_50=reduction("SRc", "vendor_graph_50", "peak_MiB_median"),
        exact_blocks=int(timed[timed["arm"] == "SRc"]["exact"].sum()) if not timed.empty else 0,
        total_blocks=int((timed["arm"] == "SRc").sum()) if not timed.empty else 0,
        exact_blocks_all_arms={a: int(g["exact"].sum()) for a, g in timed.groupby("arm") if a in gate}
        if not timed.empty else {},
        non_exact_arms=sorted(a for a, r in arms.items() if a in gate and r.get("blocks") and not r.get("exact")),
        failed_arms=sorted(a for a, r in arms.items() if "failed" in r),
        exact_blocks_by_hash=exact_by_hash(timed[timed["arm"].isin(gate)] if not timed.empty else timed),
        b0_cross_process_exact=cross_process_exact(timed),
        fairness=fairness(arms),
        busy_floor=busy_floor(arms),
        b0_split=b0_split(arms, processes),
        staging_effect=staging_effect(bdf, seed=cfg.seed),
        profiler_wall_ratio={a: r["profiler_wall_ratio"] for a, r in arms.items() if r.get("profiler_wall_ratio")},
    )
    return s


def write_results(result: dict, out: Path) -> None:
    write_json(result, out / "token2wav_factorial.json", strict_json=False)
    write_csv(result["chunks"], out / "token2wav_factorial_chunks.csv")
    write_csv(result["blocks"], out / "token2wav_factorial_blocks.csv")
