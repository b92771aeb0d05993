"""The sessions study read for notebook 6: capacity with its bounds, the lanes' plateau, B0 alone.

    capacity_bounds(dataset)             per arm and workload: sessions holding the cadence, whether that is
                                         the break ("exact") or where the time budget stopped the sweep
                                         ("lower_bound"), and the largest N that ran
    capacity_figure(workload, dataset)   p95 chunk latency vs sessions, each arm named with its exactness
                                         reference, the lower bounds marked in the figure itself
    goodput_plateau(workload, dataset)   per arm the most audio seconds served per second at any N, and its
                                         ratio to SRc's
    lanes_reading(workload, dataset)     the lanes' plateau over SRc's, their count, and what the recording
                                         settles about the limit (a lower bound settles less)
    b0_alone(dataset)                    B0 serving one session beside the factorial's B0; lower_bounds(dataset)
    limiter_reading(), limiter_figure()  what limits the lanes at their break (the lanes-limiter recording)
    exact_batching(dataset)              batched SRb beside batch-invariant SRbi: sessions held, solo-exact chunks
    mps_reading(name)                    one sweep of the lanes under MPS beside the run without MPS
    mps_sweeps(), served_rates(), mps_sweeps_reading(), served_rate_figure(), mps_limiter_reading()   every
                                         MPS sweep, each first wave's rate, the device and processes at the break

Everything is read from the recorded files through :mod:`cadencelab.course.data` and
:func:`cadencelab.course.frames.capacity_by_reference`.
"""

from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go

from .. import viz
from ..serving import LANES_TARGET
from ..viz.limiter import limiter_figure as limiter_figure_of
from ..viz.options import CapacityOptions, set_caption
from . import data
from .frames import capacity_by_reference

__all__ = ["capacity_bounds", "capacity_figure", "goodput_plateau", "lower_bounds", "lanes_reading", "b0_alone",
           "limiter_reading", "limiter_figure", "exact_batching", "mps_reading", "mps_sweeps", "mps_sweeps_reading",
           "served_rates", "served_rate_figure", "mps_limiter_reading", "limiter_runs", "MPS_SWEEPS", "MPS_LIMITER", "WORKLOADS",
           "DATASETS"]

#: the workloads of the sessions study and the two recordings of it the notebook shows
WORKLOADS = ("speak_heavy", "mixed")
DATASETS = {"sessions": "arrivals aligned on the second", "sessions_staggered": "arrivals spread over the second"}


def _ran(cap: pd.DataFrame) -> pd.DataFrame:
    skipped = cap["skipped"].fillna("").astype(str).str.len() > 0
    return cap[~skipped & ~cap["oom"].fillna(False).astype(bool)]


def capacity_bounds(dataset: str = "sessions") -> pd.DataFrame:
    """One row per (arm, workload): max_sessions holding the cadence, bound ("exact": the sweep went past it
    and broke; "lower_bound": the time budget stopped the sweep first), breaks_at (the smallest N above it
    that broke, where the recording has its bracket; else None), largest_n_run, and shown ("14" or
    ">=28")."""
    s = data.sessions_summary(dataset)
    cap = _ran(data.sessions_capacity(dataset=dataset))
    rows = []
    for key, per in s.items():
        if not key.startswith("max_sessions_at_cadence_"):
            continue
        arm = key[len("max_sessions_at_cadence_"):]
        for w, n in per.items():
            bound = s.get("capacity_bound", {}).get(arm, {}).get(w, "exact")
            ran = cap[(cap["arm"] == arm) & (cap["workload"] == w)]
            breaks = (s.get("capacity_bracket", {}).get(arm, {}).get(w) or [None, None])[1]
            rows.append(dict(arm=arm, workload=w, max_sessions=int(n), bound=bound, breaks_at=breaks,
                             largest_n_run=int(ran["sessions"].max()) if len(ran) else 0,
                             shown=(">=" if bound == "lower_bound" else "") + str(int(n)),
                             experimental=arm in s.get("experimental_arms", [])))
    return pd.DataFrame(rows)


