"""What limits the lanes: one lane pool served at its break point, every chunk's host time split by part.

``python -m cadencelab.bench lanes-limiter --device cuda --sessions 28,32 --out DIR``

One process serves as the sessions study's SRl arm does (``--lanes`` SRc graph sets over one set of weights, one
stream and thread each, speak-heavy sessions at the 1 s cadence). With
:class:`~cadencelab.bench.lanes_split.HostSplit` installed: one session alone (the reference), then every
``--sessions`` count, each chunk's host window split into parts (lock wait, swap, staging, graph launch, device
wait, ...) and each graph launch kept as an interval; the largest count again untimed (what the timer costs);
on CUDA one profiled second (kernels' busy union, overlap across streams, graph launches at once). Read with
:func:`cadencelab.viz.limiter.analyse_limiter`. Writes ``lanes_limiter.json`` and per-chunk, per-launch and
per-stream CSVs under ``--out``.

With ``--lane-processes P`` (and ``--mps``) P processes serve, where no timer reaches the lane threads: each
count's arrival waves (:func:`cadencelab.profile.limiter.waves`) and, on CUDA, one second with every process under
``torch.profiler``, all their kernels on one clock (:func:`cadencelab.profile.limiter.device_across`): their busy
union over the wave and how many ran at once. ``mode`` "processes" in the JSON; the chunk rows in the CSV.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass

from ..profile.limiter import gil_point
from . import options
from .common import built_checkpoint, check_out, write_csv, write_json
from .flags import MAX_CHUNKS, add_study_parser, config_from_args, int_range, ints_in, opt
from .session_serving import holds_cadence, worst_p95

__all__ = ["LimiterConfig", "run_study", "table"]


@dataclass
class LimiterConfig:
    config: str = options.model_config()
    device: str = options.device()
    sessions: tuple = opt((28, 32), parse=ints_in(1, MAX_CHUNKS),
                          help="session counts served with the timer (speak-heavy); N = 1 runs first as the reference")
    lanes: int = opt(16, type=int_range(1, 64), help="graph sets replaying concurrently, one CUDA stream each")
    speak_seconds: int = opt(3, type=int_range(1, MAX_CHUNKS), help="seconds (chunks per session) of each run")
    prompts: int = opt(4, type=int_range(1, MAX_CHUNKS), help="distinct prompts, taken in turn by the sessions")
    cadence_s: float = 1.0
    untimed: bool = opt(True, help="serve the largest count once more without the timer (what the timer costs)")
    profile: bool = opt(True, on_cpu=False, help="CUDA: one second of the largest count under torch.profiler "
                                                 "(kernels' busy union, overlap across streams)")
    profile_sessions: int = opt(0, type=int_range(0, MAX_CHUNKS),
                                help="sessions of the profiled second (0: the largest --sessions count)")
    lane_processes: int = opt(1, type=int_range(1, 16),
                              help="serve the lanes from this many processes (split between them), as the sessions "
                                   "study does; no host timer then: waves and the kernels of every process")
    mps: bool = opt(False, help="with --lane-processes > 1: the processes as clients of one CUDA MPS daemon")
    gil_probe: bool = opt(True, help="a thread in every lane process that sleeps 2 ms in a loop and times how late "
                                     "it wakes: the interpreter lock's wait while the lanes serve")
    n_timesteps: int = options.steps()
    seed: int = options.seed()
    condition: str = options.condition()
    out: str = options.out("lanes-limiter")
    overwrite: bool = options.overwrite()

    def __post_init__(self):
        if not 1 <= self.lane_processes <= self.lanes:
            raise ValueError(f"LimiterConfig.lane_processes must be in 1..lanes ({self.lanes}), got {self.lane_processes}")
        if self.mps and self.lane_processes < 2:
            raise ValueError(f"LimiterConfig.mps serves lane processes: it needs --lane-processes of 2 or more, "
                             f"got {self.lane_processes}")


def _sessions_cfg(cfg: LimiterConfig, speak_seconds: int | None = None):
    from .sessions import SessionsConfig

    return SessionsConfig(config=cfg.config, device=cfg.device, arms=("SRl",), workloads=("speak_heavy",),
                          sessions=(1,), lanes=cfg.lanes, speak_seconds=speak_seconds or cfg.speak_seconds,
                          prompts=cfg.prompts, cadence_s=cfg.cadence_s, n_timesteps=cfg.n_timesteps, seed=cfg.seed,
                          condition=cfg.condition, processes=False, lane_processes=cfg.lane_processes, mps=cfg.mps,
                          gil_probe=cfg.gil_probe, out=cfg.out)


def _served(server, n: int, split=None) -> tuple[list, list, dict]:
    """One speak-heavy run of ``n`` sessions (timed by ``split`` when given): (chunk rows, launch rows, point)."""
    if split is not None:
        split.start()
    res = server.run("speak_heavy", n)
    rows = res["rows"]
    point = _point(res, n, server.cfg.cadence_s, split is not None)
    if split is None:
        return [], [], point
    served = {(r["session"], r["chunk"]): r for r in rows}
    chunks = []
    for r in split.rows():
        s = served.get((r["session"], r["chunk"]), {})
        chunks.append(dict(sessions=n, **r, latency_ms=s.get("latency_ms"), queue_ms=s.get("queue_ms"),
                           arrival_s=s.get("arrival_s")))
    launches = [dict(sessions=n, **x) for x in split.launches]
    return chunks, launches, point


def _point(res: dict, n: int, cadence_s: float, timed: bool) -> dict:
    rows = res["rows"]
    return dict(sessions=n, timed=timed, chunks=len(rows), holds=holds_cadence(rows, n, cadence_s),
                worst_p95_ms=worst_p95(rows), lanes_used=res.get("lanes_used"), oom=bool(res.get("oom")),
                eager_sections=res.get("eager_sections"), captures=res.get("captures"), **gil_point(res.get("gil")))


def _profiled_second(server, cfg: LimiterConfig, n: int, progress) -> tuple[dict, list]:
    """One second of ``n`` sessions under torch.profiler (CUDA): the device's busy union and overlap, and the
    ``cudaGraphLaunch`` calls' concurrency across threads."""
    from ..profile.capture import profiled
    from ..profile.limiter import concurrency
    from ..profile.streams import stream_busy, stream_overlap

    server.cfg = _sessions_cfg(cfg, speak_seconds=1)
    try:
        with profiled(server.device, window=None) as p:
            server.run("speak_heavy", n)
    finally:
        server.cfg = _sessions_cfg(cfg)
    ov = stream_overlap(p.trace).iloc[0].to_dict()
    streams = stream_busy(p.trace).to_dict("records")
    la = p.trace.launches
    g = la[la["name"] == "cudaGraphLaunch"]
    c = concurrency(g["start_ns"] / 1e9, g["end_ns"] / 1e9)
    out = dict(sessions=n, **{k: float(v) for k, v in ov.items()},
               busy_share=float(ov["busy_union_ms"] / ov["wall_ms"]) if ov["wall_ms"] else float("nan"),
               graph_launches=c["intervals"], graph_launch_concurrency=c["mean"], graph_launch_max_concurrent=c["max"],
               graph_launch_mean_ms=float(g["dur_ns"].mean() / 1e6) if len(g) else float("nan"),
               graph_launch_union_share=c["union_s"] * 1e3 / ov["wall_ms"] if ov["wall_ms"] else float("nan"),
               kernels=int(len(p.trace.kernels)))
    progress(f"profiled second, N={n}: device busy {out['busy_share']:.0%} of {ov['wall_ms']:.0f} ms, overlap "
             f"{ov['overlap']:.2f} across {int(ov['streams'])} streams; graph launches {c['mean']:.1f} at once")
    return out, streams


