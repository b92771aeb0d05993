"""Multi-session capacity: N Token2wav sessions on one device, B0 vs SRc.

``python -m cadencelab.bench sessions --device cuda --out DIR``

Protocol

* One arm per process (``spawn``), SRc first, then B0; each loads the same seeded checkpoint and
  serves every session through one :class:`~cadencelab.adapters.token2wav.sessions.SessionManager`
  (one set of weights; for SRc one set of captured graphs, bound to each session's state by a swap).
* Session ``i`` has its own token stream, seed and prompt (``--prompts`` distinct prompts, taken
  in turn). Its k-th chunk is the same in every workload and at every N: a workload decides only
  *when* a session speaks. Each process primes one template session per prompt; the sessions
  of a run start from a copy of their prompt's template (priming is deterministic and draws
  no random numbers, so this equals priming each session).
* Workloads, at the 1 s cadence (a chunk of new tokens is 1 s of audio, arriving at t = k s):
  ``speak_heavy``: every session emits a chunk every second for ``--speak-seconds``;
  ``mixed``: sessions alternate speaking and listening turns of ``--turn-seconds`` (session i
  speaks at second k when ((k + i) // turn) is even), for ``--mixed-seconds``; half the sessions
  speak in any second. A listening session keeps its state and resumes its stream later.
* Arrivals: every speaking session's chunk at the whole second, or with ``--stagger`` session
  i's at t + i / N (spread evenly over the second).
* Chunks are served one at a time on the device, FIFO by arrival (round-robin over sessions
  within a second). Each chunk's service time (swap + synthesis + PCM on the host) is measured
  with the device synchronised before and after; the timeline is then replayed on a virtual
  clock (start = max(arrival, previous completion)), so idle gaps cost no wall time. Latency =
  completion - arrival: queueing shows. A session holds the cadence when its p95 chunk latency
  is <= ``--cadence`` (1 s). Goodput = audio seconds produced / max(last completion, horizon).
* N runs over ``--sessions`` (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64); an arm stops a workload
  one point after the first N at which not every session holds the cadence, or at an
  out-of-memory (recorded as a row, not a crash). Peak allocation per N is
  ``max_memory_allocated`` after a reset at the run's start (sessions are opened inside it; the
  weights, graphs and prompt templates are a constant under it).
* ``SRb`` (experimental, :mod:`cadencelab.bench.sessions_batched`): cross-session batched
  replay; the chunks of one second that share a shape class run as one batch of a declared
  size (``--batch-sizes``). Its gate is the same batches on the batched eager path; its
  comparison with the solo B0 reference is reported (``exact_solo``), not gated.
* Exactness: after its own runs the B0 process streams every session used by any arm alone
  (one session at a time, the number of chunks the runs needed) -- the solo references -- and
  every chunk of every run is compared with them by SHA-256 of int16 PCM and mel.
* ``--time-budget`` (s) bounds the whole study: each arm gets a share, B0 reserves time for the
  references, runs that would not fit are recorded as skipped, and results are written either way.

Output under ``--out``: ``sessions.json`` (provenance, ``summary`` with
``max_sessions_at_cadence_B0`` / ``_SRc`` per workload and their ratio,
``peak_bytes_per_added_session`` per arm next to the state bytes per session (declared and
measured), exactness, swap cost; one ``capacity`` row per (arm, workload, N)),
``sessions.csv`` (one row per arm, workload, N, session) and ``sessions_chunks.csv`` (one row
per chunk); per-arm rows are streamed to ``runs_<arm>.jsonl`` as they are produced. The
``capacity`` rows (``sessions``, ``arm``, ``p95_chunk_ms``, ``peak_MiB``) feed
:func:`cadencelab.viz.capacity_lines` one workload at a time.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path


from . import options
from .common import ArmProcess, built_checkpoint, check_out, json_default, write_csv, write_json
from .flags import (MAX_CHUNKS, add_study_parser, config_from_args, failed_line, int_range, ints_in, names_in, opt,
                    positive_float)
from .sessions_analysis import analyse
from .session_serving import (WORKLOADS, ArmServer, chunks_needed, guarded_run, holds_cadence, worst_p95)
from .token2wav import provenance



SERVED_ARMS = ("SRb", "SRl")
"""Arms served by their own servers: SRb (experimental batched replay), SRl (lanes)."""


@dataclass
class SessionsConfig:
    config: str = options.model_config()
    device: str = options.device()
    arms: tuple = opt(("SRc", "B0"), parse=names_in(lambda: [*_arms(), *SERVED_ARMS]),
                      help="comma-separated arms (B0 runs last: it also streams the solo references; SRb: "
                           "experimental batched replay; SRl: lanes, concurrent replay on CUDA streams)")
    workloads: tuple = opt(WORKLOADS, parse=names_in(WORKLOADS), help="comma-separated workloads")
    sessions: tuple = opt((1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64), parse=ints_in(1, MAX_CHUNKS),
                          help="session counts N, ascending")
    speak_seconds: int = opt(3, type=int_range(1, MAX_CHUNKS), help="speak_heavy: seconds (chunks per session)")
    mixed_seconds: int = opt(4, type=int_range(1, MAX_CHUNKS), help="mixed: seconds simulated")
    turn_seconds: int = opt(2, type=int_range(1, MAX_CHUNKS), help="mixed: length of a speaking / listening turn")
    prompts: int = opt(4, type=int_range(1, MAX_CHUNKS), help="distinct prompts, taken in turn by the sessions")
    cadence_s: float = opt(1.0, flag="--cadence", type=positive_float,
                           help="seconds: the p95 chunk latency a session must hold")
    extra_points: int = 1  # points run after the first N that breaks the cadence
    n_timesteps: int = options.steps()
    seed: int = options.seed()
    condition: str = options.condition()
    processes: bool = options.processes("one spawned process per arm (off: the arms run in this process)", on_cpu=False)
    time_budget_s: float = opt(225.0, flag="--time-budget", type=positive_float,
                               help="seconds for the whole study (stops gracefully)")
    batch_sizes: tuple = opt((1, 2, 4, 8), parse=ints_in(1, MAX_CHUNKS),
                             help="SRb: declared session counts of a batched call")
    # SRl: 16 lanes held 28 speak_heavy sessions on the H200 where 8 held 24 (2026-12-01)
    lanes: int = opt(16, type=int_range(1, 64), help="SRl: graph sets replaying concurrently, one CUDA stream each")
    stagger: bool = opt(False, help="spread each second's arrivals evenly over the second: session i of N at "
                                    "t + i / N (off: all at the whole second)")
    out: str = options.out("sessions")
    overwrite: bool = options.overwrite()

    def __post_init__(self):
        from ..adapters.token2wav.runtime import ARMS

        for a in self.arms:
            if a not in ARMS and a not in SERVED_ARMS:
                raise ValueError(f"SessionsConfig.arms: unknown arm {a!r} (choose from {sorted(ARMS) + list(SERVED_ARMS)})")
        if self.lanes < 1:
            raise ValueError(f"SessionsConfig.lanes must be >= 1, got {self.lanes}")
        self.batch_sizes = tuple(sorted(set(int(b) for b in self.batch_sizes)))
        if "SRb" in self.arms and (not self.batch_sizes or self.batch_sizes[0] != 1):
            raise ValueError(f"SessionsConfig.batch_sizes must be positive and include 1, got {self.batch_sizes}")
        for w in self.workloads:
            if w not in WORKLOADS:
                raise ValueError(f"SessionsConfig.workloads: unknown workload {w!r} (choose from {WORKLOADS})")
        if not self.sessions or min(self.sessions) < 1:
            raise ValueError(f"SessionsConfig.sessions must be positive session counts, got {self.sessions}")
        if self.speak_seconds < 1 or self.mixed_seconds < 1 or self.turn_seconds < 1:
            raise ValueError("SessionsConfig.speak_seconds, mixed_seconds and turn_seconds must be >= 1")
        if self.prompts < 1:
            raise ValueError(f"SessionsConfig.prompts must be >= 1, got {self.prompts}")
        self.sessions = tuple(sorted(set(int(n) for n in self.sessions)))


def run_grid(server, cfg: SessionsConfig, workload: str, deadline: float, emit, progress=print) -> None:
    """Ascending N until one point past the first break (or an out-of-memory, or the deadline)."""
    fails = 0
    for n in cfg.sessions:
        need = server.estimate_s(workload, n) * 1.2
        if time.perf_counter() + need > deadline:
            emit(dict(arm=server.arm, workload=workload, sessions=n, rows=[], peak_bytes=None, oom=False,
                      skipped=f"time budget (needs ~{need:.0f} s)"))
            progress(f"{server.arm} {workload} N={n}: skipped, time budget")
            break
        t0 = time.perf_counter()
        res = guarded_run(server, workload, n)
        res["wall_s"] = time.perf_counter() - t0
        emit(res)
        if res["oom"]:
            progress(f"{server.arm} {workload} N={n}: out of memory ({res.get('error', '')[:80]})")
            break
        ok = holds_cadence(res["rows"], n, cfg.cadence_s)
        p95 = worst_p95(res["rows"])
        peak = res["peak_bytes"]
        progress(f"{server.arm} {workload} N={n}: {'holds' if ok else 'BREAKS'} the cadence, worst p95 {p95:.0f} ms, "
                 f"peak {peak / 2**30 if peak else float('nan'):.2f} GiB ({res['wall_s']:.1f} s)")
        if not ok:
            fails += 1
            if fails > cfg.extra_points:
                break


def serve_arm(arm: str, ckpt: str, cfg: SessionsConfig, deadline: float, rows_path: str,
              references: dict | None = None, progress=print) -> dict:
    """Build ``arm``, run every workload's grid, then (B0) the solo references; stream results to ``rows_path``."""
    t0 = time.perf_counter()
    if arm == "SRb":
        from .sessions_batched import BatchedArmServer

        server = BatchedArmServer(arm, ckpt, cfg)
    elif arm == "SRl":
        from .sessions_lanes import LaneArmServer

        server = LaneArmServer(arm, ckpt, cfg)
    else:
        server = ArmServer(arm, ckpt, cfg)
    progress(f"{arm}: ready in {server.setup_s:.1f} s, warm-up chunk {server.chunk_s * 1e3:.0f} ms")
    if hasattr(server, "record_trace"):
        written = server.record_trace(Path(rows_path).parent / f"trace_{arm}_lanes.json")
        if written:
            progress(f"{arm}: trace of one concurrent round in {written}")
    fh = open(rows_path, "a")

    def emit(obj):
        fh.write(json.dumps(obj, default=json_default) + "\n")
        fh.flush()

    runs: list[dict] = []

    def emit_run(res):
        runs.append(res)
        emit(dict(kind="run", **res))

    try:
        refs_needed = dict(references or {})
        ref_cost = lambda need: server.chunk_s * sum(need.values()) * 1.15 + 0.05 * len(need)  # noqa: E731
        for wi, w in enumerate(cfg.workloads):
            left = deadline - time.perf_counter() - (ref_cost(refs_needed) if references is not None else 0.0)
            share = left / (len(cfg.workloads) - wi)
            run_grid(server, cfg, w, time.perf_counter() + share, emit_run, progress)
        if references is not None:
            for s, c in chunks_needed([r for res in runs for r in res["rows"]]).items():
                refs_needed[s] = max(refs_needed.get(s, 0), c)
            done = 0
            for s in sorted(refs_needed):
                if time.perf_counter() + server.chunk_s * refs_needed[s] * 1.2 > deadline:
                    progress(f"{arm}: references stopped at the time budget ({done} of {len(refs_needed)} sessions)")
                    break
                for r in server.reference(s, refs_needed[s]):
                    emit(dict(kind="reference", **r))
                done += 1
            progress(f"{arm}: solo references for {done} sessions ({time.perf_counter() - t0:.0f} s in this arm)")
        info = server.info()
        emit(dict(kind="info", **info))
        return info
    finally:
        fh.close()


