"""Lanes: several Token2wav sessions' graphs replaying at once on one GPU, each bit-identical to its solo B0 run.

A :class:`~.sessions.SessionManager` time-multiplexes one graph set, whose small kernels leave most of the device
idle. A :class:`LanePool` holds ``L`` *lanes*, each a full SRc runtime with its own state, graphs, host staging and
CUDA stream, all reading the *same* weights (:func:`share_weights`). Replay changes no kernel and no shape, so
isolation is what keeps a session exact whatever runs beside it:

* **state**: a lane's graphs touch only its buffers; with more sessions than lanes a lane swaps snapshots as a
  ``SessionManager`` does, and a session parked by one lane may continue on another (the load waits on an event).
* **randomness**: a graph reads seed and offset at replay from the generator state object that was the default's
  at capture. Each lane owns a generator, shared with the default (``Generator.graphsafe_set_state``) while its
  graphs are captured, so its replays advance only its own; a session's seed and offset are loaded before its
  chunk and read back after, so its draws do not depend on the lane or its neighbours.
* **eager work** (probe, capture, fallback, priming) runs *exclusively*: the engines' ``eager_guard`` upgrades the
  lane's shared hold of the pool lock to an exclusive one and points the default generators at the lane's (device)
  and the session's (host) state; every chunk ends with its stream synchronised, so no other work is in flight.
* **routing** (:func:`route`): to the lane already holding work of the session, else where it is resident, else
  the least loaded, so a session's chunks never run out of order.

On a CPU (no streams; the vocoder draws from the host generator) chunks run exclusively, one lane at a time.
"""

from __future__ import annotations

import contextlib
import copy
import numbers
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Sequence

import torch

from ..state.alloc import check_copies_fit
from .sessions import RngState, Session, SessionManager, check_new_session, check_template
from ..adapters.token2wav.turns import check_flag, check_tokens

__all__ = ["share_weights", "route", "LaneLock", "Lane", "LanePool", "LaneExecutor", "ChunkResult"]


def share_weights(module: torch.nn.Module) -> torch.nn.Module:
    """A copy of ``module`` that reads the same parameter tensors and owns every buffer.

    Parameters are the weights every lane reads; buffers are workspaces, state (the solver's cache
    buffers) and small constants, so each lane gets its own."""
    memo = {id(p): p for p in module.parameters()}
    return copy.deepcopy(module, memo)


def route(pending_lane: int | None, resident_lane: int | None, loads: Sequence[int]) -> int:
    """The lane a session's next chunk goes to.

    pending_lane: the lane that holds queued or running work of this session (its chunks stay in order);
    resident_lane: the lane whose bindings hold the session's state (no swap there);
    loads: queued + running chunks per lane. Otherwise the least loaded lane (lowest index on ties).
    """
    if not loads:
        raise ValueError("route: no lanes")
    for lane in (pending_lane, resident_lane):
        if lane is not None:
            if not 0 <= lane < len(loads):
                raise ValueError(f"route: lane {lane} outside 0..{len(loads) - 1}")
            return lane
    return min(range(len(loads)), key=lambda i: (loads[i], i))


class LaneLock:
    """Shared for replays, exclusive for eager work; a waiting exclusive holder blocks new shared ones."""

    def __init__(self):
        self._cv = threading.Condition()
        self._shared = 0
        self._exclusive = False
        self._waiting = 0
        self.exclusive_entries = 0

    @contextlib.contextmanager
    def shared(self):
        with self._cv:
            self._cv.wait_for(lambda: not self._exclusive and not self._waiting)
            self._shared += 1
        try:
            yield
        finally:
            with self._cv:
                self._shared -= 1
                self._cv.notify_all()

    @contextlib.contextmanager
    def exclusive(self, held_shared: bool = False):
        """Exclusive hold; ``held_shared``: the caller holds a shared one, given up for the duration."""
        with self._cv:
            if held_shared:
                self._shared -= 1
                self._cv.notify_all()
            self._waiting += 1
            self._cv.wait_for(lambda: not self._exclusive and self._shared == 0)
            self._waiting -= 1
            self._exclusive = True
            self.exclusive_entries += 1
        try:
            yield
        finally:
            with self._cv:
                self._exclusive = False
                if held_shared:  # back to the caller's shared hold, at once: it is mid-chunk
                    self._shared += 1
                self._cv.notify_all()


