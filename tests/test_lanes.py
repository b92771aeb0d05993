"""Lanes on the CPU: routing, the pool lock, weight sharing, and sessions served through a lane pool
equal to each session run alone through B0 (teaching config, eager replay backend)."""

from __future__ import annotations

import hashlib
import threading
import time

import pandas as pd
import pytest
import torch

from cadencelab.adapters.token2wav import TEACHING, build_token2wav, make_prompt
from cadencelab.serving.lanes import LaneExecutor, LaneLock, LanePool, route, share_weights
from cadencelab.adapters.token2wav.runtime import Token2wavRuntime, runtime_envelope
from sizes import CPU_STEPS

SEEDS = (11, 12, 13)
CHUNKS = 3


def _tokens(i: int, k: int) -> list[int]:
    g = torch.Generator().manual_seed(100 + i)
    buf = [4218] * 3 + torch.randint(0, 6561, (25 * 4,), generator=g).tolist()
    return buf[25 * k: 25 * k + 28]


def _digest(pcm: bytes, mel: torch.Tensor) -> tuple[str, str]:
    return hashlib.sha256(pcm).hexdigest(), hashlib.sha256(mel.detach().float().cpu().numpy().tobytes()).hexdigest()


@pytest.fixture(scope="module")
def prompts():
    return [make_prompt(TEACHING, 30 + p) for p in range(2)]


@pytest.fixture(scope="module")
def solo(prompts):
    flow, hift = build_token2wav(TEACHING, 0, envelope=runtime_envelope("B0"))
    rt = Token2wavRuntime(flow, hift, "cpu", "B0", cfg=TEACHING, backend="eager")
    out = {}
    for i, seed in enumerate(SEEDS):
        torch.manual_seed(seed)
        rt.set_stream_cache(prompts[i % 2])
        for k in range(CHUNKS):
            pcm = rt.stream(_tokens(i, k))
            out[i, k] = _digest(pcm, rt.last_mel)
    return out


def _pool(lanes: int) -> LanePool:
    flow, hift = build_token2wav(TEACHING, 0, envelope=runtime_envelope("SRc"))
    return LanePool(flow, hift, "cpu", lanes, "SRc", cfg=TEACHING, backend="eager")


# -- routing -------------------------------------------------------------------------------------------


def test_route_keeps_pending_then_resident_then_least_loaded():
    assert route(2, 0, [0, 0, 5]) == 2  # queued work of the session: stay in order
    assert route(None, 1, [0, 3, 0]) == 1  # resident: no swap
    assert route(None, None, [2, 1, 1]) == 1  # least loaded, lowest index on ties
    with pytest.raises(ValueError, match="lane 4"):
        route(4, None, [0, 0])
    with pytest.raises(ValueError, match="no lanes"):
        route(None, None, [])


