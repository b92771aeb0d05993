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

import numpy as np
import pandas as pd

from . import options
from .common import ArmProcess, built_checkpoint, json_default, write_json
from .flags import (MAX_CHUNKS, add_study_parser, config_from_args, failed_line, int_range, ints_in, names_in, opt,
                    positive_float)
from .session_serving import (WORKLOADS, ArmServer, chunks_needed, guarded_run, holds_cadence, horizon, worst_p95)
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
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
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


# ---------------------------------------------------------------------------------------
# analysis (DataFrames)
# ---------------------------------------------------------------------------------------


def chunk_frame(entries: dict) -> pd.DataFrame:
    """Every served chunk of every run, with its exactness against its arm's reference (None: unchecked).

    The reference (``reference``) is the session run alone through B0 (``solo_B0``), except
    for the experimental batched arm, whose rows carry the SHA-256 of the same batch on the
    batched eager path (``batched_eager``). ``exact_solo`` compares every row with the solo B0
    reference: for ``SRb`` it is reported, not gated.
    """
    rows = [r for es in entries.values() for e in es if e.get("kind") == "run" for r in e["rows"]]
    cols = ["arm", "workload", "sessions", "session", "chunk", "arrival_s", "start_s", "completion_s", "latency_ms",
            "service_ms", "queue_ms", "launch_ms", "host_ms", "lane", "audio_s", "swap_bytes", "swap_ms", "batch", "batch_size",
            "sha_i16", "sha_mel", "gate_sha_i16", "gate_sha_mel"]
    df = pd.DataFrame(rows, columns=cols)
    refs = pd.DataFrame([e for es in entries.values() for e in es if e.get("kind") == "reference"],
                        columns=["kind", "session", "chunk", "ref_sha_i16", "ref_sha_mel"]).drop(columns="kind")
    refs = refs.drop_duplicates(["session", "chunk"])
    df = df.merge(refs, on=["session", "chunk"], how="left")
    solo = df["ref_sha_i16"].notna()
    df["exact_solo_mel"] = (df["sha_mel"] == df["ref_sha_mel"]).where(solo)
    df["exact_solo"] = ((df["sha_i16"] == df["ref_sha_i16"]) & (df["sha_mel"] == df["ref_sha_mel"])).where(solo)
    single = (df["batch_size"].fillna(1) == 1).astype(int)
    keys = ["arm", "workload", "sessions", "session"]
    df["never_batched"] = (df.assign(_s=single).sort_values(keys + ["chunk"]).groupby(keys, sort=False)["_s"]
                           .cummin().reindex(df.index).astype(bool))  # this chunk and every earlier one alone
    batched = df["gate_sha_i16"].notna()
    df["reference"] = np.where(batched, "batched_eager", np.where(solo, "solo_B0", ""))
    want_i16 = df["gate_sha_i16"].where(batched, df["ref_sha_i16"])
    want_mel = df["gate_sha_mel"].where(batched, df["ref_sha_mel"])
    checked = want_i16.notna()
    df["checked"] = checked
    df["exact_i16"] = (df["sha_i16"] == want_i16).where(checked)
    df["exact_mel"] = (df["sha_mel"] == want_mel).where(checked)
    df["exact"] = (df["exact_i16"].astype("boolean") & df["exact_mel"].astype("boolean"))
    return df


def session_frame(chunks: pd.DataFrame, cadence_s: float = 1.0) -> pd.DataFrame:
    """One row per (arm, workload, N, session): chunks, p50 / p95 / max latency, cadence held, exactness."""
    cols = ["arm", "workload", "sessions", "session", "chunks", "p50_chunk_ms", "p95_chunk_ms", "max_chunk_ms",
            "holds_cadence", "audio_s", "checked_chunks", "exact_chunks"]
    if chunks.empty:
        return pd.DataFrame(columns=cols)
    g = chunks.groupby(["arm", "workload", "sessions", "session"], sort=False)
    df = g.agg(chunks=("chunk", "size"), p50_chunk_ms=("latency_ms", "median"),
               p95_chunk_ms=("latency_ms", lambda v: float(np.percentile(v, 95))),
               max_chunk_ms=("latency_ms", "max"), audio_s=("audio_s", "sum"),
               checked_chunks=("checked", "sum"),
               exact_chunks=("exact", lambda v: int(v.fillna(False).sum()))).reset_index()
    df["holds_cadence"] = df["p95_chunk_ms"] <= cadence_s * 1e3
    return df[cols]


