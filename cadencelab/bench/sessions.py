"""Multi-session capacity: N Token2wav sessions on one device, B0 vs SRc (and lanes SRl, batched SRb).

``python -m cadencelab.bench sessions --device cuda --out DIR``

One arm per fresh process, serving every arrival mode and workload of that arm through one
:class:`~cadencelab.serving.sessions.SessionManager` (one set of weights and, for SRc, of graphs). Session ``i``
has its own tokens, seed and prompt, and its k-th chunk is the same in every workload and at every N: a workload
decides only *when* a session speaks (``speak_heavy``: every second; ``mixed``: alternating turns). Arrivals
are ``aligned`` (at the whole second) or ``staggered`` (session i at t + i / N). Sessions start from a copy of
their prompt's primed template: priming draws no random numbers, so this equals priming each one.

Chunks are served one at a time, FIFO; each service time is measured with the device synchronised and then laid
on a virtual clock (start = max(arrival, previous completion)), so queueing shows in the latency and idle gaps
cost no wall time. A session holds the cadence when its p95 latency is <= ``--cadence``. Each (arm, arrivals,
workload) is swept to its break point (:mod:`.sessions_sweep`); an out-of-memory is a row, not a crash.
Exactness (:mod:`.sessions_verify`, after the timed runs): every chunk's SHA-256 of int16 PCM and mel against
the session streamed alone through B0 (SRb, :mod:`.sessions_batched`: the same batches run eagerly; not SRbi).
``--time-budget`` bounds the whole study (a point that would not fit is recorded as skipped); ``sessions.json``
(its ``capacity`` rows feed :func:`cadencelab.viz.capacity_lines`), ``sessions.csv`` and ``sessions_chunks.csv``
are written either way, ``sessions_staggered*`` beside them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path


from . import options
from .common import built_checkpoint, check_out, json_default, write_csv, write_json
from .flags import (MAX_CHUNKS, add_study_parser, config_from_args, failed_line, int_range, ints_in, names_in,
                    nonnegative_float, opt, positive_float)
from .sessions_analysis import analyse
from .session_serving import ARRIVALS, WORKLOADS, chunks_needed
from .sessions_arm import OwedVerification, for_arrivals, read_rows, run_arm_process, serve_arm, sweep_arm
from .sessions_sweep import arm_deadline, check_sweep
from .sessions_verify import (GATE, GATED_ARM, REFERENCE, gate_tasks, reference_pace, reference_tasks, split_workers,
                              verify)
from .token2wav import provenance

__all__ = ["SessionsConfig", "run_study", "run_studies", "result_stem", "arm_order", "table", "write_results",
           "for_arrivals", "OwedVerification", "sweep_arm", "serve_arm", "read_rows", "analyse"]


SERVED_ARMS = ("SRb", "SRbi", "SRl")
"""Arms served by their own servers: SRb (experimental batched replay), SRbi (the same, batch-invariant kernels,
experimental), SRl (lanes)."""


def _growth(text: str) -> float:
    v = positive_float(text)
    if v <= 1.0:
        raise argparse.ArgumentTypeError(f"must be a number > 1, got {text[:40]!r}")
    return v


_growth.__name__ = "float"


@dataclass
class SessionsConfig:
    config: str = options.model_config()
    device: str = options.device()
    arms: tuple = opt(("SRc", "B0"), parse=names_in(lambda: [*_arms(), *SERVED_ARMS]),
                      help="comma-separated arms (B0 runs first; SRb: experimental batched replay; SRbi: the same with "
                           "batch-invariant kernels, gated on solo B0; SRl: lanes, "
                           "concurrent replay on CUDA streams)")
    workloads: tuple = opt(WORKLOADS, parse=names_in(WORKLOADS), help="comma-separated workloads")
    arrivals: tuple = opt(("aligned",), parse=names_in(ARRIVALS),
                          help="comma-separated arrival modes, all served by each arm's one process: aligned (every "
                               "chunk at the whole second), staggered (session i of N at t + i / N); with both, the "
                               "staggered results are written as sessions_staggered.*")
    sessions: tuple = opt((1, 4, 16), parse=ints_in(1, MAX_CHUNKS),
                          help="session counts N run first, ascending; past the last, N grows by --growth until the "
                               "cadence breaks or memory runs out, then bisection to --resolution")
    growth: float = opt(2.0, type=_growth, help="past the listed N: each N this many times the previous (> 1)")
    resolution: float = opt(0.125, type=nonnegative_float,
                            help="bisect until the N that broke is within this fraction above the N that held "
                                 "(0: until adjacent)")
    max_sessions: int = opt(512, type=int_range(1, MAX_CHUNKS),
                            help="the largest N a sweep runs (it ends there as a lower bound if nothing broke)")
    margin: float = 0.25  # how far past its predicted break the ascent may jump from a point that held
    speak_seconds: int = opt(3, type=int_range(1, MAX_CHUNKS), help="speak_heavy: seconds (chunks per session)")
    mixed_seconds: int = opt(4, type=int_range(1, MAX_CHUNKS), help="mixed: seconds simulated")
    turn_seconds: int = opt(2, type=int_range(1, MAX_CHUNKS), help="mixed: length of a speaking / listening turn")
    prompts: int = opt(4, type=int_range(1, MAX_CHUNKS), help="distinct prompts, taken in turn by the sessions")
    cadence_s: float = opt(1.0, flag="--cadence", type=positive_float,
                           help="seconds: the p95 chunk latency a session must hold")
    extra_points: int = 0  # points run above the first N that breaks, before the bisection
    n_timesteps: int = options.steps()
    seed: int = options.seed()
    condition: str = options.condition()
    processes: bool = options.processes("one spawned process per arm (off: the arms run in this process)", on_cpu=False)
    time_budget_s: float = opt(225.0, flag="--time-budget", type=positive_float,
                               help="seconds for the whole study (stops gracefully)")
    arm_reserve_s: float = opt(45.0, flag="--arm-reserve", type=positive_float,
                               help="seconds of the budget each arm not yet started keeps (its start-up and the "
                                    "ascent to its break); an arm that ends early leaves the rest to the next")
    verify_workers: int = opt(4, on_cpu=1, type=int_range(1, 64),
                              help="processes of the verification phase after the timed runs (B0 solo references, "
                                   "SRb's batched eager gate), sharing the device")
    batch_sizes: tuple = opt((1, 2, 4, 8), parse=ints_in(1, MAX_CHUNKS),
                             help="SRb, SRbi: declared session counts of a batched call")
    # SRl: 16 lanes held 28 speak_heavy sessions on the H200 where 8 held 24 (2026-12-01)
    lanes: int = opt(16, type=int_range(1, 64), help="SRl: graph sets replaying concurrently, one CUDA stream each")
    lane_processes: int = opt(1, type=int_range(1, 16),
                              help="SRl: processes sharing the device, the lanes split between them (session i served "
                                   "by process i %% P; each its own weights, interpreter and CUDA context)")
    mps: bool = opt(False, help="SRl with --lane-processes > 1: the lane processes as clients of one CUDA MPS daemon "
                                "started for the arm (their kernels share the SMs instead of time-slicing)")
    gil_probe: bool = opt(False, help="SRl: a thread in each lane process that sleeps 2 ms in a loop and times how "
                                      "late it wakes (the interpreter lock's wait), recorded per run")
    stagger: bool = opt(False, help="the same as --arrivals staggered")
    out: str = options.out("sessions")
    overwrite: bool = options.overwrite()

    def __post_init__(self):
        from ..adapters.token2wav.runtime import ARMS

        for a in self.arms:
            if a not in ARMS and a not in SERVED_ARMS:
                raise ValueError(f"SessionsConfig.arms: unknown arm {a!r} "
                                 f"(choose from {sorted(ARMS) + list(SERVED_ARMS)})")
        if self.lanes < 1:
            raise ValueError(f"SessionsConfig.lanes must be >= 1, got {self.lanes}")
        if not 1 <= self.lane_processes <= self.lanes:
            raise ValueError(f"SessionsConfig.lane_processes must be in 1..lanes ({self.lanes}), "
                             f"got {self.lane_processes}")
        if self.mps and (self.lane_processes < 2 or "SRl" not in self.arms):
            raise ValueError("SessionsConfig.mps serves SRl's lane processes: it needs SRl among the arms and "
                             f"--lane-processes of 2 or more, got arms {self.arms} and {self.lane_processes}")
        self.batch_sizes = tuple(sorted(set(int(b) for b in self.batch_sizes)))
        if {"SRb", "SRbi"} & set(self.arms) and (not self.batch_sizes or self.batch_sizes[0] != 1):
            raise ValueError(f"SessionsConfig.batch_sizes must be positive and include 1, got {self.batch_sizes}")
        for w in self.workloads:
            if w not in WORKLOADS:
                raise ValueError(f"SessionsConfig.workloads: unknown workload {w!r} (choose from {WORKLOADS})")
        self.arrivals = tuple(dict.fromkeys(self.arrivals))
        if not self.arrivals or any(a not in ARRIVALS for a in self.arrivals):
            raise ValueError(f"SessionsConfig.arrivals must name modes of {ARRIVALS}, got {self.arrivals}")
        if self.stagger:  # --stagger is --arrivals staggered
            if len(self.arrivals) > 1:
                raise ValueError("SessionsConfig.stagger is arrivals=('staggered',): give one or the other")
            self.arrivals = ("staggered",)
        self.stagger = self.arrivals == ("staggered",)
        self.sessions = tuple(sorted(set(int(n) for n in self.sessions)))
        check_sweep("SessionsConfig", "sessions", self.sessions, self.growth, self.resolution, self.max_sessions)
        if self.speak_seconds < 1 or self.mixed_seconds < 1 or self.turn_seconds < 1:
            raise ValueError("SessionsConfig.speak_seconds, mixed_seconds and turn_seconds must be >= 1")
        if self.prompts < 1:
            raise ValueError(f"SessionsConfig.prompts must be >= 1, got {self.prompts}")


def result_stem(cfg: SessionsConfig, mode: str) -> str:
    """The result files' stem of arrival mode ``mode``: ``sessions``, or ``sessions_staggered`` for the
    staggered results of a study that also served aligned arrivals."""
    return "sessions_staggered" if mode == "staggered" and len(cfg.arrivals) > 1 else "sessions"


# ---------------------------------------------------------------------------------------
# the study
# ---------------------------------------------------------------------------------------


def arm_order(arms) -> list[str]:
    """B0 first (its warm-up prices the solo references for every later arm's budget), then the others as given."""
    return (["B0"] if "B0" in arms else []) + [a for a in arms if a != "B0"]


def run_study(cfg: SessionsConfig, progress=print) -> dict:
    """:func:`run_studies`; returns the result of the first arrival mode (``cfg.arrivals[0]``)."""
    return run_studies(cfg, progress)[cfg.arrivals[0]]


def run_studies(cfg: SessionsConfig, progress=print) -> dict:
    """Run every arm, verify, analyse, write one result per arrival mode under ``cfg.out``; return the
    results by arrival mode (:func:`result_stem` names their files)."""
    t_start = time.perf_counter()
    deadline = t_start + cfg.time_budget_s
    out = check_out(cfg, ("sessions*", "runs_*.jsonl", "verify.jsonl", "trace_*"))
    order = arm_order(cfg.arms)
    with built_checkpoint(cfg.config, cfg.seed, progress) as ckpt:
        infos, failures = _run_arms(cfg, order, ckpt, out, deadline, progress)
        entries = {a: read_rows(out / f"runs_{a}.jsonl") for a in order}
        verification = _verification(cfg, ckpt, entries, infos, out, deadline, progress)
    ver = read_rows(out / "verify.jsonl")
    wall = time.perf_counter() - t_start
    results = {}
    for mode in cfg.arrivals:
        cfg_m = for_arrivals(cfg, mode)
        ents = {a: [e for e in es if e.get("arrivals", mode) == mode] for a, es in entries.items()}
        ents["verification"] = [e for e in ver if e.get("kind") == "reference" or e.get("arrivals") == mode]
        result = analyse(cfg_m, ents, infos, failures)
        result["verification"] = verification
        # the study's config as the command gave it (every arrival mode), and the mode this result holds
        result["provenance"] = dict(provenance(cfg), wall_s=wall, arrivals=mode)
        write_results(result, out, result_stem(cfg, mode))
        results[mode] = result
    return results


def _reference_workers(cfg: SessionsConfig, gate: bool) -> int:
    """The verification's reference workers (:func:`split_workers`): one process fewer when one takes SRb's gate."""
    kinds = [REFERENCE] + ([GATE] if gate else [])
    return split_workers(cfg.verify_workers if cfg.processes else 1, kinds)[REFERENCE]


def _owed(cfg: SessionsConfig, arm: str, entries: dict, infos: dict) -> dict | None:
    """What the verification owes for the runs so far (:class:`~.sessions_arm.OwedVerification`'s fields),
    for ``arm``'s budget: the solo references of the gated arms' runs (priced by B0's warm-up and start) and
    the SRb gates of its capacity points; None when there is nothing to verify."""
    if "B0" not in cfg.arms and GATED_ARM not in cfg.arms:
        return None
    workers = _reference_workers(cfg, GATED_ARM in cfg.arms)
    b0 = infos.get("B0", {})
    runs = [e for a, es in entries.items() if a != GATED_ARM for e in es if e.get("kind") == "run"]
    srb = infos.get(GATED_ARM, {})
    gates = gate_tasks([e for e in entries.get(GATED_ARM, []) if e.get("kind") == "run"],
                       {int(k): v for k, v in srb.get("eager_batch_s_warmup", {}).items()})
    return dict(need=chunks_needed([r for e in runs for r in e["rows"]]) if "B0" in cfg.arms else {},
                chunk_s=reference_pace(b0.get("chunk_s_warmup", 0.0), workers, cfg.device), workers=workers,
                start_s=max(b0.get("ready_s", 0.0), srb.get("ready_s", 0.0)),
                gates_s=sum(t.estimate_s for t in gates if t.priority[0] == 0),
                gated="B0" in cfg.arms and arm != GATED_ARM)


def _run_arms(cfg: SessionsConfig, order: list, ckpt: str, out: Path, deadline: float, progress) -> tuple[dict, dict]:
    """Every arm in ``order``, each until its deadline (:func:`~.sessions_sweep.arm_deadline`); (infos, failures)
    by arm."""
    infos, failures = {}, {}
    for path in [*out.glob("runs_*.jsonl"), out / "verify.jsonl"]:
        path.unlink(missing_ok=True)
    for k, arm in enumerate(order):
        rows_path = str(out / f"runs_{arm}.jsonl")
        owed = _owed(cfg, arm, {a: read_rows(out / f"runs_{a}.jsonl") for a in order[:k]}, infos)
        now = time.perf_counter()  # the verification owed is counted point by point (sessions_arm.sweep_arm)
        budget = arm_deadline(now, deadline, len(order) - k - 1, cfg.arm_reserve_s) - now
        progress(f"arm {arm}: {budget:.0f} s of the time budget")
        if cfg.processes and not (arm == "SRl" and cfg.lane_processes > 1):  # SRl's own processes: from here
            kind, res = run_arm_process(arm, ckpt, cfg, budget, rows_path, owed)
        else:
            try:
                kind, res = "ok", serve_arm(arm, ckpt, cfg, time.perf_counter() + budget, rows_path, owed, progress)
            except Exception:
                kind, res = "error", traceback.format_exc()
        if kind == "ok":
            infos[arm] = res
        else:
            failures[arm] = str(res)[-3000:]
            progress(f"arm {arm} failed: {str(res).strip().splitlines()[-1] if str(res).strip() else res}")
    return infos, failures


def _verification(cfg: SessionsConfig, ckpt: str, entries: dict, infos: dict, out: Path, deadline: float,
                  progress) -> dict:
    """The solo references (when B0 is an arm) and SRb's gate, in the time left."""
    runs = {a: [e for e in es if e.get("kind") == "run" and e.get("rows")] for a, es in entries.items()}
    tasks = {}
    if "B0" in cfg.arms:
        solo = [e for a, es in runs.items() if a != GATED_ARM for e in es]
        pace = reference_pace(infos.get("B0", {}).get("chunk_s_warmup", 0.0),
                              _reference_workers(cfg, bool(runs.get(GATED_ARM))), cfg.device)
        tasks[REFERENCE] = reference_tasks(solo, pace)
    if runs.get(GATED_ARM):
        eager = {int(k): v for k, v in infos.get(GATED_ARM, {}).get("eager_batch_s_warmup", {}).items()}
        tasks[GATE] = gate_tasks(runs[GATED_ARM], eager)
    return verify(cfg, ckpt, tasks, out, deadline, progress)


def write_results(result: dict, out: Path, stem: str = "sessions") -> None:
    sessions, chunks = result.pop("_sessions"), result.pop("_chunks")
    write_json(result, out / f"{stem}.json", strict_json=False)
    write_csv(sessions, out / f"{stem}.csv")
    write_csv(chunks, out / f"{stem}_chunks.csv")


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
    results = run_studies(cfg, progress=lambda m: print(m, flush=True))
    failures, non_exact = {}, set()
    for mode, res in results.items():
        print(f"-- {mode} arrivals ({result_stem(cfg, mode)}.json)", flush=True)
        print(table(res), flush=True)
        failures.update(res.get("failures", {}))
        non_exact |= {a for a, n in res.get("summary", {}).get("non_exact_by_arm", {}).items() if n}
    line = failed_line("bench sessions", failures, non_exact)
    if line:
        print(line, file=sys.stderr, flush=True)
        return 1
    return 0


def add_parser(sub) -> None:
    add_study_parser(sub, "sessions", SessionsConfig, "multi-session capacity: N sessions on one device, B0 vs SRc",
                     _cli)
