"""The Freeze-Omni-*style* decoder study (``python -m cadencelab.bench crossarch --models freeze``).

The **Freeze-Omni-style decoder** (:mod:`cadencelab.adapters.freeze_style`: a model the project wrote
from published facts, *not* Freeze-Omni). Paths per block (one turn of seeded tokens, 20-token
chunks): ``overlap_recompute`` (first 20 tokens, then 40-token windows recomputing 10 tokens each
side: the non-exact control, reported with max|Δ|), ``carry`` (new tokens only, left context from
the carries), ``carry_replay`` (the carry step under ``ExactShapeReplay``), and the eager
``full_history`` reference that the carry paths must equal bit for bit.

Writes ``freeze_style.json`` and its per-chunk CSV (through :func:`cadencelab.bench.crossarch.run_study`).
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

import numpy as np
import pandas as pd

from .common import set_up_device, study_provenance

__all__ = ["FREEZE_PATHS", "FREEZE_GATED", "FreezeBench", "run_freeze", "analyse_freeze"]

FREEZE_PATHS = ("overlap_recompute", "carry", "carry_replay", "full_history")
#: the paths gated on bitwise equality with full_history (overlap_recompute is the labelled non-exact control)
FREEZE_GATED = ("carry", "carry_replay")


class FreezeBench:
    """The Freeze-Omni-*style* decoder on one device: the three paths and the full-history reference."""

    def __init__(self, cfg: Any):
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


def run_freeze(cfg: Any, progress=print) -> dict:
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
    result["provenance"] = study_provenance(cfg, ("moshi",), dict(
        wall_s=time.perf_counter() - t0,
        model="Freeze-Omni-style decoder written by cadencelab from published facts; not Freeze-Omni"))
    return result


def analyse_freeze(cfg: Any, blocks: list[dict]) -> dict:
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
