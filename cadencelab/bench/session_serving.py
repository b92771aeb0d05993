"""Serving Token2wav sessions for the ``sessions`` study: the workloads (who speaks when, which
tokens, when a chunk arrives), the arm servers' common device handling, the one-at-a-time arm
server (B0, SRc, any single-runtime arm) and the cadence verdict. ``cfg`` is a
:class:`~cadencelab.bench.sessions.SessionsConfig` throughout; the other servers
(:mod:`.sessions_batched`, :mod:`.sessions_lanes`) build on this module, and :mod:`.sessions`
runs them."""

from __future__ import annotations

import gc
import hashlib
import time

import numpy as np

from .common import CALL_TOKENS, LOOKAHEAD, STRIDE_TOKENS, set_up_device

SAMPLE_RATE = 24_000
WORKLOADS = ("mixed", "speak_heavy")
#: when a speaking session's chunk arrives: at the whole second, or spread evenly over it (:func:`arrival`)
ARRIVALS = ("aligned", "staggered")


# ---------------------------------------------------------------------------------------
# sessions and workloads (pure, the same in every process)
# ---------------------------------------------------------------------------------------


def session_seed(cfg, i: int) -> int:
    return 1_000_003 * (cfg.seed + 1) + 7919 * i + 29


def prompt_seed(cfg, p: int) -> int:
    return 10_007 * (cfg.seed + 1) + p


def session_chunk(cfg, i: int, k: int, vocab: int | None = None) -> list[int]:
    """Tokens of session ``i``'s k-th chunk: a chunk of new tokens plus the lookahead, the buffer starting with silence."""
    from ..adapters.token2wav.stock import SILENCE_TOKEN

    if vocab is None:  # the declared model's speech-token vocabulary
        from ..adapters.token2wav.configs import REAL

        vocab = REAL.vocab_size
    need = STRIDE_TOKENS * (k + 1) + LOOKAHEAD
    toks = np.random.default_rng([cfg.seed, 0x5E55, i]).integers(0, vocab, need).tolist()
    buf = [SILENCE_TOKEN] * LOOKAHEAD + toks
    return buf[STRIDE_TOKENS * k: STRIDE_TOKENS * k + CALL_TOKENS]


