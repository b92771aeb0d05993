"""Live runs for the course: the Token2wav arms built on this machine through the adapter's build call.

    live_factorial(n_steps)   the factorial arms measured in this process (CUDA): steady-chunk
                              latency, allocator peak, bit-exactness against B0 -> a rules-panel frame
    profile_chunk(arm)        one steady chunk of an arm under torch.profiler -> its Trace
    chunk_timelines(source)   the B0 and SRc timelines of one steady chunk, recorded or live

``python -m cadencelab.course.live_cells --memory --out DIR`` measures the GPU memory each live cell of the
course needs (:mod:`cadencelab.course.live_cells`).

Every arm is built by :func:`cadencelab.adapters.token2wav.runtime.build_runtime`; the factorial
streams the calls :func:`cadencelab.adapters.token2wav.turns.chunk_pieces` makes of one seeded
token stream. The benchmark studies (``python -m cadencelab.bench``) are not used here.
"""

from __future__ import annotations

import gc
import hashlib
import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..adapters.arms import FACTORIAL
from ..adapters.token2wav import REAL, TEACHING
from ..adapters.token2wav.turns import chunk_pieces
from ..adapters.token2wav.clocks import T2W_CLOCKS
from ..profile import profile_stream, summary
from ..profile.events import timeline_events
from ..profile.intervals import direction, point, ratio_interval
from ..replay.determinism import apply_condition
from . import data

__all__ = ["FACTORIAL_ARMS", "token2wav_config", "live_factorial", "factorial_frame", "ChunkTimelines", "profile_chunk",
           "chunk_timelines"]

#: the six arms of the factorial (state rule x replay granularity), from the one arm table
FACTORIAL_ARMS = FACTORIAL
_CONFIGS = {"real": REAL, "teaching": TEACHING}


def token2wav_config(name: str):
    """The Token2wav config called ``name`` ("real" or "teaching")."""
    if name not in _CONFIGS:
        raise ValueError(f"config must be one of {sorted(_CONFIGS)}, got {name!r}")
    return _CONFIGS[name]


# ---------------------------------------------------------------------------------------
# the factorial, live
# ---------------------------------------------------------------------------------------


def _stream_turns(rt, prompt, pieces, turns: int, device, seed: int) -> list[dict]:
    """Stream ``turns`` turns of ``pieces``: per turn the chunk rows (kind, latency_ms), the int16 PCM
    SHA-256 and the allocator peak in MiB (CUDA; NaN on a CPU). Turn ``i`` starts from the generators
    seeded with ``seed + i`` (the vocoder draws noise), the same for every arm."""
    import torch

    cuda = device.type == "cuda"
    out = []
    for turn in range(turns):
        if cuda:
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
            torch.cuda.manual_seed(seed + turn)
        torch.manual_seed(seed + turn)
        rt.set_stream_cache(prompt)
        h = hashlib.sha256()
        rows = []
        for index, (piece, last) in enumerate(pieces):
            kind = "flush" if last else ("first" if index == 0 else "steady")
            if cuda:
                events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                h.update(rt.stream(piece, last_chunk=last, events=events))
                events[1].synchronize()
                ms = float(events[0].elapsed_time(events[1]))
            else:
                t0 = time.perf_counter()
                h.update(rt.stream(piece, last_chunk=last))
                ms = (time.perf_counter() - t0) * 1e3
            rows.append(dict(kind=kind, latency_ms=ms))
        peak = torch.cuda.max_memory_allocated(device) / 2**20 if cuda else float("nan")
        out.append(dict(rows=rows, sha256=h.hexdigest(), peak_MiB=peak))
    return out