def run_study(cfg: LimiterConfig, progress=print) -> dict:
    """Serve, split, profile, write; the result (its ``table``: :func:`cadencelab.viz.limiter.analyse_limiter`)."""
    from .lanes_split import HostSplit
    from .sessions_lanes import LaneArmServer

    out = check_out(cfg, ("lanes_limiter*",))
    t_start = time.perf_counter()
    if cfg.lane_processes > 1:
        return _run_processes(cfg, out, t_start, progress)
    counts = sorted(set(cfg.sessions))
    with built_checkpoint(cfg.config, cfg.seed, progress) as ckpt:
        server = LaneArmServer("SRl", ckpt, _sessions_cfg(cfg))
        progress(f"SRl: {cfg.lanes} lanes ready in {time.perf_counter() - t_start:.0f} s, warm-up chunk "
                 f"{server.chunk_s * 1e3:.0f} ms")
        split = HostSplit(server.pool)
        chunks, launches, points = [], [], []
        try:
            for n in [1, *[c for c in counts if c != 1]]:
                c, la, pt = _served(server, n, split)
                chunks += c
                launches += la
                points.append(pt)
                progress(f"N={n} (timed): {'holds' if pt['holds'] else 'BREAKS'} the cadence, worst p95 "
                         f"{pt['worst_p95_ms']:.0f} ms, {len(la)} graph launches")
        finally:
            split.remove()
        if cfg.untimed:
            _, _, pt = _served(server, counts[-1])
            points.append(pt)
            progress(f"N={counts[-1]} (untimed): {'holds' if pt['holds'] else 'BREAKS'}, worst p95 "
                     f"{pt['worst_p95_ms']:.0f} ms")
        info = dict(lanes=len(server.pool.lanes), chunk_s_warmup=server.chunk_s, setup_s=server.setup_s,
                    captures_after_warmup=server.captures_after_warmup)
        result = _write(cfg, out, t_start, info, points, chunks, launches)  # the timed runs stand whatever follows
        if cfg.profile and server.cuda:
            try:
                profile, streams = _profiled_second(server, cfg, cfg.profile_sessions or counts[-1], progress)
            except Exception:  # the timed runs stand without it; the reason is recorded
                profile, streams = None, []
                result["profile_error"] = traceback.format_exc()[-2000:]
                progress(f"profiled second failed: {result['profile_error'].strip().splitlines()[-1]}")
                write_json(result, out / "lanes_limiter.json", strict_json=False)
            else:
                info.update(captures_end=server.pool.captures(),
                            eager_sections=server.pool.eager_sections - server.eager_after_warmup)
                result = _write(cfg, out, t_start, info, points, chunks, launches, profile, streams)
    return result


