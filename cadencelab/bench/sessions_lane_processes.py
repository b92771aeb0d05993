"""Arm ``SRl`` served from several processes sharing one device (``--lane-processes P``).

Why: one process serves every lane's chunk through one interpreter and one CUDA context; each chunk's graph
launches cost the host milliseconds per thousand graph nodes, and the lanes' threads launch through that one
context. ``P`` processes each hold their own :class:`~cadencelab.bench.sessions_lanes.LaneArmServer` (their own
weights, ``--lanes`` split between them, their own context) on the same device, so their launches and their
Python run side by side. Without MPS the device time-slices between the processes' contexts: kernels of two
processes never run at once, kernels of one process's lanes still do. With ``--mps`` the processes are clients
of one MPS daemon started for this arm (:class:`~cadencelab.bench.mps.Mps`), so their kernels share the SMs.
Which costs more is what the sessions study then measures.

Protocol: session ``i`` of a run is served by process ``i % P`` (its state, seed and prompt are the session's
own, so every chunk is what the session alone gives; the study's solo-B0 check compares them as for one
process). Every process starts the run at one wall-clock instant (``start_at``), submits each of its sessions'
chunks at its arrival, and answers its rows; the rows of all processes are one run. ``peak_bytes`` is the sum
of the processes' own peaks (each a ``max_memory_allocated`` of its context): an upper bound of the device's.

Set-up in waves: every process imports at once, but on CUDA process 0 sets up alone first; its set-up peak and
the device's free memory then size each next wave (:func:`next_wave`), so that 8 set-ups at their warm-up peaks
never meet on one card (they did: 8 x 10 GiB on an 80 GB H100) and a plan that cannot fit fails, named, first.
"""

from __future__ import annotations

import dataclasses
import statistics
import time

from .common import ArmProcess, serve
from .session_serving import horizon, schedule

__all__ = ["LaneProcessServer", "lanes_of", "next_wave", "one_process"]

#: seconds between sending a run and its start, so that every process has its request before t = 0
START_LEAD_S = 2.0


