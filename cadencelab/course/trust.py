"""Figures you can trust, read from the recorded factorial files: each figure with its interval over
fresh processes, the A/A check that gates every direction, and why a host-bound figure moves.

    figure_text(pt, lo, hi, unit)    "4.02x [3.44, 4.70]", "+1.0% [-19.3, +25.9]": how every figure is printed
    claim(lo, hi)                    the direction a change's interval supports ("faster", "slower", "no clear
                                     difference"), never more
    arms_frame(name)                 one row per arm: latency (mean over processes), its change against B0
                                     with the interval, the claim, processes, spread across processes
    a_a(name)                        the A/A check as recorded (arm, ratio, ci, holds)
    headline(name)                   SRc vs B0: the speedup, its interval, processes, why the rounds stopped
    process_frame(name)              one row per arm and process: its blocks' mean, spread, the host's tiny-op rate
    b0_split(name)                   B0's steady chunk split into device busy, dispatch + launch and other host time
    predicted_b0_ms(rate, name)      B0's latency on a host with another tiny-op rate, from that split
    staging_check(name)              what the next round's staging did to B0, and the headline from the blocks
                                     that no staging overlapped
    duplex_processes(names)          the duplex second over fresh processes: its interval, seconds under a goal

``name`` is a recorded dataset: ``"headline"`` (B0, SRc and B0_repeat only, the most processes) or
``"factorial"`` (every arm, at least three processes each). The intervals were computed when the
study ran (:mod:`cadencelab.profile.intervals`); :func:`process_frame` recomputes nothing but means.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..profile.intervals import (CONFIDENCE, arm_processes, direction, hierarchical_bootstrap, point, process_table,
                                 ratio_interval, relative_spread)
from . import data

__all__ = ["figure_text", "claim", "arms_frame", "a_a", "headline", "two_headlines", "process_frame", "b0_split",
           "predicted_b0_ms",
           "is_trusted", "latency_interval", "ceiling_interval", "staging_check", "kit_versus", "duplex_processes",
           "FUSED_PROCESSES", "WARMUP2_PROCESSES", "SECOND_GOAL_MS", "warmup_check"]


def _finite(*v) -> bool:
    return all(x is not None and isinstance(x, (int, float, np.floating, np.integer)) and math.isfinite(x) for x in v)


def figure_text(pt: float, lo: float | None = None, hi: float | None = None, unit: str = "x") -> str:
    """A figure and its 95% interval as the README and notebooks print it: ``unit`` "x" (a ratio),
    "%" (a change given as a fraction: 0.01 is +1.0%) or "ms". A figure without an interval says so."""
    if not _finite(pt):
        return "not recorded"
    fmt = {"x": lambda v: f"{v:.2f}", "%": lambda v: f"{100 * v:+.1f}", "ms": lambda v: f"{v:.1f}"}.get(unit)
    if fmt is None:
        raise ValueError(f"figure_text: unit must be 'x', '%' or 'ms', got {unit!r}")
    tail = {"x": "x", "%": "%", "ms": " ms"}[unit]
    if not _finite(lo, hi):
        return f"{fmt(pt)}{tail} (no interval)"
    return f"{fmt(pt)}{tail} [{fmt(lo)}, {fmt(hi)}]"


def claim(lo: float, hi: float, lower: str = "faster", higher: str = "slower") -> str:
    """The direction a change's 95% interval supports: ``higher`` only if it lies above 0, ``lower`` only
    if below, else "no clear difference" (the same rule the study applies)."""
    return direction(lo, hi, lower, higher)


def is_trusted(name: str = "factorial") -> bool:
    """Whether a recorded factorial was measured with the process method (it has ``processes_per_arm``);
    the older recordings paired blocks of one process per arm and say less."""
    return "processes_per_arm" in data.result(name).get("summary", {})


def arms_frame(name: str = "factorial") -> pd.DataFrame:
    """One row per arm of a recorded factorial: ``latency_ms`` (the mean over its processes of each
    process's mean block median), ``latency_delta`` against B0 with ``latency_delta_lo/hi``, ``claim``,
    ``processes``, ``spread`` (std / mean of the process means), peak memory and exact blocks."""
    r = data.result(name)
    blocks = pd.DataFrame(r.get("blocks", []))
    per = (arm_processes(blocks[~blocks["warmup"]], "steady_latency_ms_median")
           if "process" in blocks and len(blocks) else {})
    spread = {a: relative_spread(v) for a, v in per.items()}
    rows = []
    for arm, a in r["arms"].items():
        if "failed" in a:
            rows.append(dict(arm=arm, failed=a["failed"]))
            continue
        lo, hi = a.get("latency_delta_lo"), a.get("latency_delta_hi")
        rows.append(dict(arm=arm, latency_ms=a.get("latency_ms", a.get("steady_latency_ms_median")),
                         latency_delta=a.get("latency_delta"), latency_delta_lo=lo, latency_delta_hi=hi,
                         claim="reference" if arm == "B0" else claim(lo, hi), processes=a.get("processes", 1),
                         spread=spread.get(arm, float("nan")), peak_MiB=a.get("peak_MiB_median"),
                         exact_blocks=a.get("exact_blocks"), blocks=a.get("blocks"), reference=a.get("reference")))
    return pd.DataFrame(rows)


def a_a(name: str = "headline") -> dict | None:
    """The recorded A/A check: ``{"arm", "reference", "ratio", "ci", "holds"}`` (None: the study had no
    B0_repeat). When it does not hold, the study claims no direction."""
    return data.result(name)["summary"].get("a_a")


def headline(name: str = "headline") -> dict:
    """SRc vs B0 from a recorded file: ``speedup``, ``ci``, ``processes`` (per arm, at least),
    ``stopped`` (why the rounds ended), ``halfwidth`` (of the interval, relative to the point),
    ``target`` (the method's target half-width) and ``a_a``."""
    s = data.result(name)["summary"]
    sp, ci = s.get("speedup_SRc_vs_B0"), s.get("speedup_SRc_vs_B0_ci")
    hw = max(sp - ci[0], ci[1] - sp) / sp if _finite(sp) and ci else float("nan")
    return dict(speedup=sp, ci=ci, processes=s.get("processes_per_arm"), stopped=s.get("stopped"), halfwidth=hw,
                target=(s.get("method") or {}).get("target_halfwidth"), a_a=s.get("a_a"),
                unstable=s.get("unstable", False), unstable_arms=s.get("unstable_arms", []))


def process_frame(name: str = "headline", value: str = "steady_latency_ms_median") -> pd.DataFrame:
    """One row per arm and process of a recorded factorial (timed blocks only): ``blocks``, ``mean``,
    ``std``, ``min``, ``max`` of ``value``, and the host's ``tiny_ops_per_s`` measured in that process
    before its first block."""
    r = data.result(name)
    blocks = pd.DataFrame(r["blocks"])
    if "process" not in blocks:
        raise ValueError(f"{data.DATASETS[name][0]}: an older recording with one process per arm (no 'process' "
                         "column); re-record it with the bench's process method")
    t = process_table(blocks[~blocks["warmup"]], value)
    rate = {(p["arm"], p["process"]): (p.get("host") or {}).get("tiny_ops_per_s") for p in r.get("processes", [])}
    t["tiny_ops_per_s"] = [rate.get((a, p), float("nan")) for a, p in zip(t["arm"], t["process"])]
    return t


def b0_split(name: str = "factorial") -> dict | None:
    """B0's steady chunk split (recorded by the factorial's profiled round): ``device_busy_ms``,
    ``dispatch_launch_ms`` (its kernel launches at the host's tiny-op rate), ``other_host_ms`` (Python
    and framework work between launches), ``kernel_launches``, ``tiny_ops_per_s``, ``latency_ms``."""
    return data.result(name)["summary"].get("b0_split")


def predicted_b0_ms(tiny_ops_per_s: float, name: str = "factorial") -> float:
    """B0's steady-chunk latency on a host whose tiny-op rate is ``tiny_ops_per_s``: its launches at that
    rate plus the recorded other host time, never below the device-busy floor. A host-bound model: it
    assumes the Python and framework time scales no differently; the recorded spread says how far to trust it."""
    if not _finite(tiny_ops_per_s) or tiny_ops_per_s <= 0:
        raise ValueError(f"tiny_ops_per_s must be a positive number, got {tiny_ops_per_s!r}")
    s = b0_split(name)
    if s is None:
        raise ValueError(f"{data.DATASETS[name][0]} has no B0 split (it needs the profiled round)")
    return max(s["kernel_launches"] / tiny_ops_per_s * 1e3 + s["other_host_ms"], s["device_busy_ms"] or 0.0)


def latency_interval(name: str, arm: str, seed: int = 0) -> tuple[float, float, float]:
    """An arm's latency in a recorded factorial (ms, the mean over processes of each process's mean block
    median) and its 95% hierarchical-bootstrap interval: ``(point, lo, hi)``."""
    blocks = pd.DataFrame(data.result(name)["blocks"])
    per = arm_processes(blocks[~blocks["warmup"]], "steady_latency_ms_median").get(arm)
    if not per:
        raise ValueError(f"{data.DATASETS[name][0]}: no timed blocks of arm {arm!r}")
    boot = hierarchical_bootstrap(per, 4000, np.random.default_rng(seed))
    tail = 100 * (1 - CONFIDENCE) / 2
    return point(per), float(np.percentile(boot, tail)), float(np.percentile(boot, 100 - tail))


def ceiling_interval(name: str = "factorial") -> tuple[float, float, float]:
    """The busy floor's ceiling on any exact replay's speedup, B0 latency / B0 device-busy time, with the
    interval of B0's latency (the busy time, from one profiled block, barely moves: it is device work)."""
    floor = data.result(name)["summary"].get("busy_floor")
    if not floor:
        raise ValueError(f"{data.DATASETS[name][0]} has no busy floor (it needs the profiled round)")
    pt, lo, hi = latency_interval(name, "B0")
    busy = floor["B0_busy_ms"]
    return pt / busy, lo / busy, hi / busy


def staging_check(name: str = "headline", seed: int = 0) -> dict | None:
    """Whether the staging of the next round (its processes' CPU-only set-up on other cores, overlapping
    some timed blocks) moved the figures: ``effect`` (B0's overlapped blocks against its clear ones, as
    recorded: ``ratio``, ``ci``, ``direction``, block counts) and ``clear_speedup`` / ``clear_ci``
    (SRc vs B0 recomputed from the timed blocks no staging overlapped, over the same processes).
    None for a recording made without staging."""
    r = data.result(name)
    effect = r["summary"].get("staging_effect")
    blocks = pd.DataFrame(r.get("blocks", []))
    if not effect or "staging" not in blocks:
        return None
    clear = blocks[~blocks["warmup"] & ~blocks["staging"].astype(bool)]
    per = arm_processes(clear, "steady_latency_ms_median")
    pt, lo, hi = ratio_interval(per.get("B0", []), per.get("SRc", []), seed=seed)
    return dict(effect=effect, clear_speedup=1 + pt, clear_ci=[1 + lo, 1 + hi],
                clear_blocks={a: int(sum(len(v) for v in per.get(a, []))) for a in ("B0", "SRc")})


def two_headlines(names: tuple = ("headline", "factorial")) -> pd.DataFrame:
    """SRc's speedup over B0 in each recorded run, with its interval and what differs between the runs: one row
    per run (``speedup``, ``lo``, ``hi``, ``B0_ms``, ``SRc_ms`` with their intervals, ``processes`` per arm,
    ``arms`` in the run, the ``cores`` it was pinned to). The headline run's interval is its own recorded one;
    the factorial's is SRc's paired latency change against B0 turned into a ratio (``1 / (1 + change)``)."""
    rows = []
    for name in names:
        study = data.provenance(name)["study"]
        b0, src = latency_interval(name, "B0"), latency_interval(name, "SRc")
        if name == "headline":
            h = headline(name)
            sp, (lo, hi) = h["speedup"], h["ci"]
        else:
            a = arms_frame(name).set_index("arm").loc["SRc"]
            sp, lo, hi = 1 / (1 + a["latency_delta"]), 1 / (1 + a["latency_delta_hi"]), 1 / (1 + a["latency_delta_lo"])
        procs = process_frame(name).groupby("arm")["process"].nunique()
        rows.append(dict(run=name, speedup=sp, lo=lo, hi=hi, B0_ms=b0[0], B0_lo=b0[1], B0_hi=b0[2], SRc_ms=src[0],
                         SRc_lo=src[1], SRc_hi=src[2], processes=int(procs.loc[["B0", "SRc"]].min()),
                         arms=len(study["arms"]), cores=study.get("cores", "")))
    return pd.DataFrame(rows)


def kit_versus(name: str, arm: str, reference: str = "B0") -> dict:
    """``arm``'s change in ms per call against ``reference`` in a recorded kit factorial (``name``, a key of
    ``data.DATASETS``), from its timed blocks beside it (``<file>_blocks.csv.gz``) with the run's own bootstrap:
    ``change``, ``lo``, ``hi`` and the ``direction`` the interval supports. Any two arms of one run, e.g. SRc
    against the compile control, which the recorded JSON compares only with B0."""
    from pathlib import Path

    from .data.files import read_csv

    rel, m = data.DATASETS[name][0], data.result(name)["method"]
    blocks = read_csv(data.data_path(str(Path(rel).with_name(Path(rel).stem + "_blocks.csv.gz"))))
    per = arm_processes(blocks[~blocks["warmup"].astype(bool)], "ms_median")
    for a in (arm, reference):
        if a not in per:
            raise ValueError(f"{rel}: no timed blocks of arm {a!r} (arms: {sorted(per)})")
    pt, lo, hi = ratio_interval(per[arm], per[reference], m["n_boot"], m["seed"])
    return dict(change=pt, lo=lo, hi=hi, direction=direction(lo, hi))


#: the whole duplex second's goal (issue 38: at or under it, against the 1 s cadence)
SECOND_GOAL_MS = 250.0

#: the fused and graph decodes' duplex second, one fresh process each (H100, 2026-12-07)
FUSED_PROCESSES = ("duplex_fused_p1", "duplex_fused_p2", "duplex_fused_p3")
#: the same, each process warmed up by two seconds (the first continuation before the clock; a later H100)
WARMUP2_PROCESSES = ("duplex_fused_w2_p1", "duplex_fused_w2_p2", "duplex_fused_w2_p3")


def duplex_processes(names=FUSED_PROCESSES, goal_ms: float = SECOND_GOAL_MS, seed: int = 0) -> dict:
    """The duplex second recorded by one fresh process per dataset in ``names``: ``runs``, one row per run
    (``SRc+fusedLM``...) with the mean second (each process's timed seconds a block) and its 95% hierarchical
    bootstrap interval over the processes, the processes, the timed seconds and how many were at or under
    ``goal_ms``; ``seconds``, one row per run and second index: the median over processes of the whole second
    and of the backbone, and ``chunk_in_turn``."""
    secs, stages = [], []
    for k, name in enumerate(names):
        r = data.result(name)
        secs.append(pd.DataFrame(r["seconds"]).assign(process=k))
        stages.append(pd.DataFrame(r["rows"]).assign(process=k))
    s, st = pd.concat(secs, ignore_index=True), pd.concat(stages, ignore_index=True)
    s, st = s[~s["warmup"].astype(bool)], st[~st["warmup"].astype(bool)]
    tail = 100 * (1 - CONFIDENCE) / 2
    runs = []
    for arm, g in s.groupby("arm", sort=False):
        per = [grp["second_ms"].tolist() for _, grp in g.groupby("process")]
        boot = hierarchical_bootstrap(per, 4000, np.random.default_rng(seed))
        runs.append(dict(run=arm, processes=len(per), seconds=int(len(g)), mean_ms=point(per),
                         lo_ms=float(np.percentile(boot, tail)), hi_ms=float(np.percentile(boot, 100 - tail)),
                         median_ms=float(g["second_ms"].median()), under_goal=int((g["second_ms"] <= goal_ms).sum()),
                         goal_ms=goal_ms))
    bb = st[st["stage"] == "backbone"].groupby(["arm", "second"])["dur_ms"].median().rename("backbone_ms")
    by = (s.groupby(["arm", "second"]).agg(second_ms=("second_ms", "median"), chunk_in_turn=("chunk_in_turn", "first"))
          .join(bb).reset_index())
    return dict(runs=pd.DataFrame(runs).set_index("run"), seconds=by)


def warmup_check(name: str = "duplex_fused_warmup2", goal_ms: float = SECOND_GOAL_MS) -> dict:
    """A duplex recording with more than one warm-up second: its warm-up and timed seconds (ms, with their place
    in the turn and the backbone's share), how many timed seconds were at or under ``goal_ms``, and the slowest."""
    r = data.result(name)
    s = pd.DataFrame(r["seconds"])
    bb = pd.DataFrame(r["rows"]).query("stage == 'backbone'").set_index("second")["dur_ms"]
    s = s.assign(backbone_ms=s["second"].map(bb))
    timed, warm = s[~s["warmup"].astype(bool)], s[s["warmup"].astype(bool)]
    return dict(warmup_seconds=int(r["provenance"]["study"]["warmup_seconds"]), seconds=s, timed=len(timed),
                under_goal=int((timed["second_ms"] <= goal_ms).sum()), goal_ms=goal_ms,
                slowest_ms=float(timed["second_ms"].max()), median_ms=float(timed["second_ms"].median()),
                warmup_ms=warm["second_ms"].tolist(), warmup_backbone_ms=warm["backbone_ms"].tolist())
