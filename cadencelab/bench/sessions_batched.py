"""EXPERIMENTAL arm of the ``sessions`` study: ``SRb``, cross-session batched replay.

The chunks that arrive in the same second and share a shape class are served together: split greedily into the
declared batch sizes (largest first), each batch is one flow call and one vocoder call of
:class:`~cadencelab.serving.batched.BatchedToken2wav` through CUDA graphs keyed on ``(B,) + label``, and every
chunk of a batch completes when the batch does. Aligned arrivals (every chunk at t = k s) are the best case for
batching. With ``--stagger`` the batcher still never waits for a batch to fill: whenever the device is free it
serves the oldest waiting chunk's class with every waiting chunk of that class that fits a declared size, a lone
arrival as a batch of one (:func:`next_batch`).

Exactness gate: the **batched eager path**, since batching is not bit-identical to a session run alone (see
:mod:`cadencelab.serving.batched`). A run records its plan (the batches, in order); the verification phase, after
the timed runs so the host-bound eager calls take no time from the sweep, streams the same batches in the same
order with the same per-batch seeds from fresh copies of the same primed sessions (:class:`BatchedGateServer`)
and compares every chunk's SHA-256 of int16 PCM and mel. Points left ungated by the time budget are named in the
summary; the comparison with each session run alone through B0 is reported (``exact_solo``) and gates nothing.
Each batch draws HiFT's noise from the default generator seeded with :func:`batch_seed` just before the call.
``SRbi`` (:class:`InvariantArmServer`): the same plans, ``invariant=True`` and each session's own seed (as B0
draws), so its chunks are gated against each session alone through B0, with no batched eager gate.
"""

from __future__ import annotations

import time

import numpy as np

from .session_serving import (SAMPLE_RATE, DeviceServer, arrival, digest, max_chunks, schedule,
                              session_chunk, session_seed, tensor_digest)

ARM = "SRb"
INVARIANT_ARM = "SRbi"


def batch_seed(cfg, workload: str, n: int, j: int) -> int:
    """Seed of the default generators before batch ``j`` of the run (workload, n)."""
    return (cfg.seed + 1) * 1_000_033 + {"mixed": 1, "speak_heavy": 2}.get(workload, 0) * 100_003 + 1009 * n + j


def largest(sizes, n: int) -> int:
    """The largest declared size that ``n`` members fill (1 must be declared)."""
    if 1 not in sizes:
        raise ValueError(f"batch sizes {sorted(sizes)} must include 1 so that every chunk can be served")
    return max(s for s in sizes if s <= n)


def split(members: list, sizes) -> list[list]:
    """``members`` in order, cut greedily into the largest declared sizes that fit (1 must be declared)."""
    out, rest = [], list(members)
    while rest:
        b = largest(sizes, len(rest))
        out.append(rest[:b])
        rest = rest[b:]
    return out


def next_batch(pending: list[tuple[float, int, int]], clock: float, sizes, shape_class,
               aligned: bool) -> list[tuple[float, int, int]]:
    """The batch the device serves next, from ``pending`` (arrival, session, chunk) in arrival order.

    Eligible: a session's earliest pending chunk only (its state must advance in order), among
    the chunks of the earliest pending second (``aligned``: every arrival at a whole second) or
    among those that have arrived by ``clock`` (staggered; if none has, the next one to arrive).
    The batch is the class of the oldest eligible chunk: its eligible chunks in arrival order,
    as many as the largest declared size that fits.
    """
    first = pending[0][0]
    if aligned:
        ready = [p for p in pending if p[0] == first]
    else:
        ready = [p for p in pending if p[0] <= max(clock, first)]
    seen, eligible = set(), []
    for p in ready:
        if p[1] not in seen:
            seen.add(p[1])
            eligible.append(p)
    cls = shape_class(eligible[0][1], eligible[0][2])
    members = [p for p in eligible if shape_class(p[1], p[2]) == cls]
    return members[:largest(sizes, len(members))]