def capacity_frame(cfg: SessionsConfig, entries: dict, sessions: pd.DataFrame, chunks: pd.DataFrame) -> pd.DataFrame:
    """One row per (arm, workload, N): sessions holding the cadence, worst p95, goodput, peak, OOM / skipped."""
    rows = []
    for arm, es in entries.items():
        for e in es:
            if e.get("kind") != "run":
                continue
            w, n = e["workload"], e["sessions"]
            s = sessions[(sessions["arm"] == arm) & (sessions["workload"] == w) & (sessions["sessions"] == n)]
            c = chunks[(chunks["arm"] == arm) & (chunks["workload"] == w) & (chunks["sessions"] == n)]
            ran = bool(len(c)) and not e.get("oom") and not e.get("skipped")
            span = max(float(c["completion_s"].max()), float(horizon(cfg, w))) if len(c) else float("nan")
            swaps = c[c["swap_bytes"] > 0]
            late = int((c["latency_ms"] > cfg.cadence_s * 1e3).sum()) if ran else 0
            session_min = n * horizon(cfg, w) / 60.0
            rows.append(dict(
                arm=arm, workload=w, sessions=n, oom=bool(e.get("oom")), skipped=e.get("skipped") or "",
                error=e.get("error", ""), chunks=int(len(c)),
                sessions_holding=int(s["holds_cadence"].sum()) if ran else 0,
                all_hold=bool(ran and len(s) and s["holds_cadence"].all()),
                p95_chunk_ms=float(s["p95_chunk_ms"].max()) if ran else float("nan"),
                median_chunk_ms=float(c["latency_ms"].median()) if ran else float("nan"),
                service_ms_median=float(c["service_ms"].median()) if ran else float("nan"),
                goodput=float(c["audio_s"].sum() / span) if ran else float("nan"),
                audio_s=float(c["audio_s"].sum()),
                peak_bytes=e.get("peak_bytes"),
                peak_MiB=e["peak_bytes"] / 2**20 if e.get("peak_bytes") else float("nan"),
                state_bytes_per_session=e.get("state_bytes_per_session"),
                swaps=int(len(swaps)), swap_ms_median=float(swaps["swap_ms"].median()) if len(swaps) else 0.0,
                swap_bytes_median=float(swaps["swap_bytes"].median()) if len(swaps) else 0.0,
                checked_chunks=int(c["checked"].sum()), exact_chunks=int(c["exact"].fillna(False).sum()),
                captures=e.get("captures"), invalidations=e.get("invalidations"), wall_s=e.get("wall_s"),
                batches=e.get("batches"),
                on_time_share=float(1 - late / len(c)) if ran else float("nan"),
                underruns_per_session_min=float(late / session_min) if ran else float("nan"),
                lanes_used=e.get("lanes_used"),
                host_share=(float(c["host_ms"].sum() / (span * 1e3)) if ran and c["host_ms"].notna().any() else None),
                launch_share=(float(c["launch_ms"].sum() / (span * 1e3)) if ran and c["launch_ms"].notna().any()
                              else None),
                launch_ms_median=(float(c["launch_ms"].median()) if ran and c["launch_ms"].notna().any() else None),
                eager_sections=e.get("eager_sections"),
                mean_batch_size=float(c["batch_size"].mean()) if ran and c["batch_size"].notna().any() else None,
            ))
    return pd.DataFrame(rows)


def peak_slope(cap: pd.DataFrame) -> float | None:
    """Least-squares slope of peak bytes vs N over runs with a measured peak (None under two points)."""
    d = cap[cap["peak_bytes"].notna() & ~cap["oom"]]
    if d["sessions"].nunique() < 2:
        return None
    return float(np.polyfit(d["sessions"].astype(float), d["peak_bytes"].astype(float), 1)[0])


def capacity_bounds(cap: pd.DataFrame, max_at: dict, workloads) -> dict:
    """Per arm and workload: "exact" when a run above the maximum was measured and broke (some
    session missed the cadence, or out of memory), "lower_bound" when the sweep ended without a
    break (grid exhausted, or the next N skipped for the time budget)."""
    out: dict = {}
    for a, per in max_at.items():
        out[a] = {}
        for w in workloads:
            d = cap[(cap["arm"] == a) & (cap["workload"] == w) & (cap["sessions"] > per.get(w, 0))]
            broke = d[(d["oom"]) | ((d["skipped"].fillna("") == "") & ~d["all_hold"].fillna(False).astype(bool))]
            out[a][w] = "exact" if len(broke) else "lower_bound"
    return out


