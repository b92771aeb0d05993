"""The soak: one long stream through an arm (SRc by default), every chunk checked against B0.

``python -m cadencelab.bench soak --chunks 1800 --turn-every 30 --device cuda --out DIR``

The stream is ``--chunks`` calls of Token2wav's clocks, cut into turns of about ``--turn-every`` calls (a
deterministic jitter). Every turn primes from the prompt, streams its steady chunks and ends with a flush whose
size alternates between one that is admitted and one above f_chunk, which runs eagerly by declaration; the
generators are seeded at every turn start. The arm streams everything in one fresh process, so captured classes,
carries and the allocator live across all turns; per chunk it records the int16 PCM (and float32) SHA-256,
latencies, the allocator's counters and every replay engine's miss counters.

B0 streams the same turns with the same seeds. Every turn is self-contained, so the reference may be split at
turn boundaries across ``--b0-workers`` processes to fit the device's time limit; each runs in its own process,
so the arm's allocator statistics see nothing of B0 (``--concurrent`` overlaps them at the cost of shared
latencies; on a CPU everything runs in this process). After the ``--warmup-turns`` the allocator peak may grow by
at most one granule, there must be no fallback (any miss other than the declared ``priming``, ``outside_catalog``
on the long flush, warm-up ``probe`` and, on a CPU, ``host_rng``: its device generator *is* the host one), and
every chunk's int16 PCM hash must equal B0's. Writes ``soak.json`` (summary, one row per turn, per-arm counters)
and ``soak_chunks.csv``; rows are streamed to ``rows_<arm>_<shard>.jsonl`` as produced, so a run cut short keeps
its chunks, and ``--reference DIR`` reuses an earlier run's B0 rows.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
import traceback
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..adapters.token2wav.turns import chunk_pieces
from . import options
from .common import ArmProcess, built_checkpoint, check_out, set_up_device, write_csv, write_json
from .flags import (MAX_CHUNKS, add_study_parser, check_devices, check_names, config_from_args, exit_code, given,
                    int_range, opt, positive_float)
from ..profile.outputs import OutputRefused
from .soak_turns import Turn, plan_turns, warmup_chunks
from .token2wav import provenance

GRANULE = 2 * 2**20  # the CUDA caching allocator rounds large blocks to 2 MiB
#: the result files under --out (the summary JSON names its chunks CSV)
RESULT_JSON, RESULT_CSV = "soak.json", "soak_chunks.csv"


@dataclass
class SoakConfig:
    config: str = options.model_config()
    device: str = options.device()
    arm: str = opt("SRc", help="the arm under soak", check=lambda flag, v: _check_arm(flag, v))
    reference_arm: str = "B0"
    arms: tuple = opt(("SRc", "B0"), help="which of the arm and B0 run now (default: both, or the arm alone with "
                      "--reference; B0 alone records the reference rows; the arm alone compares with B0 rows already "
                      "under --out or --reference; none: only re-analyse the recorded rows)")
    chunks: int = opt(1800, type=int_range(1, MAX_CHUNKS), help="stream calls in all (a second of audio each)")
    turn_every: int = opt(30, type=int_range(1, MAX_CHUNKS), help="calls per turn, about (each turn ends with a flush)")
    jitter: int = opt(-1, type=int_range(-1, MAX_CHUNKS),
                      help="deterministic jitter of turn lengths in calls (-1: turn-every // 10)")
    flush_tokens: tuple = (13, 27)  # tokens of each turn's final flush, alternating (f = 2 x tokens frames)
    warmup_turns: int = opt(2, type=int_range(0, MAX_CHUNKS), help="turns of warm-up before the gates apply")
    n_timesteps: int = options.steps()
    seed: int = options.seed()
    condition: str = options.condition()
    processes: bool = options.processes("a fresh process per arm and reference shard (off: everything in this "
                                        "process, sequentially)", on_cpu=False)
    concurrent: bool = opt(False, help="run the arm and the B0 processes at the same time (faster; the arm's "
                                       "latencies then share the device)")
    b0_workers: int = opt(4, on_cpu=1, type=int_range(1, MAX_CHUNKS),
                          help="processes the B0 reference is split into at turn boundaries (1: one unbroken stream)")
    b0_devices: tuple = opt((), check=check_devices, help="comma-separated devices of the B0 processes (default: --device)")
    reference: str = opt("", help="folder (or rows file) of an earlier run whose rows_B0_*.jsonl are the reference; "
                                  "B0 then does not run")
    granule_bytes: int = GRANULE
    timeout_s: float = opt(3600.0, flag="--timeout", type=positive_float,
                           help="seconds before unfinished processes are killed")
    out: str = options.out("soak")
    overwrite: bool = options.overwrite()

    def jitter_calls(self) -> int:
        return self.turn_every // 10 if self.jitter < 0 else self.jitter


# ---------------------------------------------------------------------------------------
# one process: an arm streaming a list of turns
# ---------------------------------------------------------------------------------------


def _engine_state(rt) -> tuple[Counter, int, Counter]:
    """(misses by 'engine:reason', replays, events by 'engine:kind') summed over the runtime's engines."""
    misses, events = Counter(), Counter()
    replays = 0
    for name, e in rt.engines.items():
        for c in e.classes.values():
            replays += c.replays
            for reason, n in c.misses.items():
                misses[f"{name}:{reason}"] += n
        for reason, n in e.unclassed.items():
            misses[f"{name}:{reason}"] += n
        for ev in e.events:
            events[f"{name}:{ev['kind']}"] += 1
    return misses, replays, events


