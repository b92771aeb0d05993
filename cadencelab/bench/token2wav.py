"""The Token2wav factorial: B0, S, R, Rc, SR, SRc and the controls on matched blocks.

Protocol (every arm sees the same seeds, prompt and token streams):

* the random weights are built once and saved as a checkpoint, which every arm's fresh process loads (its solver
  buffers sized for the arm);
* a block is two turns; each primes the flow with the prompt (a turn boundary: the state-rule arms reset their
  carries in place), streams ``chunks_per_turn`` chunks (a chunk plus its lookahead, dropping the chunk after
  each, as the duplex demo does) and flushes the rest with ``last_chunk=True``; the device generator is seeded at
  the block start;
* the measurement follows :mod:`cadencelab.bench.measure` (fresh pinned processes per round, arms interleaved
  block by block in a rotating order, rounds until the headline's interval is narrow enough or the budget ends);
  each process's block 0 is a warm-up (captures happen there), reported but left out of the statistics;
* per chunk: synthesis-segment latency (CUDA events), host wall and SHA-256 of mel / float32 PCM / int16 PCM;
  per block: the allocator peak and the replay counters; one profiled block per arm gives device-busy time and
  kernel and graph launches per chunk.

The exactness gate compares every block's hashes with B0's (same round, same block). Ratios come with
hierarchical bootstrap 95% intervals (processes, then blocks within them); ``B0_repeat`` against ``B0`` is the
A/A check that gates every direction the study claims.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..adapters.arms import CONTROLS, FACTORIAL
from .token2wav_results import analyse, write_results
from ..adapters.token2wav.turns import chunk_pieces, turn_tokens
from ..replay.determinism import CONDITIONS, REFERENCE, apply_condition, split_arm
from . import options
from ..profile.provenance import run_provenance
from .common import ArmProcess, InlineArm, built_checkpoint, check_out, serve, set_up_device
from .measure import Method, host_figures, interval_halfwidth, parse_cores, pin_to_cores
from .rounds import Rounds, run_rounds
from .token2wav_analysis import table
from .flags import (MAX_BLOCKS, MAX_CHUNKS, FlagError, add_study_parser, config_from_args, failed_line, int_range,
                    opt, positive_float)

# ---------------------------------------------------------------------------------------
# configuration
# ---------------------------------------------------------------------------------------


@dataclass
class StudyConfig:
    config: str = options.model_config()
    device: str = options.device()
    # an arm ``NAME@CONDITION`` runs under that device condition instead of ``condition``; ``B0@defaults``
    # is the fairness gate's reference (the stock runtime with nothing pinned, in the same run)
    arms: tuple = opt((*FACTORIAL, *CONTROLS[:3], f"B0@{REFERENCE}"), on_cpu=FACTORIAL,
                      parse=lambda flag, text: parse_arms(flag, text),
                      help="comma-separated arms, each optionally NAME@CONDITION (must include B0)")
    condition: str = options.condition("every arm (an arm NAME@CONDITION runs under its own)")
    blocks: int = opt(3, help="timed blocks per process (plus one warm-up block)", type=int_range(1, MAX_BLOCKS))
    chunks_per_turn: int = opt(4, flag="--chunks", type=int_range(2, MAX_CHUNKS),
                               help="chunks per turn, the first and the steady ones (two turns per block; >= 2)")
    flush_tokens: tuple = (13, 27)  # tokens left for each turn's final flush (f = 2 x tokens)
    n_timesteps: int = options.steps()
    seed: int = options.seed()
    profile: bool = opt(True, help="one profiled block per arm after the timed ones (device-busy time, launches)")
    processes: bool = options.processes("fresh processes per arm (off: the arms run in this process, a CPU smoke)")
    min_processes: int = options.min_processes()
    max_processes: int = options.max_processes()
    time_budget_s: float = options.time_budget(480.0)
    target_halfwidth: float = options.target_halfwidth()
    cores: str = options.cores()
    stage: bool = opt(True, help="the next round's processes run the CPU part of their set-up (reading the checkpoint, "
                                 "building the modules; no device work) on cores other than the measurement cores "
                                 "while a round is timed; each timed block records whether it overlapped")
    extend_arms: tuple = opt(("B0", "SRc", "B0_repeat"),
                             help="the arms that get processes past --min-processes (the headline's and the A/A "
                                  "check's); the others stop at --min-processes")
    profile_chunks: int = 3  # the profiled block: one turn of this many chunks + a flush
    keep_traces: tuple = ("B0", "SRc")  # Chrome traces kept in the output folder
    block_timeout_s: float = opt(240.0, flag="--block-timeout", type=positive_float,
                                 help="seconds an arm may take for one block")
    compile_timeout_s: float = opt(420.0, flag="--compile-timeout", type=positive_float,
                                   help="seconds the torch.compile control may take to set up")
    out: str = options.out("token2wav")
    overwrite: bool = options.overwrite()

    def turns(self) -> int:
        return len(self.flush_tokens)

    def method(self) -> Method:
        """The measurement method of this study (:class:`~cadencelab.bench.measure.Method`)."""
        return Method(min_processes=self.min_processes, max_processes=self.max_processes,
                      time_budget_s=self.time_budget_s, target_halfwidth=self.target_halfwidth,
                      cores=parse_cores(self.cores) if self.processes else (), seed=self.seed)


def token_streams(cfg: StudyConfig, block: int, vocab: int | None = None, profiled: bool = False) -> list[list[int]]:
    """The generated speech tokens of each turn of ``block`` (same for every arm).

    The profiled block is one turn of ``profile_chunks`` chunks and a flush (a short trace).
    """
    if vocab is None:  # the declared model's speech-token vocabulary
        from ..adapters.token2wav.configs import REAL

        vocab = REAL.vocab_size
    rng = np.random.default_rng([cfg.seed, block])
    plan = [(cfg.profile_chunks, cfg.flush_tokens[0])] if profiled else [(cfg.chunks_per_turn, r) for r in cfg.flush_tokens]
    out = []
    for chunks, r in plan:
        n = turn_tokens(chunks, r)  # leaves r tokens (the lookahead + r - lookahead) for the flush
        out.append(rng.integers(0, vocab, n).tolist())
    return out


def block_seed(cfg: StudyConfig, block: int) -> int:
    return 1_000_003 * (cfg.seed + 1) + block


# ---------------------------------------------------------------------------------------
# one arm (in its own process)
# ---------------------------------------------------------------------------------------


def stage_arm(arm: str, ckpt: str, cfg: StudyConfig) -> dict:
    """The CPU-only part of an arm's set-up: the checkpoint read and the vendor modules built on the
    CPU (exactly what :func:`~cadencelab.adapters.token2wav.load_checkpoint` does before it moves
    them to the device). No device work, so it may run while another round is timed."""
    from ..adapters.token2wav.runtime import arm_modules
    from ..adapters.token2wav.clocks import T2W_CLOCKS

    base, _ = split_arm(arm, cfg.condition)
    t0 = time.perf_counter()
    modules = arm_modules(base, cfg.seed, "cpu", checkpoint=ckpt, clocks=T2W_CLOCKS.with_(n_steps=cfg.n_timesteps))
    return dict(modules=modules, stage_s=time.perf_counter() - t0)


class ArmRunner:
    """Holds one arm's runtime and runs blocks on it. ``staged``: :func:`stage_arm`'s result, when the
    CPU part of the set-up ran earlier (else it runs here)."""

    def __init__(self, arm: str, ckpt: str, cfg: StudyConfig, staged: dict | None = None):
        import torch

        from ..adapters.token2wav.runtime import build_runtime

        base, self.condition = split_arm(arm, cfg.condition)
        t0 = time.perf_counter()
        here = staged is None
        staged = stage_arm(arm, ckpt, cfg) if here else staged
        self.stage_s = staged["stage_s"]
        self.device, self.determinism = set_up_device(cfg.device, self.condition)  # before the first CUDA call
        self.torch = torch
        self.arm, self.cfg = arm, cfg
        backend = "cuda" if self.device.type == "cuda" else "eager"
        self.rt, self.prompt = build_runtime(None, base, cfg.seed, self.device, backend=backend,
                                             n_timesteps=cfg.n_timesteps, modules=staged["modules"])
        self.start_s = time.perf_counter() - t0 - (self.stage_s if here else 0.0)  # the device part
        self.setup_s = self.stage_s + self.start_s
        # timed work only on the study's fixed cores, resolved by the study (run_study) before any process started;
        # a staged process runs on the staging cores until here, so they are not checked against its affinity
        self.cores = pin_to_cores(parse_cores(cfg.cores, available=range(os.cpu_count() or 1)) if cfg.processes else ())
        self.host = None  # measured before the first block, when no other arm is setting up

    def _sync(self):
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def run_block(self, block: int, profile_path: str | None = None) -> dict:
        from ..adapters.token2wav.runtime import chunk_frames

        torch, rt, cfg = self.torch, self.rt, self.cfg
        if self.host is None:
            self.host = host_figures(self.device)
        apply_condition(self.condition)  # arms sharing a process (--inline) each run under their own flags
        for e in rt.engines.values():
            e.reset_counters()
        rt.primings = 0
        cuda = self.device.type == "cuda"
        if cuda:
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            torch.cuda.manual_seed(block_seed(cfg, block))
        torch.manual_seed(block_seed(cfg, block))
        h_mel, h_f32, h_i16 = hashlib.sha256(), hashlib.sha256(), hashlib.sha256()
        rows = []
        prof_ctx = None
        if profile_path is not None:
            from ..profile.capture import profiled

            rt.ranges = True
            prof_ctx = profiled(self.device, trace_path=profile_path, window="chunk")
            prof = prof_ctx.__enter__()
        try:
            for turn, toks in enumerate(token_streams(cfg, block, profiled=profile_path is not None)):
                with torch.profiler.record_function("priming") if rt.ranges else _null():
                    rt.set_stream_cache(self.prompt)
                for index, (piece, last) in enumerate(chunk_pieces(toks)):
                    ev = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) if cuda else None
                    t0 = time.perf_counter()
                    with torch.profiler.record_function("chunk") if rt.ranges else _null():
                        pcm = rt.stream(piece, last_chunk=last, events=ev)
                    wall = time.perf_counter() - t0
                    self._sync()
                    lat = ev[0].elapsed_time(ev[1]) if cuda else wall * 1e3
                    mel = rt.last_mel.detach().float().cpu().numpy().tobytes()
                    f32 = rt.last_speech.detach().float().cpu().numpy().tobytes()
                    for h, b in ((h_mel, mel), (h_f32, f32), (h_i16, pcm)):
                        h.update(b)
                    kind = "flush" if last else ("first" if index == 0 else "steady")
                    rows.append(dict(arm=self.arm, block=block, turn=turn, chunk=index, kind=kind,
                                     tokens=len(piece), frames=chunk_frames(len(piece), last),
                                     latency_ms=lat, wall_ms=wall * 1e3,
                                     sha_mel=hashlib.sha256(mel).hexdigest()[:16],
                                     sha_i16=hashlib.sha256(pcm).hexdigest()[:16]))
        finally:
            if prof_ctx is not None:
                prof_ctx.__exit__(None, None, None)
                rt.ranges = False
        peak = torch.cuda.max_memory_allocated(self.device) if cuda else None
        out = dict(arm=self.arm, block=block, rows=rows, peak_bytes=peak,
                   sha_mel=h_mel.hexdigest(), sha_f32=h_f32.hexdigest(), sha_i16=h_i16.hexdigest(),
                   summaries=rt.summaries(), primings=rt.primings,
                   vendor_graph_fires=dict(rt.vendor_graph_fires), host=self.host,
                   counters=rt.counters().drop(columns=["miss_reasons"], errors="ignore").to_dict("records")
                   if rt.engines else [])
        if profile_path is not None:
            out["profile"] = _profile_rows(prof, self.arm)
        return out


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def _profile_rows(prof, arm: str) -> dict:
    """Per-chunk device-busy time and launch counts from a profiled block."""
    s = prof.summary("chunk")
    s["arm"] = arm
    stage_rows = []
    try:
        st = prof.stages(["flow", "vocoder", "priming"])
        st["arm"] = arm
        stage_rows = st.to_dict("records")
    except Exception:  # stage attribution is a bonus; the chunk windows are the measurement
        pass
    cols = ["arm", "occurrence", "wall_us", "busy_us", "slack_frac", "host_wait_us", "kernel_wait_us",
            "other_idle_us", "kernel_launches", "graph_launches", "kernels"]
    return dict(chunks=s[cols].to_dict("records"), stages=stage_rows)


def _ready(r: ArmRunner) -> dict:
    return dict(setup_s=r.setup_s, stage_s=r.stage_s, start_s=r.start_s, determinism=r.determinism,
                cores=list(r.cores))


#: the requests an arm answers, in its process (:func:`serve`) or inline (:class:`InlineArm`)
HANDLERS = {"block": lambda r, spec: r.run_block(spec),
            "profile": lambda r, spec, path: r.run_block(spec, profile_path=path)}


def _worker(conn, arm: str, ckpt: str, cfg_dict: dict, staging_cores: tuple = ()) -> None:
    """Process entry: build the arm, then serve block (and profiled block) requests until told to stop.
    With ``staging_cores`` the CPU part of the set-up runs first, pinned to those cores (never the
    measurement cores), and the rest waits for the go (:func:`~cadencelab.bench.common.serve`)."""
    cfg = StudyConfig(**cfg_dict)
    if not staging_cores:
        serve(conn, lambda: ArmRunner(arm, ckpt, cfg), _ready, HANDLERS)
        return
    pin_to_cores(staging_cores)
    serve(conn, lambda staged: ArmRunner(arm, ckpt, cfg, staged=staged), _ready, HANDLERS,
          prepare=lambda: stage_arm(arm, ckpt, cfg))


class _Proc(ArmProcess):
    def __init__(self, arm, ckpt, cfg: StudyConfig, staging_cores: tuple = ()):
        super().__init__(arm, _worker, (arm, ckpt, dataclasses.asdict(cfg), tuple(staging_cores)))
        self.staged = None if staging_cores else {}  # what it reported when staged ({}: not staged)


def _inline(arm, ckpt, cfg: StudyConfig) -> InlineArm:
    """Same interface as _Proc, in this process (CPU smoke runs)."""
    return InlineArm(arm, lambda: ArmRunner(arm, ckpt, cfg), _ready, HANDLERS)


def provenance(cfg) -> dict:
    """The Token2wav studies' provenance (this factorial's, the sessions study's and the soak's):
    :func:`~cadencelab.profile.provenance.run_provenance` with ``minicpmo``, the device condition and ``cfg``."""
    c = CONDITIONS[cfg.condition]
    return dict(**run_provenance(packages=("minicpmo",)),
                determinism=dict(condition=c.name, **{k: v for k, v in dataclasses.asdict(c).items() if k != "name"}),
                study=dataclasses.asdict(cfg))


def bootstrap_ratio(a: np.ndarray, b: np.ndarray, n: int = 10_000, seed: int = 0) -> tuple[float, float, float]:
    """Paired bootstrap of mean(a) / mean(b) - 1 over blocks: (point, lo, hi) of the 95% interval."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if len(a) == 0 or len(a) != len(b):
        return (float("nan"),) * 3
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(a), (n, len(a)))
    r = a[idx].mean(1) / b[idx].mean(1) - 1
    return float(a.mean() / b.mean() - 1), float(np.percentile(r, 2.5)), float(np.percentile(r, 97.5))