@dataclass
class Lane:
    """One graph set: a runtime over shared weights, its session bindings, stream and generator."""

    index: int
    manager: SessionManager
    stream: object = None  # torch.cuda.Stream on CUDA
    generator: torch.Generator | None = None  # CUDA: the state object this lane's graphs registered
    state_bytes: int = 0  # device bytes this lane added when built (buffers, staging)
    chunks: int = 0
    current: Session | None = field(default=None, repr=False)  # the session whose chunk runs now

    @property
    def runtime(self):
        return self.manager.rt


@dataclass
class ChunkResult:
    """One chunk served by a lane: the output and its timing (seconds on ``time.perf_counter``)."""

    lane: int
    sid: int
    output: object
    mel: torch.Tensor  # the chunk's mel on the device, as the runtime returned it (a fresh tensor per chunk)
    queued: float
    started: float
    finished: float
    host_s: float  # the lane thread's CPU time for the chunk
    swap_bytes: int = 0  # state copied out of and into the lane's bindings for this chunk
    launched: float | None = None  # when the chunk's device work was all enqueued (then the thread waits; CUDA)


class LanePool:
    """``lanes`` Token2wav runtimes of ``arm`` over one set of weights, serving sessions concurrently.

    flow, hift: vendor modules built at ``arm``'s envelope (``runtime_envelope(arm)``); they stay the
        weight source and are not streamed through themselves.
    The pool's sessions are :class:`~.sessions.Session` snapshots; :meth:`stream` serves one chunk on
    the lane :func:`route` picks (or ``lane=``), from the calling thread; :class:`LaneExecutor`
    serves chunks from one thread per lane.
    """

    def __init__(self, flow, hift, device, lanes: int, arm: str = "SRc", **runtime_kwargs):
        from ..adapters.token2wav.runtime import ARMS, Token2wavRuntime

        if isinstance(lanes, bool) or not isinstance(lanes, numbers.Integral) or lanes < 1:
            raise ValueError(f"LanePool: lanes must be an integer >= 1, got {lanes!r}")
        if isinstance(arm, str) and arm not in ARMS:
            raise ValueError(f"LanePool: unknown arm {arm!r} (lanes serve SRc)")
        spec = ARMS[arm] if isinstance(arm, str) else arm
        if not spec.state_rule or spec.replay != "call":
            raise ValueError(f"LanePool: lanes serve the chunk-replay state-rule arm (SRc), got {spec.name!r}")
        check_copies_fit((flow, hift), device, lanes := int(lanes), "LanePool: lanes")  # each lane owns its buffers
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.lock = LaneLock()
        self._mu = threading.Lock()
        self.sessions: dict[int, Session] = {}
        self._resident: dict[int, int] = {}  # sid -> lane whose bindings hold it
        self._pending: dict[int, tuple[int, int]] = {}  # sid -> (lane, chunks queued or running)
        self._loads = [0] * lanes
        self._parked: dict[int, object] = {}  # sid -> CUDA event recorded after its snapshot was written
        self._tls = threading.local()
        self.eager_sections = 0  # exclusive sections entered by the engines' eager work while lanes served
        self.weight_bytes = sum(p.numel() * p.element_size() for m in (flow, hift) for p in m.parameters())
        self.lanes: list[Lane] = []
        for i in range(lanes):
            before = torch.cuda.memory_allocated(self.device) if self.cuda else 0
            f, h = share_weights(flow), share_weights(hift)
            rt = Token2wavRuntime(f, h, self.device, spec, **runtime_kwargs)
            gen = None
            if self.cuda:
                idx = self.device.index if self.device.index is not None else torch.cuda.current_device()
                gen = torch.cuda.default_generators[idx].clone_state()
            lane = Lane(i, SessionManager(rt, generator=gen), torch.cuda.Stream(self.device) if self.cuda else None, gen)
            for e in rt.engines.values():
                e.eager_guard = self._eager_guard
            if self.cuda:
                torch.cuda.synchronize(self.device)
                lane.state_bytes = torch.cuda.memory_allocated(self.device) - before
            self.lanes.append(lane)

    # -- generators and the lock ------------------------------------------------------------
    @contextlib.contextmanager
    def _defaults(self, lane: Lane, session: Session | None):
        """The default generators serve ``lane`` / ``session`` for an eager section (CUDA)."""
        idx = lane.generator.device.index
        default = torch.cuda.default_generators[idx]
        saved_device = default.graphsafe_get_state()
        saved_host = torch.get_rng_state()
        default.graphsafe_set_state(lane.generator)
        if session is not None:
            torch.set_rng_state(session.rng.host)
        try:
            yield
        finally:
            if session is not None:
                session.rng.host = torch.get_rng_state()
            torch.set_rng_state(saved_host)
            default.graphsafe_set_state(saved_device)

    @contextlib.contextmanager
    def _eager_guard(self):
        """Entered by a lane's engines around eager work (CUDA): exclusive, with the lane's generators."""
        lane = getattr(self._tls, "lane", None)
        if lane is None or getattr(self._tls, "exclusive", False):
            yield  # already exclusive (warm-up, priming, a CPU pool), or called outside a lane
            return
        with self.lock.exclusive(held_shared=True), self._defaults(lane, lane.current):
            self.eager_sections += 1
            self._tls.exclusive = True
            try:
                yield
            finally:
                self._tls.exclusive = False

    @contextlib.contextmanager
    def _on(self, lane: Lane, exclusive: bool, session: Session | None = None):
        """Run on ``lane``: its stream current, the pool lock held (shared on CUDA unless ``exclusive``)."""
        exclusive = exclusive or not self.cuda
        hold = self.lock.exclusive() if exclusive else self.lock.shared()
        with hold:
            self._tls.lane, self._tls.exclusive = lane, exclusive
            try:
                stream = torch.cuda.stream(lane.stream) if self.cuda else contextlib.nullcontext()
                gens = self._defaults(lane, session) if (exclusive and self.cuda) else contextlib.nullcontext()
                with stream, gens:
                    yield
            finally:
                self._tls.lane, self._tls.exclusive = None, False

    # -- sessions ------------------------------------------------------------------------------
    def open(self, sid: int, prompt, seed: int) -> Session:
        """A new session primed with ``prompt`` (on lane 0, exclusively), parked; generators as ``manual_seed(seed)``."""
        check_new_session(self.sessions, sid, seed, "LanePool.open", prompt)
        lane = self.lanes[0]
        with self._mu:
            self._park_resident(lane, on_stream=True)
        with self._on(lane, exclusive=True):
            m = lane.manager
            if self.cuda:  # prime with the default generators (priming draws nothing; the seed is the session's)
                m.generator = None
            try:
                s = m.open(sid, prompt, seed)
            finally:
                m.generator = lane.generator
            m.detach(s)
            self._sync(lane)
        self.sessions[sid] = s
        return s

    def fork(self, template: Session, sid: int, seed: int) -> Session:
        """A new session from ``template``'s primed, unstreamed snapshot, with its own seed."""
        check_new_session(self.sessions, sid, seed, "LanePool.fork")
        self._check_own(template, "fork")
        check_template(template)
        self.park(template)
        with self.lock.exclusive():  # seeding goes through the default generators, which eager sections borrow
            s = Session(sid, template.prompt, int(seed), RngState.seeded(seed, self.device),
                        state={k: v.clone() for k, v in template.state.items()}, host=dict(template.host))
            if self.cuda:
                torch.cuda.synchronize(self.device)
        self.sessions[sid] = s
        return s

    def close(self, session: Session) -> None:
        """Drop a session (parked first if a lane holds it; closed already: nothing); its snapshot is freed."""
        if isinstance(session, Session) and session.closed:
            return
        self._check_own(session, "close")
        with self._mu:
            if session.sid in self._pending:
                raise RuntimeError(f"close: session {session.sid} has chunks queued or running")
            lane = self._resident.pop(session.sid, None)
            if lane is not None:
                self.lanes[lane].manager.resident = None  # its bindings are dropped with the session
            self._parked.pop(session.sid, None)
        session.state, session.closed = {}, True
        session.last_mel = session.last_speech = None
        self.sessions.pop(session.sid, None)

    def park(self, session: Session) -> None:
        """Write ``session``'s state back into its snapshot if a lane holds it (that lane is then free)."""
        self._check_own(session, "park")
        with self._mu:
            lane = self._resident.get(session.sid)
            if lane is None:
                return
            if session.sid in self._pending:
                raise RuntimeError(f"park: session {session.sid} has chunks queued or running")
            self._park_resident(self.lanes[lane], on_stream=True)
        if self.cuda:
            self._parked[session.sid].synchronize()

    def resident_lane(self, session: Session) -> int | None:
        return self._resident.get(session.sid)

    def _park_resident(self, lane: Lane, keep: Session | None = None, on_stream: bool = False) -> int:
        """(under ``_mu``) Save the lane's resident session unless it is ``keep``; record when its snapshot
        is written. Returns the bytes copied."""
        r = lane.manager.resident
        if r is None or r is keep:
            return 0
        stream = torch.cuda.stream(lane.stream) if (self.cuda and on_stream) else contextlib.nullcontext()
        with stream:
            moved = lane.manager.park()
            if self.cuda:
                ev = torch.cuda.Event()
                ev.record()
                self._parked[r.sid] = ev
        self._resident.pop(r.sid, None)
        return moved

    # -- serving ---------------------------------------------------------------------------------
    def assign(self, session: Session) -> int:
        """Route ``session``'s next chunk (:func:`route`) and count it as pending on that lane."""
        with self._mu:
            pend = self._pending.get(session.sid)
            lane = route(pend[0] if pend else None, self._resident.get(session.sid), self._loads)
            self._pending[session.sid] = (lane, (pend[1] if pend else 0) + 1)
            self._loads[lane] += 1
            return lane

    def _done(self, session: Session, lane: int) -> None:
        with self._mu:
            ln, n = self._pending[session.sid]
            if n <= 1:
                del self._pending[session.sid]
            else:
                self._pending[session.sid] = (ln, n - 1)
            self._loads[lane] -= 1

    def stream(self, session: Session, tokens, last_chunk: bool = False, lane: int | None = None,
               return_waveform: bool = False) -> ChunkResult:
        """One chunk of ``session`` on ``lane`` (default: :func:`route`'s pick), from the calling thread; every
        argument is checked before any state changes (a refused call leaves no trace)."""
        tokens, lane = self._check_chunk(session, tokens, last_chunk, "stream", lane)
        if lane is None:
            lane = self.assign(session)
        else:
            with self._mu:
                pend = self._pending.get(session.sid)
                if pend and pend[0] != lane:
                    raise RuntimeError(f"session {session.sid} has chunks pending on lane {pend[0]}, not {lane}")
                held = self._resident.get(session.sid)
                if held is not None and held != lane:
                    if pend:
                        raise RuntimeError(f"session {session.sid} is busy on lane {held}")
                    self._park_resident(self.lanes[held], on_stream=True)  # a move: park it where it was
                self._pending[session.sid] = (lane, (pend[1] if pend else 0) + 1)
                self._loads[lane] += 1
        return self._run(self.lanes[lane], session, tokens, last_chunk, return_waveform, time.perf_counter())

    def _run(self, lane: Lane, s: Session, tokens, last_chunk: bool, return_waveform: bool, queued: float) -> ChunkResult:
        try:
            with self._on(lane, exclusive=False, session=s):
                started, cpu0 = time.perf_counter(), time.thread_time()
                with self._mu:
                    moved = self._park_resident(lane, keep=s)
                    self._resident[s.sid] = lane.index
                    ev = self._parked.pop(s.sid, None)
                if ev is not None:
                    torch.cuda.current_stream().wait_event(ev)
                lane.current = s
                lane.runtime.staging.waited_from = None
                try:
                    out = lane.manager.stream(s, tokens, last_chunk=last_chunk, return_waveform=return_waveform)
                finally:
                    lane.current = None
                swap = lane.manager.last_swap
                moved += swap.bytes_in + swap.bytes_out if swap is not None else 0
                lane.chunks += 1
                return ChunkResult(lane.index, s.sid, out, s.last_mel, queued, started, time.perf_counter(),
                                   time.thread_time() - cpu0, moved, lane.runtime.staging.waited_from)
        finally:
            self._done(s, lane.index)

    def _sync(self, lane: Lane) -> None:
        if self.cuda:
            lane.stream.synchronize()

    # -- reports ---------------------------------------------------------------------------------
    def captures(self) -> int:
        return sum(ln.manager.captures() for ln in self.lanes)

    def invalidations(self) -> int:
        return sum(ln.manager.invalidations() for ln in self.lanes)

    def state_bytes(self) -> dict[int, int]:
        """Snapshot bytes per session (resident sessions parked first so their snapshots are current)."""
        for s in list(self.sessions.values()):
            self.park(s)
        return {sid: s.state_bytes() for sid, s in self.sessions.items()}

    def counters(self):
        import pandas as pd

        frames = []
        for ln in self.lanes:
            c = ln.runtime.counters()
            if len(c):
                frames.append(c.assign(lane=ln.index))
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    def _check_own(self, session: Session, what: str) -> None:
        if not isinstance(session, Session) or self.sessions.get(session.sid) is not session:
            raise ValueError(f"LanePool.{what}: {str(session)[:80]} is not an open session of this pool")

    def _check_chunk(self, session: Session, tokens, last_chunk, what: str, lane=None) -> tuple[list[int], int | None]:
        """One chunk's arguments and the lane asked for, checked before anything is routed or counted."""
        if isinstance(session, Session) and session.closed:
            raise ValueError(f"session {session.sid} is closed")
        self._check_own(session, what)
        check_flag(last_chunk, "last_chunk", f"LanePool.{what}")
        n = len(self.lanes)
        if lane is not None and (isinstance(lane, bool) or not isinstance(lane, numbers.Integral) or not 0 <= lane < n):
            raise ValueError(f"LanePool.{what}: lane {lane!r} is not a lane of this pool (an integer in 0..{n - 1})")
        return check_tokens(tokens, self.lanes[0].runtime.vocab_size, f"LanePool.{what}"), None if lane is None else int(lane)