def _delta(now: Counter, before: Counter) -> dict:
    return {k: now[k] - before.get(k, 0) for k in sorted(now) if now[k] - before.get(k, 0) > 0}


def run_turns(arm: str, ckpt: str, cfg: SoakConfig, turn_ids: list[int], device: str, rows_path: str,
              progress=None) -> dict:
    """Build ``arm`` on ``device`` and stream ``turn_ids``; append one JSON row per chunk to ``rows_path``."""
    import torch

    from ..adapters.token2wav.runtime import build_runtime, chunk_frames

    dev, determinism = set_up_device(device, cfg.condition)  # events, graphs, allocator: the current device
    cuda = dev.type == "cuda"
    t0 = time.perf_counter()
    rt, prompt = build_runtime(None, arm, cfg.seed, dev, backend="cuda" if cuda else "eager",
                               n_timesteps=cfg.n_timesteps, checkpoint=ckpt)
    f_chunk = rt.decl.admission.max_call if rt.decl is not None and rt.decl.admission else 50
    if cuda:
        torch.cuda.synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
    setup_s = time.perf_counter() - t0
    turns = {t.turn: t for t in plan_turns(cfg, rt.cfg.vocab_size)}
    written = 0
    t_stream = time.perf_counter()
    with open(rows_path, "a") as fh:
        for tid in turn_ids:
            turn = turns[tid]
            misses0, replays0, events0 = _engine_state(rt)
            torch.manual_seed(turn.seed)  # seeds the CPU and every CUDA generator
            rt.set_stream_cache(prompt)
            pieces = list(chunk_pieces(turn.tokens))
            if len(pieces) != turn.calls:
                raise RuntimeError(f"turn {tid}: token plan out of step ({len(pieces)} calls, {turn.calls} planned)")
            for k, (piece, last) in enumerate(pieces):
                ev = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) if cuda else None
                w0 = time.perf_counter()
                pcm = rt.stream(piece, last_chunk=last, events=ev)
                if cuda:
                    torch.cuda.synchronize(dev)
                wall = time.perf_counter() - w0
                f32 = rt.last_speech.detach().float().cpu().numpy().tobytes()
                misses, replays, events = _engine_state(rt)
                frames = chunk_frames(len(piece), last)
                row = dict(
                    arm=arm, chunk=turn.start + k, turn=tid, call=k,
                    kind="flush" if last else ("first" if k == 0 else "steady"),
                    tokens=len(piece), frames=frames, beyond_f_chunk=bool(last and frames > f_chunk),
                    sha_i16=hashlib.sha256(pcm).hexdigest(), sha_f32=hashlib.sha256(f32).hexdigest(),
                    samples=len(pcm) // 2,
                    latency_ms=ev[0].elapsed_time(ev[1]) if cuda else wall * 1e3, wall_ms=wall * 1e3,
                    allocated_bytes=torch.cuda.memory_allocated(dev) if cuda else None,
                    peak_bytes=torch.cuda.max_memory_allocated(dev) if cuda else None,
                    reserved_bytes=torch.cuda.memory_reserved(dev) if cuda else None,
                    replays=replays - replays0, misses=_delta(misses, misses0), events=_delta(events, events0),
                    device=str(dev),
                )
                misses0, replays0, events0 = misses, replays, events
                fh.write(json.dumps(row) + "\n")
                fh.flush()  # a process killed at the time limit leaves every finished chunk behind
                written += 1
            if progress is not None:
                progress(f"{arm} {device}: turn {tid} done ({written} chunks, {time.perf_counter() - t_stream:.0f} s)")
    counters = rt.counters()
    return dict(arm=arm, device=str(dev), turns=list(turn_ids), chunks=written, setup_s=setup_s,
                stream_s=time.perf_counter() - t_stream, determinism=determinism, summaries=rt.summaries(),
                counters=counters.drop(columns=["miss_reasons"], errors="ignore").to_dict("records")
                if len(counters) else [],
                gpu=torch.cuda.get_device_name(dev) if cuda else None)