def capacity_figure(workload: str, dataset: str = "sessions", metric: str = "p95_chunk_ms") -> go.Figure:
    """``metric`` vs sessions N for ``workload``, one line per arm labelled with its exactness reference; the
    last N of an arm whose sweep stopped on the time budget is ringed (a lower bound, not a break)."""
    if dataset not in DATASETS:
        raise ValueError(f"capacity_figure: dataset must be one of {list(DATASETS)}, got {dataset!r}")
    cap = _ran(capacity_by_reference(workload, dataset=dataset))
    fig = viz.capacity_lines(cap, metric=metric, options=CapacityOptions(
        title=f"{workload.replace('_', '-')}, {DATASETS[dataset]}: {viz.metric_title(metric)} vs sessions",
        hline_label="cadence"))
    bounds = capacity_bounds(dataset)
    low = bounds[(bounds["workload"] == workload) & (bounds["bound"] == "lower_bound")]
    raw = _ran(data.sessions_capacity(workload, dataset=dataset)).assign(label=cap["arm"].to_numpy())
    pts = raw[raw["arm"].isin(low["arm"])]
    pts = pts[pts["sessions"] == pts.groupby("arm")["sessions"].transform("max")]
    if len(pts):
        fig.add_trace(go.Scatter(x=pts["sessions"], y=pts[metric], mode="markers", hoverinfo="text",
                                 name="sweep stopped on the time budget: capacity >= this N",
                                 text=[f"{a}: >= {n} sessions" for a, n in zip(pts["arm"], pts["sessions"])],
                                 marker=dict(symbol="circle-open", size=18, line=dict(width=2, color="black"))))
    fig.update_layout(legend=dict(orientation="h", y=-0.25, x=0), margin=dict(b=170), height=560)
    set_caption(fig, viz.caption(fig) + " Each arm is named with the reference its chunks were checked against "
                "bit for bit (SRb: the batched eager path, experimental). A ringed last point: the sweep ran out "
                "of time before the arm broke, so its capacity is at least that N.")
    return fig


def goodput_plateau(workload: str = "speak_heavy", dataset: str = "sessions") -> pd.DataFrame:
    """Per arm: the most audio seconds served per wall second at any N (its plateau), the N where it was
    reached, and the ratio to SRc's plateau."""
    cap = _ran(data.sessions_capacity(workload, dataset=dataset))
    best = cap.loc[cap.groupby("arm")["goodput"].idxmax(), ["arm", "goodput", "sessions"]]
    best = best.rename(columns={"goodput": "plateau_audio_s_per_s", "sessions": "at_sessions"})
    ref = best.set_index("arm")["plateau_audio_s_per_s"].get("SRc")
    best["vs_SRc"] = best["plateau_audio_s_per_s"] / ref if ref else float("nan")
    return best.sort_values("plateau_audio_s_per_s", ascending=False).reset_index(drop=True)


def lower_bounds(dataset: str = "sessions") -> str:
    """One line: the counts of ``dataset`` that are lower bounds (the sweep's time budget ended before the arm
    broke), or that there are none; read from the file, so a new recording says its own."""
    b = capacity_bounds(dataset)
    low = b[b["bound"] == "lower_bound"]
    named = ", ".join(f"{r.arm} {r.workload.replace('_', '-')} {r.shown}" for r in low.itertuples())
    return (f"lower bounds (the sweep's time budget ended before a break): {named}" if named else
            "no lower bounds: every arm's sweep ran past its break")


def lanes_reading(workload: str = "speak_heavy", dataset: str = "sessions") -> dict:
    """What the recording says about lanes in ``workload``: ``lanes`` (graph sets the study ran), ``ratio``
    (SRl's goodput plateau over SRc's), ``bound`` (SRl's capacity: "exact" or "lower_bound"), ``shown`` (its
    count as the tables print it) and ``reading`` (one sentence: what the ratio does and does not settle)."""
    s = data.sessions_summary(dataset)
    plateau = goodput_plateau(workload, dataset).set_index("arm")
    if "SRl" not in plateau.index or "SRc" not in plateau.index:
        raise ValueError(f"lanes_reading: the {dataset} recording has no SRl and SRc runs in {workload}")
    b = capacity_bounds(dataset).set_index(["arm", "workload"]).loc[("SRl", workload)]
    ratio, lanes = float(plateau.loc["SRl", "vs_SRc"]), int(s.get("lanes", 0))
    at = int(plateau.loc["SRl", "at_sessions"])
    if b["bound"] == "lower_bound":
        reading = (f"SRl's capacity is a lower bound ({b['shown']}: the sweep's time budget ended before a break) "
                   f"and its plateau is read at the last N it ran ({at}), so the {ratio:.2f}x is a lower bound too: "
                   f"whether the device is the whole limit this recording does not settle")
    else:
        reading = (f"SRl held the cadence up to {b['shown']} sessions and broke at the sweep's next N, so its plateau "
                   f"({ratio:.2f}x SRc's, at N = {at}) is measured, not bounded")
    return dict(lanes=lanes, ratio=ratio, bound=b["bound"], shown=b["shown"], at_sessions=at, reading=reading)


