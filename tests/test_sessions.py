"""Token2wav session manager and the ``sessions`` study on the CPU (teaching config, eager replay backend)."""

from __future__ import annotations

import hashlib

import pandas as pd
import pytest
import torch

from cadencelab.adapters.token2wav import TEACHING, build_token2wav, make_prompt
from cadencelab.adapters.token2wav.runtime import Token2wavRuntime, runtime_envelope
from cadencelab.serving.sessions import SessionManager, declared_state_bytes
from cadencelab.bench import session_serving as serving
from cadencelab.bench import sessions as study
from sizes import CPU_STEPS

SEEDS = (11, 12, 13)


def _tokens(i: int, k: int) -> list[int]:
    g = torch.Generator().manual_seed(100 + i)
    buf = [4218] * 3 + torch.randint(0, 6561, (25 * 4,), generator=g).tolist()
    return buf[25 * k: 25 * k + 28]


def _digest(pcm: bytes, mel: torch.Tensor) -> tuple[str, str]:
    return hashlib.sha256(pcm).hexdigest(), hashlib.sha256(mel.float().cpu().numpy().tobytes()).hexdigest()


def _runtime(arm: str) -> Token2wavRuntime:
    flow, hift = build_token2wav(TEACHING, 0, envelope=runtime_envelope(arm))
    return Token2wavRuntime(flow, hift, "cpu", arm, cfg=TEACHING, backend="eager")


@pytest.fixture(scope="module")
def prompts():
    return [make_prompt(TEACHING, 30 + p) for p in range(2)]


@pytest.fixture(scope="module")
def solo(prompts):
    """Each session alone through B0: seeded at its turn start, primed, 3 chunks (plus a flush for session 0)."""
    rt = _runtime("B0")
    out = {}
    for i, seed in enumerate(SEEDS):
        torch.manual_seed(seed)
        rt.set_stream_cache(prompts[i % 2])
        for k in range(3):
            out[i, k] = _digest(rt.stream(_tokens(i, k)), rt.last_mel)
    return out


ORDER = [(2, 0), (0, 0), (1, 0), (0, 1), (0, 2), (2, 1), (1, 1), (2, 2), (1, 2)]


@pytest.mark.parametrize("arm", ["B0", "SRc", "Rc", "SR"])
def test_interleaved_sessions_equal_solo_b0(arm, prompts, solo):
    m = SessionManager(_runtime(arm))
    ss = [m.open(i, prompts[i % 2], seed) for i, seed in enumerate(SEEDS)]
    got = {}
    for i, k in ORDER:
        torch.randn(7)  # someone else drawing from the host generator between chunks changes nothing
        got[i, k] = _digest(m.stream(ss[i], _tokens(i, k)), ss[i].last_mel)
    assert got == solo
    assert len(m.swaps) >= 6
    assert m.invalidations() == 0
    if arm != "B0":
        assert m.rt.counters()["replays"].sum() > 0  # admitted calls went through the shared engines


@pytest.mark.parametrize("arm", ["B0", "SRc", "Rc"])
def test_forked_sessions_equal_primed_ones(arm, prompts, solo):
    m = SessionManager(_runtime(arm))
    templates = [m.open(-1 - p, pr, 0) for p, pr in enumerate(prompts)]
    ss = [m.fork(templates[i % 2], i, seed) for i, seed in enumerate(SEEDS)]
    got = {(i, k): _digest(m.stream(ss[i], _tokens(i, k)), ss[i].last_mel) for i, k in ORDER}
    assert got == solo
    with pytest.raises(ValueError, match="already open"):
        m.fork(templates[0], 0, 1)
    with pytest.raises(ValueError, match="streamed"):
        m.fork(ss[0], 99, 1)


