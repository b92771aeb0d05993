"""Many Token2wav sessions on one device: shared weights, shared graph bindings, per-session state.

A :class:`SessionManager` wraps one :class:`~cadencelab.adapters.token2wav.runtime.Token2wavRuntime` (one set of
weights and, for the replay arms, one set of captured graphs) and serves any number of :class:`Session` objects.
A session owns only its state snapshot: under the state rule the live extent of every carry, sized to its
region's retention bound A; otherwise its own stock caches (those aliasing the solver's shared buffers are cloned
when it is switched out, since the next chunk overwrites them); and its random state (:class:`RngState`). HiFT
draws from its device's default generator, which the vendor code cannot redirect, so the session's state is
restored into it before each chunk and read back after. ``torch.cuda.set_rng_state`` writes into the generator's
existing state object, the one every captured graph reads at replay, so a replay after a restore draws what the
session's eager call would (``graphsafe_set_state`` would swap the object and leave the graphs on the old one).

Design choice: **swap** the session's state into the bindings' fixed addresses when it takes them, rather than
per-session carries with pointer rebinding. Graphs read and write carries by address: other addresses would
trip the engines' pointer guards (drop, re-capture, fail to eager); patching kernel nodes is not exposed by torch
and would bypass the admission checks; one graph set per session multiplies capture time and pool memory by N.
A swap copies at most twice the declared state, and only when the bindings change hands, so N = 1 is exactly the
solo runtime (the ``sessions`` bench records every swap). Each session adds exactly its snapshot at the retention
bound, :func:`declared_state_bytes`, the slope the capacity study checks the peak against. Exactness: a session's
chunks are bit-identical to the same session run alone through B0, whatever runs in between.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Sequence

import torch

from ..adapters.token2wav.prompts import PromptState
from ..adapters.token2wav.turns import check_flag, check_tokens

#: the seeds torch.manual_seed takes
SEED_RANGE = (-(2**63), 2**64 - 1)


def check_new_session(sessions: dict, sid, seed, where: str, prompt=PromptState) -> None:
    """A new session's id (an integer not open in ``sessions``), seed (an integer torch can seed with) and,
    when given, prompt (a :class:`~cadencelab.adapters.token2wav.prompts.PromptState`); ValueError naming what was given otherwise."""
    import numpy as np

    for name, v in (("session id", sid), ("seed", seed)):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            raise ValueError(f"{where}: {name} must be an integer, got {v!r}")
    if not SEED_RANGE[0] <= seed <= SEED_RANGE[1]:
        raise ValueError(f"{where}: seed must be in {SEED_RANGE[0]}..{SEED_RANGE[1]}, got {seed}")
    if prompt is not PromptState and not isinstance(prompt, PromptState):
        raise ValueError(f"{where}: prompt must be a PromptState (make_prompt), got {type(prompt).__name__}")
    if sid in sessions:
        raise ValueError(f"session id {sid} is already open")

__all__ = ["RngState", "Session", "SessionManager", "declared_state_bytes", "STATE_REGIONS"]

STATE_REGIONS = ("estimator_att_cache", "conformer_att_cache", "estimator_cnn_cache", "conformer_cnn_cache",
                 "vocoder_mel_cache", "vocoder_source_cache", "vocoder_speech_cache")
"""The declared regions a session carries between chunks (workspaces and the constant noise excluded)."""


def check_template(template: "Session") -> None:
    """A fork starts from a primed snapshot: a template that has streamed chunks would hand its history on."""
    if template.chunks:
        raise ValueError(f"fork: template session {template.sid} has streamed {template.chunks} chunks; "
                         "fork from a freshly primed session")


# ---------------------------------------------------------------------------------------
# random state
# ---------------------------------------------------------------------------------------


@dataclass
class RngState:
    """The default generators' states a session's stream draws from: host, and the device's on CUDA."""

    host: torch.Tensor
    device: torch.Tensor | None = None
    device_index: int | None = None

    @classmethod
    def take(cls, device: torch.device) -> "RngState":
        if device.type == "cuda":
            idx = device.index if device.index is not None else torch.cuda.current_device()
            return cls(torch.get_rng_state(), torch.cuda.get_rng_state(idx), idx)
        return cls(torch.get_rng_state())

    @classmethod
    def seeded(cls, seed: int, device: torch.device) -> "RngState":
        """The state ``torch.manual_seed(seed)`` gives (as a solo run seeds at its turn start).

        The caller's generator states are left as they were.
        """
        saved = cls.take(device)
        torch.manual_seed(int(seed))
        out = cls.take(device)
        saved.restore()
        return out

    def restore(self) -> None:
        torch.set_rng_state(self.host)
        if self.device is not None:
            torch.cuda.set_rng_state(self.device, self.device_index)

    def nbytes(self) -> int:
        return self.host.numel() + (self.device.numel() if self.device is not None else 0)