def _worker(conn, arm, ckpt, cfg_dict, deadline_left, rows_path, references):
    try:
        cfg = SessionsConfig(**cfg_dict)
        deadline = time.perf_counter() + deadline_left
        conn.send(("ok", serve_arm(arm, ckpt, cfg, deadline, rows_path, references,
                                   progress=lambda m: print(m, flush=True))))
    except Exception:
        conn.send(("error", traceback.format_exc()))


def _run_process(arm, ckpt, cfg, budget_s, rows_path, references) -> tuple[str, object]:
    p = ArmProcess(arm, _worker, (arm, ckpt, dataclasses.asdict(cfg), budget_s, rows_path, references))
    try:
        return p.wait(budget_s + 60.0)  # a minute's grace past the arm's budget
    finally:
        p.stop()


def read_rows(path) -> list[dict]:
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


# ---------------------------------------------------------------------------------------
# the study
# ---------------------------------------------------------------------------------------


def run_study(cfg: SessionsConfig, progress=print) -> dict:
    """Run every arm, analyse, write ``sessions.json`` and the CSVs under ``cfg.out``; return the result."""
    t_start = time.perf_counter()
    deadline = t_start + cfg.time_budget_s
    out = check_out(cfg, ("sessions*", "runs_*.jsonl", "trace_*"))
    order = [a for a in cfg.arms if a != "B0"] + (["B0"] if "B0" in cfg.arms else [])
    with built_checkpoint(cfg.config, cfg.seed, progress) as ckpt:
        infos, failures = _run_arms(cfg, order, ckpt, out, deadline, progress)
    entries = {a: read_rows(out / f"runs_{a}.jsonl") for a in order}
    result = analyse(cfg, entries, infos, failures)
    result["provenance"] = dict(provenance(cfg), wall_s=time.perf_counter() - t_start)
    write_results(result, out)
    return result


