"""The paper's factorial on any declared model: arms B0, S, R, Rc, SR, SRc of one :class:`KitModel`.

A :class:`~.spec.KitModel` is what a user wrote (declaration, step, the model's own stock step, a traffic
and how the runtime calls the step); :func:`factorial` certifies it once (the catalog and the certificate),
then runs every arm over the traffic in blocks, the arm order rotated each block, and returns one row per
arm: latency per call, the state held between calls, peak device memory, bit-exactness against the stock
step (B0), and how many calls replayed. The arms are the runtime's switches (:data:`ARMS`).

Latency here is measured in this process (blocks interleaved, a percentile bootstrap over blocks): good for
a CPU comparison and for notebooks. ``python -m cadencelab.bench kit`` measures the same arms the way every
study does (fresh processes per arm, pinned cores, hierarchical intervals, an A/A check).
"""

from __future__ import annotations

import hashlib
import time
from typing import Sequence

import numpy as np
import pandas as pd
import torch

from ...state.equal import bitwise_equal
from ..arms import CELLS
from .certify import certify
from .runtime import StreamingRuntime
from .spec import KitModel
from .traffic import Traffic

__all__ = ["ARMS", "run_block", "factorial", "arm_row_columns"]

#: the factorial's arms as the runtime's switches, from the one arm table (R and Rc coincide with the state rule
#: off: the stock step is the whole call; they run and are measured separately)
ARMS: dict[str, dict] = {name: a.switches() for name, a in CELLS.items()}


def _state_bytes(rt: StreamingRuntime) -> int:
    """Bytes of state held between calls: the carries (rings' positions included), or the stock caches."""
    if rt.state_rule:
        bufs = [c.buffer for c in rt.carries.values()] + [e.buffer for e in rt.ends.values()]
    else:
        bufs = [t for t in rt.caches.values() if isinstance(t, torch.Tensor)]
    return sum(t.numel() * t.element_size() for t in bufs)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_block(rt: StreamingRuntime, traffic: Traffic, reference: Sequence[torch.Tensor] | None = None) -> dict:
    """One pass of ``traffic`` through ``rt``, every call timed (the device synchronised around it).

    Returns ms per call, the SHA-256 of the outputs, calls equal to ``reference`` (the same
    bytes, :func:`~cadencelab.state.equal.bitwise_equal`: identical NaNs equal), the most
    state held between calls, the peak device memory above the block's start (CUDA; NaN on a CPU) and how
    many calls replayed."""
    dev = rt.device
    cuda = dev.type == "cuda"
    if cuda:
        _sync(dev)
        base = torch.cuda.memory_allocated(dev)
        torch.cuda.reset_peak_memory_stats(dev)
    ms, digest, equal, state, replayed = [], hashlib.sha256(), 0, 0, 0
    for k, (t, i, op, x, last) in enumerate(traffic.items_of()):
        if i == 0:
            rt.reset(traffic.prompt(t))
        b = rt.bound(op)
        mark = b.engine.tally() if b.engine is not None else None
        _sync(dev)
        t0 = time.perf_counter()
        out = rt(x, last, b.name)
        _sync(dev)
        ms.append((time.perf_counter() - t0) * 1e3)
        if mark is not None and b.engine.path_since(mark).startswith("replay"):
            replayed += 1
        host = out.detach().to("cpu").contiguous()
        digest.update(host.numpy().tobytes())
        if reference is not None and k < len(reference):
            equal += bitwise_equal(out, reference[k])
        state = max(state, _state_bytes(rt))
    peak = float(torch.cuda.max_memory_allocated(dev) - base) if cuda else float("nan")
    return dict(ms=ms, sha256=digest.hexdigest(), equal=equal, calls=len(ms), state_bytes=state,
                peak_mem_bytes=peak, replayed=replayed)