def _write(cfg, out, t_start, info, points, chunks, launches, profile=None, streams=()) -> dict:
    """Analyse and write the result files; returns the result."""
    import pandas as pd

    from ..profile.limiter import reading
    from ..viz.limiter import analyse_limiter
    from .token2wav import provenance

    ch, la = pd.DataFrame(chunks), pd.DataFrame(launches)
    tab, _ = analyse_limiter(ch, la)
    if profile is not None:  # the profiled union outranks the device spans at the count it was recorded
        at = tab["sessions"] == profile["sessions"]
        tab.loc[at, "reading"] = [reading(r, profile["busy_share"]) for r in tab[at].to_dict("records")]
    result = dict(provenance=dict(provenance(cfg), wall_s=time.perf_counter() - t_start), server=info,
                  points=points, table=tab.to_dict("records"), profiled=profile, profile_error=None,
                  files=dict(chunks="lanes_limiter_chunks.csv", launches="lanes_limiter_launches.csv",
                             streams="lanes_limiter_streams.csv"))
    write_json(result, out / "lanes_limiter.json", strict_json=False)
    write_csv(ch, out / "lanes_limiter_chunks.csv")
    write_csv(la, out / "lanes_limiter_launches.csv")
    write_csv(pd.DataFrame(list(streams)), out / "lanes_limiter_streams.csv")
    return result