def speaks(workload: str, i: int, second: int, turn: int) -> bool:
    if workload == "speak_heavy":
        return True
    if workload == "mixed":
        return ((second + i) // turn) % 2 == 0
    raise ValueError(f"workload: unknown {workload!r} (choose from {WORKLOADS})")


def horizon(cfg, workload: str) -> int:
    return cfg.speak_seconds if workload == "speak_heavy" else cfg.mixed_seconds


def schedule(cfg, workload: str, n: int) -> list[tuple[int, int, int]]:
    """(arrival second, session, chunk index) in service order: FIFO by arrival, sessions in turn."""
    out, count = [], [0] * n
    for t in range(horizon(cfg, workload)):
        for i in range(n):
            if speaks(workload, i, t, cfg.turn_seconds):
                out.append((t, i, count[i]))
                count[i] += 1
    return out


def arrival(cfg, t: int, i: int, n: int) -> float:
    """When session ``i``'s chunk of second ``t`` arrives: at ``t``, or with ``cfg.stagger`` at
    ``t + i / n`` (the N sessions' chunks spread evenly over the second)."""
    return t + i / n if cfg.stagger else float(t)


def max_chunks(cfg) -> int:
    """The most chunks any session streams in one run (over the configured workloads)."""
    rows = [dict(session=i, chunk=k) for w in cfg.workloads for _, i, k in schedule(cfg, w, 2 * cfg.turn_seconds)]
    return max(chunks_needed(rows).values(), default=1)


def chunks_needed(rows) -> dict[int, int]:
    """Per session, the chunks any recorded run streamed (what its solo reference must cover)."""
    need: dict[int, int] = {}
    for r in rows:
        need[int(r["session"])] = max(need.get(int(r["session"]), 0), int(r["chunk"]) + 1)
    return need


# ---------------------------------------------------------------------------------------
# one arm (in its own process)
# ---------------------------------------------------------------------------------------


def digest(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def tensor_digest(t) -> str:
    """SHA-256 of a tensor's values as float32 on the host (a chunk's mel)."""
    return digest(t.detach().float().cpu().numpy().tobytes())


class DeviceServer:
    """What every arm server shares: its device and kernel pinning, synchronisation, a fresh peak
    before each run, and recovery after an out-of-memory. Subclasses drop their run sessions in
    :meth:`_drop_sessions`."""

    def _set_up_device(self, arm: str, cfg) -> None:
        import torch

        self.torch, self.arm, self.cfg = torch, arm, cfg
        self.device, self.determinism = set_up_device(cfg.device, cfg.condition)
        self.cuda = self.device.type == "cuda"

    def _load(self, arm: str, ckpt: str, cfg, envelope_arm: str):
        """Set up the device for ``arm``, load the checkpoint with ``envelope_arm``'s solver buffers and make
        the prompts; starts the set-up clock. Returns (flow, hift, model config)."""
        from ..adapters.token2wav import make_prompt
        from ..adapters.token2wav.runtime import arm_modules
        from ..adapters.token2wav.clocks import T2W_CLOCKS

        self._set_up_device(arm, cfg)
        self._t0 = time.perf_counter()
        flow, hift, mcfg = arm_modules(envelope_arm, cfg.seed, self.device, checkpoint=ckpt,
                                       clocks=T2W_CLOCKS.with_(n_steps=cfg.n_timesteps))
        self.vocab = mcfg.vocab_size
        self.backend = "cuda" if self.cuda else "eager"
        self.prompts = [make_prompt(mcfg, prompt_seed(cfg, p), self.device) for p in range(cfg.prompts)]
        return flow, hift, mcfg

    def _sync(self):
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    def load(self, workload: str, n: int) -> float:
        """The device load ``n`` sessions would put on this arm, predicted from its warm-up: the seconds of
        service their chunks take at the warm-up's rate (``chunk_s``) over the seconds simulated. Near 1
        the cadence breaks; the sweep uses it to jump no further than that (:class:`~.sessions_sweep.Sweep`)."""
        return self.chunk_s * len(schedule(self.cfg, workload, n)) / horizon(self.cfg, workload)

    def _drop_sessions(self) -> None:
        pass

    def _fresh(self):
        self._drop_sessions()
        if self.cuda:  # cycles freed before the peak is reset (a CPU run measures no peak: no full collection)
            gc.collect()
            self.torch.cuda.synchronize(self.device)
            self.torch.cuda.reset_peak_memory_stats(self.device)

    def recover(self) -> None:
        """After an out-of-memory: drop every run session and return cached blocks."""
        self._fresh()
        if self.cuda:
            self.torch.cuda.empty_cache()


class ArmServer(DeviceServer):
    """One arm's runtime and session manager, its prompt templates, and the runs."""

    def __init__(self, arm: str, ckpt: str, cfg):
        from ..adapters.token2wav.runtime import build_runtime
        from ..serving.sessions import SessionManager

        modules = self._load(arm, ckpt, cfg, arm)
        rt, _ = build_runtime(None, arm, cfg.seed, self.device, backend=self.backend, n_timesteps=cfg.n_timesteps,
                              modules=modules)  # the sessions' prompts are self.prompts
        self.manager = SessionManager(rt)
        self.templates = [self.manager.open(-1 - p, pr, 0) for p, pr in enumerate(self.prompts)]
        self.setup_s = time.perf_counter() - self._t0
        self.chunk_s = self._warm_up()
        self.captures_after_warmup = self.manager.captures()
        self.template_bytes = sum(t.state_bytes() for t in self.templates)

    def _warm_up(self) -> float:
        """Two sessions interleaved over every chunk position a run reaches, twice: the first pass
        captures, swaps and selects kernels; the second times a warm chunk (the budget's estimate)."""
        m, cfg = self.manager, self.cfg
        k_max = max_chunks(cfg)
        times = []
        for rep in range(2):
            ss = [m.fork(self.templates[i % len(self.templates)], -100 - 2 * rep - i, 7 + i) for i in range(2)]
            times = []
            for k in range(k_max):
                for i, s in enumerate(ss):
                    toks = session_chunk(cfg, 10_000 + i, k, self.vocab)
                    self._sync()
                    t0 = time.perf_counter()
                    m.stream(s, toks)
                    self._sync()
                    times.append(time.perf_counter() - t0)
            for s in ss:
                m.close(s)
        return float(np.median(times))

    def estimate_s(self, workload: str, n: int) -> float:
        """Seconds a run will take: the warm-up's chunk time for every chunk of the schedule."""
        return self.chunk_s * len(schedule(self.cfg, workload, n))

    def _drop_sessions(self) -> None:
        m = self.manager
        for s in [s for s in m.sessions.values() if s.sid >= 0]:
            m.close(s)
        m.park()

    def run(self, workload: str, n: int) -> dict:
        """Serve ``n`` sessions under ``workload``; per-chunk rows on the virtual clock."""
        torch, m, cfg = self.torch, self.manager, self.cfg
        self._fresh()
        sessions = [m.fork(self.templates[i % len(self.templates)], i, session_seed(cfg, i)) for i in range(n)]
        clock, rows = 0.0, []
        for t, i, k in schedule(cfg, workload, n):  # (t, i) order is arrival order, staggered or not
            s, toks = sessions[i], session_chunk(cfg, i, k, self.vocab)
            self._sync()
            w0 = time.perf_counter()
            pcm = m.stream(s, toks)
            self._sync()
            service = time.perf_counter() - w0
            at = arrival(cfg, t, i, n)
            start = max(clock, at)
            clock = start + service
            swap = m.last_swap
            mel = tensor_digest(s.last_mel)
            rows.append(dict(arm=self.arm, workload=workload, sessions=n, session=i, chunk=k, arrival_s=at,
                             start_s=start, completion_s=clock, latency_ms=(clock - at) * 1e3,
                             service_ms=service * 1e3, audio_s=len(pcm) / 2 / SAMPLE_RATE,
                             swap_bytes=(swap.bytes_out + swap.bytes_in) if swap else 0,
                             swap_ms=m.swap_ms() if swap else 0.0,
                             sha_i16=digest(pcm), sha_mel=mel))
        peak = torch.cuda.max_memory_allocated(self.device) if self.cuda else None
        state = m.state_bytes()
        out = dict(arm=self.arm, workload=workload, sessions=n, rows=rows, peak_bytes=peak, oom=False,
                   state_bytes_per_session=max((state[i] for i in range(n)), default=0),
                   captures=m.captures(), invalidations=m.invalidations())
        for s in sessions:
            m.close(s)
        return out

    def reference(self, i: int, chunks: int) -> list[dict]:
        """Session ``i`` alone through this arm (B0: the solo reference), ``chunks`` chunks."""
        m, cfg = self.manager, self.cfg
        self._fresh()
        s = m.fork(self.templates[i % len(self.templates)], i, session_seed(cfg, i))
        rows = []
        for k in range(chunks):
            pcm = m.stream(s, session_chunk(cfg, i, k, self.vocab))
            mel = tensor_digest(s.last_mel)
            rows.append(dict(session=i, chunk=k, ref_sha_i16=digest(pcm), ref_sha_mel=mel))
        m.close(s)
        return rows

    def info(self) -> dict:
        m = self.manager
        return dict(arm=self.arm, setup_s=self.setup_s, chunk_s_warmup=self.chunk_s,
                    template_bytes=self.template_bytes, declared_state_bytes=m.declared_state_bytes(),
                    captures_after_warmup=self.captures_after_warmup, captures_end=m.captures(),
                    invalidations_end=m.invalidations(), determinism=self.determinism,
                    summaries=m.rt.summaries(), device=str(self.device))


def guarded_run(server, workload: str, n: int) -> dict:
    """``server.run`` with an out-of-memory turned into a result row (and the server recovered)."""
    import torch

    try:
        return server.run(workload, n)
    except torch.OutOfMemoryError as e:
        msg = str(e).splitlines()[0][:200] if str(e) else "out of memory"
    # recovered past the except clause: by then the traceback, which holds the run's frames, is gone
    try:
        server.recover()
    except Exception:  # noqa: BLE001 - recovery is best effort; the row says what happened
        pass
    return dict(arm=server.arm, workload=workload, sessions=n, rows=[], peak_bytes=None, oom=True, error=msg)


def session_p95s(rows: list[dict]) -> dict[int, float]:
    """p95 chunk latency (ms) of every session with a chunk in ``rows``."""
    by: dict[int, list[float]] = {}
    for r in rows:
        by.setdefault(r["session"], []).append(r["latency_ms"])
    return {i: float(np.percentile(v, 95)) for i, v in by.items()}


def worst_p95(rows: list[dict]) -> float:
    """The largest session p95 chunk latency (ms) in ``rows`` (NaN without rows)."""
    return max(session_p95s(rows).values(), default=float("nan"))


def holds_cadence(rows: list[dict], n: int, cadence_s: float) -> bool:
    """Every one of the ``n`` sessions has p95 chunk latency <= the cadence (sessions with no chunk hold)."""
    return all(v <= cadence_s * 1e3 for v in session_p95s(rows).values())
