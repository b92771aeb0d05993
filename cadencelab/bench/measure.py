"""How every study measures: several fresh processes per arm, interleaved, pinned, with hierarchical intervals.

The method follows pyperf's: one process is one sample (the stock runtime is host-bound, so its
latency moves with the process: where the interpreter and the allocator landed, what the host was
doing), values are kept per process, and a figure is the mean over processes with a spread across
them. Concretely:

* **rounds**: round ``r`` starts a fresh process for every arm (their set-up may overlap: nothing is
  timed then), then runs the arms' blocks one arm at a time, the arm order rotating each block and
  each round (A B C, B C A, ...; never all of one arm first), then ends every process;
* **pinning**: before its first timed block every arm process pins all its threads to the same
  fixed set of CPU cores (:func:`measurement_cores`, :func:`pin_to_cores`), so arms never differ by
  the cores they ran on, and only one arm runs at a time;
* **intervals**: :func:`hierarchical_bootstrap` resamples processes, then blocks within each drawn
  process; a ratio's interval resamples both arms independently (:func:`ratio_interval`);
* **stopping**: rounds continue past ``min_processes`` until the headline ratio's 95% interval is
  within ``target_halfwidth`` of its point, ``max_processes`` is reached, or the next round would
  not fit in the time budget (:func:`stop_reason` says which);
* **A/A**: the same code as the reference in fresh processes of its own (``B0_repeat`` against
  ``B0``); its interval must contain 0, else the study is unstable and claims no direction
  (:func:`a_a_check`, :func:`direction`);
* **the host**: each process records a small host figure (:func:`host_figures`: tiny-op dispatch
  and launch rate, a Python loop rate, the CPU model) so a reader can see why a host-bound figure
  moves between hosts and processes.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from typing import Iterable, Sequence

import numpy as np
import pandas as pd

__all__ = ["Method", "measurement_cores", "parse_cores", "pin_to_cores", "host_figures", "round_orders",
           "hierarchical_bootstrap", "ratio_interval", "interval_halfwidth", "stop_reason", "a_a_check",
           "direction", "arm_processes", "process_table", "CONFIDENCE"]

#: the intervals' coverage
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Method:
    """A study's measurement method (recorded in its summary as ``method``)."""

    min_processes: int = 3          # fresh processes per arm, at least
    max_processes: int = 12         # and at most
    time_budget_s: float = 480.0    # no round is started that would end past this (from the study's start)
    target_halfwidth: float = 0.05  # stop once the headline's interval half-width / point is at most this
    cores: tuple = ()               # the measurement cores every arm process pins to (empty: no pinning)
    n_boot: int = 4000
    seed: int = 0

    def __post_init__(self):
        if not 1 <= self.min_processes <= self.max_processes:
            raise ValueError(f"min_processes {self.min_processes} / max_processes {self.max_processes}: "
                             "need 1 <= min <= max")
        if not (self.time_budget_s > 0 and 0 < self.target_halfwidth < 1):
            raise ValueError(f"time_budget_s {self.time_budget_s} must be > 0 and target_halfwidth "
                             f"{self.target_halfwidth} in (0, 1)")

    def record(self) -> dict:
        return dict(asdict(self), cores=list(self.cores), confidence=CONFIDENCE)


# ---------------------------------------------------------------------------------------
# cores and the host
# ---------------------------------------------------------------------------------------


def measurement_cores(n: int = 4, available: Iterable[int] | None = None) -> tuple:
    """A fixed set of ``n`` cores for timed work: the lowest ones this process may run on, skipping
    the first (where the kernel tends to put interrupts) when more than ``n`` are available."""
    cores = sorted(os.sched_getaffinity(0) if available is None else available)
    if len(cores) > n:
        cores = cores[1:]
    return tuple(cores[:n])


def parse_cores(text: str, available: Iterable[int] | None = None) -> tuple:
    """``--cores``: ``auto`` (:func:`measurement_cores`), ``none`` (no pinning) or a list such as
    ``1-4`` or ``2,3,5``; every core must be one this process may run on."""
    text = text.strip().lower()
    avail = set(os.sched_getaffinity(0) if available is None else available)
    if text == "auto":
        return measurement_cores(available=avail)
    if text in ("none", ""):
        return ()
    cores: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        try:
            a, b = int(lo), int(hi or lo)
        except ValueError:
            raise ValueError(f"{part.strip()[:20]!r} is not a core number or range (e.g. 1-4 or 2,3)") from None
        if a > b:
            raise ValueError(f"range {part.strip()!r} runs backwards")
        cores.extend(range(a, b + 1))
    missing = sorted(set(cores) - avail)
    if missing:
        raise ValueError(f"cores {missing[:8]} are not available to this process (available: {sorted(avail)[:32]})")
    return tuple(sorted(set(cores)))


