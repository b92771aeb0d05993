"""Cross-architecture study: Moshi's Mimi (three arms) and a Freeze-Omni-*style* decoder (three paths).

``python -m cadencelab.bench crossarch --device cuda --out DIR [--models mimi,freeze] [--frames 100 --blocks 3]``

(a) **Mimi** (``moshi==0.2.13``, seeded random weights; see :mod:`cadencelab.adapters.mimi`). Arms
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

(b) **Freeze-Omni-style decoder** (:mod:`cadencelab.adapters.freeze_style`: a model the project wrote
from published facts, *not* Freeze-Omni). Paths per block (one turn of seeded tokens, 20-token
chunks): ``overlap_recompute`` (first 20 tokens, then 40-token windows recomputing 10 tokens each
side: the non-exact control, reported with max|Δ|), ``carry`` (new tokens only, left context from
the carries), ``carry_replay`` (the carry step under ``ExactShapeReplay``), and the eager
``full_history`` reference that the carry paths must equal bit for bit.

Writes ``moshi_mimi.json`` and ``freeze_style.json`` (summary, per-arm/path statistics, blocks,
provenance) and per-frame / per-chunk CSVs under ``--out``; prints a short table last.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..replay.determinism import CONDITIONS, EXACT
from .common import ArmProcess, InlineArm, default_out, json_default, run_provenance, serve, set_up_device, write_json
from .flags import (MAX_BLOCKS, MAX_CHUNKS, MAX_SEED, check_device, check_names, check_out_dir, failed_line,
                    int_range, positive_float)

MIMI_ARMS = ("eager", "vendor_graph", "replay")
FREEZE_PATHS = ("overlap_recompute", "carry", "carry_replay", "full_history")
#: the paths gated on bitwise equality with full_history (overlap_recompute is the labelled non-exact control)
FREEZE_GATED = ("carry", "carry_replay")


@dataclass
class CrossArchConfig:
    device: str = "cuda"
    models: tuple = ("mimi", "freeze")
    frames: int = 100  # Mimi frames per block (80 ms each)
    blocks: int = 3  # timed blocks (plus one warm-up block)
    arms: tuple = MIMI_ARMS
    freeze_tokens: int = 407  # tokens per Freeze-style turn: 20 full chunks + a 7-token flush
    seed: int = 0
    processes: bool = True  # one fresh process per Mimi arm (False: in this process, CPU smoke)
    block_timeout_s: float = 120.0
    setup_timeout_s: float = 180.0
    condition: str = EXACT  # device condition of every arm (cadencelab.replay.determinism)
    out: str = "out/crossarch"


def provenance(cfg: CrossArchConfig, extra: dict | None = None) -> dict:
    """The launching commit, GPU, torch, CUDA and date (:func:`~cadencelab.bench.common.run_provenance`),
    moshi's version and the study's configuration."""
    out = dict(**run_provenance(cfg.device, packages=("moshi",)), config=dataclasses.asdict(cfg),
               determinism=dict(condition=cfg.condition))
    out.update(extra or {})
    return out


# ---------------------------------------------------------------------------------------
# (a) Mimi: one arm (in its own process on a GPU)
# ---------------------------------------------------------------------------------------


def _arm_env(arm: str) -> None:
    """Set moshi's switches before it is imported: graphs only in vendor_graph, never torch.compile."""
    os.environ["NO_TORCH_COMPILE"] = "1"
    if arm == "vendor_graph":
        os.environ.pop("NO_CUDA_GRAPH", None)
    else:
        os.environ["NO_CUDA_GRAPH"] = "1"


class MimiArm:
    """One Mimi arm: the seeded model, its stream, and blocks run on it."""

    def __init__(self, arm: str, cfg: CrossArchConfig):
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


def _mimi_worker(conn, arm: str, cfg_dict: dict) -> None:
    """Process entry: build the arm, then serve block requests until told to stop."""
    serve(conn, lambda: MimiArm(arm, CrossArchConfig(**cfg_dict)), MimiArm.info, HANDLERS)


class _ArmProcess(ArmProcess):
    """A Mimi arm in a fresh spawned process, asked for blocks over a pipe."""

    def __init__(self, arm: str, cfg: CrossArchConfig):
        super().__init__(arm, _mimi_worker, (arm, dataclasses.asdict(cfg)))


def _arm_inline(arm: str, cfg: CrossArchConfig) -> InlineArm:
    """Same interface as _ArmProcess, in this process (CPU smoke runs)."""
    return InlineArm(arm, lambda: MimiArm(arm, cfg), MimiArm.info, HANDLERS, close=lambda r: r.stream.close())