def live_factorial(n_steps: int | None = None, config: str = "real", arms=FACTORIAL_ARMS, blocks: int = 1,
                   chunks_per_turn: int = 3, progress=None, condition: str = "exact", device: str = "cuda",
                   seed: int = 0, runs: int = 3) -> pd.DataFrame:
    """Measure the factorial on this machine, in this process -> a rules-panel frame.

    The study's method at a small scale: ``runs`` short runs, the arms in alternation within each (the
    order rotating each run), every arm built afresh for each run; each run is one sample, so
    ``latency_delta_lo/hi`` resample runs and then turns within them (``cadencelab.profile.intervals``),
    and ``claim`` says only what that interval supports. One process cannot sample what differs between
    processes, so the live interval is narrower than the recorded study's.

    Each arm is built by ``build_runtime`` (seeded weights, the arm's envelope, ``n_steps`` solver
    steps; None: the clocks'), streams one warm-up turn (its classes captured) and then ``blocks``
    timed turns of ``chunks_per_turn`` steady calls and a flush, the same seeded tokens for every
    arm. Per arm: lat_ms (median steady-chunk synthesis: CUDA events, perf_counter on a CPU),
    peak_MiB (median per-turn allocator peak; NaN on a CPU), exact (every timed turn's int16 PCM
    SHA-256 equals B0's), exact_blocks, blocks, latency_delta and peak_delta against B0.
    ``condition``: a key of ``data.CONDITIONS``, applied with
    :func:`cadencelab.replay.determinism.apply_condition` (a cuBLAS workspace pin takes effect only
    in a process that has not used CUDA yet). Arms that fail are named in ``attrs["failed"]``.
    """
    import torch

    from ..adapters.token2wav.runtime import build_runtime

    data.check_condition(condition)
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("live_factorial needs a CUDA device; use the recorded data (rules_panel(live=False))")
    arms = tuple(arms)
    if "B0" not in arms:
        raise ValueError(f"live_factorial: arms must include B0 (the exactness gate's reference), got {arms}")
    if blocks < 1 or chunks_per_turn < 2 or runs < 1:
        raise ValueError(f"live_factorial: blocks and runs must be >= 1 and chunks_per_turn >= 2, got {blocks}, "
                         f"{runs}, {chunks_per_turn}")
    apply_condition(data.DEVICE_CONDITIONS[condition])
    cfg = token2wav_config(config)
    say = progress or (lambda *_: None)
    measured, failed = {}, {}
    for r in range(runs):
        order = arms[r % len(arms):] + arms[: r % len(arms)]  # no arm always first
        for arm in order:
            if arm in failed:
                continue
            rt = None
            try:
                rt, prompt = build_runtime(cfg, arm, seed, dev, n_timesteps=n_steps)
                c = rt.clocks
                toks = np.random.default_rng([seed, 7]).integers(0, cfg.vocab_size, c.tokens_per_chunk * chunks_per_turn)
                pieces = list(chunk_pieces(toks.tolist(), c))
                turns = _stream_turns(rt, prompt, pieces, 1 + blocks, dev, seed)[1:]  # the first turn warms up
                measured.setdefault(arm, []).append(turns)
                say(f"live {arm}: run {r + 1} of {runs} done")
            except Exception as e:  # one arm failing keeps the others
                failed[arm] = f"{type(e).__name__}: {e}"[:300]
                measured.pop(arm, None)
                say(f"live {arm} failed: {failed[arm]}")
            finally:
                del rt
                if dev.type == "cuda":  # the arm's graphs and buffers back to the device before the next arm
                    gc.collect()
                    torch.cuda.empty_cache()
    frame = factorial_frame(measured)
    frame.attrs["n_steps"] = T2W_CLOCKS.with_(n_steps=n_steps).n_steps
    frame.attrs["failed"] = failed
    where = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "this CPU"
    frame.attrs["source"] = (f"live on {where} ({config} config, {runs} alternating run(s) of {blocks} block(s), "
                             f"{condition} kernels)")
    return frame


def factorial_frame(runs: dict[str, list]) -> pd.DataFrame:
    """Per arm (``runs``: arm -> its runs, each a list of timed turns; a plain list of turns is one run):
    lat_ms (the mean over runs of each run's mean turn median), peak, turns whose PCM digest equals B0's
    (turn by turn, run by run), latency_delta against B0 with ``latency_delta_lo/hi`` (resampling runs,
    then turns: NaN with one run and one turn), ``claim`` and ``runs``; peak_delta against B0."""
    runs = {a: (r if r and isinstance(r[0], list) else [r]) for a, r in runs.items()}

    def medians(run):
        return [float(np.median([x["latency_ms"] for x in t["rows"] if x["kind"] == "steady"])) for t in run]

    ref = runs.get("B0")
    lat = {a: [medians(run) for run in rs] for a, rs in runs.items()}
    rows = []
    for arm, rs in runs.items():
        turns = [t for run in rs for t in run]
        ref_turns = [t for run in ref for t in run] if ref is not None else []
        exact_blocks = sum(t["sha256"] == b["sha256"] for t, b in zip(turns, ref_turns))
        row = dict(arm=arm, lat_ms=point(lat[arm]), peak_MiB=float(np.median([t["peak_MiB"] for t in turns])),
                   exact=ref is not None and exact_blocks == len(turns), exact_blocks=int(exact_blocks),
                   blocks=len(turns), runs=len(rs))
        if ref is not None:
            pt, lo, hi = (0.0, 0.0, 0.0) if arm == "B0" else ratio_interval(lat[arm], lat["B0"])
            enough = arm == "B0" or sum(map(len, lat[arm])) > 1
            row.update(latency_delta=pt, latency_delta_lo=lo if enough else float("nan"),
                       latency_delta_hi=hi if enough else float("nan"),
                       claim="reference" if arm == "B0" else direction(lo, hi) if enough else "no interval (one turn)")
        rows.append(row)
    df = pd.DataFrame(rows)
    if (df["arm"] == "B0").any():
        b0 = df.set_index("arm").loc["B0"]
        df["peak_delta"] = df["peak_MiB"] / b0["peak_MiB"] - 1.0
    return df