# ---------------------------------------------------------------------------------------
# sessions
# ---------------------------------------------------------------------------------------


@dataclass
class Session:
    """One stream's state snapshot; everything else (weights, graphs, workspaces) is shared.

    ``state``: name -> tensor (state rule: one tensor per region at its retention bound; stock: each
    region's stock cache and ``spk``, as ``Token2wavRuntime.stock_state`` names them).
    ``host``: host bookkeeping (carry extents; the prompt tuple). ``last_mel`` / ``last_speech``:
    the latest chunk's flow output and waveform, as the runtime leaves them.
    """

    sid: int
    prompt: PromptState
    seed: int
    rng: RngState
    state: dict = field(default_factory=dict, repr=False)
    host: dict = field(default_factory=dict, repr=False)
    chunks: int = 0
    closed: bool = False
    last_mel: torch.Tensor | None = field(default=None, repr=False)
    last_speech: torch.Tensor | None = field(default=None, repr=False)

    def state_bytes(self) -> int:
        """Device bytes this session holds (distinct storages of its snapshot) plus its RNG state."""
        seen, total = set(), 0
        for t in self.state.values():
            s = t.untyped_storage()
            if s.data_ptr() not in seen:
                seen.add(s.data_ptr())
                total += s.nbytes()
        return total + self.rng.nbytes()


def declared_state_bytes(decl) -> int:
    """Bytes of one session's declared state: every region of :data:`STATE_REGIONS` at its retention bound A."""
    from ..contract.derivation import nbytes, region_shape

    return int(sum(nbytes(region_shape(decl, decl.region(name), _retention_bound(decl, name), stock=False),
                          decl.region(name).dtype) for name in STATE_REGIONS))


def _retention_bound(decl, region: str) -> int:
    from ..contract.derivation import envelope

    return int(envelope(decl, region)[1])


class _CarrySwap:
    """State-rule arms: copy live extents between the session snapshot and the kit's carries (the solver's own
    buffers included: they are the estimator regions' carries), and the turn's position."""

    def __init__(self, rt):
        self.rt = rt
        self.fixed = {"spk": lambda: rt.spk}

    @property
    def carries(self) -> dict:
        """The runtime's carries now (a carry replaced after construction is the one swapped)."""
        return {c.name: c for c in self.rt.carries()}

    def allocate(self) -> dict:
        out = {}
        for name, c in self.carries.items():
            shape = list(c.buffer.shape)
            shape[c.dim] = min(c.capacity, _retention_bound(self.rt.decl, name))
            out[name] = torch.zeros(shape, dtype=c.buffer.dtype, device=c.buffer.device)
        for name, get in self.fixed.items():
            out[name] = torch.zeros_like(get())
        return out

    def save(self, s: Session) -> int:
        moved = 0
        for name, c in self.carries.items():
            n = c.length
            if n > s.state[name].shape[c.dim]:
                raise ValueError(f"session {s.sid}: carry '{name}' holds {n} frames, above its retention bound "
                                 f"{s.state[name].shape[c.dim]}")
            s.state[name].narrow(c.dim, 0, n).copy_(c.buffer.narrow(c.dim, 0, n))
            s.host[name] = (c.length, c.cursor)
            moved += _nbytes(c.buffer.narrow(c.dim, 0, n))
        for name, get in self.fixed.items():
            s.state[name].copy_(get())
            moved += _nbytes(s.state[name])
        _save_turn(self.rt, s)
        return moved

    def load(self, s: Session) -> int:
        moved = 0
        for name, c in self.carries.items():
            n, cursor = s.host[name]
            c.buffer.narrow(c.dim, 0, n).copy_(s.state[name].narrow(c.dim, 0, n))
            c.length, c.cursor = n, cursor
            moved += _nbytes(c.buffer.narrow(c.dim, 0, n))
        for name, get in self.fixed.items():
            get().copy_(s.state[name])
            moved += _nbytes(s.state[name])
        _load_turn(self.rt, s)
        self.rt.stream_cache = None
        return moved