def run_mimi(cfg: CrossArchConfig, progress=print) -> dict:
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
    result["provenance"] = provenance(cfg, dict(wall_s=time.perf_counter() - t0, torch_compile=False,
                                                determinism=next(iter(setup.values()), {}).get("determinism")))
    return result


def analyse_mimi(cfg: CrossArchConfig, blocks: list[dict], failures: dict, setup: dict) -> dict:
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


# ---------------------------------------------------------------------------------------
# (b) the Freeze-Omni-style decoder (NOT Freeze-Omni)
# ---------------------------------------------------------------------------------------


class FreezeBench:
    """The Freeze-Omni-*style* decoder on one device: the three paths and the full-history reference."""

    def __init__(self, cfg: CrossArchConfig):
        import torch

        from ..adapters import freeze_style as F

        self.torch, self.F, self.cfg = torch, F, cfg
        self.device, self.determinism = set_up_device(cfg.device, cfg.condition)
        self.model = F.FreezeStyleDecoder().to(self.device).eval()
        backend = "cuda" if self.device.type == "cuda" else "eager"
        self.carry = F.CarryStream(self.model)
        self.carry_replay = F.CarryStream(self.model, replay=True, backend=backend)
        self.policy = F.OverlapPolicy()
        self.spt = self.model.cfg.samples_per_token

    def tokens(self, block: int):
        g = self.torch.Generator().manual_seed(1_000 * (self.cfg.seed + 1) + block)
        return self.torch.randint(0, self.model.cfg.vocab, (1, self.cfg.freeze_tokens), generator=g).to(self.device)

    def _calls(self, path: str, tok):
        """(tokens_new, tokens_decoded, thunk) per chunk of ``path`` on one turn."""
        n, step, m, spt = tok.shape[1], self.model.cfg.chunk_tokens, self.model, self.spt
        if path == "overlap_recompute":
            return [(k1 - k0, w1 - w0, lambda w0=w0, w1=w1, k0=k0, k1=k1: m(tok[:, w0:w1])[:, (k0 - w0) * spt:(k1 - w0) * spt])
                    for w0, w1, k0, k1 in self.policy.windows(n)]
        if path == "full_history":
            return [(min(k0 + step, n) - k0, min(k0 + step, n),
                     lambda k0=k0: m(tok[:, :min(k0 + step, n)])[:, k0 * spt:min(k0 + step, n) * spt])
                    for k0 in range(0, n, step)]
        rt = self.carry if path == "carry" else self.carry_replay
        rt.reset()
        return [(min(k0 + step, n) - k0, min(k0 + step, n) - k0,
                 lambda k0=k0: rt(tok[0, k0:k0 + step].clone().view(1, -1)))
                for k0 in range(0, n, step)]

    def run_path(self, path: str, block: int, tok) -> dict:
        torch = self.torch
        cuda = self.device.type == "cuda"
        if cuda:
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        rows, outs = [], []
        with torch.inference_mode():
            for i, (new, decoded, thunk) in enumerate(self._calls(path, tok)):
                ev = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) if cuda else None
                if cuda:
                    torch.cuda.synchronize(self.device)
                t0 = time.perf_counter()
                if ev:
                    ev[0].record()
                pcm = thunk()
                if ev:
                    ev[1].record()
                    torch.cuda.synchronize(self.device)
                wall = (time.perf_counter() - t0) * 1e3
                outs.append(pcm.clone())
                kind = "first" if i == 0 else ("flush" if new < self.model.cfg.chunk_tokens else "steady")
                rows.append(dict(path=path, block=block, chunk=i, kind=kind, tokens_new=new, tokens_decoded=decoded,
                                 latency_ms=ev[0].elapsed_time(ev[1]) if ev else wall, wall_ms=wall))
        peak = torch.cuda.max_memory_allocated(self.device) if cuda else None
        return dict(rows=rows, outs=outs, peak_bytes=peak)

    def state_bytes(self, path: str) -> int:
        if path in ("carry", "carry_replay"):
            return self.carry.state_bytes
        if path == "overlap_recompute":  # the token ids it keeps to rebuild its next window (int64)
            return (self.policy.steady - self.policy.hop) * 8
        return self.cfg.freeze_tokens * 8  # full history: every token of the turn

    def run_block(self, block: int) -> list[dict]:
        """Every path on one turn; exactness of each chunk against the full-history reference."""
        tok = self.tokens(block)
        res = {p: self.run_path(p, block, tok) for p in FREEZE_PATHS}
        ref = res["full_history"]["outs"]
        out = []
        for p, r in res.items():
            h = hashlib.sha256()
            diffs, eq = [], []
            for row, a, b in zip(r["rows"], r["outs"], ref):
                same = a.shape == b.shape
                row["exact_vs_full"] = bool(same and self.torch.equal(a, b))
                row["max_abs_diff"] = float((a - b).abs().max().item()) if same else float("nan")
                diffs.append(row["max_abs_diff"])
                eq.append(row["exact_vs_full"])
                h.update(a.float().cpu().numpy().tobytes())
            out.append(dict(path=p, block=block, rows=r["rows"], peak_bytes=r["peak_bytes"], sha_pcm=h.hexdigest(),
                            exact=bool(eq and all(eq) and len(r["outs"]) == len(ref)),
                            max_abs_diff=float(np.nanmax(diffs)) if diffs else float("nan"),
                            state_bytes=self.state_bytes(p)))
        return out