def _run_arms(cfg: SessionsConfig, order: list, ckpt: str, out: Path, deadline: float, progress) -> tuple[dict, dict]:
    """Every arm in ``order`` (B0 last), each in its share of the time left; (infos, failures) by arm."""
    infos, failures = {}, {}
    for path in out.glob("runs_*.jsonl"):
        path.unlink()
    for k, arm in enumerate(order):
        rows_path = str(out / f"runs_{arm}.jsonl")
        left = deadline - time.perf_counter()
        budget = left if k == len(order) - 1 else left / (len(order) - k + 0.5)
        refs = None
        if arm == "B0":
            refs = chunks_needed([r for a in order[:k] for e in read_rows(out / f"runs_{a}.jsonl")
                                  if e.get("kind") == "run" for r in e["rows"]])
        progress(f"arm {arm}: {budget:.0f} s of the time budget")
        if cfg.processes:
            kind, res = _run_process(arm, ckpt, cfg, budget, rows_path, refs)
        else:
            try:
                kind, res = "ok", serve_arm(arm, ckpt, cfg, time.perf_counter() + budget, rows_path, refs, progress)
            except Exception:
                kind, res = "error", traceback.format_exc()
        if kind == "ok":
            infos[arm] = res
        else:
            failures[arm] = str(res)[-3000:]
            progress(f"arm {arm} failed: {str(res).strip().splitlines()[-1] if str(res).strip() else res}")
    return infos, failures