def test_state_isolation_and_declared_bytes(prompts):
    rt = _runtime("SRc")
    m = SessionManager(rt)
    a, b = m.open(0, prompts[0], 1), m.open(1, prompts[1], 2)
    m.stream(a, _tokens(0, 0))
    m.park()
    before = {k: v.clone() for k, v in a.state.items()}
    host = dict(a.host)
    for k in range(3):
        m.stream(b, _tokens(1, k))
    m.park()
    assert a.host == host
    assert all(torch.equal(before[k], a.state[k]) for k in before)  # b's chunks never touched a's snapshot
    assert not torch.equal(a.state["estimator_att_cache"], b.state["estimator_att_cache"])
    declared = declared_state_bytes(rt.decl)
    assert m.declared_state_bytes() == declared
    spk = rt.spk.numel() * rt.spk.element_size()
    assert a.state_bytes() == declared + spk + a.rng.nbytes()  # a session holds its declared state, nothing more
    m.close(a)
    with pytest.raises(ValueError, match="closed"):
        m.stream(a, _tokens(0, 1))
    assert m.state_bytes() == {1: b.state_bytes()}


def test_b0_sessions_own_their_solver_views(prompts):
    rt = _runtime("B0")
    m = SessionManager(rt)
    a, b = m.open(0, prompts[0], 1), m.open(1, prompts[1], 2)
    m.stream(a, _tokens(0, 0))
    m.stream(b, _tokens(1, 0))  # a was parked: its views of the shared solver buffers were cloned
    shared = {rt.flow.decoder.att_cache_buffer.untyped_storage().data_ptr(),
              rt.flow.decoder.cnn_cache_buffer.untyped_storage().data_ptr()}
    assert all(t.untyped_storage().data_ptr() not in shared for t in a.state.values())


def test_stock_swap_copies_what_the_runtime_reuses(prompts):
    """An engine that hands out graph memory without copying it (R's encoder, Rc's flow chunk on CUDA)
    names those storages; parking a session then copies such tensors instead of keeping them."""
    rt = _runtime("B0")
    m = SessionManager(rt)
    a = m.open(0, prompts[0], 1)
    m.stream(a, _tokens(0, 0))
    reused = rt.stream_cache["conformer_att_cache"]

    class UncloningEngine:
        def output_storages(self):
            return {reused.untyped_storage().data_ptr()}

    rt.engines["uncloned"] = UncloningEngine()
    try:
        m.park()
    finally:
        del rt.engines["uncloned"]
    kept = a.state["conformer_att_cache"]
    assert kept is not reused and kept.untyped_storage().data_ptr() != reused.untyped_storage().data_ptr()
    assert torch.equal(kept, reused)
    assert a.state["conformer_cnn_cache"] is not None


def test_schedule_and_workloads():
    cfg = study.SessionsConfig(device="cpu", config="teaching", mixed_seconds=4, speak_seconds=3)
    heavy = serving.schedule(cfg, "speak_heavy", 4)
    assert len(heavy) == 12 and heavy[:4] == [(0, 0, 0), (0, 1, 0), (0, 2, 0), (0, 3, 0)]
    mixed = serving.schedule(cfg, "mixed", 8)
    per_second = [sum(1 for t, _, _ in mixed if t == s) for s in range(4)]
    assert per_second == [4, 4, 4, 4]  # half the sessions speak in any second
    assert serving.chunks_needed([dict(session=i, chunk=k) for _, i, k in mixed]) == {i: 2 for i in range(8)}
    # a session's k-th chunk is the same whatever the workload or N
    assert serving.session_chunk(cfg, 3, 1) == serving.session_chunk(cfg, 3, 1)
    assert serving.session_chunk(cfg, 3, 1)[:3] != [4218] * 3 and serving.session_chunk(cfg, 3, 0)[:3] == [4218] * 3
    with pytest.raises(ValueError, match="workloads"):
        study.SessionsConfig(workloads=("bursty",))


