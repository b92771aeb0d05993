"""One arm of the ``sessions`` study (:mod:`.sessions`): its server built in its process, every sweep of
every arrival mode and workload (:mod:`.sessions_sweep`), each point run if it fits in the arm's time with
the solo references it adds, and its rows streamed to ``runs_<arm>.jsonl``. ``cfg`` is a
:class:`~cadencelab.bench.sessions.SessionsConfig` throughout."""

from __future__ import annotations

import dataclasses
import json
import time
import traceback
from pathlib import Path

from .common import ArmProcess, json_default
from .session_serving import ArmServer, chunks_needed, guarded_run, holds_cadence, schedule, worst_p95
from .sessions_sweep import BREAKS, HOLDS, OOM, Sweep, order_points
from .sessions_verify import reference_pace

__all__ = ["for_arrivals", "OwedVerification", "sweep_arm", "serve_arm", "run_arm_process", "read_rows"]


def for_arrivals(cfg, mode: str):
    """``cfg`` for one arrival mode (what a server serves and a result file records)."""
    return dataclasses.replace(cfg, arrivals=(mode,), stagger=mode == "staggered")


class OwedVerification:
    """What the verification phase (:mod:`.sessions_verify`) owes when a point is considered: the solo
    references the runs so far need (``need``: chunks per session, streamed at ``chunk_s`` a chunk on
    ``workers`` processes) and the SRb gates of the capacity points (``gates_s``, on one process), each
    after a worker's start (``start_s``). The two kinds run at once: the time owed is the longer. A point
    is run only if it fits with what it would add; ``gated`` is False for an arm not gated on the solo
    references (SRb), whose runs add none."""

    def __init__(self, need: dict | None = None, chunk_s: float = 0.0, workers: int = 1, start_s: float = 0.0,
                 gates_s: float = 0.0, gated: bool = True):
        self.need = {int(k): int(v) for k, v in (need or {}).items()}
        self.chunk_s, self.workers, self.start_s = chunk_s or 0.0, max(1, workers), start_s or 0.0
        self.gates_s, self.gated = gates_s or 0.0, gated
        self.added_chunks = 0  # references added since this arm started

    def adds(self, cfg, workload: str, n: int) -> int:
        """Chunks of solo references ``n`` sessions under ``workload`` would add."""
        if not self.gated:
            return 0
        want = chunks_needed([dict(session=i, chunk=k) for _, i, k in schedule(cfg, workload, n)])
        return sum(max(0, c - self.need.get(i, 0)) for i, c in want.items())

    def seconds(self, more_chunks: int = 0, more_gates_s: float = 0.0) -> float:
        """Seconds the verification will take with ``more_chunks`` references and ``more_gates_s`` of gates."""
        refs = (sum(self.need.values()) + more_chunks) * self.chunk_s / self.workers
        gates = self.gates_s + more_gates_s
        return self.start_s + max(refs, gates) if refs > 0 or gates > 0 else 0.0

    def add(self, rows) -> None:
        if not self.gated:
            return
        for s, c in chunks_needed(rows).items():
            self.added_chunks += max(0, c - self.need.get(s, 0))
            self.need[s] = max(self.need.get(s, 0), c)


def sweep_arm(server, cfg, deadline: float, emit, progress=print, owed: OwedVerification | None = None) -> dict:
    """Every sweep of ``server``'s arm (arrival modes x workloads; :func:`~.sessions_sweep.order_points`),
    each point's run and verdict passed to ``emit`` (skipped points too). ``owed``: the verification owed
    (None: nothing to verify). Returns the sweeps by (arrivals, workload)."""
    sweeps = {(m, w): Sweep(cfg.sessions, cfg.growth, cfg.resolution, cfg.max_sessions, cfg.extra_points,
                            cfg.margin) for m in cfg.arrivals for w in cfg.workloads}
    per_mode = {m: for_arrivals(cfg, m) for m in cfg.arrivals}
    owed = owed if owed is not None else OwedVerification(gated=False)
    gate_s: dict = {}  # (arrivals, workload, N) -> seconds of the batched eager gate (SRb)
    gates = getattr(server, "gate_estimate_s", None)
    predicted_gate = getattr(server, "predicted_gate_s", None)

    def capacity_gates(key, n: int) -> float:
        """The gates the verification takes first, every sweep's capacity point, if ``n`` of ``key`` held."""
        held = {k: gate_s.get((*k, sw.holds), 0.0) for k, sw in sweeps.items()}
        if predicted_gate:
            held[key] = max(held[key], predicted_gate(key[1], n))
        return sum(held.values())

    def run(key, n):
        mode, w = key
        server.cfg = per_mode[mode]
        need = server.estimate_s(w, n) * 1.2
        extra = owed.seconds(owed.adds(server.cfg, w, n), capacity_gates(key, n))
        if time.perf_counter() + need + extra > deadline:
            emit(dict(arm=server.arm, arrivals=mode, workload=w, sessions=n, rows=[], peak_bytes=None, oom=False,
                      skipped=f"time budget (needs ~{need:.0f} s and ~{extra:.0f} s of verification)"))
            progress(f"{server.arm} {mode} {w} N={n}: skipped, time budget")
            return None
        t0 = time.perf_counter()
        res = guarded_run(server, w, n)
        res["wall_s"] = time.perf_counter() - t0
        if res["oom"]:
            verdict, headroom = OOM, None
            progress(f"{server.arm} {mode} {w} N={n}: out of memory ({res.get('error', '')[:80]})")
        else:
            ok = holds_cadence(res["rows"], n, cfg.cadence_s)
            p95, peak = worst_p95(res["rows"]), res["peak_bytes"]
            verdict = HOLDS if ok else BREAKS
            headroom = max(p95 / (cfg.cadence_s * 1e3), server.load(w, n))
            progress(f"{server.arm} {mode} {w} N={n}: {'holds' if ok else 'BREAKS'} the cadence, "
                     f"worst p95 {p95:.0f} ms, peak {peak / 2**30 if peak else float('nan'):.2f} GiB "
                     f"({res['wall_s']:.1f} s)")
            owed.add(res["rows"])
            if gates and res.get("plan"):
                gate_s[mode, w, n] = gates(res["plan"])
        emit(dict(arrivals=mode, verdict=verdict, **res))
        return verdict, headroom

    order_points(sweeps, run)
    return sweeps