def run_study(cfg: StudyConfig, progress=print) -> dict:
    """Run the whole factorial; write JSON + CSV under ``cfg.out``; return the result dict."""
    out = check_out(cfg, ("token2wav_factorial*", "trace_*.json.gz"))
    if "B0" not in cfg.arms:
        raise ValueError("the study needs the B0 arm: every exactness gate and ratio is against it")
    # the cores are chosen once, here, so every process of every round pins to the same set
    cfg = dataclasses.replace(cfg, cores=",".join(map(str, parse_cores(cfg.cores))) or "none")
    t_start = time.perf_counter()
    with built_checkpoint(cfg.config, cfg.seed, progress) as ckpt:  # also holds the traces not kept
        return _run_rounds(cfg, ckpt, out, t_start, progress)


def _spawn(cfg: StudyConfig, ckpt: str, arms: list, staging: tuple) -> dict:
    """Fresh arm processes for ``arms`` (inline arms without ``cfg.processes``); with ``staging`` cores
    they run the CPU part of their set-up there and wait for the go (:func:`~cadencelab.bench.rounds.run_rounds`)."""
    if not cfg.processes:
        return {a: _inline(a, ckpt, cfg) for a in arms}
    return {a: _Proc(a, ckpt, cfg, staging) for a in arms}