def b0_alone(dataset: str = "sessions") -> pd.DataFrame:
    """B0 in the factorial (median steady synthesis by CUDA events) beside B0 serving one session in the
    sessions study (chunk latency from arrival to completion, host clock; steady chunks = all but a turn's
    first), with what each measures and in which run."""
    fac = data.factorial().set_index("arm")
    chunks = _chunks(dataset)
    one = chunks[(chunks["arm"] == "B0") & (chunks["sessions"] == 1)]
    steady = one[one["chunk"] > 0]
    rows = [dict(measurement="factorial B0", ms=float(fac.loc["B0", "steady_latency_ms_median"]),
                 what="median synthesis segment (flow + vocoder) of steady chunks, CUDA events, 8 blocks"),
            dict(measurement="factorial B0_repeat", ms=float(fac.loc["B0_repeat", "steady_latency_ms_median"]),
                 what="the same code in another process of the same run"),
            dict(measurement="sessions B0, N = 1, steady chunks", ms=float(steady["latency_ms"].median()),
                 what=f"arrival to completion on the host clock, {len(steady)} chunks, its own process"),
            dict(measurement="sessions B0, N = 1, all chunks", ms=float(one["latency_ms"].median()),
                 what=f"as above with each turn's first chunk, {len(one)} chunks")]
    return pd.DataFrame(rows)


def _chunks(dataset: str) -> pd.DataFrame:
    """The per-chunk rows of a sessions recording (``<dataset>_chunks.csv.gz`` beside its JSON)."""
    src = data.dataset_path(dataset)
    path = src.with_name(f"{src.stem}_chunks.csv.gz")
    if not path.is_file():
        raise FileNotFoundError(f"recorded per-chunk file not found: {path} (written beside {src.name} by the study)")
    return pd.read_csv(path)


def limiter_reading(processes: str = "sessions_lane_processes") -> dict:
    """What the lanes-limiter recording measured at the lanes' break: ``held`` and ``broke`` (the timed session
    counts either side), the profiled second's ``busy_share`` (kernels running, their union over the wall),
    ``overlap`` and ``streams``, the launches' ``launch_busy_share`` and ``launch_slowdown`` at ``held``, ``gpu``,
    and, from the sessions recording ``processes`` (lanes served from several processes, another run), where
    they held and broke (``processes_held``, ``processes_broke``, ``lane_processes``). ``reading``: the sentences.
    One process and one profiled second per run: single samples, so no interval is given and none is claimed."""
    from ..profile.limiter import SATURATED

    t = data.lanes_limiter()
    points = [p for p in t.attrs["points"] if p["timed"] and p["sessions"] > 1]
    held = max((p["sessions"] for p in points if p["holds"]), default=None)
    broke = min((p["sessions"] for p in points if not p["holds"]), default=None)
    if held is None or broke is None:
        raise ValueError(f"limiter_reading: the recording has no bracket (timed counts {[p['sessions'] for p in points]})")
    prof = t.attrs["profiled"] or {}
    row = t.set_index("sessions").loc[held]
    busy = prof.get("busy_share") if prof.get("sessions") == held else None
    gpu = (t.attrs["provenance"] or {}).get("gpu")
    lanes = (t.attrs["server"] or {}).get("lanes")
    out = dict(held=int(held), broke=int(broke), gpu=gpu, lanes=lanes, busy_share=busy,
               overlap=prof.get("overlap"), streams=prof.get("streams"),
               launch_busy_share=float(row["launch_busy_share"]), launch_slowdown=float(row["launch_slowdown"]),
               launch_concurrency=float(row["launch_concurrency"]))
    text = f"On the {gpu}, {lanes} lanes in one process held {held} speak-heavy sessions and broke at {broke}."
    if busy is None:
        text += f" No second was profiled at N = {held}, so the device's share is not known."
    else:
        text += (f" In one profiled second at N = {held}, kernels ran {busy:.0%} of the wall (their busy union), "
                 f"{prof['overlap']:.1f} at once on average across {prof['streams']:.0f} streams"
                 + (" (at or above" if busy >= SATURATED else " (below") + f" the {SATURATED:.0%} this course calls "
                 f"saturated); how full the SMs were while busy was not measured.")
    alone = t.set_index("sessions").loc[min(t["sessions"])]
    ch = data.lanes_limiter_chunks()
    at = ch[ch["sessions"] == held]
    launch_cpu = float(at["launch_cpu_ms"].mean())
    out.update(wall_alone_ms=float(alone["wall_ms"]), wall_ms=float(row["wall_ms"]),
               launch_alone_ms=float(alone["launch_ms"]), launch_ms=float(row["launch_ms"]), launch_cpu_ms=launch_cpu,
               other_alone_ms=float(alone["other_ms"]), other_ms=float(row["other_ms"]))
    text += (f" A chunk's host window grew from {alone['wall_ms']:.0f} ms alone to {row['wall_ms']:.0f} ms at N = {held}: "
             f"its graph launches from {alone['launch_ms']:.0f} to {row['launch_ms']:.0f} ms, and the time outside every "
             f"timed part from {alone['other_ms']:.0f} to {row['other_ms']:.0f} ms. A graph launch was in flight "
             f"{row['launch_busy_share']:.0%} of the wall and each took {row['launch_slowdown']:.1f}x as long as one "
             f"lane's alone. The launches' time is the thread's CPU time ({launch_cpu:.0f} ms of {row['launch_ms']:.0f}), "
             f"but a launch waiting for room in the device's queue may spin, so it does not tell host work from "
             f"waiting for the device.")
    b = capacity_bounds(processes).set_index(["arm", "workload"])
    if ("SRl", "speak_heavy") in b.index:
        r = b.loc[("SRl", "speak_heavy")]
        n = int(data.result(processes)["provenance"]["study"]["lane_processes"])  # the flag it was recorded with
        out.update(processes_held=r["shown"], processes_broke=r["breaks_at"], lane_processes=n)
        past = r["bound"] == "exact" and int(r["max_sessions"]) >= broke
        text += (f" Served from {n} processes sharing the GPU (another run), the same {lanes} lanes held {r['shown']}"
                 + (f" and broke at {r['breaks_at']}" if r["breaks_at"] else "")
                 + (f": past the one-process run's break at {broke}. One sweep of each and no repeat: this suggests, "
                    f"and does not settle, that one process's host path, not the device alone, set that break."
                    if past else
                    f": not past the one-process break at {broke} (one run of each, no repeat)."))
    out["reading"] = text
    return out


