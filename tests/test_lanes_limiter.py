"""The lanes-limiter study on the CPU: the host split changes no chunk and accounts for every part, the analysis
reads synthetic rows as it should, and the study's run path writes its files (teaching config)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from cadencelab.profile.limiter import PARTS, concurrency, host_split, limiter_table, reading
from cadencelab.viz import caption
from cadencelab.viz.limiter import analyse_limiter
from sizes import CPU_STEPS
from test_lanes import CHUNKS, SEEDS, _digest, _pool, _tokens, prompts, solo  # noqa: F401 - fixtures


# -- the analysis on synthetic rows -----------------------------------------------------------------------------

def test_concurrency_union_mean_and_most_at_once():
    c = concurrency([0.0, 0.5, 2.0], [1.0, 1.5, 3.0])  # [0, 1.5] with two overlapping by 0.5, then [2, 3]
    assert c["union_s"] == pytest.approx(2.5) and c["sum_s"] == pytest.approx(3.0)
    assert c["mean"] == pytest.approx(1.2) and c["max"] == 2 and c["span_s"] == pytest.approx(3.0)
    assert concurrency([0.0, 1.0], [1.0, 2.0])["max"] == 1  # touching, not overlapping
    assert concurrency([], [])["intervals"] == 0
    with pytest.raises(ValueError, match="ends before"):
        concurrency([1.0], [0.5])


def _chunk(n, lane, start, launch, wall, dev=None):
    r = {f"{p}_ms": 0.0 for p in PARTS} | {f"{p}_cpu_ms": 0.0 for p in PARTS}
    r.update(sessions=n, lane=lane, start_s=start, end_s=start + wall / 1e3, wall_ms=wall, launch_ms=launch,
             other_ms=wall - launch, classify_ms=1.0, classify_cpu_ms=0.25)
    r["other_ms"] -= 1.0
    if dev is not None:
        r["dev_start_ms"], r["dev_end_ms"] = dev
    return r


def test_limiter_table_reads_serialized_launches_and_a_busy_device():
    # N = 1: one launch of 20 ms; N = 4: four launches side by side, each 4x slower: they take turns in effect
    ch = [_chunk(1, 0, 0.0, 20.0, 30.0)] + [_chunk(4, i, 1.0, 80.0, 85.0) for i in range(4)]
    la = [dict(sessions=1, start_s=0.0, end_s=0.02, wall_ms=20.0)]
    la += [dict(sessions=4, start_s=1.0, end_s=1.08, wall_ms=80.0) for _ in range(4)]
    tab, fig = analyse_limiter(pd.DataFrame(ch), pd.DataFrame(la))
    r = tab.set_index("sessions").loc[4]
    assert r["launch_concurrency"] == pytest.approx(4.0) and r["launch_slowdown"] == pytest.approx(4.0)
    assert r["launch_speedup"] == pytest.approx(1.0) and r["launch_busy_share"] == pytest.approx(80 / 85)
    assert r["python_wait_ms"] == pytest.approx(0.75)
    sums = sum(r[f"{p}_ms"] for p in PARTS if p != "lock_wait")
    assert sums == pytest.approx(r["wall_ms"])  # the parts add up to the host window
    assert r["reading"].startswith("host launch path")
    assert len(fig.data) == len(PARTS) + 1 and "launch" in caption(fig)
    busy = reading(dict(r), busy_share=0.95)
    assert busy.startswith("device") and "profiled" in busy
    # device spans covering the window: the device reads as saturated without a profile
    ch2 = [_chunk(2, i, 0.0, 5.0, 100.0, dev=(0.0, 100.0)) for i in range(2)]
    la2 = [dict(sessions=2, start_s=0.0, end_s=0.005, wall_ms=5.0)]
    r2 = limiter_table(pd.DataFrame(ch2), pd.DataFrame(la2), solo=2).iloc[0]
    assert r2["device_share"] == pytest.approx(1.0) and r2["device_concurrency"] == pytest.approx(2.0)
    assert r2["reading"].startswith("device")


def test_host_split_names_missing_columns():
    with pytest.raises(ValueError, match="launch_ms"):
        host_split(pd.DataFrame([dict(sessions=1, wall_ms=1.0)]))


# -- the split on a lane pool ------------------------------------------------------------------------------------

def test_host_split_changes_no_chunk_and_accounts_for_every_part(prompts, solo):  # noqa: F811
    from cadencelab.serving.lanes import LaneExecutor
    from cadencelab.bench.lanes_split import HostSplit

    pool = _pool(2)
    templates = [pool.open(-1 - p, pr, 0) for p, pr in enumerate(prompts)]
    ss = [pool.fork(templates[i % 2], i, seed) for i, seed in enumerate(SEEDS)]
    split = HostSplit(pool)
    split.start()
    got = {}
    with LaneExecutor(pool) as ex:
        for k in range(CHUNKS):
            futs = {i: ex.submit(ss[i], _tokens(i, k)) for i in range(len(SEEDS))}
            for i, f in futs.items():
                r = f.result(timeout=120)
                got[i, k] = _digest(r.output, r.mel)
    assert got == solo  # timed chunks equal the sessions alone through B0
    rows = split.rows()
    assert len(rows) == len(SEEDS) * CHUNKS
    assert sorted((r["session"], r["chunk"]) for r in rows) == sorted(got)
    for r in rows:
        assert r["lane"] in (0, 1) and r["wall_ms"] > 0 and r["other_ms"] >= 0
        assert r["classify_ms"] > 0 and r["signature_ms"] > 0 and r["lock_wait_ms"] > 0
        assert sum(r[f"{p}_ms"] for p in PARTS[1:-1]) <= r["wall_ms"] + 1e-6
    replays = sum(int(e.counters()["replays"].sum()) for ln in pool.lanes for e in ln.runtime.engines.values())
    assert len(split.launches) == replays > 0 and {x["lane"] for x in split.launches} <= {0, 1}
    split.remove()
    assert all("stream" not in vars(ln.manager) and ln.runtime.engines["flow_chunk"].timer is None
               for ln in pool.lanes)
    assert "shared" not in vars(pool.lock)


def test_lanes_limiter_study_runs_on_cpu(tmp_path):
    from cadencelab.bench.lanes_limiter import LimiterConfig, run_study, table

    cfg = LimiterConfig(config="teaching", device="cpu", sessions=(2,), lanes=1, speak_seconds=1, prompts=1,
                        untimed=False, profile=False, n_timesteps=CPU_STEPS, out=str(tmp_path))
    res = run_study(cfg, progress=lambda m: None)
    assert [r["sessions"] for r in res["table"]] == [1, 2]
    assert res["provenance"]["torch"] and "git_commit" in res["provenance"]
    saved = json.loads((tmp_path / "lanes_limiter.json").read_text())
    assert saved["table"][1]["chunks"] == 2 and saved["profiled"] is None
    ch = pd.read_csv(tmp_path / "lanes_limiter_chunks.csv")
    assert set(ch["sessions"]) == {1, 2} and (ch["launch_ms"] > 0).all()
    assert "reading" in table(res)


# -- SRl from several processes (--lane-processes) -------------------------------------------------------------

def test_lanes_split_over_processes():
    from cadencelab.bench.sessions_lane_processes import lanes_of

    assert lanes_of(16, 2) == [8, 8] and lanes_of(5, 3) == [2, 2, 1] and lanes_of(2, 2) == [1, 1]
    with pytest.raises(ValueError, match="lane-processes"):
        lanes_of(2, 3)


class _FakeProc:
    """A lane process's pipe, answering a run with one row per session it was given."""

    def __init__(self, k, oom=False):
        self.k, self.oom, self.sent, self.arm = k, oom, [], f"SRl/{k}"
        self.conn = self

    def send(self, msg):
        self.sent.append(msg)

    def wait(self, timeout):
        _, cfg, workload, n, only, start_at = self.sent[-1]
        rows = [dict(session=i, chunk=0, arrival_s=0.0, lane=0) for i in only]
        return "ok", dict(rows=rows, oom=self.oom, peak_bytes=100 + self.k, lanes_used=1, captures=2,
                          state_bytes_per_session=7, error="out of memory" if self.oom else None)


