"""What the lanes wait for, and the sweep from 8 processes: notebook 6's last measurements of the lanes.

    lock_probe()                  one row per lanes-limiter run with the interpreter-lock probe and session
                                  count: the probe's wake-up lateness, the first wave's rate, a chunk's time on
                                  its lane split into its thread on a CPU and off it
    lock_probe_reading()          what the probe rules out, what the chunks still wait for, 4 against 8 processes
    lock_probe_figure()           a chunk's time on its lane, on and off a CPU, per run and count
    eight_process_reading(name)   the sessions sweep from 8 lane processes: held, ratios, chunks checked

Why a probe: a chunk's graph launches took longer than its thread ran on a CPU, so they waited for something.
A thread that sleeps 2 ms and wakes late waited for Python's lock or for a core; one that wakes on time while
the launches still wait says the wait is in the CUDA driver's calls or on the device, with the lock released.
Both runs of :data:`LOCK_PROBE` came from one call on one card; the sweep is one run with its own B0 and SRc.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from ..serving import LANES_TARGET
from ..viz.options import set_caption
from . import data
from .capacity import limiter_runs, mps_sweeps

__all__ = ["lock_probe", "lock_probe_reading", "lock_probe_figure", "eight_process_reading", "LOCK_PROBE",
           "MPS8_SWEEP"]

#: the lanes-limiter runs with the lock probe (one call, a lent H200, 2026-12-07): 32 lanes from 4 processes, 8
LOCK_PROBE = ("lanes_limiter_lock4", "lanes_limiter_lock8")
#: the sessions sweep from 8 lane processes of 4 lanes under MPS (the same H200, the next call)
MPS8_SWEEP = "sessions_mps8"


def lock_probe(names=LOCK_PROBE) -> pd.DataFrame:
    """Per run and session count (:func:`~.capacity.limiter_runs`' columns), with ``gil_late_ms`` (the probe's
    median wake-up lateness, the processes' median), ``gil_late_p95_ms`` (the worst process's p95),
    ``gil_idle_ms`` (before the run), and a chunk's medians on its lane: ``service_ms``, ``launch_ms``,
    ``host_ms`` (its thread on a CPU) and ``off_cpu_ms`` (service less host: its thread off every CPU)."""
    rows = []
    for run in limiter_runs(names):
        pt = next(p for p in data.result(run["dataset"])["points"] if p["sessions"] == run["sessions"])
        if "gil_late_ms" not in pt:
            raise ValueError(f"{data.DATASETS[run['dataset']][0]}: N={pt['sessions']} has no lock probe (run "
                             "without --no-gil-probe)")
        ch = data.lanes_limiter_chunks(run["dataset"])
        med = ch[ch["sessions"] == run["sessions"]][["service_ms", "launch_ms", "host_ms"]].median()
        rows.append(dict(run, gil_late_ms=pt["gil_late_ms"], gil_late_p95_ms=pt["gil_late_p95_ms"],
                         gil_idle_ms=pt["gil_idle_ms"], service_ms=med["service_ms"], launch_ms=med["launch_ms"],
                         host_ms=med["host_ms"], off_cpu_ms=med["service_ms"] - med["host_ms"]))
    return pd.DataFrame(rows).drop(columns=["profiled", "wave_rates"])


def lock_probe_reading(names=LOCK_PROBE) -> dict:
    """The probe's runs read together: ``table`` (:func:`lock_probe`), ``gain`` (8 processes' first-wave rate
    over 4's, per count) and ``reading``. One run per process count: no interval, and none is claimed."""
    t = lock_probe(names)
    if t["commit"].nunique() != 1 or t["gpu"].nunique() != 1:
        raise ValueError("lock_probe_reading: the runs must come from one tree on one card, to be compared")
    few, many = t["processes"].min(), t["processes"].max()
    a, b = (t[t["processes"] == k].set_index("sessions") for k in (few, many))
    top = int(a.index.max())
    gain = (b["chunks_per_s"] / a["chunks_per_s"] - 1).dropna()
    at = a.loc[top]
    text = (f"In one call on the {t['gpu'].iloc[0]}, the same {int(at['lanes'])} lanes served "
            f"{' and '.join(map(str, a.index))} speak-heavy sessions from {few} processes and from {many}, with a "
            f"thread in every lane process that sleeps 2 ms and times how late it wakes. It woke "
            f"{t['gil_late_ms'].min():.2f}-{t['gil_late_ms'].max():.2f} ms late (median) in every run and count, "
            f"the worst process's p95 {t['gil_late_p95_ms'].max():.2f} ms, against "
            f"{t['gil_idle_ms'].min():.2f}-{t['gil_idle_ms'].max():.2f} ms before the runs: at nearly every "
            f"wake-up it found Python's lock and a core free. Yet at {top} sessions from {few} processes a chunk's "
            f"graph launches took {at['launch_ms']:.0f} ms of the {at['service_ms']:.0f} ms it spent on its lane, "
            f"while its thread ran on a CPU {at['host_ms']:.0f} ms in all: the launches alone outlasted the "
            f"thread's whole CPU time by {at['launch_ms'] - at['host_ms']:.0f} ms, waiting off every CPU and not "
            f"for the lock. So they wait inside the CUDA calls, in the driver or for the device, with the lock "
            f"released. From {many} processes the first wave was served at "
            + ", ".join(f"{b.loc[n, 'chunks_per_s']:.1f} chunks per second against {a.loc[n, 'chunks_per_s']:.1f} "
                        f"at {n} sessions ({gain[n]:+.0%})" for n in gain.index)
            + f": more processes, more paths into the driver, served the same lanes faster. One run of each, so "
            f"no interval: this suggests, and does not settle, that each process's path through the driver is "
            f"what limits the lanes, not Python's lock.")
    return dict(table=t, gain=gain.to_dict(), reading=text)