def limiter_figure() -> go.Figure:
    """The lanes-limiter recording's picture: a chunk's host window split by part, per session count."""
    t = data.lanes_limiter()
    fig = limiter_figure_of(t)
    gpu = (t.attrs["provenance"] or {}).get("gpu") or "the recorded GPU"
    fig.update_layout(title=f"Where a lane's chunk spends its host time ({gpu}, {t.attrs['server']['lanes']} lanes)")
    return fig


def exact_batching(dataset: str = "sessions_srbi") -> pd.DataFrame:
    """Batched SRb beside batch-invariant SRbi in one recording: per arm the sessions held (speak-heavy), the
    reference its chunks were gated on, and how many of its chunks equal the session run alone through B0."""
    s = data.sessions_summary(dataset)
    b = capacity_bounds(dataset).set_index(["arm", "workload"])
    rows = []
    for arm in [a for a in ("B0", "SRb", "SRbi") if (a, "speak_heavy") in b.index]:
        same = s.get("identical_to_solo_B0", {}).get(arm, {})
        rows.append(dict(arm=arm, sessions_held=b.loc[(arm, "speak_heavy"), "shown"],
                         breaks_at=b.loc[(arm, "speak_heavy"), "breaks_at"],
                         gated_on=", ".join(s.get("exactness_reference", {}).get(arm, ["solo_B0"])),
                         equal_to_solo=int(same.get("mel_and_pcm", 0)), compared=int(same.get("compared", 0)),
                         experimental=arm in s.get("experimental_arms", [])))
    return pd.DataFrame(rows).set_index("arm")