def test_lane_process_server_merges_the_processes_rows():
    from cadencelab.bench.sessions_lane_processes import LaneProcessServer

    srv = LaneProcessServer.__new__(LaneProcessServer)
    srv.arm, srv.cfg, srv.split, srv.chunk_s = "SRl", type("C", (), dict(speak_seconds=1, workloads=("speak_heavy",),
                                                                          mixed_seconds=1))(), [2, 1], 0.01
    srv.procs = [_FakeProc(0), _FakeProc(1)]
    srv.estimate_s = lambda w, n: 1.0
    out = srv.run("speak_heavy", 5)
    assert [m[4] for m in (p.sent[-1] for p in srv.procs)] == [[0, 2, 4], [1, 3]]  # session i in process i % P
    assert len({p.sent[-1][5] for p in srv.procs}) == 1  # one start instant
    assert sorted(r["session"] for r in out["rows"]) == [0, 1, 2, 3, 4]
    assert {r["session"]: (r["process"], r["lane"]) for r in out["rows"]}[3] == (1, 2)  # lanes numbered across
    assert out["peak_bytes"] == 201 and out["captures"] == 4 and not out["oom"]
    srv.procs[1] = _FakeProc(1, oom=True)
    out = srv.run("speak_heavy", 2)
    assert out["oom"] and out["rows"] == [] and out["peak_bytes"] is None and "out of memory" in out["error"]


