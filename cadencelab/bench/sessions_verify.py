"""The ``sessions`` study's verification phase: the work that gates exactness and times nothing, done
after every timed run, in processes of its own that share the device.

* **solo references**: every session used by a run of an arm gated on them (B0, SRc, SRl: every arm
  but ``SRb``) streamed alone through B0 (:class:`~cadencelab.bench.session_serving.ArmServer`), as
  many chunks as the runs needed; one task per session, in ascending order (the low sessions are
  in the most runs).
* **the SRb gate**: each ``SRb`` run's plan streamed again on the batched eager path
  (:class:`~cadencelab.bench.sessions_batched.BatchedGateServer`); one task per run, each sweep's
  capacity point (the largest N that held) first, then the point that broke above it, then the
  others, cheapest first. ``SRb``'s comparison with the solo references (``exact_solo``, reported,
  not gated) covers the sessions those references cover: the ones the gated arms used.

Host-bound eager streams, yet ``workers`` processes on one GPU take turns on it (no MPS: it time-slices
their contexts): in four of five recorded sweeps 4 reference workers served 0.8-0.9x one B0 warm-up chunk's
rate, so :func:`reference_pace` prices them as one stream. One process takes the gate (two would hold two
large runs' sessions at once), the others the references. A task that would end past the deadline is left
and said (its chunks reported unchecked). Results are rows of ``verify.jsonl``: ``reference`` (session,
chunk, SHA-256s), ``gate`` (a run's key and its rows) and ``unverified`` (a task left, and why).
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from .common import ArmProcess, InlineArm, json_default, serve
from .session_serving import chunks_needed

__all__ = ["Task", "reference_pace", "reference_tasks", "gate_tasks", "split_workers", "verify"]

REFERENCE, GATE = "reference", "gate"
GATED_ARM = "SRb"
"""The arm gated on its own batched eager path (its rows carry ``batch_size``); every other arm is gated on
the solo references."""


@dataclass(order=True)
class Task:
    """One piece of verification: ``kind`` (``reference`` or ``gate``), the request's arguments, its key in
    the results, and the seconds it is estimated to take."""

    priority: tuple
    kind: str = field(compare=False)
    args: tuple = field(compare=False)
    key: dict = field(compare=False)
    estimate_s: float = field(compare=False, default=0.0)


def reference_pace(chunk_s: float, workers: int, device: str) -> float:
    """Seconds one of ``workers`` reference workers spends per chunk, from B0's warm-up chunk ``chunk_s``: on a
    GPU they take turns (together about one B0's rate, so each ``workers`` times slower); off it, each has its
    own cores."""
    return chunk_s * max(1, workers) if str(device).startswith("cuda") else chunk_s


def reference_tasks(runs: list[dict], chunk_s: float) -> list[Task]:
    """A task per session used by ``runs`` (entries of the arms gated on solo references): that session's
    chunks (as many as any run streamed) through B0, ``chunk_s`` each."""
    need = chunks_needed([r for e in runs for r in e["rows"]])
    return [Task((0, s), REFERENCE, (s, c), dict(session=s, chunks=c), c * chunk_s) for s, c in sorted(need.items())]


def gate_tasks(runs: list[dict], eager_s: dict) -> list[Task]:
    """A task per ``SRb`` run with a plan: its capacity point (largest N that held, per arrivals and
    workload) first, then the break above it, then the others by estimate (``eager_s``: seconds of an
    eager batched call per batch size)."""
    by: dict[tuple, dict[int, dict]] = {}
    for e in runs:
        if e.get("plan") and not e.get("oom") and not e.get("skipped"):
            by.setdefault((e.get("arrivals", ""), e["workload"]), {})[e["sessions"]] = e
    worst = max(eager_s.values(), default=0.0)
    out = []
    for (arrivals, w), points in by.items():
        holds = max((n for n, e in points.items() if e.get("verdict") == "holds"), default=0)
        breaks = min((n for n, e in points.items() if e.get("verdict") != "holds" and n > holds), default=None)
        for n, e in points.items():
            est = sum(eager_s.get(len(b), worst) for b in e["plan"])
            rank = 0 if n == holds else 1 if n == breaks else 2
            out.append(Task((rank, est, arrivals, w, n), GATE, (w, n, e["plan"]),
                            dict(arm=e["arm"], arrivals=arrivals, workload=w, sessions=n), est))
    return sorted(out)


def split_workers(workers: int, kinds: list[str]) -> dict[str, int]:
    """Processes per kind of task: one for the gate (when there is gate work), the rest for references;
    at least one for each kind with work."""
    if not kinds:
        return {}
    if GATE in kinds and REFERENCE in kinds:
        return {GATE: 1, REFERENCE: max(1, workers - 1)}
    return {kinds[0]: max(1, workers)}


# ---------------------------------------------------------------------------------------
# the workers (in their own processes, or inline)
# ---------------------------------------------------------------------------------------


def _build(kind: str, ckpt: str, cfg):
    if kind == REFERENCE:
        from .session_serving import ArmServer

        return ArmServer("B0", ckpt, cfg)
    from .sessions_batched import BatchedGateServer

    return BatchedGateServer(ckpt, cfg)


def _gate(server, workload: str, n: int, plan: list) -> dict:
    """``server.gate`` with an out-of-memory turned into a result (rows empty, the chunks unchecked)."""
    import torch

    try:
        return server.gate(workload, n, [[tuple(m) for m in b] for b in plan])
    except torch.OutOfMemoryError as e:
        msg = str(e).splitlines()[0][:200] if str(e) else "out of memory"
    server.recover()
    return dict(rows=[], oom=True, error=msg)


HANDLERS = {REFERENCE: lambda s, i, c: s.reference(i, c), GATE: _gate}


def _ready(server) -> dict:
    return dict(setup_s=server.setup_s)


def _worker(conn, kind, ckpt, cfg):
    serve(conn, lambda: _build(kind, ckpt, cfg), _ready, HANDLERS)


# ---------------------------------------------------------------------------------------
# the phase
# ---------------------------------------------------------------------------------------


def verify(cfg, ckpt: str, tasks: dict[str, list[Task]], out: Path, deadline: float, progress=print) -> dict:
    """Run ``tasks`` (by kind) on ``cfg.verify_workers`` processes (inline, one worker per kind, when
    ``cfg.processes`` is off) until done or ``deadline``; results appended to ``out/verify.jsonl``.
    Returns the phase's summary: workers, tasks done and left per kind, failures, wall seconds."""
    t0 = time.perf_counter()
    kinds = [k for k in (REFERENCE, GATE) if tasks.get(k)]
    workers = split_workers(cfg.verify_workers if cfg.processes else 1, kinds)
    queues = {k: deque(sorted(tasks[k])) for k in kinds}
    done = {k: 0 for k in kinds}
    left: dict[str, list] = {k: [] for k in kinds}
    failures: list[str] = []
    lock = threading.RLock()  # take() writes a left task while holding it
    fh = open(out / "verify.jsonl", "a")

    def emit(obj):
        with lock:
            fh.write(json.dumps(obj, default=json_default) + "\n")
            fh.flush()

    def take(kind: str) -> Task | None:
        with lock:
            q = queues[kind]
            while q:
                t = q.popleft()
                if time.perf_counter() + t.estimate_s * 1.2 <= deadline:
                    return t
                left[kind].append(t)
                emit(dict(kind="unverified", task=kind, why=f"time budget (needs ~{t.estimate_s:.0f} s)", **t.key))
            return None

    def record(t: Task, res) -> None:
        if t.kind == REFERENCE:
            for r in res:
                emit(dict(kind="reference", **r))
        else:
            emit(dict(kind="gate", **t.key, **res))
        with lock:
            done[t.kind] += 1

    def loop(kind: str, worker) -> None:
        got = worker.wait(max(1.0, deadline - time.perf_counter()))
        if got[0] != "ready":
            failures.append(f"{kind} worker: {str(got[1]).strip().splitlines()[-1] if str(got[1]).strip() else got}")
            return
        while (t := take(kind)) is not None:
            t1 = time.perf_counter()
            status, res = worker.ask((t.kind, *t.args), max(1.0, deadline - t1 + 60.0))
            if status != "ok":
                failures.append(f"{kind} {t.key}: {str(res).strip().splitlines()[-1] if str(res).strip() else res}")
                with lock:
                    left[kind].append(t)
                emit(dict(kind="unverified", task=kind, why="worker failed", **t.key))
                return
            if t.kind == GATE:
                res = dict(res, wall_s=time.perf_counter() - t1)
            record(t, res)

    started = []
    try:
        if cfg.processes:
            for kind, n in workers.items():
                for w in range(n):  # the config travels pickled: its class is imported in the worker
                    started.append((kind, ArmProcess(f"verify-{kind}-{w}", _worker, (kind, ckpt, cfg))))
            threads = [threading.Thread(target=loop, args=(k, p), daemon=True) for k, p in started]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
        else:  # one after the other in this thread: inline workers share this process's generators
            for kind in kinds:
                worker = InlineArm(kind, lambda k=kind: _build(k, ckpt, cfg), _ready, HANDLERS)
                started.append((kind, worker))
                loop(kind, worker)
        for kind in kinds:  # a worker that failed leaves its queue's remainder
            while queues[kind]:
                t = queues[kind].popleft()
                left[kind].append(t)
                emit(dict(kind="unverified", task=kind, why="no worker left", **t.key))
    finally:
        for _, p in started:
            p.stop()
        fh.close()
    summary = dict(workers=workers, done=done, left={k: len(v) for k, v in left.items()},
                   left_gates=[t.key for t in left.get(GATE, [])], failures=failures,
                   wall_s=time.perf_counter() - t0)
    did = ", ".join(f"{done[k]} {k} task(s) done, {len(left[k])} left" for k in kinds) or "nothing"
    progress(f"verification: {did} on {sum(workers.values())} worker(s) in {summary['wall_s']:.0f} s")
    return summary