def _run_rounds(cfg: StudyConfig, ckpt: str, out: Path, t_start: float, progress) -> dict:
    """The rounds (:func:`~cadencelab.bench.rounds.run_rounds`): an arm's failure is recorded and the rest go on;
    round 0 ends with the profiled blocks; the results are analysed and written after every round."""
    blocks: list[dict] = []
    profiles: dict = {}
    result: dict = {}

    def keep(tally, a, b, res, overlap):
        res.update(warmup=b == 0, process=tally.round, staging=overlap)
        blocks.append(res)
        record = next(p for p in tally.processes if p["arm"] == a and p["process"] == tally.round)
        record.setdefault("host", res.pop("host", None))

    def failed(tally, a, b, error):
        r = tally.round
        where = f"failed to start (process {r})" if b is None else f"failed in process {r}, block {b}"
        progress(f"arm {a} {where}: {error.strip().splitlines()[-1]}")

    def headline(tally):
        result.clear()
        result.update(analyse(cfg, blocks, profiles, tally.failures, tally.processes))
        s = result["summary"]
        return interval_halfwidth(s["speedup_SRc_vs_B0"] or float("nan"),
                                  *(s["speedup_SRc_vs_B0_ci"] or (float("nan"),) * 2))

    def finish(tally):
        stopped = tally.stopped
        progress(f"round {tally.round + 1} done ({tally.round_s:.0f} s, {tally.elapsed_s:.0f} s in all): headline "
                 f"interval half-width {100 * tally.halfwidth:.1f}% of its point"
                 + (f"; stopping: {stopped}" if stopped else ""))
        result["provenance"] = dict(provenance(cfg), wall_s=tally.elapsed_s)
        if not stopped:
            result["provenance"]["partial"] = f"{tally.round + 1} rounds so far"
        result["summary"]["stopped"] = stopped
        write_results(result, out)

    def first_round(tally, procs):
        if cfg.profile:
            profiles.update(_profile_round(cfg, ckpt, out, procs, tally.failures, progress))

    run_rounds(Rounds(arms=cfg.arms, method=cfg.method(), blocks=cfg.blocks + 1,
                      spawn=lambda arms, staging: _spawn(cfg, ckpt, arms, staging), keep=keep, headline=headline,
                      finish=finish, extend=cfg.extend_arms, staging=staging_cores(cfg), timeout_s=cfg.block_timeout_s,
                      first_extra_s={"compile": cfg.compile_timeout_s}, failed=failed, first_round=first_round),
               t_start)
    return result