def simulate(cfg, workload: str, n: int, shape_class,
             service=lambda batch: 0.0) -> list[tuple[float, list[tuple[float, int, int]]]]:
    """(start, batch) in service order, on a virtual clock where serving ``batch`` (its
    (arrival, session, chunk) members) takes ``service(batch)`` seconds. A run passes a service
    that streams the batch and returns its measured time; the time budget's estimate, the
    warm-up's time per batch size (the same plan, predicted); the default (instant service)
    gives the plan without backlog."""
    pending = [(arrival(cfg, t, i, n), i, k) for t, i, k in schedule(cfg, workload, n)]
    out, clock = [], 0.0
    while pending:
        b = next_batch(pending, clock, cfg.batch_sizes, shape_class, aligned=not cfg.stagger)
        pending = [p for p in pending if p not in b]
        start = max(clock, max(a for a, _, _ in b))
        clock = start + service(b)
        out.append((start, b))
    return out


def batches(cfg, workload: str, n: int, shape_class) -> list[tuple[float, list[tuple[int, int]]]]:
    """(start, [(session, chunk), ...]) per batch when every batch is served at once (no backlog;
    with aligned arrivals, the order a run serves in)."""
    return [(start, [(i, k) for _, i, k in b]) for start, b in simulate(cfg, workload, n, shape_class)]


def by_chunk(i: int, k: int) -> int:
    """The shape class of session ``i``'s k-th chunk in a run: every session is a fork of a primed
    template with the declared prompt length, so its carry extents depend on ``k`` alone."""
    return k