def _server(arm: str, ckpt: str, cfg):
    if arm == "SRb":
        from .sessions_batched import BatchedArmServer

        return BatchedArmServer(arm, ckpt, cfg)
    if arm == "SRbi":
        from .sessions_batched import InvariantArmServer

        return InvariantArmServer(arm, ckpt, cfg)
    if arm == "SRl" and cfg.lane_processes > 1:  # processes of its own (a daemonic arm process may have none)
        from .sessions_lane_processes import LaneProcessServer

        return LaneProcessServer(arm, ckpt, cfg)
    if arm == "SRl":
        from .sessions_lanes import LaneArmServer

        return LaneArmServer(arm, ckpt, cfg)
    return ArmServer(arm, ckpt, cfg)


def serve_arm(arm: str, ckpt: str, cfg, deadline: float, rows_path: str,
              owed: dict | None = None, progress=print, started: float | None = None) -> dict:
    """Build ``arm``, run its sweeps (every arrival mode and workload); stream results to ``rows_path``.
    ``owed``: :class:`OwedVerification`'s fields (the verification owed so far), None: nothing to verify;
    a B0 arm prices the references at its own chunk time and start."""
    t0 = time.perf_counter()
    server = _server(arm, ckpt, cfg)
    ready_s = time.perf_counter() - t0 + (t0 - started if started is not None else 0.0)
    progress(f"{arm}: ready in {ready_s:.1f} s (set-up {server.setup_s:.1f} s), "
             f"warm-up chunk {server.chunk_s * 1e3:.0f} ms")
    if hasattr(server, "record_trace"):
        written = server.record_trace(Path(rows_path).parent / f"trace_{arm}_lanes.json")
        if written:
            progress(f"{arm}: trace of one concurrent round in {written}")
    if owed is not None and arm == "B0":
        owed = dict(owed, chunk_s=owed.get("chunk_s") or reference_pace(server.chunk_s, owed.get("workers", 1),
                                                                        cfg.device),
                    start_s=owed.get("start_s") or ready_s)
    ledger = OwedVerification(**owed) if owed is not None else None
    fh = open(rows_path, "a")

    def emit(obj):
        fh.write(json.dumps(obj, default=json_default) + "\n")
        fh.flush()

    try:
        sweeps = sweep_arm(server, cfg, deadline, lambda res: emit(dict(kind="run", **res)), progress, ledger)
        server.cfg = cfg
        info = dict(server.info(), ready_s=ready_s, arm_s=time.perf_counter() - t0,
                    sweeps={f"{m}/{w}": dict(bracket=list(sw.bracket), exact=sw.exact, stopped=sw.stopped,
                                             points=len(sw.verdicts)) for (m, w), sw in sweeps.items()})
        emit(dict(kind="info", **info))
        progress(f"{arm}: " + ", ".join(f"{k} [{v['bracket'][0]}, {v['bracket'][1] or '-'}]"
                                        for k, v in info["sweeps"].items()) + f" ({info['arm_s']:.0f} s in this arm)")
        return info
    finally:
        fh.close()
        if hasattr(server, "close"):  # a server with processes of its own ends them
            server.close()


def _worker(conn, arm, ckpt, cfg, deadline_left, rows_path, owed, spawned_at):
    try:
        started = time.perf_counter() - max(0.0, time.time() - spawned_at)  # the spawn, in this clock
        deadline = started + deadline_left
        conn.send(("ok", serve_arm(arm, ckpt, cfg, deadline, rows_path, owed, progress=lambda m: print(m, flush=True),
                                   started=started)))
    except Exception:
        conn.send(("error", traceback.format_exc()))


def run_arm_process(arm, ckpt, cfg, budget_s, rows_path, owed) -> tuple[str, object]:
    """:func:`serve_arm` in a fresh spawned process, ``budget_s`` from its spawn; ("ok", info) or ("error", why).
    The config travels pickled (its class is imported in the worker)."""
    p = ArmProcess(arm, _worker, (arm, ckpt, cfg, budget_s, rows_path, owed, time.time()))
    try:
        return p.wait(budget_s + 60.0)  # a minute's grace past the arm's budget
    finally:
        p.stop()


def read_rows(path) -> list[dict]:
    """The JSON lines of ``path`` (none if it does not exist; a line cut short is left out)."""
    out = []
    p = Path(path)
    if not p.exists():
        return out
    for line in p.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # a line cut short by a killed process
            pass
    return out
