"""The Token2wav factorial's recordings (data/h200/token2wav_factorial*.json) and any study's provenance."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .files import (
    DATASETS,
    PAPER_DATASETS,
    PAPER_SOURCE,
    PARETO_COLUMNS,
    data_path,
    dataset_of,
    load_json,
    need_key,
    recording_how,
)

# ---------------------------------------------------------------------------------------
# the Token2wav factorial (data/h200/token2wav_factorial*.json)
# ---------------------------------------------------------------------------------------


def factorial_result(condition: str = "exact") -> dict:
    """The whole recorded factorial result (summary, arms, blocks, chunks, profiles, provenance)."""
    rel, how = dataset_of("factorial", condition)
    return load_json(rel, how)


def factorial(condition: str = "exact") -> pd.DataFrame:
    """One row per arm: steady_latency_ms_median / _p95, peak_MiB_median, latency_delta(_lo/_hi),
    peak_delta(_lo/_hi), exact, exact_blocks, blocks, and where profiled busy_ms_median,
    wall_over_busy, slack_frac_median, launches per chunk; replay summaries as dicts. Arms that
    failed keep a row with their ``failed`` message and NaN numbers. Adds ``condition``.
    """
    rel, _ = dataset_of("factorial", condition)
    arms = need_key(factorial_result(condition), "arms", rel)
    df = pd.DataFrame([dict(v, arm=v.get("arm", k)) for k, v in arms.items()])
    first = ["arm", "steady_latency_ms_median", "peak_MiB_median", "exact", "exact_blocks", "blocks"]
    df = df[[c for c in first if c in df.columns] + [c for c in df.columns if c not in first]]
    df["condition"] = condition
    return df


def factorial_blocks(condition: str = "exact") -> pd.DataFrame:
    """One row per (arm, block): warmup, peak_bytes, latency medians, hashes, exact_* flags."""
    rel, _ = dataset_of("factorial", condition)
    df = pd.DataFrame(need_key(factorial_result(condition), "blocks", rel))
    if "peak_bytes" in df.columns:
        df["peak_MiB"] = df["peak_bytes"] / 2**20
    df["condition"] = condition
    return df


def factorial_chunks(condition: str = "exact") -> pd.DataFrame:
    """One row per streamed chunk: arm, block, turn, chunk, kind (first/steady/flush), latency_ms, ..."""
    rel, _ = dataset_of("factorial", condition)
    df = pd.DataFrame(need_key(factorial_result(condition), "chunks", rel))
    df["condition"] = condition
    return df


def factorial_summary(condition: str = "exact") -> dict:
    """The headline ratios: speedup_SRc_vs_B0, peak_reduction_SRc_vs_B0, exact blocks, ..."""
    rel, _ = dataset_of("factorial", condition)
    return dict(need_key(factorial_result(condition), "summary", rel))


def pareto_frame(condition: str = "exact", arms: list[str] | None = None) -> pd.DataFrame:
    """The factorial's arms in the columns :func:`cadencelab.viz.pareto` expects.

    lat_ms = latency_ms (the mean over fresh processes; older files: steady_latency_ms_median),
    peak_MiB = peak_MiB_median, exact = bit-exact in every block. The error bars (lat_lo/lat_hi,
    peak_lo/peak_hi) are the 95% intervals (hierarchical over processes and blocks; older files: paired
    over the blocks of one process per arm) of each arm's ratio to B0 (``latency_delta_lo/hi``, ``peak_delta_lo/hi``), carried to the arm's
    own median: ``lat_lo = lat_ms * (1 + latency_delta_lo) / (1 + latency_delta)``. B0, the
    reference, therefore has zero-width bars. Failed arms are left out.
    """
    df = factorial(condition)
    if "failed" in df.columns:
        df = df[df["failed"].isna()]
    if arms is not None:
        missing = sorted(set(arms) - set(df["arm"]))
        if missing:
            raise ValueError(f"pareto_frame: arms {missing} not in the recorded factorial ({sorted(df['arm'])})")
        df = df.set_index("arm").loc[list(arms)].reset_index()
    lat = df["latency_ms"] if "latency_ms" in df else df["steady_latency_ms_median"]  # older files: chunk medians
    out = pd.DataFrame({"arm": df["arm"].astype(str), "lat_ms": lat.astype(float),
                        "peak_MiB": df["peak_MiB_median"].astype(float)})
    for value, delta, lo, hi in (("lat_ms", "latency_delta", "lat_lo", "lat_hi"),
                                 ("peak_MiB", "peak_delta", "peak_lo", "peak_hi")):
        d = df.get(delta, pd.Series(np.nan, index=df.index)).astype(float).fillna(0.0)
        for col, src in ((lo, f"{delta}_lo"), (hi, f"{delta}_hi")):
            b = df.get(src, pd.Series(np.nan, index=df.index)).astype(float)
            out[col] = (out[value] * (1 + b.fillna(d)) / (1 + d)).to_numpy()
        out[lo] = np.minimum(out[lo], out[value])  # a percentile interval can miss its point by rounding
        out[hi] = np.maximum(out[hi], out[value])
    out["exact"] = df["exact"].fillna(False).astype(bool).to_numpy()
    out["condition"] = condition
    return out[PARETO_COLUMNS + ["condition"]].reset_index(drop=True)
# ---------------------------------------------------------------------------------------
# provenance
# ---------------------------------------------------------------------------------------


def provenance(name: str = "factorial") -> dict:
    """Where a recorded file came from.

    ``name``: a dataset (a key of :data:`DATASETS`: "factorial", "factorial_pinned", "duplex_second",
    "device_conditions", "paper_duplex_second", ...) or a JSON path relative to the data folder.
    Recorded studies give their ``provenance`` block (git commit, GPU, torch, CUDA, date, study
    config); the paper data gives its citation.
    """
    if name in PAPER_DATASETS:
        file = data_path(DATASETS[name][0])
        return dict(source=PAPER_SOURCE, file=str(file), readme=str(data_path("paper/README.md")))
    rel, how = (DATASETS[name][0], recording_how(name)) if name in DATASETS else (name, None)
    obj = load_json(rel, how)
    return dict(need_key(obj, "provenance", rel))
