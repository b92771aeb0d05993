"""Where a lane's host time per chunk goes: a timer on a :class:`~cadencelab.serving.lanes.LanePool`.

:class:`HostSplit` wraps, per lane and only through public names, the calls a chunk makes and times each
(wall and the thread's CPU time), attributing them to the chunk its thread is serving:

* ``lock_wait``: taking the pool lock (shared, before the chunk; exclusive for an eager section);
* ``swap``: parking the lane's resident session and loading the chunk's session (device copies enqueued);
* ``tokens_in``: the tokens' copy to the device; ``classify``: the kit's frame count and class label;
* ``signature``, ``checks``: an engine keying the call and checking its addresses (pointer guards);
* ``stage``, ``launch``, ``outputs``: a replay's staging copies, its graph launch, its outputs handed back;
* ``to_host``: the waveform's copy enqueued; ``device_wait``: the host waiting for the chunk's device work;
* ``other``: the rest of the chunk's host window (kit and runtime bookkeeping, eager glue ops, RNG state).

Every graph launch is also kept as an interval (:attr:`HostSplit.launches`) so a study can ask whether the
lanes' launches run side by side or take turns (:func:`cadencelab.profile.limiter.concurrency`). On CUDA each
chunk also records two events on its lane's stream around its synthesis, read back as its device span against
one reference event (:meth:`HostSplit.device_spans`).

The timer costs a few microseconds per call (two clock reads per part); a study reports it beside an untimed run.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time

__all__ = ["PARTS", "HostSplit"]

#: the parts of a chunk's host time, in the order a chunk meets them
PARTS = ("lock_wait", "swap", "tokens_in", "classify", "signature", "checks", "stage", "launch", "outputs",
         "to_host", "device_wait")


class HostSplit:
    """Times every lane of ``pool`` (see the module docstring); :meth:`remove` puts the pool back as it was.

    Use :meth:`start` before a run (it clears the records and, on CUDA, records the reference event) and read
    :attr:`chunks` (one dict per chunk), :attr:`launches` and :meth:`device_spans` after it."""

    def __init__(self, pool):
        import torch

        self.pool, self.torch, self.cuda = pool, torch, pool.cuda
        self._tls = threading.local()
        self._mu = threading.Lock()
        self._undo: list = []
        self.chunks: list[dict] = []
        self.launches: list[dict] = []
        self._ref = None
        self._patch(pool.lock, "shared", self._lock_wrapper(pool.lock.shared))
        self._patch(pool.lock, "exclusive", self._lock_wrapper(pool.lock.exclusive))
        for ln in pool.lanes:
            m, rt = ln.manager, ln.runtime
            self._patch(m, "stream", self._chunk_wrapper(ln.index, m.stream))
            self._patch(m, "park", self._timed("swap", m.park))
            self._patch(m.swap, "load", self._timed("swap", m.swap.load))
            self._patch(rt.staging, "tokens_to_device", self._timed("tokens_in", rt.staging.tokens_to_device))
            self._patch(rt.staging, "to_host", self._to_host_wrapper(rt.staging))
            if rt.kit is not None:
                self._patch(rt.kit, "frames_of", self._timed("classify", rt.kit.frames_of))
            for name, e in rt.engines.items():
                self._undo.append((e, "timer", e.timer, True))
                e.timer = functools.partial(self._part, name)

    # -- installing ------------------------------------------------------------------------------
    def _patch(self, obj, name: str, fn) -> None:
        had = name in vars(obj)
        self._undo.append((obj, name, vars(obj).get(name), had))
        setattr(obj, name, fn)

    def remove(self) -> None:
        """Every wrapper taken off (the instances' own attributes restored)."""
        for obj, name, old, had in reversed(self._undo):
            if had:
                setattr(obj, name, old)
            else:
                delattr(obj, name)
        self._undo.clear()

    def start(self) -> None:
        """Clear the records; on CUDA synchronise and record the reference event the device spans count from."""
        with self._mu:
            self.chunks, self.launches = [], []
        if self.cuda:
            torch = self.torch
            torch.cuda.synchronize(self.pool.device)
            self._ref = torch.cuda.Event(enable_timing=True)
            self._ref.record()
            torch.cuda.synchronize(self.pool.device)
        self.t0 = time.perf_counter()

    # -- timing ------------------------------------------------------------------------------------
    def _add(self, part: str, wall: float, cpu: float) -> None:
        rec = getattr(self._tls, "chunk", None)
        if rec is None:  # outside a chunk (the lock before it): held until the thread's next chunk opens
            rec = self._tls.pending = getattr(self._tls, "pending", None) or {}
        rec[part + "_ms"] = rec.get(part + "_ms", 0.0) + wall * 1e3
        rec[part + "_cpu_ms"] = rec.get(part + "_cpu_ms", 0.0) + cpu * 1e3

    @contextlib.contextmanager
    def _part(self, engine: str, part: str):
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            yield
        finally:
            t1, c1 = time.perf_counter(), time.thread_time()
            self._add(part, t1 - t0, c1 - c0)
            if part == "launch":
                rec = getattr(self._tls, "chunk", None)
                with self._mu:
                    self.launches.append(dict(lane=None if rec is None else rec["lane"], engine=engine,
                                              thread=threading.get_ident(), start_s=t0 - self.t0, end_s=t1 - self.t0,
                                              wall_ms=(t1 - t0) * 1e3, cpu_ms=(c1 - c0) * 1e3))

    def _timed(self, part: str, fn):
        def timed(*args, **kwargs):
            t0, c0 = time.perf_counter(), time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self._add(part, time.perf_counter() - t0, time.thread_time() - c0)
        return timed

    def _lock_wrapper(self, hold):
        @contextlib.contextmanager
        def timed(*args, **kwargs):
            t0, c0 = time.perf_counter(), time.thread_time()
            with hold(*args, **kwargs):
                self._add("lock_wait", time.perf_counter() - t0, time.thread_time() - c0)
                yield
        return timed

    def _to_host_wrapper(self, staging):
        to_host = staging.to_host

        def timed(speech):
            t0, c0 = time.perf_counter(), time.thread_time()
            staging.waited_from = None
            out = to_host(speech)
            t1, c1 = time.perf_counter(), time.thread_time()
            waited = staging.waited_from if staging.waited_from is not None else t1  # CPU: nothing to wait for
            self._add("to_host", waited - t0, 0.0)
            self._add("device_wait", t1 - waited, 0.0)
            rec = getattr(self._tls, "chunk", None)
            if rec is not None:
                rec["to_host_cpu_total_ms"] = rec.get("to_host_cpu_total_ms", 0.0) + (c1 - c0) * 1e3
            return out
        return timed

    def _chunk_wrapper(self, lane: int, stream):
        def chunk(session, tokens, *args, **kwargs):
            held = getattr(self._tls, "pending", None) or {}
            rec = dict(lane=lane, session=session.sid, chunk=session.chunks, **held)
            self._tls.pending = None
            ev = None
            if self.cuda and kwargs.get("events") is None:
                ev = (self.torch.cuda.Event(enable_timing=True), self.torch.cuda.Event(enable_timing=True))
                kwargs["events"] = ev
            self._tls.chunk = rec
            t0, c0 = time.perf_counter(), time.thread_time()
            try:
                return stream(session, tokens, *args, **kwargs)
            finally:
                t1, c1 = time.perf_counter(), time.thread_time()
                self._tls.chunk = None
                rec.update(start_s=t0 - self.t0, end_s=t1 - self.t0, wall_ms=(t1 - t0) * 1e3,
                           cpu_ms=(c1 - c0) * 1e3, thread=threading.get_ident())
                rec["_events"] = ev
                with self._mu:
                    self.chunks.append(rec)
        return chunk

    # -- reading ---------------------------------------------------------------------------------
    def device_spans(self) -> None:
        """(CUDA) Each chunk's synthesis on its lane's stream, from the reference event: ``dev_start_ms``,
        ``dev_end_ms`` in every chunk record (the device synchronised first). Nothing on a CPU."""
        if not self.cuda:
            for r in self.chunks:
                r.pop("_events", None)
            return
        self.torch.cuda.synchronize(self.pool.device)
        for r in self.chunks:
            ev = r.pop("_events", None)
            if ev is not None and self._ref is not None:
                r["dev_start_ms"] = self._ref.elapsed_time(ev[0])
                r["dev_end_ms"] = self._ref.elapsed_time(ev[1])

    def rows(self) -> list[dict]:
        """The chunk records with every part present (0 where a chunk met none) and ``other_ms`` the rest of its
        host window."""
        self.device_spans()
        out = []
        for r in self.chunks:
            r = {k: v for k, v in r.items() if not k.startswith("_")}
            for p in PARTS:
                r.setdefault(p + "_ms", 0.0)
                r.setdefault(p + "_cpu_ms", 0.0)
            inside = sum(r[p + "_ms"] for p in PARTS if p != "lock_wait")
            r["other_ms"] = max(0.0, r["wall_ms"] - inside)
            out.append(r)
        return out