def test_waves_give_each_arrival_waves_rate_and_host_cores_per_process():
    from cadencelab.profile.limiter import waves

    rows = pd.DataFrame(dict(sessions=[4] * 6, arrival_s=[0, 0, 0, 0, 1, 1], completion_s=[0.1, 0.2, 0.3, 0.4, 1.2, 1.5],
                             host_ms=[100, 100, 100, 100, 50, 50], process=[0, 1, 0, 1, 0, 1]))
    w = waves(rows)
    assert list(w["wave"]) == [0, 1] and list(w["chunks"]) == [4, 2]
    assert w.loc[0, "span_ms"] == pytest.approx(400) and w.loc[0, "chunks_per_s"] == pytest.approx(10)
    assert w.loc[0, "host_cores"] == pytest.approx(1.0) and w.loc[0, "host_cores_per_process"] == pytest.approx(0.5)
    assert w.loc[1, "chunks_per_s"] == pytest.approx(4) and w.loc[1, "processes"] == 2
    with pytest.raises(ValueError, match="host_ms"):
        waves(rows.drop(columns="host_ms"))


def test_device_across_unions_every_processes_kernels_in_the_window():
    from cadencelab.profile.limiter import device_across

    k = pd.DataFrame(dict(process=[0, 0, 1, 1], start_ns=[-50, 50, 25, 300], end_ns=[40, 100, 75, 400]))
    d = device_across(k, 0, 200)  # the last kernel lies outside; the first is clipped to the window
    assert d["kernels"] == 3 and d["window_ms"] == pytest.approx(200e-6)
    assert d["busy_share"] == pytest.approx(0.5) and d["max_at_once"] == 2
    assert d["at_once"] == pytest.approx((40 + 50 + 50) / 100)
    assert d["busy_share_by_process"] == {0: pytest.approx(0.45), 1: pytest.approx(0.25)}
    with pytest.raises(ValueError, match="empty"):
        device_across(k, 5, 5)


def test_next_wave_fits_the_set_ups_in_the_free_memory_and_fails_named_when_none_fits():
    from cadencelab.bench.sessions_lane_processes import CONTEXT_ALLOWANCE, next_wave

    gib = 1 << 30
    assert next_wave(7, None, 1, 8) == 7  # off CUDA: no reading, all at once
    reading = dict(setup_peak_bytes=9 * gib, free_bytes=70 * gib)
    assert next_wave(7, reading, 1, 8) == 70 * gib // (9 * gib + CONTEXT_ALLOWANCE) == 7
    assert next_wave(3, reading, 5, 8) == 3
    assert next_wave(7, dict(reading, free_bytes=25 * gib), 1, 8) == 2
    with pytest.raises(RuntimeError, match=r"3 of 8 set up; .* about 10\.0 GiB .* 5\.0 GiB free: use fewer"):
        next_wave(5, dict(reading, free_bytes=5 * gib), 3, 8)


