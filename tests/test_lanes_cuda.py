"""Lanes on CUDA graphs: sessions replaying concurrently on separate streams, each bit-identical to
running alone through B0, whatever runs beside it and whichever lane it lands on.

Every test needs a CUDA device (``@pytest.mark.cuda``; skipped by conftest.py without one).
"""

from __future__ import annotations

import hashlib

import pytest
import torch
import toys

from cadencelab.adapters.token2wav import REAL, TEACHING, build_token2wav, make_prompt
from cadencelab.serving.lanes import LaneExecutor, LanePool
from cadencelab.adapters.token2wav.runtime import Token2wavRuntime, runtime_envelope

SEEDS = (21, 22, 23, 24)
CHUNKS = 4  # estimator extents 302, 352, 402, 402: every flow class, then a steady replay


def _tokens(i: int, k: int) -> list[int]:
    g = torch.Generator().manual_seed(200 + i)
    buf = [4218] * 3 + torch.randint(0, 6561, (25 * CHUNKS + 3,), generator=g).tolist()
    return buf[25 * k: 25 * k + 28]


def _digest(pcm: bytes, mel: torch.Tensor) -> tuple[str, str]:
    return hashlib.sha256(pcm).hexdigest(), hashlib.sha256(mel.detach().float().cpu().numpy().tobytes()).hexdigest()


def _solo_b0(cfg, prompts) -> dict:
    flow, hift = build_token2wav(cfg, 0, device="cuda", envelope=runtime_envelope("B0"))
    rt = Token2wavRuntime(flow, hift, "cuda", "B0", cfg=cfg)
    out = {}
    for i, seed in enumerate(SEEDS):
        torch.manual_seed(seed)
        rt.set_stream_cache(prompts[i % len(prompts)])
        for k in range(CHUNKS):
            pcm = rt.stream(_tokens(i, k))
            out[i, k] = _digest(pcm, rt.last_mel)
    del rt, flow, hift
    torch.cuda.empty_cache()
    return out


def _pool(cfg, lanes: int) -> LanePool:
    flow, hift = build_token2wav(cfg, 0, device="cuda", envelope=runtime_envelope("SRc"))
    return LanePool(flow, hift, "cuda", lanes, "SRc", cfg=cfg, backend="cuda")


def _sessions(pool, prompts):
    templates = [pool.sessions.get(-1 - p) or pool.open(-1 - p, pr, 0) for p, pr in enumerate(prompts)]
    return [pool.fork(templates[i % len(prompts)], i, seed) for i, seed in enumerate(SEEDS)]


def _warm(pool, prompts):
    """Every lane captures every class (sessions of its own, closed after)."""
    for ln in pool.lanes:
        t = pool.open(-100 - ln.index, prompts[0], 0)
        s = pool.fork(t, 1000 + ln.index, 5)
        for k in range(CHUNKS):
            pool.stream(s, _tokens(9, k), lane=ln.index)
        pool.close(s)
        pool.close(t)


@pytest.mark.cuda
@pytest.mark.parametrize("cfg", [TEACHING, REAL], ids=["teaching", "real"])
def test_lanes_exact_beside_different_neighbours(cfg):
    prompts = [make_prompt(cfg, 40 + p, "cuda") for p in range(2)]
    ref = _solo_b0(cfg, prompts)
    pool = _pool(cfg, 2)
    _warm(pool, prompts)
    captures, eager = pool.captures(), pool.eager_sections
    default_state = torch.cuda.get_rng_state()
    got_a, got_b = {}, {}
    for pairs, got in (((0, 1), got_a), ((0, 2), got_b)):  # session 0 beside session 1, then beside session 2
        ss = _sessions(pool, prompts)
        with LaneExecutor(pool) as ex:
            for k in range(CHUNKS):
                futs = {i: ex.submit(ss[i], _tokens(i, k)) for i in pairs}
                torch.randn(7, device="cuda")  # foreign draws on the default generator meanwhile
                for i, f in futs.items():
                    r = f.result(timeout=300)
                    got[i, k] = _digest(r.output, r.mel)
        for s in ss:
            pool.close(s)
    for got in (got_a, got_b):
        assert got == {key: ref[key] for key in got}
    assert got_a[0, CHUNKS - 1] == got_b[0, CHUNKS - 1]
    assert pool.captures() == captures, "serving re-captured a graph"
    assert pool.eager_sections == eager, "steady serving ran eager work"
    assert pool.invalidations() == 0
    c = pool.counters()
    voc = c[c["engine"] == "vocoder_core"]
    assert (voc["rng"] == "device").any() and (voc["replays"] > 0).all(), c
    assert set(c["lane"]) == {0, 1}
    # the lanes' replays advanced their own generators, never the default one (beyond the foreign draws)
    after = torch.cuda.get_rng_state()
    torch.cuda.set_rng_state(default_state)
    for _ in range(2 * CHUNKS):
        torch.randn(7, device="cuda")
    assert torch.equal(after, torch.cuda.get_rng_state())


