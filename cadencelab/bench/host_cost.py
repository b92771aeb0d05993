"""The host cost of a replayed call's bookkeeping, per chunk, in fresh processes with intervals.

``python -m cadencelab.bench.host_cost --processes 4 --chunks 12`` (CPU, teaching config by default)

Each fresh (spawned) process builds one SRc lane (:class:`~cadencelab.serving.lanes.LanePool` of one
lane), times it with :class:`~cadencelab.bench.lanes_split.HostSplit` and streams ``--chunks`` chunks (sessions
of three chunks each, after one warm-up session). Per chunk it keeps the thread CPU time of the parts the
engines and the kit add around the model's own work: ``classify``, ``signature``, ``checks`` (the pointer guards), ``stage`` and ``outputs``,
and their sum ``bookkeeping``. The figure per part is the mean over processes of each process's mean, with its
95% hierarchical-bootstrap interval (:func:`cadencelab.profile.intervals.hierarchical_bootstrap`): processes,
then chunks within a process, resampled. On a CPU the graph launch is the model run eagerly: its part is not
a launch's cost and is not reported.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys

import numpy as np

__all__ = ["BOOKKEEPING", "measure_process", "measure", "summarise"]

#: the parts a replayed call adds around the model's own work
BOOKKEEPING = ("classify", "signature", "checks", "stage", "outputs")


def measure_process(chunks: int = 12, config: str = "teaching", n_timesteps: int = 3, seed: int = 0) -> dict:
    """In this process: part -> list of ms per chunk (one SRc lane, ``chunks`` timed chunks)."""
    import torch

    from ..adapters.token2wav import TEACHING, build_token2wav, make_prompt
    from ..serving.lanes import LanePool
    from ..adapters.token2wav.runtime import runtime_envelope
    from .lanes_split import HostSplit
    from .session_serving import session_chunk

    if config != "teaching":
        raise ValueError(f"host_cost measures the teaching config on a CPU, got {config!r}")
    cfg = TEACHING
    torch.manual_seed(seed)
    flow, hift = build_token2wav(cfg, seed, envelope=runtime_envelope("SRc", n_timesteps))
    pool = LanePool(flow, hift, "cpu", 1, "SRc", n_timesteps=n_timesteps, cfg=cfg, backend="eager")
    template = pool.open(-1, make_prompt(cfg, seed + 1), 0)
    chunk_cfg = type("ChunkCfg", (), dict(seed=seed))()
    per = 3

    def stream(sid: int, split=None):
        s = pool.fork(template, sid, 7 + sid)
        for k in range(per):
            pool.stream(s, session_chunk(chunk_cfg, sid, k, cfg.vocab_size))
        pool.close(s)

    stream(1000)  # warm-up: every class probed and admitted
    split = HostSplit(pool)
    split.start()
    for sid in range(-(-chunks // per)):
        stream(sid)
    rows = split.rows()[:chunks]
    split.remove()
    out = {p: [r[f"{p}_cpu_ms"] for r in rows] for p in BOOKKEEPING}
    out["bookkeeping"] = [sum(r[f"{p}_cpu_ms"] for p in BOOKKEEPING) for r in rows]
    return out


def _child(q, chunks, config, n_timesteps, seed):
    q.put(measure_process(chunks, config, n_timesteps, seed))


def measure(processes: int = 4, chunks: int = 12, config: str = "teaching", n_timesteps: int = 3) -> list[dict]:
    """:func:`measure_process` in ``processes`` fresh spawned processes, one after another."""
    ctx = mp.get_context("spawn")
    out = []
    for k in range(processes):
        q = ctx.Queue()
        p = ctx.Process(target=_child, args=(q, chunks, config, n_timesteps, k))
        p.start()
        out.append(q.get(timeout=900))
        p.join()
    return out


def summarise(samples: list[dict]) -> dict:
    """Per part: mean ms per chunk over processes and its 95% interval (hierarchical bootstrap)."""
    from ..profile.intervals import CONFIDENCE, hierarchical_bootstrap, point

    tail = 100 * (1 - CONFIDENCE) / 2
    res = {}
    for part in (*BOOKKEEPING, "bookkeeping"):
        s = [x[part] for x in samples]
        boot = hierarchical_bootstrap(s)
        res[part] = dict(ms=point(s), lo=float(np.percentile(boot, tail)), hi=float(np.percentile(boot, 100 - tail)),
                         processes=len(s), chunks=sum(len(v) for v in s))
    return res


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m cadencelab.bench.host_cost", description=__doc__.splitlines()[0])
    p.add_argument("--processes", type=int, default=4)
    p.add_argument("--chunks", type=int, default=12)
    p.add_argument("--steps", type=int, default=3)
    a = p.parse_args(argv)
    print(json.dumps(summarise(measure(a.processes, a.chunks, n_timesteps=a.steps)), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