class _StockSwap:
    """Stock arms: the session's own stream state (:meth:`~cadencelab.adapters.token2wav.runtime.Token2wavRuntime.stock_state`); tensors in
    memory the runtime reuses on the next call (views of the shared solver buffers, outputs of engines that do
    not clone them: R's encoder, Rc's flow chunk) are cloned on save."""

    def __init__(self, rt):
        self.rt = rt

    def _shared_storages(self) -> set:
        dec = self.rt.flow.decoder
        dit = self.rt.dit()
        bufs = (dec.att_cache_buffer, dec.cnn_cache_buffer, dit.att_cache_buffer, dit.cnn_cache_buffer)
        pools = set().union(*(e.output_storages() for e in self.rt.engines.values()))
        return {b.untyped_storage().data_ptr() for b in bufs} | pools

    @staticmethod
    def _own(t, shared: set):
        if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() in shared:
            return t.clone()
        return t

    def allocate(self) -> dict:
        return {}

    def save(self, s: Session) -> int:
        moved = 0
        state = {}
        shared = self._shared_storages()
        for k, v in self.rt.stock_state().items():
            own = self._own(v, shared)
            moved += _nbytes(v) if own is not v else 0
            state[k] = own
        s.state = state
        _save_turn(self.rt, s)
        return moved

    def load(self, s: Session) -> int:
        self.rt.load_stock_state(s.state)
        _load_turn(self.rt, s)
        s.state = {}  # the runtime holds the tensors now; save() rebuilds the snapshot
        return 0


def _save_turn(rt, s: Session) -> None:
    """The session's place in its turn: its prompt, and which operators' final calls ran (rule arms)."""
    s.host["prompt"] = rt.cache
    s.host["ended"] = set(rt.kit.ended) if rt.kit is not None else None


def _load_turn(rt, s: Session) -> None:
    rt.cache = s.host["prompt"]
    if rt.kit is not None:
        rt.kit.ended = set(s.host.get("ended") or ())


def _nbytes(t) -> int:
    return t.numel() * t.element_size() if isinstance(t, torch.Tensor) else 0


@dataclass
class SwapRecord:
    """One change of hands of the bindings: bytes copied out and in, and the time it took."""

    out_sid: int | None
    in_sid: int
    bytes_out: int
    bytes_in: int
    ms: float