def mps_reading(name: str = "sessions_mps", before: str = "sessions_lane_processes") -> dict:
    """The lanes served from several processes as clients of one MPS daemon (``name``), beside the run without
    MPS (``before``): ``lane_processes``, ``lanes``, ``servers`` (MPS servers seen: 1 when the processes were its
    clients), per arm ``held`` / ``broke``, ``srl_over_src``, ``srl_over_b0``, ``target_met`` (``LANES_TARGET``),
    ``exact`` / ``checked``, and ``reading``. One sweep per run: no interval is given and none is claimed."""
    row = mps_sweeps((name,)).iloc[0]  # one sweep, read as every sweep is
    arms = [a for a in ("B0", "SRc", "SRl") if row[f"held_{a}"] is not None and pd.notna(row[f"held_{a}"])]
    held = {a: int(row[f"held_{a}"]) for a in arms}
    broke = {a: (int(row[f"broke_{a}"]) if pd.notna(row[f"broke_{a}"]) else None) for a in arms}
    out = dict(lane_processes=int(row["lane_processes"]), lanes=int(row["lanes"]), servers=int(row["servers"]),
               held=held, broke=broke, srl_over_src=row["srl_over_src"], srl_over_b0=held["SRl"] / held["B0"],
               target_met=bool(row["target_met"]), exact=int(row["exact"]), checked=int(row["checked"]),
               gpu=row["gpu"], target_sessions=int(row["target_sessions"]))
    clients = "clients of one MPS server" if out["servers"] == 1 else f"{out['servers']} MPS servers seen"
    need = out["target_sessions"]  # the fewest SRl sessions reaching the target
    target = (f"meeting the {LANES_TARGET}x target" if out["target_met"] else
              f"the {LANES_TARGET}x target needs {need}")
    text = (f"Under MPS, {out['lane_processes']} processes of {out['lanes'] // out['lane_processes']} lanes "
            f"({clients}) "
            f"held {held['SRl']} speak-heavy sessions" + (f" and broke at {broke['SRl']}" if broke["SRl"] else "")
            + f"; SRc held {held['SRc']} and B0 {held['B0']} in the same run: SRl held {out['srl_over_src']:.1f}x "
            f"SRc's count ({target}) "
            f"and {out['srl_over_b0']:.1f}x B0's, "
            f"with {out['exact']} of {out['checked']} checked chunks equal to the session run alone.")
    if not out["target_met"] and broke["SRl"] and held["SRl"] < need < broke["SRl"]:
        text += (f" The sweep tried no count between {held['SRl']} and {broke['SRl']}, and the target's {need} "
                 f"lies between them: this run neither meets nor misses it; a sweep through {need} would say.")
    bb = capacity_bounds(before).set_index("arm")
    if "SRl" in bb.index:
        n0 = int(data.result(before)["provenance"]["study"]["lane_processes"])
        lanes0 = int(data.result(before)["arms"]["SRl"]["lanes"])
        out.update(before_held=int(bb.loc["SRl", "shown"]), before_lanes=lanes0, before_processes=n0)
        text += (f" Without MPS, {n0} processes of {lanes0} lanes in all held {out['before_held']} in another run; "
                 f"this run had {out['lanes']} lanes and MPS, so the two changes are not separated, and one sweep "
                 f"of each does not settle a difference.")
    out["reading"] = text
    return out


#: the sweeps of the lanes under MPS (H100, 2026-12-07), 4 processes each: 32 lanes, then 40 lanes (no B0 arm
#: in that one, so its chunks are unchecked: a lane-count control)
MPS_SWEEPS = ("sessions_mps", "sessions_mps_r2", "sessions_mps_r3", "sessions_mps_40lanes")


def mps_sweeps(names=MPS_SWEEPS) -> pd.DataFrame:
    """One row per sweep under MPS: ``lanes``, ``lane_processes``, per arm ``held_<arm>`` / ``broke_<arm>``
    (speak-heavy; None where the arm did not run or never broke), ``srl_over_src``, ``target_sessions`` (the
    fewest SRl sessions meeting ``LANES_TARGET`` x SRc's), ``target_met``, ``checked`` / ``exact`` chunks and
    ``control`` (no B0 arm: no chunk checked against the session alone)."""
    rows = []
    for name in names:
        r = data.result(name)
        s, srl = r["summary"], r["arms"]["SRl"]
        b = capacity_bounds(name)
        b = b[b["workload"] == "speak_heavy"].set_index("arm")
        row = dict(dataset=name, date=r["provenance"].get("date", "")[:16], gpu=r["provenance"].get("gpu"),
                   lanes=int(srl["lanes"]), lane_processes=int(srl["lane_processes"]), mps=bool(srl["mps"]["on"]),
                   servers=int(srl["mps"].get("servers", 0)))
        for arm in ("B0", "SRc", "SRl"):
            row[f"held_{arm}"] = int(b.loc[arm, "shown"]) if arm in b.index else None
            row[f"broke_{arm}"] = (int(b.loc[arm, "breaks_at"]) if arm in b.index and pd.notna(b.loc[arm, "breaks_at"])
                                   else None)
        row["srl_over_src"] = row["held_SRl"] / row["held_SRc"]
        row["target_sessions"] = math.ceil(LANES_TARGET * row["held_SRc"])
        row["target_met"] = row["held_SRl"] >= row["target_sessions"]
        # met, missed (the sweep broke at or below the target's count) or untried (it jumped over it)
        row["target"] = ("met" if row["target_met"] else "missed" if row["broke_SRl"] is not None
                         and row["broke_SRl"] <= row["target_sessions"] else "untried")
        row.update(checked=int(s["chunks_checked"]), exact=int(s["chunks_exact"]), control="B0" not in r["arms"])
        rows.append(row)
    return pd.DataFrame(rows).set_index("dataset")