class BatchedArmServer(DeviceServer):
    """The ``SRb`` arm: one :class:`BatchedToken2wav` (replay on), its prompt templates, and the runs.

    Same interface as :class:`~cadencelab.bench.session_serving.ArmServer` (``run``, ``recover``,
    ``info``, ``chunk_s``, ``estimate_s``, ``load``); its runs are gated by :class:`BatchedGateServer`.
    """

    ARM = ARM
    invariant = False

    def __init__(self, arm: str, ckpt: str, cfg):
        from ..serving.batched import BatchedToken2wav

        if arm != self.ARM:
            raise ValueError(f"{type(self).__name__} serves arm {self.ARM!r}, not {arm!r}")
        # stock solver buffers: priming runs the vendor setup_cache solo, as B0 does
        flow, hift, mcfg = self._load(arm, ckpt, cfg, "B0")
        self.bt = BatchedToken2wav(flow, hift, self.device, replay=True, backend=self.backend,
                                   n_timesteps=cfg.n_timesteps, cfg=mcfg, batch_sizes=cfg.batch_sizes,
                                   invariant=self.invariant)
        self.templates = [self.bt.open(-1 - p, pr) for p, pr in enumerate(self.prompts)]
        self.setup_s = time.perf_counter() - self._t0
        self.batch_s: dict[int, float] = {}
        self.eager_s: dict[int, float] = {}
        self._live: list = []  # the sessions of the run in progress (dropped by _drop_sessions)
        self._warm_up()
        self.chunk_s = min(self.batch_s[b] / b for b in self.batch_s)
        self.captures_after_warmup = self.captures()
        self.template_bytes = sum(t.state_bytes() for t in self.templates)

    # -- helpers -----------------------------------------------------------------------------
    def _fork(self, i: int):
        seed = session_seed(self.cfg, i) if self.invariant else None  # SRbi: the seed session i has alone
        return self.bt.fork(self.templates[i % len(self.templates)], i, seed=seed)

    def _call(self, ss, chunks, seed: int, eager: bool) -> tuple[list, float]:
        self.torch.manual_seed(seed)
        self._sync()
        t0 = time.perf_counter()
        pcm = self.bt.stream(ss, chunks, eager=eager)
        self._sync()
        return pcm, time.perf_counter() - t0

    def _warm_up(self) -> None:
        """Every declared batch size over every chunk position a run reaches, replayed and eager, twice:
        the first pass captures, the second times a replayed and an eager batch per size."""
        k_max = max_chunks(self.cfg)
        for rep in range(2):
            rep_t: dict[int, list] = {}
            eag_t: dict[int, list] = {}
            for b in self.bt.batch_sizes:
                for eager, times in ((False, rep_t), (True, eag_t)):
                    ss = [self._fork(j) for j in range(b)]
                    for k in range(k_max):
                        _, dt = self._call(ss, [session_chunk(self.cfg, 10_000 + j, k, self.vocab) for j in range(b)],
                                           k, eager)
                        times.setdefault(b, []).append(dt)
                    del ss
        self.batch_s = {b: float(np.median(v)) for b, v in rep_t.items()}
        self.eager_s = {b: float(np.median(v)) for b, v in eag_t.items()}

    def captures(self) -> int:
        return self.bt.captures()

    def invalidations(self) -> int:
        return self.bt.invalidations()

    def _drop_sessions(self) -> None:
        """The run's sessions, emptied in place: after an out-of-memory the traceback still holds
        the run's frames, whose lists are these."""
        self._live.clear()

    def estimate_s(self, workload: str, n: int) -> float:
        """Seconds a run will take: the plan simulated with the warm-up's median time per batch size
        (under load, staggered arrivals form larger, fewer batches)."""
        return sum(self.batch_s[len(b)] for _, b in simulate(self.cfg, workload, n, by_chunk,
                                                              lambda b: self.batch_s[len(b)]))

    def gate_estimate_s(self, plan: list) -> float:
        """Seconds the exactness gate of a run's ``plan`` takes on the batched eager path (warm-up medians)."""
        return sum(self.eager_s.get(len(b), max(self.eager_s.values())) for b in plan)

    def predicted_gate_s(self, workload: str, n: int) -> float:
        """:meth:`gate_estimate_s` of the plan a run of ``n`` sessions is predicted to serve."""
        return self.gate_estimate_s([b for _, b in simulate(self.cfg, workload, n, by_chunk,
                                                             lambda b: self.batch_s[len(b)])])

    # -- a run -------------------------------------------------------------------------------
    def run(self, workload: str, n: int) -> dict:
        """Serve ``n`` sessions under ``workload`` in batches; the plan (each batch's (session, chunk)
        members, in order) comes back with the rows, for the exactness gate (:class:`BatchedGateServer`)."""
        torch, cfg = self.torch, self.cfg
        self._fresh()
        ss = self._live = [self._fork(i) for i in range(n)]
        served = []  # per batch: (service s, [(sha_i16, sha_mel, audio_s) per member])

        def serve(batch) -> float:
            members = [(i, k) for _, i, k in batch]
            # stream() refuses a batch whose sessions' shape classes differ
            pcm, service = self._call([ss[i] for i, _ in members], [session_chunk(cfg, i, k, self.vocab)
                                                                     for i, k in members],
                                      batch_seed(cfg, workload, n, len(served)), eager=False)
            served.append((service, [(digest(b), tensor_digest(ss[i].last_mel),
                                      len(b) / 2 / SAMPLE_RATE) for (i, _), b in zip(members, pcm)]))
            return service

        timeline = simulate(cfg, workload, n, by_chunk, serve)
        rows, plan = [], []
        for j, ((start, batch), (service, outs)) in enumerate(zip(timeline, served)):
            plan.append([(i, k) for _, i, k in batch])
            clock = start + service
            for (at, i, k), (sha_i16, sha_mel, audio_s) in zip(batch, outs):
                rows.append(dict(arm=self.arm, workload=workload, sessions=n, session=i, chunk=k, arrival_s=at,
                                 start_s=start, completion_s=clock, latency_ms=(clock - at) * 1e3,
                                 service_ms=service * 1e3, audio_s=audio_s, swap_bytes=0,
                                 swap_ms=0.0, batch=j, batch_size=len(batch), sha_i16=sha_i16, sha_mel=sha_mel))
        peak = torch.cuda.max_memory_allocated(self.device) if self.cuda else None
        state = max((s.state_bytes() for s in ss), default=0)
        ss.clear()
        return dict(arm=self.arm, workload=workload, sessions=n, rows=rows, peak_bytes=peak, oom=False,
                    state_bytes_per_session=state, captures=self.captures(), invalidations=self.invalidations(),
                    batches=len(plan), batch_sizes_used=sorted({len(m) for m in plan}), plan=plan)

    def info(self) -> dict:
        bt = self.bt
        counters = bt.counters()  # one row per class (and per unclassed miss reason) of both engines
        captured = counters[counters["status"] == "captured"]
        return dict(arm=self.arm, experimental=True, invariant=self.invariant, setup_s=self.setup_s,
                    chunk_s_warmup=self.chunk_s,
                    batch_s_warmup={str(b): v for b, v in self.batch_s.items()},
                    eager_batch_s_warmup={str(b): v for b, v in self.eager_s.items()},
                    batch_sizes=list(bt.batch_sizes), workspace_bytes={str(b): v for b, v in bt.workspace_bytes().items()},
                    template_bytes=self.template_bytes, declared_state_bytes=None,
                    captures_after_warmup=self.captures_after_warmup, captures_end=self.captures(),
                    invalidations_end=self.invalidations(),
                    replays=int(counters["replays"].sum()), graph_staging_bytes=int(captured["staging_bytes"].sum()),
                    graphs=int(len(captured)),
                    determinism=self.determinism,
                    summaries=bt.summaries(), calls={f"{p}:{b}": c for (p, b), c in sorted(bt.calls.items())},
                    device=str(self.device))