class LaneExecutor:
    """One worker thread per lane: ``submit`` routes a chunk and returns a Future of its :class:`ChunkResult`.

    Chunks of one lane run in submission order; different lanes run at once (CUDA streams). Use as a
    context manager, or call :meth:`shutdown`.
    """

    def __init__(self, pool: LanePool):
        self.pool = pool
        self._queues = [queue.Queue() for _ in pool.lanes]
        self._threads = [threading.Thread(target=self._work, args=(i,), name=f"lane-{i}", daemon=True)
                         for i in range(len(pool.lanes))]
        for t in self._threads:
            t.start()

    def submit(self, session: Session, tokens, last_chunk: bool = False) -> Future:
        tokens = self.pool._check_chunk(session, tokens, last_chunk, "submit")[0]
        fut: Future = Future()
        lane = self.pool.assign(session)
        self._queues[lane].put((session, tokens, last_chunk, fut, time.perf_counter()))
        return fut

    def _work(self, i: int) -> None:
        lane = self.pool.lanes[i]
        while True:
            item = self._queues[i].get()
            if item is None:
                return
            s, tokens, last_chunk, fut, queued = item
            if not fut.set_running_or_notify_cancel():
                self.pool._done(s, i)
                continue
            try:
                fut.set_result(self.pool._run(lane, s, tokens, last_chunk, False, queued))
            except BaseException as e:  # noqa: BLE001 - handed to the caller through the future
                fut.set_exception(e)

    def shutdown(self) -> None:
        for q in self._queues:
            q.put(None)
        for t in self._threads:
            t.join()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.shutdown()