def served_rates(names=MPS_SWEEPS, arms=("SRc", "SRl")) -> pd.DataFrame:
    """Per sweep, arm and session count, the first arrival wave (every session's first chunk at one instant, no
    backlog): ``span_ms`` to its last completion, ``chunks_per_s`` (the rate it was served at) and
    ``host_cores_per_process`` (the lane threads' CPU time over the span; it counts a thread spinning while it
    waits for the device). From :func:`cadencelab.profile.limiter.waves` over each recording's chunks."""
    from ..profile.limiter import waves

    out = []
    for name in names:
        c = data.sessions_chunks(name)
        for arm in arms:
            g = c[(c["arm"] == arm) & (c["workload"] == "speak_heavy")]
            if g.empty:
                continue
            if "process" not in g or g["process"].isna().all():
                g = g.assign(process=0)  # one process served the arm
            w = waves(g)
            out.append(w[w["wave"] == 0].assign(dataset=name, arm=arm,
                                                lanes=int(data.result(name)["arms"]["SRl"]["lanes"])))
    cols = ["dataset", "arm", "lanes", "sessions", "chunks", "span_ms", "chunks_per_s", "host_cores_per_process"]
    return pd.concat(out, ignore_index=True)[cols]


def mps_sweeps_reading(names=MPS_SWEEPS, from_sessions: int = 16) -> dict:
    """What the sweeps under MPS say together: the counts SRl held and SRc's (one sweep each, so a spread and no
    interval), how often the target was met, the lane-count control, and the rate the first waves were served
    at from ``from_sessions`` (the sweeps' first count above a few per process) to the count each sweep held
    (``plateau``: min, max chunks/s)."""
    t = mps_sweeps(names)
    main, ctl = t[~t["control"]], t[t["control"]]
    rates = served_rates(names)
    held = rates["dataset"].map(t["held_SRl"])
    srl = rates[(rates["arm"] == "SRl") & (rates["sessions"] >= from_sessions) & (rates["sessions"] <= held)]
    few = rates[(rates["arm"] == "SRl") & (rates["sessions"] < from_sessions)]
    src = rates[rates["arm"] == "SRc"]
    out = dict(sweeps=len(main), held=main["held_SRl"].tolist(), held_src=sorted(set(main["held_SRc"])),
               ratios=main["srl_over_src"].round(2).tolist(), met=int(main["target_met"].sum()),
               missed=int((main["target"] == "missed").sum()), untried=int((main["target"] == "untried").sum()),
               target_sessions=sorted(set(main["target_sessions"])), exact=int(main["exact"].sum()),
               checked=int(main["checked"].sum()), control_lanes=ctl["lanes"].tolist(),
               control_held=ctl["held_SRl"].tolist(), lanes=sorted(set(main["lanes"])),
               plateau=(float(srl["chunks_per_s"].min()), float(srl["chunks_per_s"].max())),
               plateau_counts=(int(srl["sessions"].min()), int(srl["sessions"].max())),
               small_rate=(float(few["chunks_per_s"].min()), float(few["chunks_per_s"].max())) if len(few) else None,
               small_counts=sorted(set(few["sessions"])), processes=sorted(set(main["lane_processes"])),
               src_rate=(float(src["chunks_per_s"].min()), float(src["chunks_per_s"].max())),
               host_cores=(float(srl["host_cores_per_process"].min()), float(srl["host_cores_per_process"].max())),
               gpu=main["gpu"].iloc[0])
    held = ", ".join(str(h) for h in out["held"])
    ratios = ", ".join(f"{x:.2f}x" for x in out["ratios"])
    procs = out["processes"][0]
    text = (f"In {out['sweeps']} sweeps under MPS on the {out['gpu']}, {procs} processes of "
            f"{out['lanes'][0] // procs} lanes each held {held} speak-heavy sessions where SRc held "
            f"{' or '.join(map(str, out['held_src']))} in the same run ({ratios}); the {LANES_TARGET}x target "
            f"({' or '.join(map(str, out['target_sessions']))} sessions) was met in {out['met']} of "
            f"{out['sweeps']}, missed by the next count in {out['missed']}"
            + (f" and never tried in {out['untried']} (it held less and broke above)" if out["untried"] else "")
            + ". One sweep per run: the counts are a spread, not an interval. "
            f"Every checked chunk equalled the session run alone: {out['exact']} of {out['checked']}.")
    if len(ctl):
        text += (f" With {out['control_lanes'][0]} lanes instead of {out['lanes'][0]} (a control without B0, its "
                 f"chunks unchecked) SRl held {out['control_held'][0]}: more lanes did not hold more sessions.")
    text += (f" From {from_sessions} sessions to the count each sweep held, the first wave of chunks (every "
             f"session's first, arriving together) was served at {out['plateau'][0]:.0f}-{out['plateau'][1]:.0f} "
             f"chunks per second whatever the count, against {out['small_rate'][0]:.0f} at "
             f"{' and '.join(map(str, out['small_counts']))} sessions and "
             f"{out['src_rate'][0]:.1f}-{out['src_rate'][1]:.1f} for SRc's one graph set: the served rate stops "
             f"growing by {from_sessions} sessions, with lanes and processes to spare, and the sessions held sit "
             f"near that rate times the 1 s cadence. The lane threads used {out['host_cores'][0]:.1f}-{out['host_cores'][1]:.1f} "
             f"cores' worth of CPU time per process there (a thread waiting on the device counts as busy).")
    out["reading"] = text
    return out


