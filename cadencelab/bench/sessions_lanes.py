"""Arm ``SRl`` of the ``sessions`` study: sessions served by a :class:`~cadencelab.serving.lanes.LanePool`.

``cfg.lanes`` SRc graph sets over one set of weights, each on its own CUDA stream, fed by one thread per lane
(:class:`~cadencelab.serving.lanes.LaneExecutor`). Why threads: a lane's chunk is a few replayed graphs with eager
glue between them and ends by waiting for its waveform on the host; one thread per lane lets a lane wait while the
others launch (graph launches release the interpreter lock), with no launcher loop to write.

Unlike the one-at-a-time arms, laid on a virtual clock, lanes overlap on the device, so a run is served in **real
time**: each chunk is submitted at its arrival and its latency is its wall-clock completion minus its arrival.
Each row also records the lane, the time queued on it (``queue_ms``), the service time, the time the thread took
to enqueue the chunk's device work (``launch_ms``, interpreter-lock waits included) and the thread's CPU time
(``host_ms``, spinning on the device included).

Warm-up: every lane streams two interleaved sessions over every chunk position a run reaches, one lane at a time
(each lane captures its own graphs, registering its own generator), then all lanes stream together once, whose
wall time per chunk is the budget's estimate. Exactness: every chunk against the session run alone through B0,
the same gate as SRc.
"""

from __future__ import annotations

import contextlib
import time

import numpy as np

from ..profile.gil import GilProbe
from .session_serving import (SAMPLE_RATE, DeviceServer, arrival, digest, horizon, max_chunks, schedule,
                              session_chunk, session_seed, tensor_digest)

ARM = "SRl"


