"""What limits the lanes: one lane pool served at its break point, every chunk's host time split by part.

``python -m cadencelab.bench lanes-limiter --device cuda --sessions 28,32 --out DIR``

One process, one :class:`~cadencelab.bench.sessions_lanes.LaneArmServer` serving as the sessions study's SRl arm
does (``--lanes`` SRc graph sets on one set of weights, one stream and thread each, speak-heavy sessions at the
1 s cadence, chunks submitted at their arrival):

1. the pool is built and warmed up as the sessions study does it;
2. with :class:`~cadencelab.bench.lanes_split.HostSplit` installed, one session alone (the reference a launch's
   slow-down is read against), then every ``--sessions`` count: each chunk's host window split into its parts
   (lock wait, swap, staging, graph launch, the wait for the device, ...), each graph launch kept as an interval,
   and on CUDA each chunk's device span from events on its lane's stream;
3. the largest count again without the timer (``--untimed``): what the timer itself costs;
4. on CUDA (``--profile``), one second under ``torch.profiler``: the kernels' busy union, each stream's busy time,
   their overlap (:func:`cadencelab.profile.streams.stream_overlap`) and how many graph launches ran at once.

Read with :func:`cadencelab.viz.limiter.analyse_limiter`; the summary's ``reading`` per count is
:func:`cadencelab.profile.limiter.reading`. Writes ``lanes_limiter.json`` and per-chunk, per-launch and
per-stream CSVs (``lanes_limiter_chunks.csv``, ``_launches.csv``, ``_streams.csv``) under ``--out``.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass

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
    n_timesteps: int = options.steps()
    seed: int = options.seed()
    condition: str = options.condition()
    out: str = options.out("lanes-limiter")
    overwrite: bool = options.overwrite()


def _sessions_cfg(cfg: LimiterConfig, speak_seconds: int | None = None):
    from .sessions import SessionsConfig

    return SessionsConfig(config=cfg.config, device=cfg.device, arms=("SRl",), workloads=("speak_heavy",),
                          sessions=(1,), lanes=cfg.lanes, speak_seconds=speak_seconds or cfg.speak_seconds,
                          prompts=cfg.prompts, cadence_s=cfg.cadence_s, n_timesteps=cfg.n_timesteps, seed=cfg.seed,
                          condition=cfg.condition, processes=False, out=cfg.out)


def _served(server, n: int, split=None) -> tuple[list, list, dict]:
    """One speak-heavy run of ``n`` sessions (timed by ``split`` when given): (chunk rows, launch rows, point)."""
    if split is not None:
        split.start()
    res = server.run("speak_heavy", n)
    rows = res["rows"]
    point = dict(sessions=n, timed=split is not None, chunks=len(rows),
                 holds=holds_cadence(rows, n, server.cfg.cadence_s), worst_p95_ms=worst_p95(rows),
                 lanes_used=res.get("lanes_used"),
                 eager_sections=res.get("eager_sections"), captures=res.get("captures"))
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


def table(result: dict) -> str:
    """The short table printed last: per count the parts that take most of a chunk's host window, and the reading."""
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
    p = result.get("profiled")
    if p:
        lines.append(f"profiled N={p['sessions']}: device busy {p['busy_share']:.0%}, overlap {p['overlap']:.2f} over "
                     f"{p['streams']:.0f} streams, graph launches {p['graph_launch_concurrency']:.2f} at once "
                     f"(mean {p['graph_launch_mean_ms']:.1f} ms)")
    return "\n".join(lines)


def _cli(args) -> int:
    cfg = config_from_args(LimiterConfig, args)
    res = run_study(cfg, progress=lambda m: print(m, flush=True))
    print(table(res), flush=True)
    return 0


def add_parser(sub) -> None:
    add_study_parser(sub, "lanes-limiter", LimiterConfig, "what limits the lanes: host time per chunk split by part, "
                     "graph launches and the device at the break point", _cli)