def run_freeze(cfg: CrossArchConfig, progress=print) -> dict:
    t0 = time.perf_counter()
    fb = FreezeBench(cfg)
    blocks = []
    for b in range(cfg.blocks + 1):
        for r in fb.run_block(b):
            r["warmup"] = b == 0
            blocks.append(r)
        progress(f"freeze-style block {b}/{cfg.blocks} done ({time.perf_counter() - t0:.0f} s)")
    result = analyse_freeze(cfg, blocks)
    result["replay"] = fb.carry_replay.engine.summary()
    result["replay_counters"] = fb.carry_replay.engine.counters().drop(columns=["miss_reasons"]).to_dict("records")
    result["provenance"] = provenance(cfg, dict(wall_s=time.perf_counter() - t0, model="Freeze-Omni-style decoder "
                                                "written by cadencelab from published facts; not Freeze-Omni"))
    return result


def analyse_freeze(cfg: CrossArchConfig, blocks: list[dict]) -> dict:
    chunks = pd.DataFrame([dict(r, warmup=b["warmup"]) for b in blocks for r in b["rows"]])
    bdf = pd.DataFrame([{k: v for k, v in b.items() if k != "rows"} for b in blocks])
    paths = {}
    for p in FREEZE_PATHS:
        t = bdf[(bdf["path"] == p) & (~bdf["warmup"])]
        c = chunks[(chunks["path"] == p) & (~chunks["warmup"])]
        steady = c[c["kind"] == "steady"]["latency_ms"]
        peaks = t["peak_bytes"].dropna()
        paths[p] = dict(path=p, blocks=int(len(t)), exact_blocks=int(t["exact"].sum()),
                        exact=bool(len(t) and t["exact"].all()), max_abs_diff=float(t["max_abs_diff"].max()),
                        steady_latency_ms_median=float(steady.median()) if len(steady) else float("nan"),
                        all_latency_ms_median=float(c["latency_ms"].median()) if len(c) else float("nan"),
                        tokens_decoded_per_block=float(c.groupby("block")["tokens_decoded"].sum().median()) if len(c) else 0,
                        peak_MiB_median=float(peaks.median() / 2**20) if len(peaks) else None,
                        state_bytes=int(t["state_bytes"].iloc[0]) if len(t) else None,
                        role={"overlap_recompute": "non-exact control (truncated 10-token left context)",
                              "full_history": "eager reference"}.get(p, "gated: bit-exact vs full_history"))

    def speed(a, b):
        x, y = paths[a]["steady_latency_ms_median"], paths[b]["steady_latency_ms_median"]
        return (y / x) if (x and y and x == x and y == y) else None

    summary = dict(
        speedup_carry_vs_overlap=speed("carry", "overlap_recompute"),
        speedup_carry_replay_vs_overlap=speed("carry_replay", "overlap_recompute"),
        speedup_carry_replay_vs_carry=speed("carry_replay", "carry"),
        peak_MiB={p: r["peak_MiB_median"] for p, r in paths.items()},
        state_bytes={p: r["state_bytes"] for p, r in paths.items()},
        exact_blocks=paths["carry_replay"]["exact_blocks"], total_blocks=paths["carry_replay"]["blocks"],
        exact_blocks_carry=paths["carry"]["exact_blocks"],
        overlap_max_abs_diff=paths["overlap_recompute"]["max_abs_diff"],
        overlap_exact_blocks=paths["overlap_recompute"]["exact_blocks"],
    )
    return dict(summary=summary, paths=paths, blocks=bdf.to_dict("records"), chunks=chunks.to_dict("records"))


# ---------------------------------------------------------------------------------------
# the study
# ---------------------------------------------------------------------------------------