class _Staged:
    """A lane process as the parent sees it during set-up: staged, then ready at go; its reading of the device
    is the card's free memory, less every ready process's held bytes."""

    def __init__(self, k, card, peak):
        self.k, self.card, self.peak, self.arm, self.state, self.asked = k, card, peak, f"SRl/{k}", "staged", []

    def go(self):
        self.state = "go"

    def wait(self, timeout):
        if self.state == "staged":
            return "staged", dict(stage_s=0.1)
        self.card["ready"] += 1
        return "ready", dict(chunk_s=0.01, memory=self.ask(("memory",), timeout)[1])

    def ask(self, msg, timeout):
        self.asked.append(msg)
        free = self.card["total"] - self.card["ready"] * self.card["held"]
        return "ok", dict(setup_peak_bytes=self.peak, held_bytes=self.card["held"], free_bytes=free,
                          total_bytes=self.card["total"])


def test_lane_processes_set_up_in_waves_sized_by_the_first_ones_peak():
    """On CUDA process 0 sets up alone; then as many at once as the free memory holds at its peak, asked anew
    after each wave; every process is set up in order. Off CUDA all at once."""
    from cadencelab.bench.sessions_lane_processes import LaneProcessServer

    gib = 1 << 30
    card = dict(total=80 * gib, held=6 * gib, ready=0)
    srv = LaneProcessServer.__new__(LaneProcessServer)
    srv.cuda, srv.ready, srv.waves = True, [], []
    srv.procs = [_Staged(k, card, 15 * gib) for k in range(8)]
    srv._set_up(10.0)
    assert srv.waves == [1, 4, 3] and len(srv.ready) == 8  # 74 GiB free, then 50, at a 16 GiB need
    assert all(p.state == "go" for p in srv.procs) and srv.procs[4].asked == [("memory",)] * 2
    card.update(held=10 * gib, ready=0)  # free 70, 30, 20, then 10 GiB: the eighth cannot set up
    srv.ready, srv.waves = [], []
    srv.procs = [_Staged(k, card, 15 * gib) for k in range(8)]
    with pytest.raises(RuntimeError, match="7 of 8 set up"):
        srv._set_up(10.0)
    assert srv.waves == [1, 4, 1, 1] and srv.procs[7].state == "staged"
    card["ready"], srv.cuda, srv.ready, srv.waves = 0, False, [], []
    srv.procs = [_Staged(k, card, 15 * gib) for k in range(3)]
    srv._set_up(10.0)
    assert srv.waves == [3]


def test_lane_process_server_profile_puts_every_processes_kernels_on_one_clock():
    import numpy as np

    from cadencelab.bench.sessions_lane_processes import LaneProcessServer

    class _Profiled(_FakeProc):
        def wait(self, timeout):
            kind, res = super().wait(timeout)
            res["kernels"] = dict(start_ns=np.array([10, 20]) + self.k, end_ns=np.array([15, 30]) + self.k)
            return kind, res

    srv = LaneProcessServer.__new__(LaneProcessServer)
    srv.arm, srv.cfg, srv.split, srv.chunk_s = "SRl", type("C", (), dict(speak_seconds=1, workloads=("speak_heavy",),
                                                                          mixed_seconds=1))(), [1, 1], 0.01
    srv.procs = [_Profiled(0), _Profiled(1)]
    srv.estimate_s = lambda w, n: 1.0
    out = srv.run("speak_heavy", 2, profile=True)
    assert [p.sent[-1][0] for p in srv.procs] == ["profile", "profile"]
    assert out["kernels"]["process"].tolist() == [0, 0, 1, 1] and out["kernels"]["start_ns"].tolist() == [10, 20, 11, 21]
    assert out["start_ns"] == int(srv.procs[0].sent[-1][5] * 1e9)
    assert "kernels" not in srv.run("speak_heavy", 2)