def write_results(result: dict, out: Path) -> None:
    sessions, chunks = result.pop("_sessions"), result.pop("_chunks")
    write_json(result, out / "sessions.json", strict_json=False)
    write_csv(sessions, out / "sessions.csv")
    write_csv(chunks, out / "sessions_chunks.csv")


def table(result: dict) -> str:
    """The short table printed last."""
    lines = [f"{'arm':>5} {'workload':>12} {'N':>4} {'hold':>6} {'p95 ms':>8} {'goodput':>8} {'peak MiB':>9} "
             f"{'swap ms':>8} {'exact':>9}"]
    for r in result["capacity"]:
        if r["oom"] or r["skipped"]:
            lines.append(f"{r['arm']:>5} {r['workload']:>12} {r['sessions']:>4}  "
                         f"{'OUT OF MEMORY' if r['oom'] else 'skipped: ' + r['skipped']}")
            continue
        hold = f"{r['sessions_holding']:>3}/{r['sessions']:<2}"
        lines.append(f"{r['arm']:>5} {r['workload']:>12} {r['sessions']:>4} {hold} "
                     f"{r['p95_chunk_ms']:8.0f} {r['goodput']:8.2f} {r['peak_MiB']:9.0f} {r['swap_ms_median']:8.2f} "
                     f"{r['exact_chunks']:>4}/{r['checked_chunks']:<4}")
    for a, f in result.get("failures", {}).items():
        lines.append(f"{a:>5} FAILED: {f.strip().splitlines()[-1][:100] if f.strip() else f}")
    s = result["summary"]
    lines.append("summary: " + json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in s.items()},
                                          default=json_default))
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------------------


def _arms() -> tuple:
    from ..adapters.token2wav.runtime import ARMS

    return tuple(ARMS)


def _cli(args) -> int:
    cfg = config_from_args(SessionsConfig, args)
    res = run_study(cfg, progress=lambda m: print(m, flush=True))
    print(table(res), flush=True)
    non_exact = [a for a, n in res.get("summary", {}).get("non_exact_by_arm", {}).items() if n]
    line = failed_line("bench sessions", res.get("failures", {}), non_exact)
    if line:
        print(line, file=sys.stderr, flush=True)
        return 1
    return 0


def add_parser(sub) -> None:
    add_study_parser(sub, "sessions", SessionsConfig, "multi-session capacity: N sessions on one device, B0 vs SRc",
                     _cli)
