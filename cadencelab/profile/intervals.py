"""Intervals for measurements kept per process: the figure (mean over processes of each process's
mean over its blocks), its hierarchical bootstrap (processes, then blocks within them), ratios
between arms, the A/A check and the direction an interval supports.

The studies measure through :mod:`cadencelab.bench.measure`, which uses these; the course reads
recorded files and uses the same functions, so a figure and its interval are computed one way.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

__all__ = ["CONFIDENCE", "point", "hierarchical_bootstrap", "ratio_interval", "interval_halfwidth", "direction",
           "a_a_check", "arm_processes", "process_table", "relative_spread"]

#: the intervals' coverage
CONFIDENCE = 0.95


def _ragged(samples: Sequence[Sequence[float]]) -> tuple[np.ndarray, np.ndarray]:
    groups = [np.asarray(s, float) for s in samples]
    groups = [g[np.isfinite(g)] for g in groups]
    groups = [g for g in groups if len(g)]
    if not groups:
        return np.zeros((0, 0)), np.zeros(0, int)
    lens = np.array([len(g) for g in groups])
    x = np.full((len(groups), lens.max()), np.nan)
    for i, g in enumerate(groups):
        x[i, : len(g)] = g
    return x, lens


def point(samples: Sequence[Sequence[float]]) -> float:
    """The figure: the mean over processes of each process's mean over its blocks."""
    x, lens = _ragged(samples)
    if not len(lens):
        return float("nan")
    return float(np.mean(np.nanmean(x, axis=1)))


def hierarchical_bootstrap(samples: Sequence[Sequence[float]], n: int = 4000,
                           rng: np.random.Generator | None = None) -> np.ndarray:
    """Bootstrap replicates of :func:`point` for one arm: draw processes with replacement, then
    blocks with replacement within each drawn process. ``samples`` holds one sequence of block
    values per process (lengths may differ). One process: only its blocks are resampled."""
    rng = np.random.default_rng(0) if rng is None else rng
    x, lens = _ragged(samples)
    p = len(lens)
    if p == 0:
        return np.full(n, np.nan)
    bmax = x.shape[1]
    pick = rng.integers(0, p, (n, p)) if p > 1 else np.zeros((n, 1), int)
    k = lens[pick]  # blocks in each drawn process
    draw = np.floor(rng.random((n, p, bmax)) * k[..., None]).astype(int)
    vals = x[pick[..., None], draw]
    valid = np.arange(bmax)[None, None, :] < k[..., None]
    means = np.where(valid, vals, 0.0).sum(-1) / k
    return means.mean(-1)


def ratio_interval(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]], n: int = 4000,
                   seed: int = 0) -> tuple[float, float, float]:
    """``point(a) / point(b) - 1`` and its 95% hierarchical-bootstrap interval, each arm resampled on
    its own (processes of different arms are different samples): ``(point, lo, hi)``. A side with one value
    in all (one process of one block) has nothing to resample: the point stands, the interval is NaN (no
    direction)."""
    pa, pb = point(a), point(b)
    if not (np.isfinite(pa) and np.isfinite(pb) and pb != 0):
        return (float("nan"),) * 3
    if min(sum(len(x) for x in a), sum(len(x) for x in b)) < 2:
        return float(pa / pb - 1), float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    r = hierarchical_bootstrap(a, n, rng) / hierarchical_bootstrap(b, n, rng) - 1
    tail = 100 * (1 - CONFIDENCE) / 2
    return float(pa / pb - 1), float(np.percentile(r, tail)), float(np.percentile(r, 100 - tail))


def interval_halfwidth(pt: float, lo: float, hi: float) -> float:
    """The larger distance from a point to its interval's ends, relative to the point."""
    if not all(np.isfinite(v) for v in (pt, lo, hi)) or pt == 0:
        return float("inf")
    return float(max(pt - lo, hi - pt) / abs(pt))


def direction(lo: float, hi: float, lower: str = "faster", higher: str = "slower",
              none: str = "no clear difference") -> str:
    """What an interval of a change supports: ``higher`` if it lies above 0, ``lower`` below, else ``none``."""
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return none
    if lo > 0:
        return higher
    if hi < 0:
        return lower
    return none


def a_a_check(samples: dict, arm: str = "B0_repeat", reference: str = "B0", n: int = 4000, seed: int = 0) -> dict | None:
    """The A/A gate: ``arm`` runs the reference's code in fresh processes of its own; its latency
    change against the reference (``ratio``: ``arm / reference - 1``) must have a 95% interval that
    contains 0 (``holds``). None when the study has no such pair, or no interval for it (a side with one
    value): an untested check neither holds nor fails."""
    if arm not in samples or reference not in samples:
        return None
    pt, lo, hi = ratio_interval(samples[arm], samples[reference], n, seed)
    if not (np.isfinite(pt) and np.isfinite(lo) and np.isfinite(hi)):
        return None
    return dict(arm=arm, reference=reference, ratio=pt, ci=[lo, hi], holds=bool(lo <= 0 <= hi))


def arm_processes(blocks: pd.DataFrame, value: str, arm_col: str = "arm", process_col: str = "process") -> dict:
    """``{arm: [block values of process 0, of process 1, ...]}`` from a blocks table (timed blocks only)."""
    out: dict[str, list] = {}
    if blocks.empty or value not in blocks:
        return out
    for (arm, _), g in blocks.groupby([arm_col, process_col], sort=True):
        out.setdefault(arm, []).append(g[value].to_numpy(float))
    return out


def process_table(blocks: pd.DataFrame, value: str, arm_col: str = "arm", process_col: str = "process") -> pd.DataFrame:
    """One row per arm and process: its blocks, mean and spread of ``value`` (what pyperf keeps per worker)."""
    if blocks.empty:
        return pd.DataFrame(columns=[arm_col, process_col, "blocks", "mean", "std", "min", "max"])
    g = blocks.groupby([arm_col, process_col])[value]
    return pd.DataFrame(dict(blocks=g.size(), mean=g.mean(), std=g.std(ddof=1), min=g.min(), max=g.max())).reset_index()


def relative_spread(samples: Sequence[Sequence[float]]) -> float:
    """The standard deviation of the process means over their mean (pyperf warns above 0.1: the
    system was unstable while it measured). NaN with fewer than two processes."""
    means = [float(np.mean(s)) for s in samples if len(s)]
    if len(means) < 2 or np.mean(means) == 0:
        return float("nan")
    return float(np.std(means, ddof=1) / np.mean(means))