class InvariantArmServer(BatchedArmServer):
    """The ``SRbi`` arm: :class:`BatchedArmServer` with batch-invariant kernels and per-session seeds; gated on
    the solo B0 references like SRc, so it prices and owes no batched eager gate."""

    ARM = INVARIANT_ARM
    invariant = True
    gate_estimate_s = None  # the sweep asks these of a gated batched arm only
    predicted_gate_s = None


class BatchedGateServer(DeviceServer):
    """The exactness gate of ``SRb`` in a process of its own: the batched eager path (no graphs) over the same
    weights and prompts. :meth:`gate` streams a run's plan again, batch by batch, with the run's seeds,
    from fresh forks of the same primed templates; its rows carry the SHA-256 the run's rows must equal."""

    def __init__(self, ckpt: str, cfg):
        from ..serving.batched import BatchedToken2wav

        flow, hift, mcfg = self._load(ARM, ckpt, cfg, "B0")  # the solver buffers SRb runs with
        self.bt = BatchedToken2wav(flow, hift, self.device, replay=False, backend=self.backend,
                                   n_timesteps=cfg.n_timesteps, cfg=mcfg, batch_sizes=cfg.batch_sizes)
        self.templates = [self.bt.open(-1 - p, pr) for p, pr in enumerate(self.prompts)]
        self._live: list = []
        self.setup_s = time.perf_counter() - self._t0

    def _drop_sessions(self) -> None:
        self._live.clear()

    def gate(self, workload: str, n: int, plan: list) -> dict:
        """The batched eager path over ``plan`` (the run of ``n`` sessions under ``workload``): one row per
        chunk, (session, chunk, gate_sha_i16, gate_sha_mel), in the plan's order."""
        cfg = self.cfg
        self._fresh()
        ref = self._live = [self.bt.fork(self.templates[i % len(self.templates)], i) for i in range(n)]
        rows = []
        for j, members in enumerate(plan):
            self.torch.manual_seed(batch_seed(cfg, workload, n, j))
            pcm = self.bt.stream([ref[i] for i, _ in members], [session_chunk(cfg, i, k, self.vocab)
                                                                 for i, k in members], eager=True)
            rows += [dict(session=i, chunk=k, gate_sha_i16=digest(b), gate_sha_mel=tensor_digest(ref[i].last_mel))
                     for (i, k), b in zip(members, pcm)]
        self.recover()  # the sessions' memory back to the device: the reference workers share it
        return dict(rows=rows, oom=False)