def _run_processes(cfg: LimiterConfig, out, t_start: float, progress) -> dict:
    """The lanes from ``cfg.lane_processes`` processes: every count served once, then the profiled second."""
    from .sessions_lane_processes import LaneProcessServer

    counts = sorted(set(cfg.sessions))
    with built_checkpoint(cfg.config, cfg.seed, progress) as ckpt:
        server = LaneProcessServer("SRl", ckpt, _sessions_cfg(cfg))
        try:
            progress(f"SRl: {cfg.lanes} lanes in {cfg.lane_processes} processes (MPS {'on' if cfg.mps else 'off'}) "
                     f"ready in {server.setup_s:.0f} s")
            rows, points = [], []
            for n in counts:
                res = server.run("speak_heavy", n)
                rows += res["rows"]
                points.append(_point(res, n, cfg.cadence_s, False))
                progress(f"N={n}: {'holds' if points[-1]['holds'] else 'BREAKS'} the cadence, worst p95 "
                         f"{points[-1]['worst_p95_ms']:.0f} ms")
            info = server.info()
            result = _write_processes(cfg, out, t_start, info, points, rows)
            if cfg.profile and server.cuda:
                try:
                    profile = _profiled_across(server, cfg, cfg.profile_sessions or counts[-1], progress)
                except Exception:  # the served counts stand without it; the reason is recorded
                    result["profile_error"] = traceback.format_exc()[-2000:]
                    progress(f"profiled second failed: {result['profile_error'].strip().splitlines()[-1]}")
                    write_json(result, out / "lanes_limiter.json", strict_json=False)
                else:
                    result = _write_processes(cfg, out, t_start, info, points, rows, profile)
        finally:
            server.close()
    return result


def _profiled_across(server, cfg: LimiterConfig, n: int, progress) -> dict:
    """One second of ``n`` sessions, every lane process under ``torch.profiler``: the kernels of all processes
    over the wave (its arrival to its last completion), the wave's rate and the threads' CPU time."""
    import pandas as pd

    from ..profile.limiter import device_across, waves

    server.cfg = _sessions_cfg(cfg, speak_seconds=1)
    try:
        res = server.run("speak_heavy", n, profile=True)
    finally:
        server.cfg = _sessions_cfg(cfg)
    rows = res["rows"]
    if not rows:
        raise RuntimeError(f"profiled second, N={n}: no rows ({res.get('error', 'out of memory')})")
    if getattr(server, "cuda", False) and res["kernels"].empty:  # never a 0% busy device read from no records
        raise RuntimeError(f"profiled second, N={n}: the profiler recorded no kernels in any lane process")
    lo = res["start_ns"]
    hi = lo + int(max(r["completion_s"] for r in rows) * 1e9)
    d = device_across(res["kernels"], lo, hi)
    w = waves(pd.DataFrame(rows)).iloc[0]
    out = dict(sessions=n, **d, chunks_per_s=float(w["chunks_per_s"]), span_ms=float(w["span_ms"]),
               host_cores_per_process=float(w["host_cores_per_process"]), worst_p95_ms=worst_p95(rows))
    progress(f"profiled second, N={n}: kernels of {len(d['busy_share_by_process'])} processes busy "
             f"{d['busy_share']:.0%} of the wave's {d['window_ms']:.0f} ms, {d['at_once']:.1f} at once; "
             f"{w['chunks_per_s']:.1f} chunks/s")
    return out