def test_a_lane_process_opens_only_the_templates_its_sessions_fork():
    """Process 1 of 2 serves the odd sessions: of 4 prompts it opens 1 and 3 (session i takes prompt i % 4); its
    warm-up forks those, and a session it does not serve has no template there."""
    from cadencelab.bench import sessions as study
    from cadencelab.bench.common import built_checkpoint
    from cadencelab.bench.sessions_lanes import LaneArmServer

    cfg = study.SessionsConfig(config="teaching", device="cpu", arms=("SRl",), lanes=1, prompts=4, speak_seconds=1,
                               n_timesteps=CPU_STEPS, processes=False)
    with built_checkpoint(cfg.config, cfg.seed, lambda m: None) as ckpt:
        part, whole = LaneArmServer("SRl", ckpt, cfg, share=(1, 2)), LaneArmServer("SRl", ckpt, cfg)
    assert sorted(part.templates) == [1, 3] and sorted(whole.templates) == [0, 1, 2, 3]
    assert part._template(5) is part.templates[1] and part._spare(1) is part.templates[3]
    assert part.template_bytes * 2 == whole.template_bytes
    with pytest.raises(KeyError, match=r"session 2 takes prompt 2, .*prompts \[1, 3\]"):
        part._template(2)


def test_a_real_lane_process_stages_then_answers_its_memory_reading():
    """The worker's wiring: imports staged, set up at go, and a ``memory`` request answered (None off CUDA)."""
    from cadencelab.bench import sessions as study
    from cadencelab.bench.common import built_checkpoint
    from cadencelab.bench.sessions_lane_processes import LaneProcessServer

    cfg = study.SessionsConfig(config="teaching", device="cpu", arms=("SRl",), lanes=1, prompts=1, speak_seconds=1,
                               n_timesteps=CPU_STEPS, processes=False)
    with built_checkpoint(cfg.config, cfg.seed, lambda m: None) as ckpt:
        srv = LaneProcessServer("SRl", ckpt, cfg)
        try:
            assert srv.waves == [1] and srv.ready[0]["memory"] is None
            assert srv.procs[0].ask(("memory",), 60.0) == ("ok", None)
            assert srv.info()["setup_memory"] == [None]
        finally:
            srv.close()


def test_a_lane_process_profile_reads_its_kernels_against_the_wall_clock():
    """The worker's profiled run on the CPU (no kernels there): its rows as a plain run's, its clock mark found,
    and the processes' analysis of the second reads it."""
    from cadencelab.bench import lanes_limiter as lim
    from cadencelab.bench.common import built_checkpoint
    from cadencelab.bench.sessions_lane_processes import _profile, one_process
    from cadencelab.bench.sessions_lanes import LaneArmServer

    cfg = lim.LimiterConfig(config="teaching", device="cpu", sessions=(2,), lanes=2, speak_seconds=1, prompts=1,
                            n_timesteps=CPU_STEPS, lane_processes=2)
    with built_checkpoint(cfg.config, cfg.seed, lambda m: None) as ckpt:
        server = LaneArmServer("SRl", ckpt, one_process(lim._sessions_cfg(cfg), 2))

        class _One:  # one process standing for the lane processes: the run a LaneProcessServer merges
            def __init__(self):
                self.cfg = lim._sessions_cfg(cfg)

            def run(self, workload, n, profile=False):
                import time

                start_at = time.time() + 0.05
                res = _profile(server, one_process(self.cfg, 2), workload, n, list(range(n)), start_at)
                k = pd.DataFrame(dict(process=0, **res["kernels"]))
                rows = [dict(r, process=0) for r in res["rows"]]  # as LaneProcessServer.run numbers them
                return dict(rows=rows, kernels=k, start_ns=int(start_at * 1e9))

        msgs = []
        out = lim._profiled_across(_One(), cfg, 2, msgs.append)
    assert out["sessions"] == 2 and out["kernels"] == 0 and out["busy_share"] == 0.0
    assert out["chunks_per_s"] > 0 and out["host_cores_per_process"] > 0 and out["window_ms"] > 0
    assert "profiled second, N=2" in msgs[-1]