def run_study(cfg: CrossArchConfig, progress=print) -> dict:
    """Run the selected models; write their JSON and CSV files; return {model: result}."""
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    for model, run, rows, stem in (("mimi", run_mimi, "frames", "moshi_mimi"),
                                   ("freeze", run_freeze, "chunks", "freeze_style")):
        if model not in cfg.models:
            continue
        r = run(cfg, progress)
        csv = f"{stem}_{rows}.csv"  # the JSON names its rows' CSV beside it
        write_json({k: v for k, v in r.items() if k != rows} | {f"{rows}_csv": csv}, out / f"{stem}.json",
                   strict_json=False)
        pd.DataFrame(r[rows]).to_csv(out / csv, index=False)
        results[model] = r
    return results


def table(results: dict) -> str:
    """The short table printed last."""
    nan = float("nan")
    lines = []
    if "mimi" in results:
        lines.append("Mimi (moshi 0.2.13, seeded random weights): per-frame encode+decode")
        for a, r in results["mimi"]["arms"].items():
            if "failed" in r and not r.get("blocks"):
                lines.append(f"  {a:>14}  FAILED: {str(r['failed']).strip().splitlines()[-1][:90]}")
                continue
            lines.append(f"  {a:>14}  lat {r['latency_ms_median']:8.3f} ms  speedup {r.get('speedup_vs_eager') or nan:5.2f}x  "
                         f"peak {r.get('peak_MiB_median') or nan:8.1f} MiB  exact {r['exact_blocks']}/{r['blocks']}  "
                         f"vendor graphs {r['vendor_graphs_captured']}")
    if "freeze" in results:
        lines.append("Freeze-Omni-style decoder (not Freeze-Omni): per 20-token chunk")
        for p, r in results["freeze"]["paths"].items():
            lines.append(f"  {p:>17}  steady {r['steady_latency_ms_median']:8.3f} ms  peak {r.get('peak_MiB_median') or nan:8.1f} MiB  "
                         f"state {r['state_bytes']} B  exact {r['exact_blocks']}/{r['blocks']}  max|d| {r['max_abs_diff']:.3g}")
    summary = {m: r["summary"] for m, r in results.items()}
    lines.append("summary: " + json.dumps(summary, default=json_default, separators=(",", ":")))
    return "\n".join(lines)


def _cli(args) -> int:
    models = check_names("--models", args.models, ("mimi", "freeze"))
    arms = check_names("--arms", args.arms, MIMI_ARMS) if args.arms else None
    check_device("--device", args.device)
    check_out_dir("--out", args.out)
    processes = args.device.startswith("cuda") if args.processes is None else args.processes
    cfg = CrossArchConfig(device=args.device, models=models, frames=args.frames, blocks=args.blocks, seed=args.seed,
                          freeze_tokens=args.freeze_tokens, processes=processes, out=args.out,
                          block_timeout_s=args.block_timeout, condition=args.condition)
    if arms:
        cfg.arms = arms
    res = run_study(cfg, progress=lambda m: print(m, flush=True))
    print(table(res), flush=True)
    mimi = res.get("mimi", {}).get("summary", {})
    freeze = [f"freeze:{p}" for p, r in res.get("freeze", {}).get("paths", {}).items()
              if p in FREEZE_GATED and not r.get("exact")]
    line = failed_line("bench crossarch", mimi.get("failed_arms", ()), [*mimi.get("non_exact_arms", ()), *freeze])
    if line:
        print(line, file=sys.stderr, flush=True)
        return 1
    return 0


def add_parser(sub) -> None:
    t = sub.add_parser("crossarch", help="Moshi's Mimi (eager / vendor graphs / generic replay) and a Freeze-Omni-style decoder")
    t.add_argument("--device", default="cuda")
    t.add_argument("--models", default="mimi,freeze", help="comma-separated: mimi, freeze")
    t.add_argument("--frames", type=int_range(1, MAX_CHUNKS), default=100, help="Mimi frames (80 ms) per block")
    t.add_argument("--blocks", type=int_range(1, MAX_BLOCKS), default=3, help="timed blocks (plus one warm-up block)")
    t.add_argument("--arms", default="", help="Mimi arms (default: eager,vendor_graph,replay)")
    t.add_argument("--freeze-tokens", type=int_range(1, MAX_CHUNKS), default=407, help="tokens per Freeze-style turn (20-token chunks)")
    t.add_argument("--seed", type=int_range(0, MAX_SEED), default=0)
    t.add_argument("--processes", dest="processes", action="store_true", default=None,
                   help="one fresh process per Mimi arm (default on CUDA)")
    t.add_argument("--inline", dest="processes", action="store_false", help="Mimi arms in this process (default on CPU)")
    t.add_argument("--block-timeout", type=positive_float, default=120.0)
    t.add_argument("--condition", choices=list(CONDITIONS), default=EXACT,
                   help=f"device condition (default: the exact condition, {EXACT})")
    t.add_argument("--out", default=default_out("crossarch"))
    t.set_defaults(fn=_cli)