def _served_teaching():
    """The teaching config's solo B0 references, and a warmed two-lane pool with the sessions forked."""
    prompts = [make_prompt(TEACHING, 40 + p, "cuda") for p in range(2)]
    ref = _solo_b0(TEACHING, prompts)
    pool = _pool(TEACHING, 2)
    _warm(pool, prompts)
    return ref, pool, _sessions(pool, prompts)


@pytest.mark.cuda
def test_lane_reassignment_and_four_sessions_on_two_lanes():
    ref, pool, ss = _served_teaching()
    got = {}
    lanes = {0: [0, 1, 1, 0], 1: [1, 0, 0, 1], 2: [0, 0, 1, 1], 3: [1, 1, 0, 0]}  # every session changes lane
    for k in range(CHUNKS):
        for i in (0, 1, 2, 3):
            r = pool.stream(ss[i], _tokens(i, k), lane=lanes[i][k])
            got[i, k] = _digest(r.output, r.mel)
    assert got == ref
    assert pool.invalidations() == 0


@pytest.mark.cuda
def test_lane_pointer_guard_fires_when_its_state_moves():
    ref, pool, ss = _served_teaching()
    got = {}
    for k in range(CHUNKS):
        if k == 2:  # lane 1's conformer carry moves: its flow graph must not read the old address
            toys.swap_conformer_carry(pool.lanes[1].runtime)
        with LaneExecutor(pool) as ex:
            futs = {i: ex.submit(ss[i], _tokens(i, k)) for i in (0, 1)}
            for i, f in futs.items():
                r = f.result(timeout=300)
                got[i, k] = _digest(r.output, r.mel)
    assert got == {key: ref[key] for key in got}
    c = pool.counters()
    assert c[c["lane"] == 1]["invalidations"].sum() == 1
    assert c[c["lane"] == 0]["invalidations"].sum() == 0
    inval = [e for e in pool.lanes[1].runtime.engines["flow_chunk"].events if e["kind"] == "invalidation"]
    assert len(inval) == 1 and inval[0]["detail"] == "aliased input moved"


@pytest.mark.cuda
def test_host_split_on_cuda_lanes_keeps_chunks_exact_and_reads_launches_and_device_spans():
    """The lanes-limiter's timer on CUDA lanes: chunks equal solo B0, every replay a timed graph launch, each chunk
    a device span from its lane's events (cadencelab.bench.lanes_split)."""
    from cadencelab.bench.lanes_split import HostSplit

    ref, pool, ss = _served_teaching()
    split = HostSplit(pool)
    split.start()
    got = {}
    with LaneExecutor(pool) as ex:
        for k in range(CHUNKS):
            futs = {i: ex.submit(ss[i], _tokens(i, k)) for i in range(len(SEEDS))}
            for i, f in futs.items():
                r = f.result(timeout=300)
                got[i, k] = _digest(r.output, r.mel)
    rows = split.rows()
    split.remove()
    assert got == ref
    assert len(rows) == len(SEEDS) * CHUNKS and len(split.launches) >= len(rows)
    assert all(r["launch_ms"] > 0 and r["dev_end_ms"] > r["dev_start_ms"] >= 0 for r in rows)