def test_lanes_limiter_from_processes_on_cpu(tmp_path):
    """--lane-processes 2: the counts served from two processes, their waves written and tabled."""
    from cadencelab.bench.lanes_limiter import LimiterConfig, run_study, table

    cfg = LimiterConfig(config="teaching", device="cpu", sessions=(2,), lanes=2, speak_seconds=1, prompts=1,
                        untimed=False, profile=False, n_timesteps=CPU_STEPS, lane_processes=2, out=str(tmp_path))
    res = run_study(cfg, progress=lambda m: None)
    assert res["mode"] == "processes" and res["server"]["lane_processes"] == 2
    assert [p["sessions"] for p in res["points"]] == [2] and res["waves"][0]["chunks"] == 2
    ch = pd.read_csv(tmp_path / "lanes_limiter_chunks.csv")
    assert set(ch["process"]) == {0, 1}
    assert json.loads((tmp_path / "lanes_limiter.json").read_text())["mode"] == "processes"
    assert "wave-0 chunks/s" in table(res) and "lock late ms" in table(res)
    pt = res["points"][0]  # every process probed the interpreter lock while it served
    assert pt["gil_late_ms"] >= 0 and 0 <= pt["gil_late_share"] <= 1 and pt["gil_idle_ms"] >= 0
    with pytest.raises(ValueError, match="lane-processes of 2 or more"):
        LimiterConfig(device="cpu", mps=True)
    with pytest.raises(ValueError, match=r"lane_processes must be in 1\.\.lanes \(4\), got 5"):
        LimiterConfig(device="cpu", lanes=4, lane_processes=5)


def _fake_control(tmp_path, servers="4242"):
    """A stand-in for nvidia-cuda-mps-control: logs each call (flags, stdin, pipe folder) and answers as the daemon."""
    log = tmp_path / "calls.log"
    exe = tmp_path / "mps-control"
    exe.write_text(f"""#!/bin/sh
if [ "$1" = "-d" ]; then echo "daemon $CUDA_MPS_PIPE_DIRECTORY" >> {log}; touch "$CUDA_MPS_PIPE_DIRECTORY/control"; exit 0; fi
read cmd; echo "$cmd" >> {log}
case "$cmd" in get_server_list) echo "{servers}";; quit) rm -f "$CUDA_MPS_PIPE_DIRECTORY/control";; esac
""")
    exe.chmod(0o755)
    return str(exe), log


def test_mps_daemon_is_private_recorded_and_quit(tmp_path, monkeypatch):
    import os

    from cadencelab.bench.mps import Mps

    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", "/elsewhere")
    monkeypatch.delenv("CUDA_MPS_LOG_DIRECTORY", raising=False)
    exe, log = _fake_control(tmp_path)
    with Mps(exe) as mps:
        pipe = os.environ["CUDA_MPS_PIPE_DIRECTORY"]
        assert pipe.startswith(mps.folder) and pipe != "/elsewhere"  # its own folder, inherited by the lanes
        assert mps.served() == ["4242"]
        assert mps.record() == dict(on=True, servers=1, pipe_directory=mps.folder)
    assert log.read_text().splitlines() == [f"daemon {pipe}", "get_server_list", "quit"]
    assert os.environ["CUDA_MPS_PIPE_DIRECTORY"] == "/elsewhere" and "CUDA_MPS_LOG_DIRECTORY" not in os.environ
    assert not os.path.exists(mps.folder)  # its folder removed with it


def test_mps_refuses_clearly(tmp_path, monkeypatch):
    from cadencelab.bench import sessions as study
    from cadencelab.bench.mps import Mps

    monkeypatch.setattr("shutil.which", lambda name: None)
    with pytest.raises(RuntimeError, match="nvidia-cuda-mps-control is not on PATH"):
        Mps()
    with pytest.raises(ValueError, match="lane-processes of 2 or more"):
        study.SessionsConfig(device="cpu", arms=("B0", "SRl"), lane_processes=1, mps=True)
    with pytest.raises(ValueError, match="SRl among the arms"):
        study.SessionsConfig(device="cpu", arms=("B0",), lanes=4, lane_processes=2, mps=True)


