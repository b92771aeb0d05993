"""Sessions on CUDA graphs: SRc serving interleaved sessions through one set of captured graphs.

Every test needs a CUDA device (``@pytest.mark.cuda``; skipped by conftest.py without one).
"""

from __future__ import annotations

import hashlib

import pytest
import torch

from cadencelab.adapters.token2wav import REAL, TEACHING, build_token2wav, make_prompt
from cadencelab.adapters.token2wav.runtime import Token2wavRuntime, pin_determinism, runtime_envelope
from cadencelab.serving.sessions import SessionManager

SEEDS = (21, 22, 23)
CHUNKS = 4  # estimator extents 302, 352, 402, 402: every flow class, captured once, replayed by every session


def _tokens(i: int, k: int) -> list[int]:
    g = torch.Generator().manual_seed(200 + i)
    buf = [4218] * 3 + torch.randint(0, 6561, (25 * CHUNKS + 3,), generator=g).tolist()
    return buf[25 * k: 25 * k + 28]


def _digest(pcm: bytes, mel: torch.Tensor) -> tuple[str, str]:
    return hashlib.sha256(pcm).hexdigest(), hashlib.sha256(mel.float().cpu().numpy().tobytes()).hexdigest()


def _runtime(cfg, arm: str) -> Token2wavRuntime:
    flow, hift = build_token2wav(cfg, 0, device="cuda", envelope=runtime_envelope(arm))
    return Token2wavRuntime(flow, hift, "cuda", arm, cfg=cfg, backend="cuda" if arm != "B0" else "auto")


def _solo_b0(cfg, prompts) -> dict:
    rt = _runtime(cfg, "B0")
    out = {}
    for i, seed in enumerate(SEEDS):
        torch.manual_seed(seed)
        rt.set_stream_cache(prompts[i % len(prompts)])
        for k in range(CHUNKS):
            out[i, k] = _digest(rt.stream(_tokens(i, k)), rt.last_mel)
    del rt
    torch.cuda.empty_cache()
    return out


@pytest.mark.cuda
@pytest.mark.parametrize("cfg", [TEACHING, REAL], ids=["teaching", "real"])
def test_src_sessions_on_graphs_equal_solo_b0(cfg):
    pin_determinism()
    prompts = [make_prompt(cfg, 40 + p, "cuda") for p in range(2)]
    ref = _solo_b0(cfg, prompts)
    m = SessionManager(_runtime(cfg, "SRc"))
    ss = [m.open(i, prompts[i % 2], seed) for i, seed in enumerate(SEEDS)]
    got, captures = {}, []
    for k in range(CHUNKS):
        for i in (0, 1, 2):
            torch.randn(5, device="cuda")  # foreign draws between chunks do not reach any session
            got[i, k] = _digest(m.stream(ss[i], _tokens(i, k)), ss[i].last_mel)
            torch.cuda.synchronize()
            assert m.swap_ms() >= 0.0
        captures.append(m.captures())
    assert got == ref
    c = m.rt.counters()
    flow = c[c["engine"] == "flow_chunk"]
    voc = c[c["engine"] == "vocoder_core"]
    assert (flow["replays"] > 0).sum() >= 3, m.rt.summaries()  # sessions 1 and 2 replay what session 0 captured
    assert (voc["rng"] == "device").any() and (voc["replays"] > 0).any(), m.rt.summaries()
    assert captures[-1] == captures[-2], "switching sessions re-captured a graph"
    assert c["captures"].max() == 1 and c["invalidations"].sum() == 0 and m.invalidations() == 0
    assert len(m.swaps) >= 3 * CHUNKS - 1
    del m
    torch.cuda.empty_cache()


@pytest.mark.cuda
def test_b0_sessions_equal_solo_b0_cuda():
    pin_determinism()
    prompts = [make_prompt(TEACHING, 40 + p, "cuda") for p in range(2)]
    ref = _solo_b0(TEACHING, prompts)
    m = SessionManager(_runtime(TEACHING, "B0"))
    templates = [m.open(-1 - p, pr, 0) for p, pr in enumerate(prompts)]
    ss = [m.fork(templates[i % 2], i, seed) for i, seed in enumerate(SEEDS)]
    got = {}
    for k in range(CHUNKS):
        for i in (2, 0, 1):
            got[i, k] = _digest(m.stream(ss[i], _tokens(i, k)), ss[i].last_mel)
    assert got == ref


@pytest.mark.cuda
def test_bench_sessions_cuda_smoke(tmp_path):
    from cadencelab.bench import sessions as study

    cfg = study.SessionsConfig(config="teaching", device="cuda", sessions=(1, 2, 4), max_sessions=4,
                               speak_seconds=2, mixed_seconds=2, turn_seconds=1, prompts=2, processes=False,
                               time_budget_s=120.0, out=str(tmp_path))
    res = study.run_study(cfg, progress=print)
    s = res["summary"]
    assert s["all_checked_chunks_exact"] and s["chunks_checked"] == s["chunks"], s
    assert s["recaptures_after_warmup"]["SRc"] == 0 and s["invalidations"]["SRc"] == 0
    cap = res["capacity"]
    assert all(r["peak_bytes"] for r in cap if not r["skipped"])
