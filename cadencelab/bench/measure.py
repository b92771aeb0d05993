"""How every study measures: several fresh processes per arm, interleaved, pinned, with hierarchical intervals.

The method follows pyperf's: one process is one sample (the stock runtime is host-bound, so its latency moves
with where the interpreter and the allocator landed and what the host was doing), values are kept per process,
and a figure is the mean over processes with a spread across them. Concretely:

* **rounds**: each round starts a fresh process for every arm (set-up may overlap: nothing is timed then), runs
  the arms' blocks one arm at a time in an order rotating each block and each round, then ends every process;
* **pinning**: before its first timed block every arm process pins its threads to the same cores
  (:func:`measurement_cores`, :func:`pin_to_cores`), so arms never differ by the cores they ran on;
* **intervals** (:mod:`cadencelab.profile.intervals`, so the course reads recorded files with the same functions):
  :func:`hierarchical_bootstrap` resamples processes, then blocks within them; a ratio's interval resamples both
  arms independently (:func:`ratio_interval`);
* **stopping**: rounds continue past ``min_processes`` until the headline ratio's 95% interval is within
  ``target_halfwidth`` of its point, ``max_processes`` is reached, or the next round would not fit the time
  budget (:func:`stop_reason`);
* **A/A**: the reference's code in fresh processes of its own (``B0_repeat`` against ``B0``); its interval must
  contain 0, else the study is unstable and claims no direction (:func:`a_a_check`, :func:`direction`);
* **the host**: each process records :func:`host_figures` (tiny-op and Python loop rates, the CPU model), so a
  reader can see why a host-bound figure moves between hosts and processes.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from typing import Iterable, Sequence

from ..profile.intervals import (CONFIDENCE, a_a_check, arm_processes, direction, hierarchical_bootstrap,
                                 interval_halfwidth, point, process_table, ratio_interval, relative_spread)

__all__ = ["Method", "core_siblings", "core_survey", "survey_table", "measurement_cores", "parse_cores", "pin_to_cores", "host_figures", "round_orders",
           "hierarchical_bootstrap", "ratio_interval", "interval_halfwidth", "stop_reason", "a_a_check",
           "direction", "arm_processes", "process_table", "point", "relative_spread", "CONFIDENCE"]

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


def core_siblings(cores: Iterable[int], root: str = "/sys/devices/system/cpu") -> dict:
    """Each core's SMT siblings (the logical cores sharing its physical core, itself included), read
    from ``root``'s topology files; a core whose file cannot be read is its own only sibling."""
    out = {}
    for c in cores:
        try:
            with open(f"{root}/cpu{c}/topology/thread_siblings_list") as f:
                out[c] = tuple(sorted(_cpu_list(f.read())))
        except (OSError, ValueError):
            out[c] = (c,)
    return out


def _cpu_list(text: str) -> list:
    cores = []
    for part in text.strip().split(","):
        lo, _, hi = part.strip().partition("-")
        cores.extend(range(int(lo), int(hi or lo) + 1))
    return cores


def measurement_cores(n: int = 4, available: Iterable[int] | None = None, siblings: dict | None = None) -> tuple:
    """A fixed set of ``n`` cores for timed work: the lowest ones this process may run on, one logical
    core per physical core (an SMT sibling shares its core's execution units, so two busy siblings slow
    each other), skipping the first physical core (where the kernel tends to put interrupts) when enough
    others are available. ``siblings``: :func:`core_siblings` (read from the host when None)."""
    cores = sorted(os.sched_getaffinity(0) if available is None else available)
    sib = core_siblings(cores) if siblings is None else siblings
    chosen, used = [], set()
    for c in cores:
        group = set(sib.get(c, (c,)))
        if group & used:
            continue
        chosen.append(c)
        used |= group
    if len(chosen) > n:
        chosen = chosen[1:]
    elif len(chosen) < n:  # too few physical cores: fill with the remaining logical ones, lowest first
        chosen += [c for c in cores if c not in chosen][:n - len(chosen)]
        chosen = sorted(chosen)
    return tuple(chosen[:n])


def parse_cores(text: str, available: Iterable[int] | None = None, siblings: dict | None = None) -> tuple:
    """``--cores``: ``auto`` (:func:`measurement_cores`), ``none`` (no pinning) or a list such as
    ``1-4`` or ``2,3,5``; every core must be one this process may run on. ``siblings``: as for
    :func:`measurement_cores` (read from the host when None)."""
    text = text.strip().lower()
    avail = set(os.sched_getaffinity(0) if available is None else available)
    if text == "auto":
        return measurement_cores(available=avail, siblings=siblings)
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


def core_survey(cores: Sequence[int], rounds: int = 5, device: str = "cpu", pause_s: float = 1.0,
                loop: int = 200_000, ops: int = 2000, progress=None) -> "pd.DataFrame":
    """How fast each core runs host-bound work, and how steadily: this process pins itself to one core
    at a time and measures :func:`host_figures` there (a pure-Python loop rate and the tiny-op rate on
    ``device``), ``rounds`` sweeps over ``cores`` spaced ``pause_s`` apart (a busy neighbour or a
    frequency change shows as a round that differs). The original affinity is restored. One row per
    (round, core), with the core's SMT siblings."""
    import pandas as pd

    before = os.sched_getaffinity(0)
    sib = core_siblings(cores)
    rows = []
    try:
        for r in range(rounds):
            for c in cores:
                os.sched_setaffinity(0, {c})
                h = host_figures(device, ops=ops, loop=loop)
                rows.append(dict(round=r, core=c, siblings=",".join(map(str, sib[c])),
                                 python_loop_ns=h["python_loop_ns"], tiny_op_us=h["tiny_op_us"]))
            if progress is not None:
                progress(f"survey round {r + 1} of {rounds} done")
            if r + 1 < rounds:
                time.sleep(pause_s)
    finally:
        os.sched_setaffinity(0, before)
    return pd.DataFrame(rows)


def survey_table(survey: "pd.DataFrame") -> "pd.DataFrame":
    """Per core: the median and the relative spread ((max - min) / median) across rounds of the Python
    loop time and the tiny-op time, slowest median first."""
    g = survey.groupby(["core", "siblings"])
    out = g.agg(python_loop_ns=("python_loop_ns", "median"), tiny_op_us=("tiny_op_us", "median")).reset_index()
    for col in ("python_loop_ns", "tiny_op_us"):
        spread = g[col].agg(lambda v: (v.max() - v.min()) / v.median()).reset_index(drop=True)
        out[f"{col}_spread"] = spread.to_numpy()
    return out.sort_values("python_loop_ns", ascending=False).reset_index(drop=True)


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
# stopping
# ---------------------------------------------------------------------------------------


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
