"""The Mimi study (``python -m cadencelab.bench crossarch --models mimi``): Moshi's Mimi codec, three arms.

**Mimi** (``moshi==0.2.13``, seeded random weights; see :mod:`cadencelab.adapters.mimi`). Arms
``eager`` (moshi's CUDA graphs off), ``vendor_graph`` (moshi's ``CUDAGraphed`` as shipped) and
``replay`` (cadencelab's generic ``ExactShapeReplay`` over the per-frame encode and decode, driven by
the declaration; vendor graphs off). On a GPU each arm runs in its own fresh process (spawned; the
graph switches are set before moshi is imported), arms interleaved block by block. A block is one
stream (moshi's in-place ``reset_streaming`` at its start) of ``frames`` 80 ms frames of a seeded
signal, identical in every arm; block 0 is a warm-up (captures happen there), reported but left out
of the statistics. Per frame: encode + decode latency (CUDA events, the device synchronised after
every frame), SHA-256 of codes and PCM; per block: the allocator peak (reset at the block start)
and whole-block hashes. A block is exact when its codes and PCM hashes equal the eager arm's.
torch.compile is off in every arm; every arm runs under the exact device condition
(:data:`cadencelab.replay.determinism.EXACT`).

Writes ``moshi_mimi.json`` and its per-frame CSV (through :func:`cadencelab.bench.crossarch.run_study`).
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any

import numpy as np
import pandas as pd

from .common import ArmProcess, InlineArm, serve, set_up_device, study_provenance

__all__ = ["MIMI_ARMS", "MimiArm", "run_mimi", "analyse_mimi"]

MIMI_ARMS = ("eager", "vendor_graph", "replay")


def _arm_env(arm: str) -> None:
    """Set moshi's switches before it is imported: graphs only in vendor_graph, never torch.compile."""
    os.environ["NO_TORCH_COMPILE"] = "1"
    if arm == "vendor_graph":
        os.environ.pop("NO_CUDA_GRAPH", None)
    else:
        os.environ["NO_CUDA_GRAPH"] = "1"


class MimiArm:
    """One Mimi arm: the seeded model, its stream, and blocks run on it."""

    def __init__(self, arm: str, cfg: Any):
        _arm_env(arm)
        import torch

        from ..adapters import mimi as M

        self.torch, self.M, self.arm, self.cfg = torch, M, arm, cfg
        t0 = time.perf_counter()
        self.device, self.determinism = set_up_device(cfg.device, cfg.condition)
        self.model = M.build_mimi(cfg.seed, device=self.device)
        backend = "cuda" if self.device.type == "cuda" else "eager"
        self.stream = M.MimiStream(self.model, arm, backend=backend)
        self.setup_s = time.perf_counter() - t0

    def info(self) -> dict:
        return dict(setup_s=self.setup_s, rebinding=self.stream.rebinding, state_tensors=len(self.stream.refs),
                    state_bytes=self.stream.state_bytes(), determinism=self.determinism)

    def run_block(self, block: int) -> dict:
        torch, M, s = self.torch, self.M, self.stream
        cuda = self.device.type == "cuda"
        s.reset()
        for e in s.engines.values():
            e.reset_counters()
        if cuda:
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        res = M.run_stream(s, M.pcm_stream(self.cfg.frames, self.cfg.seed, block), timing=True)
        peak = torch.cuda.max_memory_allocated(self.device) if cuda else None
        for r in res.rows:
            r.update(arm=self.arm, block=block)
        h = M.stream_hashes(res)
        counters = s.counters()
        notes = [dict(e) for eng in s.engines.values() for e in eng.events
                 if e["kind"] in ("capture_failed", "invalidation", "rejected", "refused")][:8]
        return dict(arm=self.arm, block=block, rows=res.rows, peak_bytes=peak, sha_codes=h["codes"], sha_pcm=h["pcm"],
                    summaries=s.summaries(), vendor_graphs_captured=s.vendor_graphs_captured(), engine_events=notes,
                    engine_status={r["engine"]: f"{r['status']} {r['reason']}".strip()
                                   for r in counters.to_dict("records") if r["status"] != "unclassed"},
                    invalidations=int(counters["invalidations"].sum()) if len(counters) else 0,
                    replays=int(counters["replays"].sum()) if len(counters) else 0)