# ---------------------------------------------------------------------------------------
# one chunk, kernel by kernel
# ---------------------------------------------------------------------------------------


@dataclass
class ChunkTimelines:
    """One steady chunk, eager (B0) and replayed (SRc): events, per-chunk summary, provenance."""

    eager: pd.DataFrame
    replay: pd.DataFrame
    summary: pd.DataFrame
    source: str
    what: str
    traces: dict = field(default_factory=dict)


def profile_chunk(arm: str = "B0", config: str = "teaching", device: str = "cpu", warm_chunks: int = 3,
                  seed: int = 0):
    """Profile one steady Token2wav chunk live: build the arm, warm it through the catalog's
    classes (``warm_chunks`` chunks), then profile one more chunk. Returns the Trace."""
    import torch

    from ..adapters.token2wav.runtime import build_runtime

    cfg = token2wav_config(config)
    dev = torch.device(device)
    rt, prompt = build_runtime(cfg, arm, seed, dev)
    rt.set_stream_cache(prompt)
    c = rt.clocks
    toks = np.random.default_rng(seed).integers(0, cfg.vocab_size, c.tokens_per_chunk * (warm_chunks + 1)
                                                 + c.lookahead_tokens).tolist()
    pieces = [toks[c.tokens_per_chunk * i: c.tokens_per_chunk * i + c.call_tokens] for i in range(warm_chunks + 1)]
    for p in pieces[:-1]:
        rt.stream(p)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    rt.ranges = True
    prof = profile_stream([lambda: rt.stream(pieces[-1])], device=dev, window="chunk")
    rt.ranges = False
    return prof.trace


def chunk_timelines(source: str = "auto", config: str = "teaching", device: str = "cpu",
                    warm_chunks: int = 3) -> ChunkTimelines:
    """The B0 and SRc timelines of one steady chunk.

    source "recorded": the H200 traces (``data.recorded_trace``); "live": profile
    ``config`` on ``device`` now (:func:`profile_chunk`); "auto": recorded when the files exist,
    live otherwise (on a CPU the live trace has host ops only, which is what the player then walks).
    ``warm_chunks``: live only, chunks streamed before the profiled one (3 reach the steady class).
    """
    if source not in ("auto", "recorded", "live"):
        raise ValueError(f"chunk_timelines: source must be 'auto', 'recorded' or 'live', got {source!r}")
    traces = {}
    if source in ("auto", "recorded"):
        try:
            traces = {"eager": data.recorded_trace("B0"), "replay": data.recorded_trace("SRc")}
            src = "recorded: one steady chunk of the real config on an H200 (B0 eager, SRc replayed)"
        except FileNotFoundError:
            if source == "recorded":
                raise
    if not traces:
        traces = {"eager": profile_chunk("B0", config, device, warm_chunks),
                  "replay": profile_chunk("SRc", config, device, warm_chunks)}
        src = f"live: one steady chunk of the {config} config on {device} (B0 eager, SRc replay backend 'auto')"
    ev = {}
    what = ""
    for k, t in traces.items():
        ev[k], what = timeline_events(t)
    rows = []
    for k, t in traces.items():
        s = summary(t, "chunk").iloc[[-1]].copy()
        s.insert(0, "variant", k)
        rows.append(s)
    return ChunkTimelines(ev["eager"], ev["replay"], pd.concat(rows, ignore_index=True), src, what, traces)