def test_lane_lock_exclusive_waits_for_shared_and_upgrade_does_not_deadlock():
    lock, log = LaneLock(), []

    def reader(name, hold):
        with lock.shared():
            log.append(f"{name}+")
            time.sleep(hold)
            log.append(f"{name}-")

    def upgrader():
        with lock.shared():
            with lock.exclusive(held_shared=True):
                log.append("X")
            log.append("U-")

    ts = [threading.Thread(target=reader, args=("a", 0.05)), threading.Thread(target=upgrader)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(5)
    assert not any(t.is_alive() for t in ts)
    assert log.index("X") > log.index("a-")  # the exclusive section waited for the other shared holder
    assert lock.exclusive_entries == 1


def test_share_weights_shares_parameters_and_copies_buffers():
    flow, _ = build_token2wav(TEACHING, 0, envelope=runtime_envelope("SRc"))
    f2 = share_weights(flow)
    for (n, p), (_, q) in zip(flow.named_parameters(), f2.named_parameters()):
        assert p.data_ptr() == q.data_ptr(), n
    for (n, b), (_, c) in zip(flow.named_buffers(), f2.named_buffers()):
        assert b.data_ptr() != c.data_ptr() and torch.equal(b, c), n


def test_pool_refuses_arms_without_chunk_replay_and_state():
    flow, hift = build_token2wav(TEACHING, 0, envelope=runtime_envelope("B0"))
    with pytest.raises(ValueError, match="SRc"):
        LanePool(flow, hift, "cpu", 2, "B0", cfg=TEACHING, backend="eager")
    with pytest.raises(ValueError, match="lanes must be an integer >= 1"):
        LanePool(flow, hift, "cpu", 0, "SRc", cfg=TEACHING, backend="eager")


# -- serving ---------------------------------------------------------------------------------------------


def test_lane_pool_sessions_equal_solo_b0_with_moves(prompts, solo):
    pool = _pool(2)
    templates = [pool.open(-1 - p, pr, 0) for p, pr in enumerate(prompts)]
    ss = [pool.fork(templates[i % 2], i, seed) for i, seed in enumerate(SEEDS)]
    got = {}
    # session 0 moves lane 0 -> 1 -> 0; sessions 1 and 2 share lane 1 (swaps)
    plan = [(0, 0, 0), (1, 0, 1), (2, 0, 1), (0, 1, 1), (1, 1, 1), (2, 1, 0), (0, 2, 0), (2, 2, 1), (1, 2, 1)]
    for i, k, lane in plan:
        r = pool.stream(ss[i], _tokens(i, k), lane=lane)
        assert r.lane == lane and r.sid == i
        got[i, k] = _digest(r.output, r.mel)
    assert got == solo
    assert pool.lanes[0].chunks + pool.lanes[1].chunks == len(plan)
    pool.close(ss[0])
    with pytest.raises(ValueError, match="closed"):
        pool.stream(ss[0], _tokens(0, 0))


def test_lane_executor_serves_every_session_in_order(prompts, solo):
    pool = _pool(2)
    templates = [pool.open(-1 - p, pr, 0) for p, pr in enumerate(prompts)]
    ss = [pool.fork(templates[i % 2], i, seed) for i, seed in enumerate(SEEDS)]
    got, lanes_used = {}, set()
    with LaneExecutor(pool) as ex:
        for k in range(CHUNKS):
            futs = {i: ex.submit(ss[i], _tokens(i, k)) for i in range(len(SEEDS))}
            for i, f in futs.items():
                r = f.result(timeout=120)
                lanes_used.add(r.lane)
                assert r.finished >= r.started >= r.queued
                got[i, k] = _digest(r.output, r.mel)
    assert got == solo
    assert lanes_used == {0, 1}
    assert pool.state_bytes()  # every session parked, snapshots current
    assert all(pool.resident_lane(s) is None for s in ss)


def test_lane_pool_refuses_unknown_and_busy_sessions(prompts):
    pool = _pool(1)
    t = pool.open(-1, prompts[0], 0)
    s = pool.fork(t, 0, 5)
    with pytest.raises(ValueError, match="already open"):
        pool.fork(t, 0, 6)
    pool.stream(s, _tokens(0, 0))
    with pytest.raises(ValueError, match="fork from a freshly primed"):
        pool.fork(s, 9, 1)


def test_sessions_study_lanes_arm_on_cpu(tmp_path):
    """SRl in the study: served in real time, every chunk equal to the session alone through B0."""
    from cadencelab.bench import sessions as study

    cfg = study.SessionsConfig(config="teaching", device="cpu", arms=("SRl", "B0"), workloads=("speak_heavy",),
                               sessions=(2,), max_sessions=2, cadence_s=1e6, speak_seconds=1, mixed_seconds=1,
                               turn_seconds=1, prompts=1, lanes=2, processes=False, time_budget_s=600.0,
                               n_timesteps=CPU_STEPS, out=str(tmp_path))
    res = study.run_study(cfg, progress=lambda m: None)
    s = res["summary"]
    assert not res["failures"], res["failures"]
    assert s["all_checked_chunks_exact"] and s["chunks_checked"] == s["chunks"] > 0, s
    assert s["exactness_reference"]["SRl"] == ["solo_B0"] and s["lanes"] == 2
    cap = [r for r in res["capacity"] if r["arm"] == "SRl" and not r["skipped"]]
    assert cap and all(r["lanes_used"] == min(r["sessions"], 2) for r in cap), cap
    assert all(0.0 <= r["on_time_share"] <= 1.0 and r["host_share"] > 0 for r in cap)
    chunks = pd.read_csv(tmp_path / "sessions_chunks.csv")
    srl = chunks[chunks["arm"] == "SRl"]
    assert srl["lane"].notna().all() and (srl["queue_ms"] >= 0).all()
    assert (srl["completion_s"] >= srl["arrival_s"]).all()


# -- the recorded lanes round -----------------------------------------------------------------------------


def test_union_and_stream_overlap_on_synthetic_intervals():
    from types import SimpleNamespace

    from cadencelab.profile.streams import stream_busy, stream_overlap

    k = pd.DataFrame(dict(start_ns=[0, 10, 0, 10], end_ns=[10, 20, 10, 20], stream=[1, 1, 2, 2], name="k",
                          cat="kernel"))
    side = stream_overlap(SimpleNamespace(kernels=k)).iloc[0]  # two streams fully side by side
    assert side["overlap"] == 2.0 and side["busy_union_ms"] == 20 / 1e6
    k2 = k.assign(start_ns=[0, 10, 20, 30], end_ns=[10, 20, 30, 40])  # taking turns
    assert stream_overlap(SimpleNamespace(kernels=k2)).iloc[0]["overlap"] == 1.0
    assert list(stream_busy(SimpleNamespace(kernels=k2))["stream"]) == [1, 2]
    with pytest.raises(ValueError, match="no device records"):
        stream_busy(SimpleNamespace(kernels=k.iloc[:0]))


def test_recorded_lanes_round_overlaps_two_lanes():
    from cadencelab import viz
    from cadencelab.course import data, frames
    from cadencelab.profile.streams import stream_busy, stream_overlap

    t = data.recorded_trace("SRl", "lanes")
    per = stream_busy(t)
    assert len(per) == 2 and per["ops"].nunique() == 1  # the same graphs replayed on two streams
    o = stream_overlap(t).iloc[0]
    assert 1.2 < o["overlap"] <= 2.0 and o["wall_ms"] < o["busy_sum_ms"]
    w = frames.lanes_window(t)
    assert set(w["stream"]) == {"lane 0", "lane 1"}
    fig = viz.kernel_timeline(w)
    assert fig.data and viz.caption(fig)
    cap = frames.capacity_by_reference("speak_heavy")
    assert "SRl · exact vs solo B0" in set(cap["arm"])
    assert any(a.startswith("SRb · exact vs batched eager") for a in cap["arm"])