def _worker(conn, arm, ckpt, cfg_dict, turn_ids, device, rows_path, threads):
    try:
        import torch

        torch.set_num_threads(threads)
        cfg = SoakConfig(**cfg_dict)
        every = max(1, len(turn_ids) // 10)

        def progress(msg, _n=[0]):
            _n[0] += 1
            if _n[0] % every == 0 or _n[0] == len(turn_ids):
                print(msg, flush=True)

        conn.send(("ok", run_turns(arm, ckpt, cfg, turn_ids, device, rows_path, progress=progress)))
    except Exception:
        conn.send(("error", traceback.format_exc()))


class _Job(ArmProcess):
    """One spawned process streaming a shard of turns."""

    def __init__(self, arm, ckpt, cfg, turn_ids, device, rows_path, threads):
        super().__init__(arm, _worker, (arm, ckpt, dataclasses.asdict(cfg), turn_ids, device, rows_path, threads))
        self.device, self.rows_path = device, rows_path

    def result(self, deadline: float):
        out = self.wait(max(1.0, deadline - time.monotonic()))
        self.stop(join_s=30)
        return out


def shard_turns(turns: list[Turn], workers: int) -> list[list[int]]:
    """Contiguous groups of turns with about equal chunk counts."""
    workers = max(1, min(workers, len(turns)))
    total = sum(t.calls for t in turns)
    groups: list[list[int]] = [[] for _ in range(workers)]
    acc = 0
    for t in turns:
        g = min(workers - 1, int(acc * workers / total))
        groups[g].append(t.turn)
        acc += t.calls
    return [g for g in groups if g]


def read_rows(paths) -> pd.DataFrame:
    rows = []
    for p in paths:
        p = Path(p)
        if not p.exists():
            continue
        for line in p.read_text().splitlines():
            line = line.strip()
            if line:
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:  # a row cut short by a killed process
                    continue
                if isinstance(row, dict) and "chunk" in row:  # a row of another kind is no chunk's
                    rows.append(row)
    df = pd.DataFrame(rows)
    if not df.empty:
        df = df.drop_duplicates("chunk", keep="last").sort_values("chunk").reset_index(drop=True)
    return df


def _check_recorded(cfg: SoakConfig) -> None:
    """An analysis of recorded rows has rows of the arm and of its reference to compare (a ValueError names
    the folder and the files looked for): no verdict on nothing."""
    src = Path(cfg.out)
    have = {arm: len(read_rows(sorted(src.glob(f"rows_{arm}_*.jsonl")))) if src.is_dir() else 0
            for arm in (cfg.arm, cfg.reference_arm)}
    if cfg.reference:
        have[cfg.reference_arm] = len(reference_rows(cfg.reference, cfg.reference_arm))
    missing = [arm for arm, n in have.items() if not n]
    if missing:
        where = " or ".join(f"rows_{a}_*.jsonl" for a in missing)
        raise ValueError(f"--analyse-only: no readable {where} rows under {src} (of {cfg.arm} and its reference "
                         f"{cfg.reference_arm}): nothing to analyse, nothing written")


def reference_rows(path: str, arm: str) -> pd.DataFrame:
    p = Path(path)
    files = [p] if p.is_file() else sorted(p.glob(f"rows_{arm}_*.jsonl"))
    if not files:
        raise FileNotFoundError(f"{path}: no rows_{arm}_*.jsonl reference rows")
    return read_rows(files)


# ---------------------------------------------------------------------------------------
# orchestration
# ---------------------------------------------------------------------------------------


def run_soak(cfg: SoakConfig, progress=print) -> dict:
    """Run the soak; write ``soak.json`` and ``soak_chunks.csv`` under ``cfg.out`` (a run of the reference
    alone writes only its rows); return the result. The output folder is checked first
    (:func:`~cadencelab.bench.common.check_out`): never the recorded data, nothing replaced without ``overwrite``."""
    import torch

    from ..adapters.token2wav import REAL, TEACHING

    unknown = set(cfg.arms) - {cfg.arm, cfg.reference_arm}
    if unknown:
        raise ValueError(f"--arms may name the arm ({cfg.arm}) and the reference ({cfg.reference_arm}), "
                         f"got {sorted(unknown)}")
    # the rows of the arms that run now are written afresh (other arms' rows are inputs), and the summary unless
    # only the reference runs (its rows are then the result: the arm's run into the same folder compares)
    reference_only = bool(cfg.arms) and cfg.arm not in cfg.arms
    if not cfg.arms:  # analysis of recorded rows: none to analyse is refused before anything is written
        _check_recorded(cfg)
    summary = () if reference_only else (RESULT_JSON, RESULT_CSV)
    out = check_out(cfg, (*summary, *(f"rows_{arm}_*.jsonl" for arm in cfg.arms)))
    mcfg = {"real": REAL, "teaching": TEACHING}[cfg.config]
    turns = plan_turns(cfg, mcfg.vocab_size)
    progress(f"soak: {cfg.chunks} chunks in {len(turns)} turns ({cfg.arm} vs {cfg.reference_arm}, {cfg.config}, "
             f"{cfg.device}); running {', '.join(cfg.arms) or 'nothing (analysis of recorded rows)'}")
    for arm in cfg.arms:  # rows of the arms that run now are recorded afresh; others stay (split runs)
        for old in out.glob(f"rows_{arm}_*.jsonl"):
            old.unlink()
    t_start = time.perf_counter()
    meta: dict[str, list] = {}
    failures: list[str] = []
    if cfg.arms:
        with built_checkpoint(mcfg, cfg.seed, progress, prefix="cadencelab-soak-weights-") as ckpt:
            _run_arms(cfg, turns, ckpt, out, meta, failures, progress)
    arm_rows = read_rows(sorted(out.glob(f"rows_{cfg.arm}_*.jsonl")))
    if cfg.reference and cfg.reference_arm not in cfg.arms:
        ref_rows = reference_rows(cfg.reference, cfg.reference_arm)
    else:  # recorded now, or by an earlier run into the same folder
        ref_rows = read_rows(sorted(out.glob(f"rows_{cfg.reference_arm}_*.jsonl")))
    if ref_rows.empty:
        progress(f"no {cfg.reference_arm} rows to compare with: exact_chunks will be 0")
    result = analyse(cfg, turns, arm_rows, ref_rows, meta, failures)
    result["provenance"] = dict(provenance(cfg), wall_s=time.perf_counter() - t_start,
                                torch_threads=torch.get_num_threads())
    if summary:
        write_results(result, out)
    return result


def _run_arms(cfg: SoakConfig, turns: list[Turn], ckpt: str, out: Path, meta: dict, failures: list, progress) -> None:
    """The arm and the reference shards that run now: results into ``meta``, failures into ``failures``."""
    all_turns = [t.turn for t in turns]
    jobs: list[tuple[str, list[int], str]] = []  # (arm, turns, device)
    if cfg.arm in cfg.arms:
        jobs.append((cfg.arm, all_turns, cfg.device))
    ref_shards = []
    if cfg.reference_arm in cfg.arms:
        devices = list(cfg.b0_devices) or [cfg.device]
        for i, group in enumerate(shard_turns(turns, cfg.b0_workers if cfg.processes else 1)):
            ref_shards.append((cfg.reference_arm, group, devices[i % len(devices)]))
    deadline = time.monotonic() + cfg.timeout_s

    def rows_path(arm, i):
        return str(out / f"rows_{arm}_{i}.jsonl")

    def collect(job_list):
        for (arm, group, dev, path), job in job_list:
            kind, res = job.result(deadline)
            if kind == "ok":
                meta.setdefault(arm, []).append(res)
                progress(f"{arm} on {dev}: {res['chunks']} chunks in {res['stream_s']:.0f} s "
                         f"(setup {res['setup_s']:.0f} s)")
            else:
                failures.append(f"{arm} turns {group[0]}..{group[-1]} on {dev}: {str(res)[-2000:]}")
                progress(f"{arm} on {dev} failed: {str(res).strip().splitlines()[-1]}")

    if cfg.processes:
        specs = [(a, g, d, rows_path(a, i)) for i, (a, g, d) in enumerate(jobs)]
        specs += [(a, g, d, rows_path(a, i)) for i, (a, g, d) in enumerate(ref_shards)]
        phases = [p for p in ([specs] if cfg.concurrent else [specs[: len(jobs)], specs[len(jobs):]]) if p]
        # one intra-op thread count for every process: on a CPU it changes float32 reduction order
        threads = max(1, (os.cpu_count() or 2) // max(len(p) for p in phases))
        for phase in phases:
            collect([(s, _Job(s[0], ckpt, cfg, s[1], s[2], s[3], threads)) for s in phase])
    else:
        for i, (a, g, d) in [(0, j) for j in jobs] + list(enumerate(ref_shards)):
            path = rows_path(a, i)
            try:
                res = run_turns(a, ckpt, cfg, g, d, path, progress=None)
                meta.setdefault(a, []).append(res)
                progress(f"{a}: {res['chunks']} chunks in {res['stream_s']:.1f} s (setup {res['setup_s']:.1f} s)")
            except Exception:
                failures.append(f"{a} on {d}: {traceback.format_exc()[-2000:]}")
                progress(f"{a} failed: {traceback.format_exc().strip().splitlines()[-1]}")


# ---------------------------------------------------------------------------------------
# analysis
# ---------------------------------------------------------------------------------------


def declared_eager(reason: str, row: dict, warmup: int, cpu: bool) -> bool:
    """Whether one engine miss is a declared eager case (else it is a fallback)."""
    if reason == "priming":
        return True  # cache-free prompt priming: eager by construction
    if reason == "outside_catalog":
        return bool(row["beyond_f_chunk"])  # a flush longer than f_chunk: outside the admission predicate
    if reason == "probe":
        return row["chunk"] < warmup  # first sight of a class, during warm-up
    if reason == "host_rng":
        return cpu  # the CPU device's generator is the host generator
    return False


def analyse(cfg: SoakConfig, turns: list[Turn], arm_rows: pd.DataFrame, ref_rows: pd.DataFrame, meta: dict,
            failures: list) -> dict:
    warm = warmup_chunks(cfg, turns)
    cpu = not str(cfg.device).startswith("cuda")
    ref = ref_rows.set_index("chunk") if not ref_rows.empty else pd.DataFrame(columns=["sha_i16", "sha_f32"])
    chunks = []
    fallbacks_after, declared_after, fallbacks_during = Counter(), Counter(), Counter()
    events_after = Counter()
    replayed_after = 0
    for row in arm_rows.to_dict("records") if not arm_rows.empty else []:
        c = int(row["chunk"])
        r = ref.loc[c] if c in ref.index else None
        fb, dec = Counter(), Counter()
        for key, n in (row.get("misses") or {}).items():
            engine, reason = key.split(":", 1)
            (dec if declared_eager(reason, row, warm, cpu) else fb)[key] += n
        after = c >= warm
        if after:
            fallbacks_after.update(fb)
            declared_after.update(dec)
            events_after.update(row.get("events") or {})
            replayed_after += int(row["replays"])
        else:
            fallbacks_during.update(fb)
        chunks.append(dict(
            chunk=c, turn=row["turn"], call=row["call"], kind=row["kind"], tokens=row["tokens"], frames=row["frames"],
            warmup=not after, exact_i16=bool(r is not None and r["sha_i16"] == row["sha_i16"]),
            exact_f32=bool(r is not None and r["sha_f32"] == row["sha_f32"]),
            sha_i16=row["sha_i16"], sha_i16_ref=None if r is None else r["sha_i16"],
            latency_ms=row["latency_ms"], latency_ms_ref=None if r is None else r["latency_ms"],
            wall_ms=row["wall_ms"], allocated_bytes=row["allocated_bytes"], peak_bytes=row["peak_bytes"],
            reserved_bytes=row["reserved_bytes"], replays=row["replays"], fallbacks=sum(fb.values()),
            declared_eager=sum(dec.values()), misses=json.dumps(row.get("misses") or {}, sort_keys=True),
            events=json.dumps(row.get("events") or {}, sort_keys=True),
        ))
    cdf = pd.DataFrame(chunks)
    n = len(cdf)
    compared = int(cdf["sha_i16_ref"].notna().sum()) if n else 0
    exact = int(cdf["exact_i16"].sum()) if n else 0
    mism = cdf[~cdf["exact_i16"]]["chunk"] if n else pd.Series(dtype=int)
    peak_growth = peak_warm = peak_final = None
    if n and cdf["peak_bytes"].notna().all():
        peak_final = int(cdf["peak_bytes"].iloc[-1])
        before = cdf[cdf["chunk"] < warm]
        peak_warm = int(before["peak_bytes"].iloc[-1]) if len(before) else int(cdf["peak_bytes"].iloc[0])
        peak_growth = peak_final - peak_warm
    steady = cdf[(cdf["kind"] == "steady") & ~cdf["warmup"]] if n else cdf
    lat = float(steady["latency_ms"].median()) if len(steady) else float("nan")
    lat_ref = float(pd.to_numeric(steady["latency_ms_ref"]).median()) if len(steady) else float("nan")
    after_rows = cdf[~cdf["warmup"]] if n else cdf
    summary = dict(
        arm=cfg.arm, reference_arm=cfg.reference_arm, config=cfg.config, device=cfg.device,
        chunks=n, planned_chunks=cfg.chunks, turns=len(turns), turn_every=cfg.turn_every,
        turn_calls_min=min(t.calls for t in turns), turn_calls_max=max(t.calls for t in turns),
        warmup_turns=min(cfg.warmup_turns, len(turns)), warmup_chunks=warm,
        compared_chunks=compared, exact_chunks=exact,
        exact_chunks_f32=int(cdf["exact_f32"].sum()) if n else 0,
        first_mismatch_chunk=int(mism.iloc[0]) if len(mism) else None,
        peak_bytes_at_warmup_end=peak_warm, peak_bytes_final=peak_final,
        peak_growth_bytes_after_warmup=peak_growth, granule_bytes=cfg.granule_bytes,
        peak_flat=None if peak_growth is None else bool(peak_growth <= cfg.granule_bytes),
        allocated_bytes_after_warmup_min=int(after_rows["allocated_bytes"].min())
        if len(after_rows) and after_rows["allocated_bytes"].notna().all() else None,
        allocated_bytes_after_warmup_max=int(after_rows["allocated_bytes"].max())
        if len(after_rows) and after_rows["allocated_bytes"].notna().all() else None,
        fallbacks_after_warmup=int(sum(fallbacks_after.values())),
        fallbacks_after_warmup_by_reason=dict(fallbacks_after),
        fallbacks_during_warmup=int(sum(fallbacks_during.values())),
        declared_eager_after_warmup=dict(declared_after),
        declared_eager_cases=["priming", "outside_catalog on a flush beyond f_chunk", "probe during warm-up"]
        + (["host_rng (CPU: the device generator is the host generator)"] if cpu else []),
        engine_events_after_warmup=dict(events_after),
        replayed_calls_after_warmup=replayed_after,
        steady_latency_ms_median=lat, reference_steady_latency_ms_median=lat_ref,
        speedup=(lat_ref / lat) if (lat and lat == lat and lat_ref == lat_ref) else None,
        reference_processes=sum(len(v) for k, v in meta.items() if k == cfg.reference_arm) or None,
        reference_from=cfg.reference or None, reference_chunks=int(len(ref_rows)),
        failures=len(failures),
    )
    summary.update(latency_conditions(cfg, summary["reference_processes"]))
    if not summary["latency_comparable"]:
        summary["speedup"] = None  # the key stays; a ratio of unlike conditions is no speedup
    summary["exact"] = bool(n == cfg.chunks and exact == n)
    summary["passed"] = bool(summary["exact"] and summary["fallbacks_after_warmup"] == 0
                             and summary["peak_flat"] is not False and not failures)
    per_turn = []
    for t in turns:
        rows = cdf[(cdf["chunk"] >= t.start) & (cdf["chunk"] < t.stop)] if n else cdf
        per_turn.append(dict(turn=t.turn, start=t.start, calls=t.calls, flush_tokens=t.flush_tokens, seed=t.seed,
                             recorded=int(len(rows)), exact=int(rows["exact_i16"].sum()) if len(rows) else 0,
                             fallbacks=int(rows["fallbacks"].sum()) if len(rows) else 0,
                             peak_bytes=int(rows["peak_bytes"].iloc[-1])
                             if len(rows) and rows["peak_bytes"].notna().all() else None))
    return dict(summary=summary, config=dataclasses.asdict(cfg), turns=per_turn, arms=meta, failures=failures,
                chunks=cdf)


def latency_conditions(cfg: SoakConfig, reference_processes: int | None) -> dict:
    """Where the two latency medians were measured, and whether their ratio means anything.

    The soak's gates are exactness, a flat peak and no fallbacks; latency is a by-product. The
    ratio of the two medians is a like-for-like speedup only when both arms ran alone, one
    process each, on the same device (``--b0-workers 1``, not ``--concurrent``).
    """
    ref_devices = list(cfg.b0_devices) or [cfg.device]
    comparable = bool(not cfg.concurrent and (reference_processes or 1) == 1 and ref_devices == [cfg.device])
    why = "" if comparable else (
        f"reference ran as {reference_processes or 1} process(es) on {','.join(ref_devices)}"
        + (" concurrently with the arm" if cfg.concurrent else "") + f", the arm alone on {cfg.device}: "
        "the ratio is not a like-for-like speedup (see the factorial study for that)")
    return dict(reference_devices=ref_devices, concurrent=bool(cfg.concurrent), latency_comparable=comparable,
                latency_note=why)


def write_results(result: dict, out: Path) -> None:
    chunks = result["chunks"]
    body = {k: v for k, v in result.items() if k != "chunks"}
    body["chunks_csv"] = RESULT_CSV
    write_json(body, out / RESULT_JSON, strict_json=False)
    write_csv(chunks, out / RESULT_CSV)


def table(result: dict) -> str:
    s = result["summary"]
    growth = s["peak_growth_bytes_after_warmup"]
    lines = [
        f"{s['arm']} vs {s['reference_arm']} ({s['config']}, {s['device']}): {s['chunks']} chunks, {s['turns']} turns, "
        f"warm-up {s['warmup_chunks']} chunks",
        f"  exact int16 PCM: {s['exact_chunks']}/{s['chunks']} (float32 {s['exact_chunks_f32']}; compared "
        f"{s['compared_chunks']})" + (f", first mismatch at chunk {s['first_mismatch_chunk']}"
                                      if s["first_mismatch_chunk"] is not None else ""),
        "  allocator peak growth after warm-up: " + ("n/a (CPU)" if growth is None else
                                                     f"{growth} bytes (granule {s['granule_bytes']})"),
        f"  fallbacks after warm-up: {s['fallbacks_after_warmup']} {s['fallbacks_after_warmup_by_reason'] or ''}; "
        f"declared eager: {s['declared_eager_after_warmup']}",
        f"  steady latency median: {s['steady_latency_ms_median']:.2f} ms vs {s['reference_steady_latency_ms_median']:.2f}"
        f" ms" + ("" if s.get("latency_comparable", True)
                  else " (not like-for-like: " + s["latency_note"].split(": the ratio")[0] + ")"),
        f"  {'PASS' if s['passed'] else 'FAIL'}" + (f" ({s['failures']} process failures)" if s["failures"] else ""),
    ]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------------------


def _check_arm(flag: str, arm: str) -> None:
    from ..adapters.token2wav.runtime import ARMS

    check_names(flag, arm, ARMS)


def _cli(args) -> int:
    cfg = config_from_args(SoakConfig, args)
    if args.analyse_only:
        cfg.arms = ()
    elif given(args, "arms"):
        check_names("--arms", ",".join(cfg.arms), (cfg.arm, cfg.reference_arm), allow_empty=True)
    else:
        cfg.arms = (cfg.arm,) if cfg.reference else (cfg.arm, cfg.reference_arm)
    try:
        res = run_soak(cfg, progress=lambda m: print(m, flush=True))
    except OutputRefused:  # one line on stderr, from the entry point
        raise
    except (ValueError, FileNotFoundError) as e:
        print(f"soak: {e}", flush=True)
        return 2
    failed = sorted({f.split(" ", 1)[0] for f in res["failures"]})  # each failure starts with its arm
    if cfg.arms and cfg.arm not in cfg.arms:  # a reference-only run: nothing to gate yet
        print(f"{cfg.reference_arm} reference rows recorded under {cfg.out}: {res['summary']['reference_chunks']} "
              f"chunks; run the arm with --arms {cfg.arm} --out {cfg.out} to compare", flush=True)
        return exit_code("bench soak", failed)
    print(table(res), flush=True)
    return exit_code("bench soak", failed, [] if failed or res["summary"]["passed"] else [cfg.arm])


def add_parser(sub) -> None:
    t = add_study_parser(sub, "soak", SoakConfig,
                         "a long stream through SRc, every chunk checked against B0 (allocator, fallbacks)", _cli)
    t.add_argument("--analyse-only", action="store_true", help="run nothing: summarise the rows already under --out "
                   "(never the recorded data folder; an earlier summary there is replaced only with --overwrite)")