def staging_cores(cfg: StudyConfig) -> tuple:
    """The cores the next round's processes prepare on while a round is timed: every core this process
    may run on that is neither a measurement core nor an SMT sibling of one. Empty (no staging: each
    round sets up before it is timed, nothing overlapping) with ``--no-stage``, inline arms, no
    pinning, or no such core."""
    from .measure import core_siblings

    cores = cfg.method().cores
    if not (cfg.stage and cfg.processes and cores):
        return ()
    avail = sorted(os.sched_getaffinity(0))
    taken = {s for c in cores for s in core_siblings([c])[c]} | set(cores)
    free = tuple(c for c in avail if c not in taken)
    return free


def _profile_round(cfg: StudyConfig, ckpt: str, out: Path, procs: dict, failures: dict, progress) -> dict:
    """One profiled block per arm, in the first round's processes after their timed blocks."""
    profiles = {}
    for a, p in procs.items():
        if a in failures:
            continue
        keep = a in cfg.keep_traces
        path = str((out if keep else Path(ckpt)) / f"trace_{a}.json.gz")
        kind, res = p.ask(("profile", cfg.blocks + 1, path), cfg.block_timeout_s)
        if not keep and os.path.exists(path):
            os.remove(path)
        if kind == "ok":
            profiles[a] = res.get("profile", {})
            profiles[a]["kinds"] = [r["kind"] for r in res["rows"]]
        else:
            progress(f"arm {a}: profiled block failed: {str(res).strip().splitlines()[-1]}")
    return profiles