def test_a_lane_process_serves_its_lanes_alone_under_the_parents_mps():
    from cadencelab.bench import sessions as study
    from cadencelab.bench.sessions_lane_processes import one_process

    cfg = study.SessionsConfig(device="cpu", arms=("B0", "SRl"), lanes=8, lane_processes=4, mps=True)
    one = one_process(cfg, 2)
    assert (one.lanes, one.lane_processes, one.mps) == (2, 1, False) and one.arms == cfg.arms


def test_lane_processes_under_mps_fail_closed_without_a_server(tmp_path, monkeypatch):
    """Lane processes that started but are no MPS server's clients: the arm stops, naming it, and the daemon quits."""
    from cadencelab.bench import sessions_lane_processes as lp

    exe, log = _fake_control(tmp_path, servers="")
    monkeypatch.setattr("shutil.which", lambda name: exe)

    class _Ready(_FakeProc):
        went = False

        def go(self):
            self.went = True

        def wait(self, timeout):
            return ("ready", dict(chunk_s=0.1, setup_s=0.0, lanes=1)) if self.went else ("staged", {})

        def stop(self):
            self.stopped = True

    monkeypatch.setattr(lp, "ArmProcess", lambda name, fn, args: _Ready(len(name)))
    cfg = type("C", (), dict(device="cuda", lanes=2, lane_processes=2, mps=True))()
    with pytest.raises(RuntimeError, match="no MPS server runs"):
        lp.LaneProcessServer("SRl", "ckpt", cfg)
    assert log.read_text().splitlines()[-1] == "quit"


@pytest.mark.slow
def test_sessions_study_lanes_from_two_processes_on_cpu(tmp_path):
    """--lane-processes 2: SRl served by two processes, every chunk equal to the session alone through B0
    (about a minute on a loaded 2-core host: two processes build their lane pools)."""
    from cadencelab.bench import sessions as study

    cfg = study.SessionsConfig(config="teaching", device="cpu", arms=("SRl", "B0"), workloads=("speak_heavy",),
                               sessions=(3,), max_sessions=3, cadence_s=1e6, speak_seconds=1, prompts=2, lanes=2,
                               lane_processes=2, processes=False, time_budget_s=600.0, n_timesteps=CPU_STEPS,
                               out=str(tmp_path))
    res = study.run_study(cfg, progress=lambda m: None)
    s = res["summary"]
    assert not res["failures"], res["failures"]
    assert s["all_checked_chunks_exact"] and s["chunks_checked"] == s["chunks"] > 0, s
    ch = pd.read_csv(tmp_path / "sessions_chunks.csv")
    srl = ch[ch["arm"] == "SRl"]
    assert set(srl["process"]) == {0, 1} and srl["exact"].all()


def test_sessions_study_lanes_under_mps_on_cpu(tmp_path, monkeypatch):
    """--mps end to end with a stand-in daemon (a CPU makes no MPS client): the workers serve with the parent's
    daemon named in the arm's record, the daemon quit after the arm, every chunk equal to the session alone."""
    from cadencelab.bench import sessions as study

    exe, log = _fake_control(tmp_path)
    monkeypatch.setattr("shutil.which", lambda name: exe)
    cfg = study.SessionsConfig(config="teaching", device="cpu", arms=("SRl", "B0"), workloads=("speak_heavy",),
                               sessions=(2,), max_sessions=2, cadence_s=1e6, speak_seconds=1, prompts=1, lanes=2,
                               lane_processes=2, mps=True, processes=False, time_budget_s=600.0,
                               n_timesteps=CPU_STEPS, out=str(tmp_path / "out"))
    res = study.run_study(cfg, progress=lambda m: None)
    assert not res["failures"], res["failures"]
    assert res["summary"]["all_checked_chunks_exact"]
    assert res["arms"]["SRl"]["mps"]["on"] and res["arms"]["SRl"]["mps"]["servers"] == 1
    assert log.read_text().splitlines()[-1] == "quit"