class _FakeServer:
    """Chunks take ``service`` s of virtual service (``slow_service`` from N = ``slow_at``); OOM from ``oom_at``."""

    arm = "SRc"
    chunk_s = 0.0

    def __init__(self, cfg, oom_at=None, slow_at=None, service=0.3, slow_service=0.6):
        self.cfg, self.recovered, self.ran = cfg, 0, []
        self.oom_at, self.slow_at, self.service, self.slow_service = oom_at, slow_at, service, slow_service

    def run(self, workload, n):
        self.ran.append((self.cfg.arrivals[0], workload, n))
        if self.oom_at is not None and n >= self.oom_at:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (fake)")
        svc = self.slow_service if self.slow_at is not None and n >= self.slow_at else self.service
        rows, clock = [], 0.0
        for t, i, k in serving.schedule(self.cfg, workload, n):
            at = serving.arrival(self.cfg, t, i, n)
            clock = max(clock, at) + svc
            rows.append(dict(arm=self.arm, workload=workload, sessions=n, session=i, chunk=k, arrival_s=at,
                             start_s=clock - svc, completion_s=clock, latency_ms=(clock - at) * 1e3,
                             service_ms=svc * 1e3, audio_s=1.0, swap_bytes=10, swap_ms=0.1, sha_i16="x", sha_mel="y"))
        return dict(arm=self.arm, workload=workload, sessions=n, rows=rows, peak_bytes=1000 + 100 * n, oom=False,
                    state_bytes_per_session=100, captures=3, invalidations=0)

    def estimate_s(self, workload, n):
        return self.chunk_s * len(serving.schedule(self.cfg, workload, n))

    def load(self, workload, n):
        return 0.0

    def recover(self):
        self.recovered += 1


def _sweep(cfg, server, deadline=1e18, owed=None):
    runs = []
    sweeps = study.sweep_arm(server, cfg, deadline, runs.append, progress=lambda m: None, owed=owed)
    return runs, sweeps


def test_out_of_memory_is_a_row_and_a_break():
    cfg = study.SessionsConfig(device="cpu", config="teaching", sessions=(1, 2, 3, 4, 6, 8), speak_seconds=2,
                               workloads=("speak_heavy",))
    server = _FakeServer(cfg, oom_at=4)
    runs, sweeps = _sweep(cfg, server)
    assert [r["sessions"] for r in runs] == [1, 2, 3, 4]  # 3 holds (0.9 s), 4 is out of memory: the break
    assert runs[-1]["oom"] and runs[-1]["verdict"] == "oom" and "out of memory" in runs[-1]["error"]
    assert server.recovered == 1 and sweeps["aligned", "speak_heavy"].bracket == (3, 4)
    refs = [dict(kind="reference", session=i, chunk=k, ref_sha_i16="x", ref_sha_mel="y")
            for i in range(3) for k in range(2)]
    res = study.analyse(cfg, {"SRc": [dict(kind="run", **r) for r in runs] + refs}, {}, {})
    cap = pd.DataFrame(res["capacity"])
    assert cap.loc[cap["sessions"] == 4, "oom"].item() and cap.loc[cap["sessions"] == 3, "all_hold"].item()
    assert res["summary"]["max_sessions_at_cadence_SRc"]["speak_heavy"] == 3
    assert res["summary"]["capacity_bound"]["SRc"]["speak_heavy"] == "exact"
    assert res["summary"]["capacity_bracket"]["SRc"]["speak_heavy"] == [3, 4]
    assert res["summary"]["peak_bytes_per_added_session"]["SRc"] == pytest.approx(100.0)
    assert res["summary"]["all_checked_chunks_exact"]
    assert "OUT OF MEMORY" in study.table(dict(res, failures={}))


def test_extra_points_run_past_the_break():
    cfg = study.SessionsConfig(device="cpu", config="teaching", sessions=(1, 2, 3, 4, 6, 8), speak_seconds=2,
                               workloads=("speak_heavy",), extra_points=1)
    runs, sweeps = _sweep(cfg, _FakeServer(cfg, slow_at=3))
    assert [r["sessions"] for r in runs] == [1, 2, 3, 4]  # 3 breaks (1.8 s), 4 shows the break, 6 is not run
    assert sweeps["aligned", "speak_heavy"].bracket == (2, 3)


