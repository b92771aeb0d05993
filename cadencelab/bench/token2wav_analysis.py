"""The Token2wav factorial's summary figures beyond the per-arm latencies: the host the study ran on,
B0's cross-process determinism, why B0's latency moves with the host (:func:`b0_split`), the fairness
gate against the unpinned stock runtime, the device-busy floor, exactness by hash (and which B0 each arm's
hashes are gated on), and the short table the study prints last."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from ..replay.determinism import REFERENCE, split_arm


#: the spread of an arm's process means (std / mean) above which pyperf calls a system unstable
UNSTABLE_SPREAD = 0.10


def host_summary(processes: list[dict]) -> dict | None:
    """The host the study ran on: its CPU model, the pinned cores, and the tiny-op rate
    (:func:`~cadencelab.bench.measure.host_figures`) across every arm process (median, min, max)."""
    hosts = [p["host"] for p in processes if p.get("host")]
    if not hosts:
        return None
    rate = np.array([h["tiny_ops_per_s"] for h in hosts], float)
    return dict(cpu_model=hosts[0].get("cpu_model"), cores=processes[0].get("cores"),
                cpus_available=hosts[0].get("cpus_available"),
                tiny_ops_per_s_median=float(np.median(rate)), tiny_ops_per_s_min=float(rate.min()),
                tiny_ops_per_s_max=float(rate.max()),
                python_loop_ns_median=float(np.median([h["python_loop_ns"] for h in hosts])), processes=len(hosts))


def cross_process_exact(timed: pd.DataFrame) -> dict | None:
    """Whether B0's hashes of each block agree across its processes (the stock runtime's own
    determinism between processes): ``{"blocks": n, "agree": m}`` over block indices."""
    if timed.empty:
        return None
    b0 = timed[timed["arm"] == "B0"]
    if b0.empty:
        return None
    agree = b0.groupby("block")[["sha_mel", "sha_f32", "sha_i16"]].nunique().eq(1).all(axis=1)
    return dict(blocks=int(len(agree)), agree=int(agree.sum()), processes=int(b0["process"].nunique()))


def b0_split(arms: dict, processes: list[dict]) -> dict | None:
    """Why B0's latency moves with the host: its steady chunk split into device-busy time (the
    profile), host dispatch and launch (its kernel launches at this host's tiny-op rate) and the
    rest of the host's time (Python and framework work between launches). ``predict(rate)``: B0's
    latency on a host whose tiny-op rate is ``rate`` is about ``launches / rate + other_host_ms``."""
    b0 = arms.get("B0", {})
    launches, lat, busy = b0.get("kernel_launches_per_chunk"), b0.get("latency_ms"), b0.get("busy_ms_median")
    rates = [p["host"]["tiny_ops_per_s"] for p in processes if p.get("arm") == "B0" and p.get("host")]
    if not launches or not rates or lat is None or lat != lat:
        return None
    rate = float(np.median(rates))
    launch_ms = launches / rate * 1e3
    return dict(latency_ms=lat, device_busy_ms=busy, kernel_launches=launches, tiny_ops_per_s=rate,
                dispatch_launch_ms=launch_ms, other_host_ms=max(lat - launch_ms, 0.0),
                dispatch_launch_share=min(launch_ms / lat, 1.0))


def fairness(arms: dict, tolerance: float = 0.05) -> dict | None:
    """The fairness gate: the study's B0 (under its exact condition) against ``B0@defaults`` (nothing
    pinned) measured in the same run, over processes and blocks. ``B0_slower_by`` is B0's latency
    relative to the reference; the gate ``holds`` when its whole 95% interval is at most
    ``tolerance``, ``fails`` when the whole interval is above it, and is ``inconclusive`` otherwise
    (``verdict``). None when the study has no such arm."""
    ref = arms.get(f"B0@{REFERENCE}")
    if not ref or "failed" in ref or "B0" not in arms or "failed" in arms["B0"]:
        return None
    d, lo, hi = ref.get("latency_delta"), ref.get("latency_delta_lo"), ref.get("latency_delta_hi")
    if d is None or d != d:
        return None
    slower = 1 / (1 + d) - 1  # B0 relative to the unpinned reference (delta is reference / B0 - 1)
    ci = [1 / (1 + hi) - 1, 1 / (1 + lo) - 1]
    verdict = "holds" if ci[1] <= tolerance else "fails" if ci[0] > tolerance else "inconclusive"
    return dict(reference_arm=f"B0@{REFERENCE}", B0_ms=arms["B0"].get("latency_ms"), reference_ms=ref.get("latency_ms"),
                B0_slower_by=slower, B0_slower_by_ci=ci, tolerance=tolerance, verdict=verdict,
                holds=verdict == "holds")


def busy_floor(arms: dict) -> dict | None:
    """The device-busy floor from the profiled blocks: B0's busy time per steady chunk, the ceiling
    it puts on any exact replay (B0 latency / B0 busy: no replay can beat running B0's kernels back to
    back) and the share of that ceiling SRc's speedup reaches."""
    b0, src = arms.get("B0", {}), arms.get("SRc", {})
    busy, lat = b0.get("busy_ms_median"), b0.get("latency_ms", b0.get("steady_latency_ms_median"))
    if not busy or not lat or lat != lat:
        return None
    ceiling = lat / busy
    out = dict(B0_busy_ms=busy, B0_latency_ms=lat, ceiling=ceiling)
    src_lat = src.get("latency_ms", src.get("steady_latency_ms_median"))
    if src_lat:
        speedup = lat / src_lat
        out.update(SRc_speedup=speedup, SRc_share_of_ceiling=speedup / ceiling, SRc_busy_ms=src.get("busy_ms_median"))
    return out