def test_host_cost_summary_has_an_interval_per_part():
    from cadencelab.bench.host_cost import BOOKKEEPING, summarise

    samples = [{p: [0.1 * (k + 1), 0.1 * (k + 2)] for p in (*BOOKKEEPING, "bookkeeping")} for k in range(3)]
    s = summarise(samples)
    assert set(s) == {*BOOKKEEPING, "bookkeeping"}
    r = s["checks"]
    assert r["ms"] == pytest.approx(0.25) and r["lo"] <= r["ms"] <= r["hi"] and r["processes"] == 3 and r["chunks"] == 6


# -- the engine's module-tensor list: rebuilt only after a registration in a tree it lists ---------------------

def test_a_module_that_reuses_a_listed_modules_id_does_not_bump_the_epoch():
    """A listed module dies and a fresh one (a Sequential a forward slices out) gets its id: a registration on the
    fresh one must not re-list every engine's tensors (the tracked entry's weak reference is dead or elsewhere)."""
    import gc
    import weakref

    import torch

    from cadencelab.replay import engine

    fresh = torch.nn.Sequential()
    ghost = torch.nn.Linear(1, 1)
    engine._TRACKED[id(fresh)] = weakref.ref(ghost)  # what id reuse leaves: an entry for another object
    del ghost
    gc.collect()
    before = engine._EPOCH[0]
    fresh.add_module("relu", torch.nn.ReLU())
    assert engine._EPOCH[0] == before
    engine._TRACKED[id(fresh)] = weakref.ref(fresh)  # listed: now a registration on it bumps
    fresh.add_module("relu2", torch.nn.ReLU())
    assert engine._EPOCH[0] == before + 1
    del engine._TRACKED[id(fresh)]


def test_engine_relists_module_tensors_only_after_a_registration_in_its_trees():
    import torch

    from cadencelab.replay.engine import ExactShapeReplay

    net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 4))
    e = ExactShapeReplay(lambda x: net(x), "net", backend="eager", modules=[net])
    x = torch.randn(2, 4)
    for _ in range(2):
        e(x)
    listed = e._module_tensors()
    net[0:2](x)  # slicing builds a fresh Sequential (registrations outside the listed tree): no re-listing
    assert e._module_tensors() is listed
    net[2].weight = torch.nn.Parameter(net[2].weight.detach().clone())  # a replaced parameter: re-listed, seen moved
    assert e._module_tensors() is not listed
    e(x)
    c = e.counters().iloc[0]
    assert c["invalidations"] == 1 and c["miss_reasons"].get("invalidated") == 1
    assert torch.equal(e(x), net(x))


@pytest.mark.cuda
@pytest.mark.parametrize("mps", [False, True], ids=["processes", "mps"])
def test_lanes_limiter_profiles_every_lane_process_on_cuda(tmp_path, mps):
    """Two lane processes on the GPU, with and without the MPS daemon: the profiled second holds kernels of
    both processes on one clock, inside the wave it measured."""
    from cadencelab.bench.lanes_limiter import LimiterConfig, run_study

    cfg = LimiterConfig(config="teaching", device="cuda", sessions=(2,), lanes=2, speak_seconds=1, prompts=1,
                        untimed=False, profile=True, lane_processes=2, mps=mps, out=str(tmp_path))
    res = run_study(cfg, progress=print)
    assert res["profile_error"] is None and res["server"]["lane_processes"] == 2
    assert res["server"]["setup_waves"] == [1, 1]  # process 0 alone, then the other at its measured peak
    mem = res["server"]["setup_memory"]
    assert all(0 < m["held_bytes"] <= m["setup_peak_bytes"] and m["free_bytes"] < m["total_bytes"] for m in mem)
    p = res["profiled"]
    assert p["sessions"] == 2 and p["kernels"] > 0 and len(p["busy_share_by_process"]) == 2
    assert all(s > 0 for s in p["busy_share_by_process"].values())
    assert 0 < p["busy_share"] <= 1 and p["max_at_once"] >= 1 and p["window_ms"] > 0
    assert json.loads((tmp_path / "lanes_limiter.json").read_text())["profiled"]["kernels"] == p["kernels"]