#: the lanes-limiter runs under MPS (one call, H100, 2026-12-07): 4 processes of 8 lanes, profiled; 8 of 4
MPS_LIMITER = ("lanes_limiter_mps4", "lanes_limiter_mps8")


def limiter_runs(names=MPS_LIMITER) -> list[dict]:
    """Per lanes-limiter run from processes: its processes, lanes, and each count's first wave (and profile)."""
    out = []
    for name in names:
        r = data.result(name)
        if r.get("mode") != "processes":
            raise ValueError(f"{data.DATASETS[name][0]}: not a lanes-limiter run from processes")
        first = [w for w in r["waves"] if w["wave"] == 0]
        for w in first:
            pt = next(p for p in r["points"] if p["sessions"] == w["sessions"])
            waves = [x["chunks_per_s"] for x in r["waves"] if x["sessions"] == w["sessions"]]
            out.append(dict(dataset=name, processes=int(r["server"]["lane_processes"]), lanes=int(r["server"]["lanes"]),
                            wave_rates=waves,
                            sessions=int(w["sessions"]), chunks_per_s=float(w["chunks_per_s"]),
                            host_cores_per_process=float(w["host_cores_per_process"]), holds=bool(pt["holds"]),
                            worst_p95_ms=float(pt["worst_p95_ms"]), mps=bool(r["server"]["mps"]["on"]),
                            profiled=r.get("profiled"), gpu=r["provenance"].get("gpu"),
                            commit=r["provenance"].get("git_commit")))
    return out


def _rates(run) -> str:
    return " and ".join(f"{v:.1f}" for v in run["wave_rates"])