def exact_by_hash(timed: pd.DataFrame) -> dict:
    """Per arm, timed blocks whose mel / float32 PCM / int16 PCM hashes equal B0's."""
    if timed.empty:
        return {}
    return {a: {h: int(g[f"exact_{h}"].sum()) for h in ("mel", "f32", "i16")} for a, g in timed.groupby("arm")}


def staging_effect(bdf: pd.DataFrame, arm: str = "B0", seed: int = 0) -> dict | None:
    """What the next round's staging (its processes' CPU-only set-up on other cores) did to ``arm``:
    its timed blocks that ran while some staging was under way against those that ran with none,
    per process (:func:`~cadencelab.profile.intervals.ratio_interval`: ``ratio`` = overlapped /
    clear - 1, with its interval and the direction it supports). None when no block carries the flag."""
    from ..profile.intervals import direction, ratio_interval

    if bdf.empty or "staging" not in bdf:
        return None
    t = bdf[(~bdf["warmup"]) & (bdf["arm"] == arm)]
    over, clear = [], []
    for _, g in t.groupby("process"):
        flag = g["staging"].astype(bool)
        if flag.any():
            over.append(g.loc[flag, "steady_latency_ms_median"].to_numpy(float))
        if (~flag).any():
            clear.append(g.loc[~flag, "steady_latency_ms_median"].to_numpy(float))
    out = dict(arm=arm, blocks_overlapped=int(t["staging"].astype(bool).sum()),
               blocks_clear=int((~t["staging"].astype(bool)).sum()), ratio=None, ci=None, direction=None)
    if over and clear:
        pt, lo, hi = ratio_interval(over, clear, seed=seed)
        out.update(ratio=pt, ci=[lo, hi], direction=direction(lo, hi))
    return out


def reference_of(arm: str, arms, condition: str) -> str:
    """The arm whose hashes ``arm``'s are gated on: the B0 of its own device condition (``B0`` or
    ``B0@<condition>``); a B0 is its own reference. An arm whose condition has no B0 in the study is
    compared with the study's ``B0`` and is not gated (:func:`gated`)."""
    base, cond = split_arm(arm, condition)
    if base == "B0":
        return arm
    for cand in arms:
        if split_arm(cand, condition) == ("B0", cond):
            return cand
    return "B0"


def gated(arm: str, arms, condition: str) -> bool:
    """Whether ``arm``'s exactness is a gate: it runs under the condition of its reference B0."""
    ref = reference_of(arm, arms, condition)
    return ref != arm and split_arm(ref, condition)[1] == split_arm(arm, condition)[1]


def _fmt(v, spec: str, na: str = "n/a") -> str:
    """``v`` formatted with ``spec``, or ``na`` where it was not measured (None or NaN)."""
    return na if v is None or v != v else format(v, spec)


def table(result: dict) -> str:
    """The short table printed last: per arm its latency (mean over processes) and change against
    B0 with the 95% interval, the processes behind it, peak memory, exactness and the profile's
    busy time and launches (``n/a on CPU`` where a CUDA-only figure was not measured)."""
    rows = []
    for a, r in result["arms"].items():
        if "failed" in r:
            rows.append(f"{a:>18}  FAILED: {r['failed'].strip().splitlines()[-1][:90]}")
            continue
        ex = "ref" if r["reference"] == a else f"{r['exact_blocks']}/{r['blocks']}" + ("" if r["gated"] else " (not gated)")
        delta = ("" if a == "B0" else f" ({_fmt(100 * r.get('latency_delta', float('nan')), '+.1f')}% "
                 f"[{_fmt(100 * r.get('latency_delta_lo', float('nan')), '+.1f')},"
                 f"{_fmt(100 * r.get('latency_delta_hi', float('nan')), '+.1f')}] {r.get('latency_direction', '')})")
        cpu_na = "n/a on CPU" if r.get("peak_MiB_median") != r.get("peak_MiB_median") else "n/a"
        rows.append(
            f"{a:>18}  lat {_fmt(r.get('latency_ms'), '8.2f')} ms{delta}  x{r.get('processes', 0)} proc  "
            f"peak {_fmt(r.get('peak_MiB_median'), '.0f', cpu_na)}{'' if cpu_na == 'n/a on CPU' else ' MiB'}  exact {ex}  "
            f"busy {_fmt(r.get('busy_ms_median'), '.1f')} ms  launches {_fmt(r.get('kernel_launches_per_chunk'), '.0f')}"
            f"/{_fmt(r.get('graph_launches_per_chunk'), '.0f')} graphs")
    s = result["summary"]
    a_a = s.get("a_a")
    if a_a:
        rows.append(f"A/A ({a_a['arm']} vs {a_a['reference']}): {100 * a_a['ratio']:+.1f}% "
                    f"[{100 * a_a['ci'][0]:+.1f}, {100 * a_a['ci'][1]:+.1f}] -> "
                    + ("holds" if a_a["holds"] else "FAILS: the study is unstable and claims no direction"))
    if s.get("speedup_SRc_vs_B0"):
        lo, hi = s["speedup_SRc_vs_B0_ci"]
        rows.append(f"SRc vs B0: {s['speedup_SRc_vs_B0']:.2f}x [{lo:.2f}, {hi:.2f}] over {s['processes_per_arm']}+ "
                    f"processes per arm (stopped: {s.get('stopped')})")
    rows.append("summary: " + json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in s.items()}))
    return "\n".join(rows)