def summarise(cfg: SessionsConfig, cap: pd.DataFrame, chunks: pd.DataFrame, infos: dict) -> dict:
    granule = 2 * 2**20
    arms = list(dict.fromkeys(cap["arm"])) if len(cap) else []
    s: dict = {}
    max_at = {a: {} for a in arms}
    for a in arms:
        for w in cfg.workloads:
            d = cap[(cap["arm"] == a) & (cap["workload"] == w) & cap["all_hold"]]
            max_at[a][w] = int(d["sessions"].max()) if len(d) else 0
        s[f"max_sessions_at_cadence_{a}"] = max_at[a]
    s["capacity_bound"] = capacity_bounds(cap, max_at, cfg.workloads)
    if "B0" in max_at and "SRc" in max_at:
        ratio = {w: (max_at["SRc"][w] / max_at["B0"][w] if max_at["B0"].get(w) else None) for w in cfg.workloads}
        s["sessions_ratio_SRc_over_B0"] = ratio
        vals = [r for r in ratio.values() if r is not None]
        s["target_ratio_3x_met"] = bool(vals and len(vals) == len(ratio) and min(vals) >= 3.0)
    slopes = {a: {w: peak_slope(cap[(cap["arm"] == a) & (cap["workload"] == w)]) for w in cfg.workloads} for a in arms}
    s["peak_bytes_per_added_session"] = {a: max([v for v in slopes[a].values() if v is not None], default=None)
                                        for a in arms}
    s["peak_bytes_per_added_session_by_workload"] = slopes
    s["state_bytes_per_session"] = {a: (int(cap[cap["arm"] == a]["state_bytes_per_session"].dropna().max())
                                        if cap[cap["arm"] == a]["state_bytes_per_session"].notna().any() else None)
                                    for a in arms}
    s["declared_state_bytes_per_session"] = {a: infos.get(a, {}).get("declared_state_bytes") for a in arms}
    within = {}
    for a in arms:
        slope, declared = s["peak_bytes_per_added_session"][a], s["declared_state_bytes_per_session"][a]
        if slope is not None and declared:
            within[a] = bool(slope <= declared + granule)
    s["added_session_within_declared_state"] = within
    checked = chunks[chunks["checked"]] if len(chunks) else chunks
    s["chunks"] = int(len(chunks))
    s["chunks_checked"] = int(len(checked))
    s["chunks_exact"] = int(checked["exact"].fillna(False).sum()) if len(checked) else 0
    s["all_checked_chunks_exact"] = bool(len(checked) and s["chunks_exact"] == len(checked))
    s["non_exact_by_arm"] = ({a: int((~g["exact"].fillna(True)).sum()) for a, g in checked.groupby("arm")}
                             if len(checked) else {})
    srcs = chunks[(chunks["arm"] == "SRc") & (chunks["swap_bytes"] > 0)] if len(chunks) else chunks
    s["swap_ms_median_SRc"] = float(srcs["swap_ms"].median()) if len(srcs) else None
    s["swap_bytes_median_SRc"] = float(srcs["swap_bytes"].median()) if len(srcs) else None
    s["exactness_reference"] = ({a: sorted(set(g["reference"]) - {""}) for a, g in chunks.groupby("arm")}
                                if len(chunks) else {})
    solo = chunks[chunks["exact_solo"].notna()] if len(chunks) else chunks
    s["identical_to_solo_B0"] = ({a: dict(mel_and_pcm=int(g["exact_solo"].astype(bool).sum()),
                                         mel=int(g["exact_solo_mel"].astype(bool).sum()), compared=int(len(g)),
                                         mel_iff_never_batched=bool((g["exact_solo_mel"].astype(bool)
                                                                     == g["never_batched"]).all()))
                                  for a, g in solo.groupby("arm")} if len(solo) else {})
    if "SRb" in max_at:
        s["experimental_arms"] = ["SRb"]
        if "SRc" in max_at:
            s["sessions_ratio_SRb_over_SRc"] = {w: (max_at["SRb"][w] / max_at["SRc"][w] if max_at["SRc"].get(w)
                                                    else None) for w in cfg.workloads}
    if "SRl" in max_at:
        for other in ("SRc", "SRb"):
            if other in max_at:
                s[f"sessions_ratio_SRl_over_{other}"] = {w: (max_at["SRl"][w] / max_at[other][w]
                                                             if max_at[other].get(w) else None) for w in cfg.workloads}
        r = s.get("sessions_ratio_SRl_over_SRc")
        if r is not None:
            vals = [v for v in r.values() if v is not None]
            s["target_lanes_2_5x_met"] = bool(vals and len(vals) == len(r) and min(vals) >= 2.5)
        info = infos.get("SRl", {})
        s["lanes"] = info.get("lanes")
        s["lane_bytes"] = info.get("lane_bytes")
        s["eager_sections_after_warmup_SRl"] = info.get("eager_sections_after_warmup")
    s["recaptures_after_warmup"] = {a: (i["captures_end"] - i["captures_after_warmup"]) for a, i in infos.items()}
    s["invalidations"] = {a: i["invalidations_end"] for a, i in infos.items()}
    return s


def analyse(cfg: SessionsConfig, entries: dict, infos: dict, failures: dict) -> dict:
    chunks = chunk_frame(entries)
    sessions = session_frame(chunks, cfg.cadence_s)
    cap = capacity_frame(cfg, entries, sessions, chunks)
    return dict(summary=summarise(cfg, cap, chunks, infos), capacity=cap.to_dict("records"),
                arms=infos, failures=failures, _sessions=sessions, _chunks=chunks)


def write_results(result: dict, out: Path) -> None:
    sessions, chunks = result.pop("_sessions"), result.pop("_chunks")
    write_json(result, out / "sessions.json", strict_json=False)
    sessions.to_csv(out / "sessions.csv", index=False)
    chunks.to_csv(out / "sessions_chunks.csv", index=False)


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