#: the requests a Mimi arm answers, in its process (:func:`serve`) or inline (:class:`InlineArm`)
HANDLERS = {"block": lambda r, spec: r.run_block(spec)}


def _mimi_worker(conn, arm: str, config: type, cfg_dict: dict) -> None:
    """Process entry: build the arm (its config rebuilt from ``cfg_dict``), then serve block requests
    until told to stop."""
    serve(conn, lambda: MimiArm(arm, config(**cfg_dict)), MimiArm.info, HANDLERS)


class _ArmProcess(ArmProcess):
    """A Mimi arm in a fresh spawned process, asked for blocks over a pipe."""

    def __init__(self, arm: str, cfg: Any):
        super().__init__(arm, _mimi_worker, (arm, type(cfg), dataclasses.asdict(cfg)))


def _arm_inline(arm: str, cfg: Any) -> InlineArm:
    """Same interface as _ArmProcess, in this process (CPU smoke runs)."""
    return InlineArm(arm, lambda: MimiArm(arm, cfg), MimiArm.info, HANDLERS, close=lambda r: r.stream.close())


def run_mimi(cfg: Any, progress=print) -> dict:
    """All Mimi arms, interleaved block by block (order rotating); returns the analysed result."""
    from ..adapters.mimi import load_moshi

    load_moshi()  # fail early, with the install command, when moshi is absent
    t0 = time.perf_counter()
    make = _ArmProcess if cfg.processes else _arm_inline
    procs = {a: make(a, cfg) for a in cfg.arms}
    setup, failures, blocks = {}, {}, []
    for a, p in procs.items():
        kind, res = p.wait(cfg.setup_timeout_s)
        if kind == "ready":
            setup[a] = res
            progress(f"mimi arm {a}: ready in {res['setup_s']:.1f} s (rebinding state: {res['rebinding']})")
        else:
            failures[a] = str(res)
            progress(f"mimi arm {a}: setup failed: {str(res).strip().splitlines()[-1]}")
    live = [a for a in cfg.arms if a not in failures]
    try:
        for b in range(cfg.blocks + 1):
            order = live[b % len(live):] + live[:b % len(live)] if live else []
            for a in order:
                kind, res = procs[a].ask(("block", b), cfg.block_timeout_s)
                if kind != "ok":
                    failures[a] = str(res)
                    progress(f"mimi arm {a} failed in block {b}: {str(res).strip().splitlines()[-1]}")
                    continue
                res["warmup"] = b == 0
                blocks.append(res)
            live = [a for a in live if a not in failures]
            progress(f"mimi block {b}/{cfg.blocks} done ({time.perf_counter() - t0:.0f} s)")
    finally:
        for p in procs.values():
            p.stop()
    result = analyse_mimi(cfg, blocks, failures, setup)
    result["provenance"] = study_provenance(cfg, ("moshi",), dict(
        wall_s=time.perf_counter() - t0, torch_compile=False,
        determinism=next(iter(setup.values()), {}).get("determinism")))
    return result


def analyse_mimi(cfg: Any, blocks: list[dict], failures: dict, setup: dict) -> dict:
    """Frames, blocks and per-arm statistics; exactness and speedups against the eager arm."""
    frames = pd.DataFrame([dict(r, warmup=b["warmup"]) for b in blocks for r in b["rows"]])
    ref = {b["block"]: b for b in blocks if b["arm"] == "eager"}
    brows = []
    for b in blocks:
        r = ref.get(b["block"])
        lat = [x["latency_ms"] for x in b["rows"]]
        brows.append(dict(arm=b["arm"], block=b["block"], warmup=b["warmup"], peak_bytes=b["peak_bytes"],
                          latency_ms_median=float(np.median(lat)) if lat else float("nan"),
                          sha_codes=b["sha_codes"], sha_pcm=b["sha_pcm"],
                          exact_codes=bool(r and r["sha_codes"] == b["sha_codes"]),
                          exact_pcm=bool(r and r["sha_pcm"] == b["sha_pcm"]),
                          vendor_graphs_captured=b["vendor_graphs_captured"], replays=b["replays"],
                          invalidations=b["invalidations"], summaries=b["summaries"],
                          engine_status=b["engine_status"], engine_events=b["engine_events"]))
    bdf = pd.DataFrame(brows)
    if not bdf.empty:
        bdf["exact"] = bdf["exact_codes"] & bdf["exact_pcm"]
    arms = {a: _arm_stats(a, frames, bdf, failures, setup) for a in cfg.arms}
    eager = arms.get("eager", {}).get("latency_ms_median")
    for r in arms.values():
        lat = r.get("latency_ms_median")
        r["speedup_vs_eager"] = (eager / lat) if (eager and lat and lat == lat) else None
    return dict(summary=_mimi_summary(arms), arms=arms, failures=failures, setup=setup,
                blocks=bdf.to_dict("records"), frames=frames.to_dict("records"))