def _interval(values: Sequence[float], n: int = 2000, seed: int = 0) -> tuple[float, float]:
    v = np.asarray(values, float)
    if len(v) < 2:
        return float("nan"), float("nan")
    reps = np.random.default_rng(seed).choice(v, size=(n, len(v)), replace=True).mean(axis=1)
    return float(np.quantile(reps, 0.025)), float(np.quantile(reps, 0.975))


def arm_row_columns() -> list[str]:
    return ["arm", "state_rule", "replay", "granularity", "blocks", "calls", "latency_ms", "latency_ms_lo",
            "latency_ms_hi", "vs_B0", "state_bytes", "peak_mem_bytes", "exact_calls", "bit_exact", "replayed"]


def factorial(model: KitModel, arms: Sequence[str] = tuple(ARMS), *, blocks: int = 5, warmup: int = 1,
              backend: str = "auto", seed: int = 0) -> pd.DataFrame:
    """The factorial of ``model``: one row per arm (see :func:`arm_row_columns`), in this process.

    ``latency_ms``: the mean over blocks of each block's median ms per call, with a 95% percentile-bootstrap
    interval over blocks (``latency_ms_lo``/``_hi``); ``vs_B0``: latency / B0's - 1 (B0 in ``arms``).
    ``bit_exact``: every call of every block ``torch.equal`` to the stock step's. ``attrs``: ``catalog`` and
    ``certificate`` (the :func:`certify` DataFrames), ``certified``, ``model``, ``device``, ``method``.
    """
    arms = list(arms)
    bad = [a for a in arms if a not in ARMS]
    if bad or not arms or len(set(arms)) != len(arms):
        raise ValueError(f"arms must be distinct names among {list(ARMS)}, got {arms}")
    for name, v, lo in (("blocks", blocks, 1), ("warmup", warmup, 0)):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise ValueError(f"factorial: {name} must be an int >= {lo}, got {v!r}")
    torch.manual_seed(seed)
    cert = certify(model, backend=backend)
    reference = cert.stock_outputs
    runtimes = {a: StreamingRuntime(model, a, backend=backend) for a in arms}
    results: dict[str, list] = {a: [] for a in arms}
    for k in range(warmup + blocks):
        order = arms[k % len(arms):] + arms[:k % len(arms)]  # rotated each block: no arm always first
        for a in order:
            res = run_block(runtimes[a], model.traffic, reference)
            if k >= warmup:
                results[a].append(res)
    rows = []
    for a in arms:
        rs = results[a]
        per_block = [float(np.median(r["ms"])) for r in rs]
        lo, hi = _interval(per_block, seed=seed)
        rows.append(dict(arm=a, state_rule=ARMS[a]["state_rule"], replay=ARMS[a]["replay"],
                         granularity=ARMS[a].get("granularity", "") if ARMS[a]["replay"] else "",
                         blocks=len(rs), calls=rs[0]["calls"], latency_ms=float(np.mean(per_block)),
                         latency_ms_lo=lo, latency_ms_hi=hi, state_bytes=max(r["state_bytes"] for r in rs),
                         peak_mem_bytes=max(r["peak_mem_bytes"] for r in rs),
                         exact_calls=min(r["equal"] for r in rs),
                         bit_exact=all(r["equal"] == r["calls"] for r in rs), replayed=rs[-1]["replayed"]))
    df = pd.DataFrame(rows)
    b0 = df.set_index("arm")["latency_ms"].get("B0")
    df["vs_B0"] = df["latency_ms"] / b0 - 1 if b0 is not None else float("nan")
    df = df[arm_row_columns()]
    df.attrs.update(model=model.name, device=str(torch.device(model.device)), certified=cert.ok,
                    reference=cert.reference,
                    catalog=cert.catalog, certificate=cert.table,
                    method=f"in-process: {blocks} timed blocks after {warmup} warm-up, the arm order rotated each "
                           f"block; 95% percentile bootstrap over blocks of the per-block median ms per call")
    return df