def lock_probe_figure(names=LOCK_PROBE) -> go.Figure:
    """A chunk's median time on its lane per run and count, stacked: its thread on a CPU, and off every CPU."""
    t = lock_probe(names)
    x = [f"{p} processes, N={n}" for p, n in zip(t["processes"], t["sessions"])]
    fig = go.Figure([go.Bar(x=x, y=t["host_ms"], name="its thread on a CPU"),
                     go.Bar(x=x, y=t["off_cpu_ms"], name="waiting off every CPU")])
    for xi, (_, r) in zip(x, t.iterrows()):
        fig.add_annotation(x=xi, y=r["service_ms"], text=f"lock probe {r['gil_late_ms']:.2f} ms late",
                           showarrow=False, yshift=12)
    fig.update_layout(barmode="stack", height=420, margin=dict(t=60, b=50), yaxis_title="ms per chunk (median)",
                      title=f"Where a chunk's time on its lane goes ({t['gpu'].iloc[0]}, one run each)")
    return set_caption(fig, "Each bar: the median chunk of one run at one session count. The probe's thread "
                            "woke on time in every run, so the time off a CPU is not spent waiting for "
                            "Python's lock or a core.")


def eight_process_reading(name: str = MPS8_SWEEP) -> dict:
    """The sessions sweep from 8 lane processes: the held counts (``held``, ``broke``), ``srl_over_src``,
    ``srl_over_b0``, ``target_met``, the chunks checked against the session alone overall and at the count SRl
    held (``checked_at_held`` of ``chunks_at_held``), and ``reading``. One sweep: no interval."""
    row = mps_sweeps((name,)).iloc[0]
    r = data.result(name)
    by_arm = r["summary"]["checked_chunks_by_arm"]["SRl"]
    c = data.sessions_chunks(name)
    at = c[(c["arm"] == "SRl") & (c["sessions"] == row["held_SRl"])]
    out = dict(gpu=row["gpu"], lane_processes=int(row["lane_processes"]), lanes=int(row["lanes"]),
               held={a: int(row[f"held_{a}"]) for a in ("B0", "SRc", "SRl")},
               broke={a: row[f"broke_{a}"] for a in ("B0", "SRc", "SRl")},
               srl_over_src=float(row["srl_over_src"]), srl_over_b0=row["held_SRl"] / row["held_B0"],
               target_met=bool(row["target_met"]), checked=int(row["checked"]), exact=int(row["exact"]),
               srl_chunks=int(by_arm["chunks"]), srl_checked=int(by_arm["checked"]),
               chunks_at_held=int(len(at)), checked_at_held=int(at["checked"].sum()),
               exact_at_held=int((at["exact"] == True).sum()))  # noqa: E712 (NaN where unchecked)
    h = out["held"]
    target = (f"the {LANES_TARGET}x target met" if out["target_met"] else
              f"short of the {LANES_TARGET}x target's {int(row['target_sessions'])}")
    text = (f"On the {out['gpu']}, {out['lane_processes']} processes of {out['lanes'] // out['lane_processes']} "
            f"lanes under MPS held {h['SRl']} speak-heavy sessions and broke at {int(out['broke']['SRl'])}; SRc held "
            f"{h['SRc']} and B0 {h['B0']} in the same run: SRl held {out['srl_over_src']:.1f}x SRc's count "
            f"({target}) and {out['srl_over_b0']:.1f}x B0's. Every checked chunk equalled the session run alone: "
            f"{out['exact']} of {out['checked']}.")
    if out["srl_checked"] < out["srl_chunks"]:
        text += (f" Not every chunk was checked: the verification's time ran out first, and "
                 f"{out['srl_chunks'] - out['srl_checked']} of SRl's {out['srl_chunks']} chunks went unchecked; at "
                 f"the {h['SRl']} sessions held, {out['checked_at_held']} of {out['chunks_at_held']} were checked, "
                 f"all equal.")
    text += (" One sweep, on another card than the sweeps from 4 processes: it does not compare 8 processes with "
             "4 (the probe's runs do, on one card), and a capacity from one sweep has no interval.")
    out["reading"] = text
    return out