def _arm_stats(arm: str, frames: pd.DataFrame, bdf: pd.DataFrame, failures: dict, setup: dict) -> dict:
    if bdf.empty or arm not in set(bdf["arm"]):
        return dict(arm=arm, failed=failures.get(arm, "no blocks"))
    t = bdf[(bdf["arm"] == arm) & (~bdf["warmup"])]
    f = frames[(frames["arm"] == arm) & (~frames["warmup"])]
    peaks = t["peak_bytes"].dropna()
    row = dict(arm=arm, blocks=int(len(t)), exact_blocks=int(t["exact"].sum()), exact=bool(len(t) and t["exact"].all()),
               exact_codes_blocks=int(t["exact_codes"].sum()), exact_pcm_blocks=int(t["exact_pcm"].sum()),
               frames=int(len(f)),
               latency_ms_median=float(f["latency_ms"].median()) if len(f) else float("nan"),
               latency_ms_p95=float(f["latency_ms"].quantile(0.95)) if len(f) else float("nan"),
               encode_ms_median=float(f["encode_ms"].median()) if len(f) else float("nan"),
               decode_ms_median=float(f["decode_ms"].median()) if len(f) else float("nan"),
               wall_ms_median=float(f["wall_ms"].median()) if len(f) else float("nan"),
               peak_MiB_median=float(peaks.median() / 2**20) if len(peaks) else None,
               vendor_graphs_captured=int(t["vendor_graphs_captured"].max()) if len(t) else 0,
               replays_per_block=int(t["replays"].median()) if len(t) else 0,
               invalidations=int(t["invalidations"].sum()) if len(t) else 0,
               setup_s=setup.get(arm, {}).get("setup_s"), rebinding=setup.get(arm, {}).get("rebinding"))
    if len(t):
        row["replay"] = t.iloc[-1]["summaries"]
        row["engine_status"] = t.iloc[-1]["engine_status"]
    events = [e for evs in bdf[bdf["arm"] == arm]["engine_events"] for e in evs]
    if events:
        row["engine_events"] = events[:8]
    if arm in failures:
        row["failed"] = failures[arm]
    return row


def _mimi_summary(arms: dict) -> dict:
    def get(a, k):
        return arms.get(a, {}).get(k)

    vs, rs = get("vendor_graph", "speedup_vs_eager"), get("replay", "speedup_vs_eager")
    return dict(
        speedup_vendor_graph_vs_eager=vs, speedup_replay_vs_eager=rs,
        vendor_speedup_recovered=(rs / vs) if (rs and vs) else None,
        peak_MiB={a: r.get("peak_MiB_median") for a, r in arms.items()},
        latency_ms_median={a: r.get("latency_ms_median") for a, r in arms.items()},
        exact_blocks=get("replay", "exact_blocks") or 0, total_blocks=get("replay", "blocks") or 0,
        exact_blocks_all_arms={a: r.get("exact_blocks", 0) for a, r in arms.items()},
        total_blocks_all_arms={a: r.get("blocks", 0) for a, r in arms.items()},
        non_exact_arms=sorted(a for a, r in arms.items() if r.get("blocks") and not r.get("exact")),
        failed_arms=sorted(a for a, r in arms.items() if "failed" in r),
    )
