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

__all__ = ["for_arrivals", "OwedReferences", "sweep_arm", "serve_arm", "run_arm_process", "read_rows"]


def for_arrivals(cfg, mode: str):
    """``cfg`` for one arrival mode (what a server serves and a result file records)."""
    return dataclasses.replace(cfg, arrivals=(mode,), stagger=mode == "staggered")


class OwedReferences:
    """The solo references the runs so far need (chunks per session) and what streaming them will take
    (``chunk_s`` a chunk of B0 on ``workers`` processes): a point is run only if it fits with the
    references it adds."""

    def __init__(self, need: dict | None = None, chunk_s: float = 0.0, workers: int = 1):
        self.need = {int(k): int(v) for k, v in (need or {}).items()}
        self.chunk_s, self.workers = chunk_s, max(1, workers)
        self.added_chunks = 0  # owed since this arm started (the arm's deadline left out the others)

    def adds(self, cfg, workload: str, n: int) -> int:
        """Chunks ``n`` sessions under ``workload`` would add to the references owed."""
        want = chunks_needed([dict(session=i, chunk=k) for _, i, k in schedule(cfg, workload, n)])
        return sum(max(0, c - self.need.get(i, 0)) for i, c in want.items())

    def seconds(self, more: int = 0) -> float:
        """Seconds of the references this arm added, and ``more`` chunks."""
        return (self.added_chunks + more) * self.chunk_s / self.workers

    def add(self, rows) -> None:
        for s, c in chunks_needed(rows).items():
            self.added_chunks += max(0, c - self.need.get(s, 0))
            self.need[s] = max(self.need.get(s, 0), c)


def sweep_arm(server, cfg, deadline: float, emit, progress=print,
              refs: OwedReferences | None = None) -> dict:
    """Every sweep of ``server``'s arm (arrival modes x workloads; :func:`~.sessions_sweep.order_points`),
    each point's run and verdict passed to ``emit`` (skipped points too). ``refs``: the solo references
    owed (None: the arm is not gated on them). Returns the sweeps by (arrivals, workload)."""
    sweeps = {(m, w): Sweep(cfg.sessions, cfg.growth, cfg.resolution, cfg.max_sessions, cfg.extra_points,
                            cfg.margin) for m in cfg.arrivals for w in cfg.workloads}
    per_mode = {m: for_arrivals(cfg, m) for m in cfg.arrivals}
    gate_s: dict = {}  # (arrivals, workload, N) -> seconds of the batched eager gate (SRb)
    gates = getattr(server, "gate_estimate_s", None)
    predicted_gate = getattr(server, "predicted_gate_s", None)

    def gate_reserve() -> float:
        """The gates of every sweep's current bracket: the verification will want them first."""
        return sum(gate_s.get((*k, n), 0.0) for k, sw in sweeps.items() for n in sw.bracket if n)

    def run(key, n):
        mode, w = key
        server.cfg = per_mode[mode]
        need = server.estimate_s(w, n) * 1.2
        extra = refs.seconds(refs.adds(server.cfg, w, n)) if refs is not None else 0.0
        extra += gate_reserve() + (predicted_gate(w, n) if predicted_gate else 0.0)
        if time.perf_counter() + need + extra > deadline:
            emit(dict(arm=server.arm, arrivals=mode, workload=w, sessions=n, rows=[], peak_bytes=None, oom=False,
                      skipped=f"time budget (needs ~{need + extra:.0f} s)"))
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
            if refs is not None:
                refs.add(res["rows"])
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
    if arm == "SRl":
        from .sessions_lanes import LaneArmServer

        return LaneArmServer(arm, ckpt, cfg)
    return ArmServer(arm, ckpt, cfg)


def serve_arm(arm: str, ckpt: str, cfg, deadline: float, rows_path: str,
              owed: dict | None = None, progress=print, started: float | None = None) -> dict:
    """Build ``arm``, run its sweeps (every arrival mode and workload); stream results to ``rows_path``.
    ``owed``: the solo references owed so far (``need``, ``chunk_s``, ``workers``), None when the arm is
    not gated on them; a B0 arm prices them at its own chunk time."""
    t0 = time.perf_counter()
    server = _server(arm, ckpt, cfg)
    ready_s = time.perf_counter() - t0 + (t0 - started if started is not None else 0.0)
    progress(f"{arm}: ready in {ready_s:.1f} s (set-up {server.setup_s:.1f} s), "
             f"warm-up chunk {server.chunk_s * 1e3:.0f} ms")
    if hasattr(server, "record_trace"):
        written = server.record_trace(Path(rows_path).parent / f"trace_{arm}_lanes.json")
        if written:
            progress(f"{arm}: trace of one concurrent round in {written}")
    refs = None
    if owed is not None:
        refs = OwedReferences(owed.get("need"), owed.get("chunk_s") or (server.chunk_s if arm == "B0" else 0.0),
                              owed.get("workers", 1))
    fh = open(rows_path, "a")

    def emit(obj):
        fh.write(json.dumps(obj, default=json_default) + "\n")
        fh.flush()

    try:
        sweeps = sweep_arm(server, cfg, deadline, lambda res: emit(dict(kind="run", **res)), progress, refs)
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