def test_the_sweep_grows_past_the_list_to_the_break_then_bisects():
    """Nothing listed breaks: N doubles past the list until it does, then bisection to the resolution."""
    cfg = study.SessionsConfig(device="cpu", config="teaching", sessions=(1, 2), speak_seconds=2,
                               workloads=("speak_heavy",), resolution=0.0)
    runs, sweeps = _sweep(cfg, _FakeServer(cfg, slow_at=11, service=0.01, slow_service=1.0))  # holds up to 10
    assert [r["sessions"] for r in runs] == [1, 2, 4, 8, 16, 12, 10, 11]
    assert sweeps["aligned", "speak_heavy"].bracket == (10, 11)
    res = study.analyse(cfg, {"SRc": [dict(kind="run", **r) for r in runs]}, {}, {})
    assert res["summary"]["max_sessions_at_cadence_SRc"]["speak_heavy"] == 10
    assert res["summary"]["capacity_bound"]["SRc"]["speak_heavy"] == "exact"
    assert res["summary"]["capacity_bracket"]["SRc"]["speak_heavy"] == [10, 11]


def test_time_budget_skips_and_says_so():
    cfg = study.SessionsConfig(device="cpu", config="teaching", sessions=(1, 2), speak_seconds=2,
                               workloads=("speak_heavy",))
    server = _FakeServer(cfg)
    server.chunk_s = 1e6
    runs, sweeps = _sweep(cfg, server, deadline=0.0)
    assert len(runs) == 1 and runs[0]["skipped"].startswith("time budget")
    assert sweeps["aligned", "speak_heavy"].stopped and not sweeps["aligned", "speak_heavy"].exact


def test_both_arrival_modes_in_one_server_ascents_first():
    """One server serves every (arrivals, workload) sweep, each with its own arrivals; every ascent runs before
    any bisection; staggered arrivals spread the load so the same service holds more sessions."""
    cfg = study.SessionsConfig(device="cpu", config="teaching", sessions=(1, 2), speak_seconds=2,
                               workloads=("speak_heavy",), arrivals=("aligned", "staggered"), resolution=0.0)
    server = _FakeServer(cfg, service=0.3)
    runs, sweeps = _sweep(cfg, server)
    assert {r["arrivals"] for r in runs} == {"aligned", "staggered"}
    modes = [m for m, _, _ in server.ran]
    first_bisection = min(i for i, (m, _, n) in enumerate(server.ran)
                          if n < max(n2 for m2, _, n2 in server.ran[:i + 1] if m2 == m))
    assert set(modes[:first_bisection]) == {"aligned", "staggered"}  # both ascents before the first bisection
    aligned, staggered = sweeps["aligned", "speak_heavy"], sweeps["staggered", "speak_heavy"]
    assert aligned.bracket == (3, 4)  # 3 chunks at once: the third done at 0.9 s, a fourth at 1.2 s
    assert staggered.exact and staggered.holds > aligned.holds
    for r in runs:  # each run's rows arrive as its mode says
        whole = all(row["arrival_s"] % 1 == 0 for row in r["rows"])
        assert whole == (r["arrivals"] == "aligned") or r["sessions"] == 1


def test_a_point_is_run_only_with_the_references_it_adds():
    """A gated arm's point that fits alone but not with the solo references it would add is skipped."""
    cfg = study.SessionsConfig(device="cpu", config="teaching", sessions=(1, 2, 4), speak_seconds=2,
                               workloads=("speak_heavy",), max_sessions=4)
    import time

    owed = study.OwedVerification({0: 2}, chunk_s=10.0, workers=2)
    assert owed.adds(cfg, "speak_heavy", 1) == 0 and owed.adds(cfg, "speak_heavy", 2) == 2
    assert owed.seconds(2) == pytest.approx(20.0)
    runs, sweeps = _sweep(cfg, _FakeServer(cfg), deadline=time.perf_counter() + 25.0, owed=owed)
    # N=1 adds nothing (10 s owed), N=2 adds 2 chunks (20 s owed), N=4 would owe 40 s: skipped
    assert [(r["sessions"], bool(r.get("skipped"))) for r in runs] == [(1, False), (2, False), (4, True)]
    assert owed.need == {0: 2, 1: 2} and owed.added_chunks == 2