def _write_processes(cfg, out, t_start, info, points, rows, profile=None) -> dict:
    import pandas as pd

    from ..profile.limiter import waves
    from .token2wav import provenance

    ch = pd.DataFrame(rows)
    w = waves(ch) if len(ch) else pd.DataFrame()
    result = dict(provenance=dict(provenance(cfg), wall_s=time.perf_counter() - t_start), mode="processes",
                  server=info, points=points, waves=w.to_dict("records"), profiled=profile, profile_error=None,
                  files=dict(chunks="lanes_limiter_chunks.csv"))
    write_json(result, out / "lanes_limiter.json", strict_json=False)
    write_csv(ch, out / "lanes_limiter_chunks.csv")
    return result


def table(result: dict) -> str:
    """The short table printed last: per count the parts that take most of a chunk's host window, and the reading."""
    if result.get("mode") == "processes":
        return _table_processes(result)
    lines = [f"{'N':>4} {'chunks/s':>8} {'wall ms':>8} {'launch ms':>9} {'at once':>7} {'speed-up':>8} "
             f"{'launch%':>7} {'device%':>7} {'py wait':>7}  reading"]
    for r in result["table"]:
        lines.append(f"{r['sessions']:>4} {r['chunks_per_s']:8.1f} {r['wall_ms']:8.1f} {r['launch_ms']:9.1f} "
                     f"{r['launch_concurrency']:7.2f} {r['launch_speedup']:8.2f} {r['launch_busy_share']:7.0%} "
                     f"{r['device_share']:7.0%} {r['python_wait_ms']:7.2f}  {r['reading']}")
    for pt in result["points"]:
        if not pt["timed"]:
            lines.append(f"untimed N={pt['sessions']}: worst p95 {pt['worst_p95_ms']:.0f} ms, "
                         f"{'holds' if pt['holds'] else 'breaks'}")
        if "gil_late_ms" in pt:
            lines.append(f"{'timed' if pt['timed'] else 'untimed'} N={pt['sessions']}: the lock probe woke "
                         f"{pt['gil_late_ms']:.2f} ms late (median; {pt['gil_idle_ms']:.2f} idle), late "
                         f"{pt['gil_late_share']:.0%} of the run")
    p = result.get("profiled")
    if p:
        lines.append(f"profiled N={p['sessions']}: device busy {p['busy_share']:.0%}, overlap {p['overlap']:.2f} over "
                     f"{p['streams']:.0f} streams, graph launches {p['graph_launch_concurrency']:.2f} at once "
                     f"(mean {p['graph_launch_mean_ms']:.1f} ms)")
    return "\n".join(lines)


def _table_processes(result: dict) -> str:
    first = {w["sessions"]: w for w in result["waves"] if w["wave"] == 0}
    lines = [f"{'N':>4} {'holds':>5} {'p95 ms':>7} {'wave-0 chunks/s':>15} {'host cores/process':>18} "
             f"{'lock late ms':>12} {'late share':>10}"]
    for pt in result["points"]:
        w = first.get(pt["sessions"], {})
        lines.append(f"{pt['sessions']:>4} {str(pt['holds']):>5} {pt['worst_p95_ms']:7.0f} "
                     f"{w.get('chunks_per_s', float('nan')):15.1f} {w.get('host_cores_per_process', float('nan')):18.2f} "
                     f"{pt.get('gil_late_ms', float('nan')):12.2f} {pt.get('gil_late_share', float('nan')):10.0%}")
    p = result.get("profiled")
    if p:
        lines.append(f"profiled N={p['sessions']}: kernels busy {p['busy_share']:.0%} of the wave's "
                     f"{p['window_ms']:.0f} ms, {p['at_once']:.1f} at once (most {p['max_at_once']}), "
                     f"{p['chunks_per_s']:.1f} chunks/s")
    return "\n".join(lines)


def _cli(args) -> int:
    cfg = config_from_args(LimiterConfig, args)
    res = run_study(cfg, progress=lambda m: print(m, flush=True))
    print(table(res), flush=True)
    return 0


def add_parser(sub) -> None:
    add_study_parser(sub, "lanes-limiter", LimiterConfig, "what limits the lanes: host time per chunk split by part, "
                     "graph launches and the device at the break point", _cli)