def mps_limiter_reading(names=MPS_LIMITER) -> dict:
    """What limits the lanes under MPS, from the lanes-limiter runs of one call: the profiled run's kernels over
    the wave (all processes' union, how many at once, each process's own share) and the wave's rate with 4
    processes against 8 at the same count. ``runs``: one row per run; ``reading``: the sentences."""
    runs = pd.DataFrame(limiter_runs(names))
    prof = next(p for p in runs["profiled"] if p)
    four, eight = (runs[runs["processes"] == k].iloc[0] for k in (runs["processes"].min(), runs["processes"].max()))
    own = sorted(prof["busy_share_by_process"].values())
    gain = eight["chunks_per_s"] / four["chunks_per_s"] - 1
    ch = data.lanes_limiter_chunks(four["dataset"])
    at = ch[ch["sessions"] == four["sessions"]][["launch_ms", "service_ms", "host_ms"]].median()
    alone = pd.concat([data.sessions_chunks(n) for n in MPS_SWEEPS])
    alone = alone[(alone["arm"] == "SRl") & (alone["sessions"] == four["processes"])]  # one chunk per process
    one = alone[["launch_ms", "service_ms", "host_ms"]].median()
    text = (f"At {prof['sessions']} speak-heavy sessions under MPS on the {four['gpu']} ({four['processes']} processes "
            f"of {four['lanes'] // four['processes']} lanes), one profiled second put every process's kernels on one "
            f"clock: together they ran {prof['busy_share']:.0%} of the wave's {prof['window_ms']:.0f} ms, "
            f"{prof['at_once']:.1f} at once on average ({prof['max_at_once']} at most); each process's own kernels "
            f"ran {own[0]:.0%}-{own[-1]:.0%} of it. The same {four['lanes']} lanes from {eight['processes']} processes "
            f"of {eight['lanes'] // eight['processes']}, in the same call, served the first wave of "
            f"{eight['sessions']} sessions at {eight['chunks_per_s']:.1f} chunks per second against "
            f"{four['chunks_per_s']:.1f} ({gain:+.0%}; each run's waves: {_rates(eight)} against {_rates(four)}; "
            f"worst p95 {eight['worst_p95_ms']:.0f} ms against {four['worst_p95_ms']:.0f} ms). A device whose "
            f"timeline is {prof['busy_share']:.0%} busy still took more work side by side: a busy union says when "
            f"some kernel runs, not that the SMs are full, so it does not make the device the limit, and in this "
            f"run more processes (more interpreters, launch paths and hardware queues) served faster. One run of "
            f"each, at one count, so no interval: this suggests, and does not settle, "
            f"that each process's path still limits the lanes (the limiter study checks no chunk against the "
            f"session alone; a sessions sweep from {eight['processes']} processes, on an H200, follows).")
    text += (f" Inside the {four['processes']}-process run (medians per chunk), a chunk's graph launches took "
             f"{at['launch_ms']:.0f} ms of the {at['service_ms']:.0f} ms it spent on its lane, while its thread ran on "
             f"a CPU {at['host_ms']:.0f} ms in all: most of the launch time was spent waiting off the CPU. With one "
             f"chunk per process ({four['processes']} sessions, the sweeps) the launches took {one['launch_ms']:.0f} "
             f"ms and the thread was on a CPU for the whole chunk ({one['host_ms']:.0f} of {one['service_ms']:.0f} "
             f"ms). What the launches waited for is not measured in this run (the lock probe, on an H200, "
             f"follows); a wait that one process's launches share would explain why more processes served faster.")
    return dict(runs=runs.drop(columns="profiled"), profiled=prof, gain=gain, reading=text,
                launches=dict(at=at.to_dict(), one_per_process=one.to_dict()))


def served_rate_figure(names=MPS_SWEEPS, limiter=MPS_LIMITER) -> go.Figure:
    """The first wave's served rate against the session count: one line per sweep (SRl), SRc's beside them, and
    the lanes-limiter runs (4 and 8 processes) as markers."""
    rates = served_rates(names)
    fig = go.Figure()
    for (name, arm), g in rates.groupby(["dataset", "arm"], sort=False):
        g = g.sort_values("sessions")
        label = f"SRl, {name} ({int(g['lanes'].iloc[0])} lanes)" if arm == "SRl" else f"SRc, {name}"
        fig.add_trace(go.Scatter(x=g["sessions"], y=g["chunks_per_s"], mode="lines+markers", name=label,
                                 line=dict(dash="solid" if arm == "SRl" else "dot"),
                                 hovertemplate="N=%{x}: %{y:.1f} chunks/s<extra>" + label + "</extra>"))
    for r in limiter_runs(limiter) if limiter else []:
        label = f"SRl, {r['processes']} processes of {r['lanes'] // r['processes']} lanes ({r['dataset']})"
        fig.add_trace(go.Scatter(x=[r["sessions"]], y=[r["chunks_per_s"]], mode="markers", name=label,
                                 marker=dict(size=13, symbol="diamond" if r["processes"] > 4 else "square"),
                                 hovertemplate="N=%{x}: %{y:.1f} chunks/s<extra>" + label + "</extra>"))
    fig.update_layout(title="The rate each count's first wave of chunks was served at (lanes under MPS)",
                      xaxis_title="sessions served (N)", yaxis=dict(title="chunks per second", rangemode="tozero"),
                      height=420, margin=dict(t=60, b=50))
    return set_caption(fig, "Each point: N sessions' first chunks, arriving together, over the time to the last "
                            "one's completion. A line that flattens as N grows is a rate the lanes cannot raise "
                            "by serving more at once; the markers are the same lanes from 4 and from 8 processes.")