def pin_to_cores(cores: Sequence[int]) -> tuple:
    """Pin every thread of this process (and the threads it starts later) to ``cores``; set torch's
    intra-op threads to their number when torch is loaded. Returns the cores (empty: left as it was)."""
    if not cores:
        return ()
    cores = tuple(cores)
    tids = [int(t) for t in os.listdir("/proc/self/task")] if os.path.isdir("/proc/self/task") else [0]
    for tid in tids:
        try:
            os.sched_setaffinity(tid, cores)
        except (ProcessLookupError, PermissionError):  # a thread that ended meanwhile
            pass
    os.sched_setaffinity(0, cores)
    import sys

    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(len(cores))
    return cores


def cpu_model() -> str | None:
    """The host CPU's model name (Linux ``/proc/cpuinfo``), None where it cannot be read."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def host_figures(device, ops: int = 3000, loop: int = 300_000) -> dict:
    """What a host-bound runtime's speed depends on, measured in this process on ``device``: the rate
    of tiny device ops (a one-element in-place add: framework dispatch plus a kernel launch, the
    cost every eager kernel pays on the host), a pure-Python loop rate, and the CPU model."""
    import torch

    dev = torch.device(device)
    x = torch.zeros(1, device=dev)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    for _ in range(200):
        x.add_(1.0)
    sync()
    t0 = time.perf_counter()
    for _ in range(ops):
        x.add_(1.0)
    sync()
    op_s = (time.perf_counter() - t0) / ops
    t0 = time.perf_counter()
    s = 0
    for i in range(loop):
        s += i
    py_s = (time.perf_counter() - t0) / loop
    return dict(tiny_ops_per_s=1.0 / op_s, tiny_op_us=op_s * 1e6, python_loop_ns=py_s * 1e9, cpu_model=cpu_model(),
                cpus_available=len(os.sched_getaffinity(0)))


# ---------------------------------------------------------------------------------------
# orders
# ---------------------------------------------------------------------------------------


def round_orders(arms: Sequence[str], round_index: int, blocks: int) -> list[list[str]]:
    """The arm order of each block of one round: rotated by one each block, and each round starting
    one further along, so no arm is always first or always last."""
    arms = list(arms)
    n = max(1, len(arms))
    out = []
    for b in range(blocks):
        k = (round_index + b) % n
        out.append(arms[k:] + arms[:k])
    return out


# ---------------------------------------------------------------------------------------
# intervals
# ---------------------------------------------------------------------------------------


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
    its own (processes of different arms are different samples): ``(point, lo, hi)``."""
    pa, pb = point(a), point(b)
    if not (np.isfinite(pa) and np.isfinite(pb) and pb != 0):
        return (float("nan"),) * 3
    rng = np.random.default_rng(seed)
    r = hierarchical_bootstrap(a, n, rng) / hierarchical_bootstrap(b, n, rng) - 1
    tail = 100 * (1 - CONFIDENCE) / 2
    return float(pa / pb - 1), float(np.percentile(r, tail)), float(np.percentile(r, 100 - tail))


def interval_halfwidth(pt: float, lo: float, hi: float) -> float:
    """The larger distance from a point to its interval's ends, relative to the point."""
    if not all(np.isfinite(v) for v in (pt, lo, hi)) or pt == 0:
        return float("inf")
    return float(max(pt - lo, hi - pt) / abs(pt))


def stop_reason(method: Method, processes_done: int, halfwidth: float, elapsed_s: float,
                round_s: float) -> str | None:
    """Why the rounds stop now, or None to run another: ``"converged"`` (the headline's interval
    within ``target_halfwidth``), ``"max processes"`` or ``"time budget"`` (another round of
    ``round_s`` would end past it). Never before ``min_processes``, and never ``"converged"`` on one
    process (its interval says nothing of the spread between processes)."""
    if processes_done < method.min_processes:
        return None
    if halfwidth <= method.target_halfwidth and processes_done >= 2:  # one process has no spread to bound
        return "converged"
    if processes_done >= method.max_processes:
        return "max processes"
    if elapsed_s + round_s > method.time_budget_s:
        return "time budget"
    return None


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
    contains 0 (``holds``). None when the study has no such pair."""
    if arm not in samples or reference not in samples:
        return None
    pt, lo, hi = ratio_interval(samples[arm], samples[reference], n, seed)
    if not np.isfinite(pt):
        return None
    return dict(arm=arm, reference=reference, ratio=pt, ci=[lo, hi], holds=bool(lo <= 0 <= hi))


# ---------------------------------------------------------------------------------------
# per-process tables
# ---------------------------------------------------------------------------------------


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