def test_sessions_config_arrivals_and_sweep_fields():
    cfg = study.SessionsConfig(device="cpu", config="teaching", stagger=True)
    assert cfg.arrivals == ("staggered",) and cfg.stagger
    both = study.SessionsConfig(device="cpu", config="teaching", arrivals=("aligned", "staggered"))
    assert not both.stagger and study.result_stem(both, "staggered") == "sessions_staggered"
    assert study.result_stem(both, "aligned") == study.result_stem(cfg, "staggered") == "sessions"
    one = study.for_arrivals(both, "staggered")
    assert one.arrivals == ("staggered",) and one.stagger and serving.arrival(one, 0, 1, 2) == 0.5
    with pytest.raises(ValueError, match="stagger"):
        study.SessionsConfig(device="cpu", config="teaching", stagger=True, arrivals=("aligned", "staggered"))
    with pytest.raises(ValueError, match="arrivals"):
        study.SessionsConfig(device="cpu", config="teaching", arrivals=("bursty",))
    with pytest.raises(ValueError, match="growth"):
        study.SessionsConfig(device="cpu", config="teaching", growth=1.0)
    with pytest.raises(ValueError, match="max_sessions"):
        study.SessionsConfig(device="cpu", config="teaching", sessions=(1, 64), max_sessions=32)
    assert study.arm_order(("SRl", "SRc", "B0", "SRb")) == ["B0", "SRl", "SRc", "SRb"]


def test_bench_smoke_cpu(tmp_path):
    """Both arrival modes served by one process per arm: two result files of the old shape, one set of solo
    references for both (every chunk of B0 and SRc checked), each arm's sweeps of both modes in its info."""
    cfg = study.SessionsConfig(config="teaching", device="cpu", sessions=(1, 2), max_sessions=2, cadence_s=1e6,
                               arrivals=("aligned", "staggered"), speak_seconds=1, mixed_seconds=2, turn_seconds=1,
                               prompts=1, processes=False, time_budget_s=900.0, n_timesteps=CPU_STEPS,
                               out=str(tmp_path))
    results = study.run_studies(cfg, progress=lambda m: None)
    assert list(results) == ["aligned", "staggered"]
    res = results["aligned"]
    for mode, r in results.items():
        s = r["summary"]
        assert s["chunks"] > 0 and s["chunks_checked"] == s["chunks"] and s["all_checked_chunks_exact"], (mode, s)
        assert set(s["max_sessions_at_cadence_B0"]) == {"mixed", "speak_heavy"}
        # nothing broke below the cap: a lower bound, its bracket open above
        assert s["capacity_bound"]["SRc"] == {"mixed": "lower_bound", "speak_heavy": "lower_bound"}
        assert s["capacity_bracket"]["SRc"] == {"mixed": [2, None], "speak_heavy": [2, None]}
        assert r["provenance"]["arrivals"] == mode and r["provenance"]["study"]["arrivals"] == ("aligned", "staggered")
        assert sorted(r["arms"]["SRc"]["sweeps"]) == ["aligned/mixed", "aligned/speak_heavy", "staggered/mixed",
                                                      "staggered/speak_heavy"]
    s = res["summary"]
    assert s["recaptures_after_warmup"] == {"SRc": 0, "B0": 0}
    assert s["declared_state_bytes_per_session"]["SRc"] > 0
    for name in ("sessions.json", "sessions.csv", "sessions_chunks.csv", "sessions_staggered.json",
                 "sessions_staggered.csv", "sessions_staggered_chunks.csv", "runs_SRc.jsonl", "runs_B0.jsonl",
                 "verify.jsonl"):
        assert (tmp_path / name).exists(), name
    staggered = pd.read_csv(tmp_path / "sessions_staggered_chunks.csv")
    aligned = pd.read_csv(tmp_path / "sessions_chunks.csv")
    assert (staggered["arrival_s"] % 1 != 0).any() and (aligned["arrival_s"] % 1 == 0).all()
    # one reference per (session, chunk), streamed once for both modes
    refs = [e for e in study.read_rows(tmp_path / "verify.jsonl") if e["kind"] == "reference"]
    assert len(refs) == len({(e["session"], e["chunk"]) for e in refs}) > 0
    assert "summary:" in study.table(res).splitlines()[-1]
    from cadencelab.viz import capacity_lines

    cap = pd.DataFrame(res["capacity"])
    assert {"arm", "workload", "sessions", "p95_chunk_ms", "peak_MiB", "goodput"} <= set(cap.columns)
    capacity_lines(cap[cap["workload"] == "speak_heavy"])