# ---------------------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------------------


def parse_arms(flag: str, text: str) -> tuple:
    """``--arms``: names of ``ARMS``, each optionally ``NAME@CONDITION`` (a device condition), none
    twice, B0 among them."""
    from ..adapters.token2wav.runtime import ARMS

    arms = tuple(a.strip() for a in text.split(",") if a.strip())
    for a in arms:
        base = a.partition("@")[0]
        if base not in ARMS:
            raise FlagError(flag, f"unknown {base[:40]!r} (choose from {', '.join(ARMS)}, each optionally "
                                  f"@CONDITION)")
        try:
            split_arm(a)
        except ValueError as e:
            raise FlagError(flag, f"{a[:60]!r}: {e}") from None
    dup = sorted({a for a in arms if arms.count(a) > 1})
    if dup:
        raise FlagError(flag, f"{', '.join(dup)} given twice")
    if "B0" not in arms:
        raise FlagError(flag, "must include B0: every exactness gate and ratio is against it")
    return arms


def _cli(args) -> int:
    cfg = config_from_args(StudyConfig, args)
    res = run_study(cfg, progress=lambda m: print(m, flush=True))
    print(table(res), flush=True)
    s = res["summary"]
    line = failed_line("bench token2wav", s["failed_arms"], s["non_exact_arms"])
    if line:
        print(line, file=sys.stderr, flush=True)
        return 1
    return 0


def add_parser(sub) -> None:
    add_study_parser(sub, "token2wav", StudyConfig, "the Token2wav factorial (B0, S, R, Rc, SR, SRc + controls)", _cli)