class SessionManager:
    """N Token2wav sessions on one runtime (one set of weights and graph bindings), swapped in turn.

    runtime: a :class:`~cadencelab.adapters.token2wav.runtime.Token2wavRuntime` of any arm; the manager owns it from now on
        (stream through the manager only).
    time_swaps: record each swap's duration (CUDA events, read after the chunk; host wall on CPU).
    generator: a CUDA generator whose state object the runtime's graphs registered at capture (a
        lane's, :mod:`.lanes`): a session's device state is loaded into it before its chunk and read
        back after, instead of into the device's default generator (the host generator is not
        touched: the lane's eager guard serves host draws).

    ``open(sid, prompt, seed)`` primes a new session (as a solo run does after
    ``torch.manual_seed(seed)``); ``fork(template, sid, seed)`` starts a session from a primed
    template's snapshot (priming is deterministic and draws no random numbers, so this equals
    priming again); ``stream(session, tokens, last_chunk)`` synthesises one chunk of that session.
    """

    def __init__(self, runtime, time_swaps: bool = True, generator: torch.Generator | None = None):
        if generator is not None and runtime.device.type != "cuda":
            raise ValueError("SessionManager: a lane generator is a CUDA generator; on a CPU the default generators serve")
        self.rt = runtime
        self.generator = generator
        self.device = runtime.device
        self.swap = _CarrySwap(runtime) if runtime.spec.state_rule else _StockSwap(runtime)
        self.time_swaps = time_swaps
        self.resident: Session | None = None
        self.sessions: dict[int, Session] = {}
        self.swaps: list[SwapRecord] = []
        self.last_swap: SwapRecord | None = None
        self._pending = None

    # -- life cycle ---------------------------------------------------------------------
    @torch.inference_mode()
    def open(self, sid: int, prompt: PromptState, seed: int) -> Session:
        """A new session primed with ``prompt``; its generators start as ``torch.manual_seed(seed)`` leaves them."""
        check_new_session(self.sessions, sid, seed, "SessionManager.open", prompt)
        self.park()
        s = Session(sid, prompt, int(seed), RngState.seeded(seed, self.device), state=self.swap.allocate())
        s.rng.restore()
        self.rt.set_stream_cache(prompt)
        s.rng = RngState.take(self.device)
        self.resident = s
        self.sessions[sid] = s
        self.park()
        return s

    @torch.inference_mode()
    def fork(self, template: Session, sid: int, seed: int) -> Session:
        """A new session starting from ``template``'s (primed, unstreamed) snapshot with its own seed."""
        check_new_session(self.sessions, sid, seed, "SessionManager.fork")
        self._check_own(template, "fork")
        check_template(template)
        if self.resident is template:
            self.park()
        state = {k: v.clone() for k, v in template.state.items()}
        s = Session(sid, template.prompt, int(seed), RngState.seeded(seed, self.device), state=state,
                    host=dict(template.host))
        self.sessions[sid] = s
        return s

    def detach(self, session: Session) -> None:
        """Park ``session`` if it holds the bindings and forget it (a lane pool keeps its sessions itself)."""
        if self.resident is session:
            self.park()
        self.sessions.pop(session.sid, None)

    def close(self, session: Session) -> None:
        """Drop a session's snapshot (its memory returns to the allocator); closing it again does nothing."""
        if isinstance(session, Session) and session.closed:
            return
        self._check_own(session, "close")
        if self.resident is session:
            self.resident = None
        session.state, session.closed = {}, True
        session.last_mel = session.last_speech = None
        self.sessions.pop(session.sid, None)

    @torch.inference_mode()
    def park(self) -> int:
        """Write the resident session's state back into its snapshot; the bindings are then free."""
        if self.resident is None:
            return 0
        moved = self.swap.save(self.resident)
        self.resident = None
        return moved

    # -- streaming ------------------------------------------------------------------------
    @torch.inference_mode()
    def stream(self, session: Session, tokens: Sequence[int] | torch.Tensor, last_chunk: bool = False,
               return_waveform: bool = False, events: tuple | None = None):
        """One chunk of ``session``: bind its state (swap if another session holds the bindings), run, keep its RNG.
        Every argument is checked before anything moves: a refused call leaves no trace."""
        if session.closed:
            raise ValueError(f"session {session.sid} is closed")
        self._check_own(session, "stream")
        tokens = check_tokens(tokens, self.rt.vocab_size, "SessionManager.stream")
        check_flag(last_chunk, "last_chunk", "SessionManager.stream")
        self._activate(session)
        if self.generator is None:
            session.rng.restore()
            out = self.rt.stream(tokens, last_chunk=last_chunk, return_waveform=return_waveform, events=events)
            session.rng = RngState.take(self.device)
        else:  # a lane: the session's device draws go through the lane's own generator
            self.generator.set_state(session.rng.device)
            out = self.rt.stream(tokens, last_chunk=last_chunk, return_waveform=return_waveform, events=events)
            session.rng.device = self.generator.get_state()
        session.chunks += 1
        session.last_mel, session.last_speech = self.rt.last_mel, self.rt.last_speech
        return out

    def _activate(self, s: Session) -> None:
        if self.resident is s:
            self.last_swap = None
            return
        cuda = self.device.type == "cuda" and self.time_swaps
        ev = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) if cuda else None
        t0 = time.perf_counter()
        if ev:
            ev[0].record()
        out_sid = self.resident.sid if self.resident is not None else None
        b_out = self.park()
        b_in = self.swap.load(s)
        if ev:
            ev[1].record()
        self.resident = s
        rec = SwapRecord(out_sid, s.sid, b_out, b_in, float("nan") if ev else (time.perf_counter() - t0) * 1e3)
        self._pending = (rec, ev) if ev else None
        self.last_swap = rec
        self.swaps.append(rec)
        if len(self.swaps) > 100_000:
            del self.swaps[:50_000]

    def swap_ms(self) -> float | None:
        """Duration of the latest swap (CUDA: reads its events; call after the chunk has synchronised)."""
        if self.last_swap is None:
            return None
        if self._pending is not None and self._pending[0] is self.last_swap:
            rec, ev = self._pending
            ev[1].synchronize()
            rec.ms = ev[0].elapsed_time(ev[1])
            self._pending = None
        return self.last_swap.ms

    # -- reports ---------------------------------------------------------------------------
    def state_bytes(self) -> dict[int, int]:
        """Snapshot bytes per open session (the resident one is parked first so its snapshot is current)."""
        self.park()
        return {sid: s.state_bytes() for sid, s in self.sessions.items()}

    def declared_state_bytes(self) -> int | None:
        """Declared per-session state (state-rule arms; None for stock arms, which have no declaration)."""
        return declared_state_bytes(self.rt.decl) if self.rt.spec.state_rule else None

    def captures(self) -> int:
        """Graphs captured so far by the runtime's engines (unchanged by switching sessions)."""
        return sum(c.captures for e in self.rt.engines.values() for c in e.classes.values())

    def invalidations(self) -> int:
        return sum(c.invalidations for e in self.rt.engines.values() for c in e.classes.values())

    def _check_own(self, session: Session, what: str) -> None:
        """``session`` is a Session and no other session of this manager has its id (a lane pool's sessions
        are detached from its lanes' managers: those pass)."""
        if not isinstance(session, Session) or self.sessions.get(session.sid, session) is not session:
            raise ValueError(f"SessionManager.{what}: {str(session)[:80]} is not a session of this manager")