def lanes_of(lanes: int, processes: int) -> list[int]:
    """``lanes`` split over ``processes`` as evenly as they go (each at least one)."""
    if processes < 1 or lanes < processes:
        raise ValueError(f"--lane-processes {processes} needs at least as many lanes ({lanes}), one per process")
    return [lanes // processes + (k < lanes % processes) for k in range(processes)]


def one_process(cfg, lanes: int):
    """The config one lane process serves with: its own lanes, one process, no MPS of its own (the parent runs it)."""
    return dataclasses.replace(cfg, lanes=lanes, lane_processes=1, mps=False)


#: device bytes a lane process holds outside PyTorch's allocator (its CUDA context and module images), allowed
#: for when a wave is sized: an MPS client's context is smaller, a plain one near this
CONTEXT_ALLOWANCE = 1 << 30


def next_wave(waiting: int, memory: dict | None, ready: int, processes: int) -> int:
    """How many of the ``waiting`` lane processes may set up at once: as many as the device's free memory holds
    at the set-up peak, both in ``memory`` (read after the last wave; None off CUDA: all at once)."""
    if memory is None:
        return waiting
    need = memory["setup_peak_bytes"] + CONTEXT_ALLOWANCE
    fit = memory["free_bytes"] // need
    if fit < 1:
        raise RuntimeError(f"SRl lane processes: {ready} of {processes} set up; each set-up needs about "
                           f"{need / 2**30:.1f} GiB (a process's set-up peak plus its context) and the device has "
                           f"{memory['free_bytes'] / 2**30:.1f} GiB free: use fewer --lane-processes or --lanes")
    return min(waiting, int(fit))


def _prepare() -> None:
    """The imports before a lane process's device set-up: every process's overlap the others' set-ups."""
    from ..serving import lanes  # noqa: F401  (torch and the serving stack; no device work)
    from . import sessions_lanes  # noqa: F401


def _build(ckpt: str, cfg, lanes: int, share: tuple[int, int]):
    from .sessions_lanes import LaneArmServer

    server = LaneArmServer("SRl", ckpt, one_process(cfg, lanes), share)
    if server.cuda:  # the warm-up's freed blocks back to the device: P processes' caches would each keep them
        server.torch.cuda.empty_cache()
    return server


def _memory(server) -> dict | None:
    """A ready lane process's reading for :func:`next_wave` (its cache already returned by :func:`_build`)."""
    if not server.cuda:
        return None
    cuda = server.torch.cuda
    free, total = cuda.mem_get_info()
    return dict(setup_peak_bytes=int(cuda.max_memory_reserved()), held_bytes=int(cuda.memory_reserved()),
                free_bytes=int(free), total_bytes=int(total))


def _ready(server) -> dict:
    return dict(chunk_s=server.chunk_s, setup_s=server.setup_s, lanes=len(server.pool.lanes), memory=_memory(server))


def _run(server, cfg, workload: str, n: int, only: list, start_at: float) -> dict:
    from .session_serving import guarded_run

    server.cfg = one_process(cfg, len(server.pool.lanes))
    return guarded_run(_Part(server, only, start_at), workload, n)


def _profile(server, cfg, workload: str, n: int, only: list, start_at: float) -> dict:
    """:func:`_run` under ``torch.profiler``: its answer and ``kernels``, every device record's (start, end) in
    ``time.time_ns`` nanoseconds, so that the processes' kernels meet on one clock. The profiler's clock is read
    against ``time.time_ns`` at a marked range just before the run."""
    import numpy as np
    import torch

    from ..profile.capture import profiled

    with profiled(server.device, window=None) as p:
        with torch.profiler.record_function(_MARK):
            mark_ns = time.time_ns()
        res = _run(server, cfg, workload, n, only, start_at)
    r = p.trace.ranges
    mark = r[(r["name"] == _MARK) & (r["side"] == "cpu")]
    if mark.empty:
        raise RuntimeError(f"lane process profile: the trace has no {_MARK!r} range to set its clock by")
    offset = mark_ns - int(mark["start_ns"].iloc[0])
    k = p.trace.kernels
    res["kernels"] = dict(start_ns=(k["start_ns"].to_numpy(np.int64) + offset),
                          end_ns=(k["end_ns"].to_numpy(np.int64) + offset))
    return res


#: the range that sets a lane process's profiler clock against ``time.time_ns``
_MARK = "cadencelab.clock_mark"


class _Part:
    """One process's share of a run, as :func:`~.session_serving.guarded_run` calls it."""

    def __init__(self, server, only, start_at):
        self.server, self.only, self.start_at, self.arm = server, only, start_at, server.arm

    def run(self, workload, n):
        return self.server.run(workload, n, only=self.only, start_at=self.start_at)

    def recover(self):
        self.server.recover()


def _worker(conn, ckpt: str, cfg, lanes: int, share: tuple[int, int] = (0, 1)) -> None:
    serve(conn, lambda _: _build(ckpt, cfg, lanes, share), _ready,
          {"run": _run, "profile": _profile, "info": lambda server: server.info(), "memory": _memory},
          prepare=_prepare)


class LaneProcessServer:
    """``cfg.lane_processes`` lane servers in their own processes on ``cfg.device``, one run served by all."""

    def __init__(self, arm: str, ckpt: str, cfg, start_timeout_s: float = 900.0):
        self.arm, self.cfg = arm, cfg
        self.cuda = cfg.device.startswith("cuda")
        t0 = time.perf_counter()
        self.split = lanes_of(cfg.lanes, cfg.lane_processes)
        self.mps = None
        if cfg.mps:  # before any lane process makes its context
            from .mps import Mps

            self.mps = Mps().__enter__()
        self.procs, self.ready, self.waves = [], [], []
        try:
            for k, lanes in enumerate(self.split):
                self.procs.append(ArmProcess(f"{arm}/{k}", _worker, (ckpt, cfg, lanes, (k, len(self.split)))))
            self._set_up(start_timeout_s)
            if self.mps is not None and not self.mps.served():
                raise RuntimeError("--mps: the lane processes started but no MPS server runs: they are not its clients")
        except BaseException:
            self.close()
            raise
        self.setup_s = time.perf_counter() - t0
        # the processes together: each chunk at the slowest process's warm-up rate, P processes at once
        self.chunk_s = max(r["chunk_s"] for r in self.ready) / len(self.procs)

    def _set_up(self, timeout_s: float) -> None:
        """Every process's imports at once, then the device set-ups in waves (:func:`next_wave`): on CUDA the
        first wave is process 0 alone, whose reading sizes the next."""
        for p in self.procs:
            self._expect(p, "staged", timeout_s)
        wave = 1 if self.cuda else len(self.procs)
        while True:
            batch = self.procs[len(self.ready): len(self.ready) + wave]
            for p in batch:
                p.go()
            self.ready += [self._expect(p, "ready", timeout_s) for p in batch]
            self.waves.append(len(batch))
            waiting = len(self.procs) - len(self.ready)
            if not waiting:
                return
            wave = next_wave(waiting, self._reading(batch, timeout_s), len(self.ready), len(self.procs))

    def _reading(self, batch: list, timeout_s: float) -> dict | None:
        """After a wave: the device's free memory now (asked of its last process, every one of the wave ready)
        and the highest set-up peak the wave measured; None off CUDA."""
        peaks = [r["memory"]["setup_peak_bytes"] for r in self.ready[-len(batch):] if r.get("memory")]
        if not peaks:
            return None
        now = self._expect(batch[-1], "ok", timeout_s, ("memory",))
        return dict(now, setup_peak_bytes=max(peaks))

    @staticmethod
    def _expect(p, kind: str, timeout_s: float, ask: tuple | None = None) -> dict:
        got, res = p.ask(ask, timeout_s) if ask else p.wait(timeout_s)
        if got != kind:
            raise RuntimeError(f"{p.arm} failed to start: {str(res)[-2000:]}")
        return res

    def estimate_s(self, workload: str, n: int) -> float:
        return horizon(self.cfg, workload) + self.chunk_s * len(schedule(self.cfg, workload, n)) + START_LEAD_S

    def load(self, workload: str, n: int) -> float:
        return self.chunk_s * len(schedule(self.cfg, workload, n)) / horizon(self.cfg, workload)

    def run(self, workload: str, n: int, profile: bool = False) -> dict:
        """Serve ``n`` sessions: session i in process i % P, every process from one start instant. With
        ``profile`` each process serves under ``torch.profiler`` and the answer holds ``kernels`` (process,
        start_ns, end_ns on ``time.time_ns``'s clock) and ``start_ns`` (t = 0 of the rows' times on it)."""
        p_count = len(self.procs)
        start_at = time.time() + START_LEAD_S
        for k, p in enumerate(self.procs):
            p.conn.send(("profile" if profile else "run", self.cfg, workload, n,
                         [i for i in range(n) if i % p_count == k], start_at))
        limit = self.estimate_s(workload, n) * 4 + 120.0
        parts = []
        for p in self.procs:
            kind, res = p.wait(limit)
            if kind != "ok":
                raise RuntimeError(f"{p.arm}: {str(res)[-2000:]}")
            parts.append(res)
        rows = sorted((r for part in parts for r in part["rows"]), key=lambda r: (r["arrival_s"], r["session"]))
        oom = any(part["oom"] for part in parts)
        peaks = [part.get("peak_bytes") for part in parts]
        out = dict(arm=self.arm, workload=workload, sessions=n, rows=[] if oom else rows, oom=oom,
                   peak_bytes=None if oom or any(v is None for v in peaks) else int(sum(peaks)),
                   peak_bytes_per_process=peaks, lane_processes=p_count,
                   lanes_used=sum(part.get("lanes_used", 0) for part in parts),
                   state_bytes_per_session=max((part.get("state_bytes_per_session", 0) for part in parts), default=0),
                   captures=sum(part.get("captures", 0) for part in parts),
                   invalidations=sum(part.get("invalidations", 0) for part in parts),
                   eager_sections=sum(part.get("eager_sections", 0) for part in parts),
                   gil=[part.get("gil") for part in parts] if any(part.get("gil") for part in parts) else None)
        if oom:
            out["error"] = "; ".join(part.get("error", "") for part in parts if part["oom"])
        if profile:
            import pandas as pd

            out["start_ns"] = int(start_at * 1e9)
            out["kernels"] = pd.concat([pd.DataFrame(dict(process=k, **part["kernels"])) for k, part in enumerate(parts)
                                        if "kernels" in part], ignore_index=True)
        for r in out["rows"]:  # the lane a row names: its process's lanes counted after the earlier processes'
            r["process"] = r["session"] % p_count
            r["lane"] = sum(self.split[: r["process"]]) + r["lane"]
        return out

    def recover(self) -> None:
        """Each process recovers after its own out-of-memory (inside its run)."""

    def info(self) -> dict:
        infos = []
        for p in self.procs:
            kind, res = p.ask(("info",), 120.0)
            infos.append(res if kind == "ok" else dict(error=str(res)[-500:]))
        first = next((i for i in infos if "error" not in i), {})
        return dict(arm=self.arm, setup_s=self.setup_s, chunk_s_warmup=self.chunk_s, lanes=sum(self.split),
                    lane_processes=len(self.procs), lanes_per_process=self.split,
                    lane_bytes=[b for i in infos for b in i.get("lane_bytes", [])],
                    weight_bytes=first.get("weight_bytes"), weight_copies=len(self.procs),
                    template_bytes=sum(i.get("template_bytes", 0) for i in infos),
                    declared_state_bytes=first.get("declared_state_bytes"),
                    captures_after_warmup=sum(i.get("captures_after_warmup", 0) for i in infos),
                    captures_end=sum(i.get("captures_end", 0) for i in infos),
                    invalidations_end=sum(i.get("invalidations_end", 0) for i in infos),
                    eager_sections_after_warmup=sum(i.get("eager_sections_after_warmup", 0) for i in infos),
                    determinism=first.get("determinism"), device=first.get("device"),
                    warmup_chunk_s_per_process=[r["chunk_s"] for r in self.ready],
                    median_warmup_chunk_s=statistics.median(r["chunk_s"] for r in self.ready),
                    mps=self.mps.record() if self.mps is not None else dict(on=False),
                    setup_waves=self.waves, setup_memory=[r.get("memory") for r in self.ready],
                    processes=infos)

    def close(self) -> None:
        for p in self.procs:
            p.stop()
        if self.mps is not None:
            mps, self.mps = self.mps, None
            mps.__exit__(None, None, None)