class LaneArmServer(DeviceServer):
    """The lane pool, its prompt templates and the real-time runs."""

    def __init__(self, arm: str, ckpt: str, cfg, share: tuple[int, int] = (0, 1)):
        """``share = (k, P)``: this server serves the sessions ``i % P == k`` (one of ``P`` lane processes), so
        it opens only the prompt templates those sessions fork (session ``i`` takes prompt ``i % prompts``)."""
        from ..serving.lanes import LanePool
        from ..serving.sessions import declared_state_bytes

        flow, hift, mcfg = self._load(arm, ckpt, cfg, "SRc")
        self.pool = LanePool(flow, hift, self.device, cfg.lanes, "SRc", n_timesteps=cfg.n_timesteps, cfg=mcfg,
                             backend=self.backend)
        self.declared = declared_state_bytes(self.pool.lanes[0].runtime.decl)
        k, p_count = share
        used = sorted({i % len(self.prompts) for i in range(k, k + p_count * len(self.prompts), p_count)})
        self.templates = {p: self.pool.open(-1 - p, self.prompts[p], 0) for p in used}
        self.setup_s = time.perf_counter() - self._t0
        self.chunk_s = self._warm_up()
        self.captures_after_warmup = self.pool.captures()
        self.eager_after_warmup = self.pool.eager_sections
        self.template_bytes = sum(t.state_bytes() for t in self.templates.values())

    def _template(self, i: int):
        """Session ``i``'s template: its prompt's (a session of another lane process has none here)."""
        p = i % len(self.prompts)
        if p not in self.templates:
            raise KeyError(f"SRl lane server: session {i} takes prompt {p}, whose template this process (serving "
                           f"prompts {sorted(self.templates)}) did not open")
        return self.templates[p]

    def _spare(self, i: int):
        """A template for the ``i``-th warm-up session: the served prompts' in turn (their shapes get captured)."""
        t = list(self.templates.values())
        return t[i % len(t)]

    def _warm_up(self) -> float:
        from ..serving.lanes import LaneExecutor

        pool, cfg = self.pool, self.cfg
        k_max = max_chunks(cfg)
        for ln in pool.lanes:  # one lane at a time: its captures
            ss = [pool.fork(self._spare(i), -100 - 2 * ln.index - i, 7 + i) for i in range(2)]
            for k in range(k_max):
                for i, s in enumerate(ss):
                    pool.stream(s, session_chunk(cfg, 10_000 + i, k, self.vocab), lane=ln.index)
            for s in ss:
                pool.close(s)
        n = len(pool.lanes)  # every lane at once: the steady time per chunk
        ss = [pool.fork(self._spare(i), -1000 - i, 7 + i) for i in range(n)]
        per_chunk = []
        with LaneExecutor(pool) as ex:
            for k in range(k_max):
                t0 = time.perf_counter()
                futs = [ex.submit(s, session_chunk(cfg, 10_000 + i, k, self.vocab)) for i, s in enumerate(ss)]
                for f in futs:
                    f.result()
                per_chunk.append((time.perf_counter() - t0) / n)
        for s in ss:
            pool.close(s)
        return float(np.median(per_chunk))

    def record_trace(self, path, lanes: int = 2) -> str | None:
        """A Chrome trace (gzipped) of one steady round of ``lanes`` sessions on ``lanes`` lanes at once:
        the lanes' kernels overlapping on their streams. CUDA only; returns the file written."""
        import gzip
        import os
        import shutil

        from ..serving.lanes import LaneExecutor
        from ..profile.capture import profiled
        from ..profile.outputs import atomic_path

        if not self.cuda:
            return None
        pool, cfg = self.pool, self.cfg
        lanes = min(lanes, len(pool.lanes))
        ss = [pool.fork(self._spare(i), -2000 - i, 11 + i) for i in range(lanes)]
        k_max = max_chunks(cfg)
        with LaneExecutor(pool) as ex:
            for k in range(k_max + 1):
                toks = [session_chunk(cfg, 20_000 + i, k, self.vocab) for i in range(lanes)]
                if k < k_max:
                    for f in [ex.submit(s, t) for s, t in zip(ss, toks)]:
                        f.result()
                    continue
                with profiled(self.device, trace_path=str(path), window="lanes_round"):
                    with self.torch.profiler.record_function("lanes_round"):
                        for f in [ex.submit(s, t) for s, t in zip(ss, toks)]:
                            f.result()
        for s in ss:
            pool.close(s)
        with open(path, "rb") as src, atomic_path(f"{path}.gz") as tmp, gzip.open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst)
        os.remove(path)
        return f"{path}.gz"

    def estimate_s(self, workload: str, n: int) -> float:
        """Seconds a run takes: the schedule's horizon plus the chunks at the concurrent warm-up rate."""
        return horizon(self.cfg, workload) + self.chunk_s * len(schedule(self.cfg, workload, n))

    def _drop_sessions(self) -> None:
        pool = self.pool
        for s in [s for s in pool.sessions.values() if s.sid >= 0]:
            pool.close(s)

    def run(self, workload: str, n: int, only=None, start_at: float | None = None) -> dict:
        """Serve ``n`` sessions in real time: each chunk submitted at its arrival, lanes serving at once.

        ``only``: the sessions of the ``n`` this process serves (default all; :mod:`.sessions_lane_processes`
        splits them over processes); ``start_at``: the wall-clock time (``time.time()``) of t = 0, shared by
        those processes (default: now)."""
        from ..serving.lanes import LaneExecutor

        torch, pool, cfg = self.torch, self.pool, self.cfg
        self._fresh()
        served = sorted(set(range(n) if only is None else only))
        sessions = {i: pool.fork(self._template(i), i, session_seed(cfg, i)) for i in served}
        items = sorted((x for x in schedule(cfg, workload, n) if x[1] in sessions),
                       key=lambda x: (arrival(cfg, x[0], x[1], n), x[1]))
        tokens = {(i, k): session_chunk(cfg, i, k, self.vocab) for _, i, k in items}
        submitted = []
        self._sync()
        probe = GilProbe() if cfg.gil_probe else None
        with probe or contextlib.nullcontext(), LaneExecutor(pool) as ex:
            t0 = time.perf_counter() + (start_at - time.time() if start_at is not None else 0.0)
            for t, i, k in items:
                at = arrival(cfg, t, i, n)
                wait = t0 + at - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
                submitted.append((at, i, k, ex.submit(sessions[i], tokens[i, k])))
            results = [(at, i, k, f.result()) for at, i, k, f in submitted]
        rows = []
        for at, i, k, r in results:
            done = r.finished - t0
            rows.append(dict(arm=self.arm, workload=workload, sessions=n, session=i, chunk=k, arrival_s=at,
                             start_s=r.started - t0, completion_s=done, latency_ms=(done - at) * 1e3,
                             service_ms=(r.finished - r.started) * 1e3, queue_ms=(r.started - r.queued) * 1e3,
                             host_ms=r.host_s * 1e3, lane=r.lane,
                             launch_ms=(r.launched - r.started) * 1e3 if r.launched is not None else None, audio_s=len(r.output) / 2 / SAMPLE_RATE,
                             swap_bytes=r.swap_bytes, swap_ms=0.0,
                             sha_i16=digest(r.output), sha_mel=tensor_digest(r.mel)))
        peak = torch.cuda.max_memory_allocated(self.device) if self.cuda else None
        state = pool.state_bytes()
        out = dict(arm=self.arm, workload=workload, sessions=n, rows=rows, peak_bytes=peak, oom=False,
                   state_bytes_per_session=max((state[i] for i in served), default=0),
                   captures=pool.captures(), invalidations=pool.invalidations(),
                   lanes_used=len({r["lane"] for r in rows}),
                   eager_sections=pool.eager_sections - self.eager_after_warmup,
                   gil=probe.summary() if probe else None)
        for s in sessions.values():
            pool.close(s)
        return out

    def info(self) -> dict:
        pool = self.pool
        return dict(arm=self.arm, setup_s=self.setup_s, chunk_s_warmup=self.chunk_s, lanes=len(pool.lanes),
                    lane_bytes=[ln.state_bytes for ln in pool.lanes], weight_bytes=pool.weight_bytes,
                    template_bytes=self.template_bytes, declared_state_bytes=self.declared,
                    captures_after_warmup=self.captures_after_warmup, captures_end=pool.captures(),
                    invalidations_end=pool.invalidations(),
                    eager_sections_after_warmup=pool.eager_sections - self.eager_after_warmup,
                    determinism=self.determinism, summaries={f"lane{ln.index}": ln.runtime.summaries()
                                                             for ln in pool.lanes},
                    device=str(self.device))
