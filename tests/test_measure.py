"""The measurement method (cadencelab.bench.measure): orders, intervals, the A/A gate, stopping, pinning."""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pandas as pd
import pytest

from cadencelab.bench import measure
from cadencelab.bench.measure import Method


def _processes(rng, n_proc, n_blocks, mean, proc_sd, block_sd):
    """Synthetic block values: each process draws its own level, each block scatters around it."""
    return [rng.normal(rng.normal(mean, proc_sd), block_sd, n_blocks) for _ in range(n_proc)]


def test_round_orders_rotate_so_no_arm_is_always_first():
    arms = ["B0", "SRc", "B0_repeat"]
    firsts = [o[0] for r in range(3) for o in measure.round_orders(arms, r, 3)]
    assert set(firsts) == set(arms)
    for r in range(3):
        for order in measure.round_orders(arms, r, 4):
            assert sorted(order) == sorted(arms)  # every arm once per block
    # each round starts one further along
    assert [measure.round_orders(arms, r, 1)[0][0] for r in range(3)] == arms


def test_point_is_the_mean_of_process_means():
    assert measure.point([[1.0, 3.0], [10.0]]) == pytest.approx((2.0 + 10.0) / 2)
    assert np.isnan(measure.point([]))
    assert measure.point([[np.nan, 4.0]]) == 4.0  # a missing block is left out, not counted as zero


def test_hierarchical_interval_covers_process_spread_that_block_resampling_misses():
    rng = np.random.default_rng(1)
    a = _processes(rng, 6, 8, 100.0, proc_sd=15.0, block_sd=1.0)
    boot = measure.hierarchical_bootstrap(a, 3000, np.random.default_rng(0))
    lo, hi = np.percentile(boot, [2.5, 97.5])
    # resampling blocks of pooled values (ignoring processes) would give a far narrower interval
    pooled = np.concatenate(a)
    pooled_boot = pooled[np.random.default_rng(0).integers(0, len(pooled), (3000, len(pooled)))].mean(1)
    plo, phi = np.percentile(pooled_boot, [2.5, 97.5])
    assert (hi - lo) > 1.5 * (phi - plo)
    assert lo < measure.point(a) < hi


def test_ratio_interval_and_a_a_on_identical_code_contains_zero_across_seeds():
    holds = 0
    for seed in range(40):
        rng = np.random.default_rng(seed)
        samples = {"B0": _processes(rng, 4, 3, 230.0, 25.0, 5.0), "B0_repeat": _processes(rng, 4, 3, 230.0, 25.0, 5.0)}
        check = measure.a_a_check(samples)
        assert set(check) == {"arm", "reference", "ratio", "ci", "holds"}
        holds += check["holds"]
    assert holds >= 34  # a 95% interval: nominally 38 of 40; allow for the bootstrap's small-sample shortfall


def test_a_a_fails_on_a_real_difference_and_direction_follows_the_interval():
    rng = np.random.default_rng(3)
    samples = {"B0": _processes(rng, 5, 4, 200.0, 2.0, 1.0), "B0_repeat": _processes(rng, 5, 4, 260.0, 2.0, 1.0)}
    check = measure.a_a_check(samples)
    assert not check["holds"] and check["ci"][0] > 0
    assert measure.direction(*check["ci"]) == "slower"
    assert measure.direction(-0.3, -0.1) == "faster"
    assert measure.direction(-0.1, 0.2) == "no clear difference"
    assert measure.direction(float("nan"), 0.1) == "no clear difference"
    assert measure.a_a_check({"B0": [[1.0]]}) is None


def test_ratio_interval_brackets_the_true_ratio():
    rng = np.random.default_rng(5)
    a = _processes(rng, 6, 4, 60.0, 0.5, 0.3)
    b = _processes(rng, 6, 4, 240.0, 20.0, 5.0)
    pt, lo, hi = measure.ratio_interval(a, b)
    assert lo < pt < hi and lo < 60 / 240 - 1 < hi
    assert all(np.isnan(measure.ratio_interval([], b)))


def test_stop_reason_never_stops_before_min_processes_and_names_why():
    m = Method(min_processes=3, max_processes=5, time_budget_s=100.0, target_halfwidth=0.05)
    assert m.record()["confidence"] == measure.CONFIDENCE
    assert measure.stop_reason(m, 2, 0.0, 10.0, 10.0) is None
    one = Method(min_processes=1, max_processes=5)
    assert measure.stop_reason(one, 1, 0.0, 10.0, 10.0) is None  # one process bounds no spread
    assert measure.stop_reason(m, 3, 0.04, 10.0, 10.0) == "converged"
    assert measure.stop_reason(m, 3, 0.2, 10.0, 10.0) is None
    assert measure.stop_reason(m, 3, 0.2, 95.0, 10.0) == "time budget"
    assert measure.stop_reason(m, 5, 0.2, 10.0, 10.0) == "max processes"
    assert measure.interval_halfwidth(4.0, 3.8, 4.4) == pytest.approx(0.1)
    assert measure.interval_halfwidth(float("nan"), 1, 2) == float("inf")
    with pytest.raises(ValueError, match="min_processes"):
        Method(min_processes=4, max_processes=3)


def test_parse_cores_accepts_ranges_and_refuses_cores_it_cannot_use():
    avail = {0, 1, 2, 3, 4, 5}
    assert measure.parse_cores("1-3", avail) == (1, 2, 3)
    assert measure.parse_cores("2,4", avail) == (2, 4)
    assert measure.parse_cores("none", avail) == ()
    alone = {c: (c,) for c in avail}
    assert measure.parse_cores("auto", avail, alone) == (1, 2, 3, 4)  # core 0 skipped when there are more
    assert measure.measurement_cores(4, {0, 1}) == (0, 1)
    for bad, why in (("7", "not available"), ("a-b", "not a core"), ("3-1", "backwards")):
        with pytest.raises(ValueError, match=why):
            measure.parse_cores(bad, avail)


def test_auto_cores_take_one_logical_core_per_physical_core(tmp_path):
    # 4 physical cores, SMT pairs (c, c + 4): the topology files as Linux writes them
    for c in range(8):
        d = tmp_path / f"cpu{c}" / "topology"
        d.mkdir(parents=True)
        (d / "thread_siblings_list").write_text(f"{c % 4},{c % 4 + 4}\n")
    sib = measure.core_siblings(range(8), root=str(tmp_path))
    assert sib[5] == (1, 5) and sib[0] == (0, 4)
    assert measure.core_siblings([9], root=str(tmp_path)) == {9: (9,)}  # unreadable: its own sibling
    # three physical cores past the first; the fourth core is filled from the remaining logical ones
    assert measure.measurement_cores(3, range(8), sib) == (1, 2, 3)
    assert measure.measurement_cores(4, range(8), sib) == (0, 1, 2, 3)
    assert measure.measurement_cores(2, {1, 5, 2, 6}, sib) == (1, 2)  # never 1 and its sibling 5
    # "1-2,5" style lists, as the kernel writes ranges
    (tmp_path / "cpu0" / "topology" / "thread_siblings_list").write_text("0-1,5\n")
    assert measure.core_siblings([0], root=str(tmp_path))[0] == (0, 1, 5)


def test_core_survey_measures_every_core_and_restores_affinity():
    before = os.sched_getaffinity(0)
    cores = sorted(before)[:2]
    survey = measure.core_survey(cores, rounds=2, pause_s=0.0, loop=2000, ops=50)
    assert os.sched_getaffinity(0) == before
    assert len(survey) == 2 * len(cores) and set(survey.core) == set(cores)
    assert (survey.python_loop_ns > 0).all() and (survey.tiny_op_us > 0).all()
    table = measure.survey_table(survey)
    assert list(table.core) == list(table.sort_values("python_loop_ns", ascending=False).core)
    assert (table.python_loop_ns_spread >= 0).all()


def test_pin_to_cores_pins_this_process():
    import torch

    before, threads = os.sched_getaffinity(0), torch.get_num_threads()
    try:
        core = sorted(before)[-1]
        assert measure.pin_to_cores((core,)) == (core,)
        assert os.sched_getaffinity(0) == {core} and torch.get_num_threads() == 1
        assert measure.pin_to_cores(()) == ()
    finally:
        os.sched_setaffinity(0, before)
        torch.set_num_threads(threads)  # the threads it found, not one per core


def test_host_figures_on_the_cpu():
    h = measure.host_figures("cpu", ops=200, loop=10_000)
    assert h["tiny_ops_per_s"] > 0 and h["tiny_op_us"] == pytest.approx(1e6 / h["tiny_ops_per_s"])
    assert h["python_loop_ns"] > 0 and h["cpus_available"] >= 1


def test_process_tables_keep_values_per_process():
    blocks = pd.DataFrame(dict(arm=["B0", "B0", "B0", "SRc"], process=[0, 0, 1, 0], v=[1.0, 3.0, 5.0, 2.0]))
    per = measure.arm_processes(blocks, "v")
    assert [list(x) for x in per["B0"]] == [[1.0, 3.0], [5.0]] and [list(x) for x in per["SRc"]] == [[2.0]]
    t = measure.process_table(blocks, "v")
    assert list(t.loc[t["arm"] == "B0", "mean"]) == [2.0, 5.0]
    assert measure.arm_processes(pd.DataFrame(), "v") == {}


def test_factorial_runs_every_arm_in_rounds_of_fresh_runtimes(tmp_path):
    """The factorial on the CPU (inline: each round builds every arm afresh): every arm in every round, the
    blocks of a round interleaved, the A/A check and the headline with intervals, the stopping reason."""
    from cadencelab.bench.token2wav import StudyConfig, run_study
    from sizes import CPU_STEPS

    cfg = StudyConfig(config="teaching", device="cpu", arms=("B0", "SRc", "B0_repeat"), blocks=1, chunks_per_turn=2,
                      n_timesteps=CPU_STEPS, profile=False, processes=False, min_processes=2, max_processes=2,
                      out=str(tmp_path))
    res = run_study(cfg, progress=lambda m: None)
    s = res["summary"]
    assert s["processes_per_arm"] == 2 and s["processes_by_arm"] == {"B0": 2, "SRc": 2, "B0_repeat": 2}
    assert s["stopped"] in ("max processes", "converged") and s["method"]["min_processes"] == 2
    assert s["a_a"]["arm"] == "B0_repeat" and len(s["a_a"]["ci"]) == 2
    lo, hi = s["speedup_SRc_vs_B0_ci"]
    assert lo <= s["speedup_SRc_vs_B0"] <= hi
    assert s["non_exact_arms"] == [] and s["exact_blocks_all_arms"] == {"SRc": 2, "B0_repeat": 2}
    assert s["b0_cross_process_exact"] == {"blocks": 1, "agree": 1, "processes": 2}
    blocks = pd.DataFrame(res["blocks"])
    assert set(zip(blocks["arm"], blocks["process"])) == {(a, p) for a in cfg.arms for p in range(2)}
    assert all(p.get("host", {}).get("tiny_ops_per_s", 0) > 0 for p in res["processes"])
    arms = res["arms"]
    assert arms["B0"]["latency_delta"] == 0.0 and arms["SRc"]["latency_direction"] in (
        "faster", "slower", "no clear difference")
    assert (tmp_path / "token2wav_factorial.json").exists() and (tmp_path / "token2wav_factorial_blocks.csv").exists()


def test_staged_rounds_prepare_the_next_round_on_other_cores(tmp_path):
    """Fresh processes (spawned): round 2's process reads the checkpoint and builds the modules on the core
    that is not the measurement core while round 1 is timed; every block says whether it overlapped, the
    summary weighs the overlap, and the staged process is as exact as the unstaged one (one arm, two rounds:
    the smallest run that has both)."""
    from cadencelab.bench.token2wav import StudyConfig, run_study, staging_cores
    from sizes import CPU_STEPS

    avail = sorted(os.sched_getaffinity(0))
    if len(avail) < 2:
        pytest.skip("needs two cores: one to measure on, one to stage on")
    cfg = StudyConfig(config="teaching", device="cpu", arms=("B0",), blocks=1, chunks_per_turn=2,
                      n_timesteps=CPU_STEPS, profile=False, processes=True, min_processes=2, max_processes=2,
                      cores=str(avail[0]), out=str(tmp_path))
    assert staging_cores(cfg) and avail[0] not in staging_cores(cfg)
    assert staging_cores(dataclasses.replace(cfg, stage=False)) == ()
    res = run_study(cfg, progress=lambda m: None)
    s = res["summary"]
    assert s["processes_by_arm"] == {"B0": 2} and s["non_exact_arms"] == []
    # the staged process's output equals the unstaged one's, bit for bit
    assert s["b0_cross_process_exact"] == {"blocks": 1, "agree": 1, "processes": 2}
    assert all(p["stage_s"] > 0 and p["cores"] == [avail[0]] for p in res["processes"])
    blocks = pd.DataFrame(res["blocks"])
    assert blocks["staging"].dtype == bool and not blocks.loc[blocks.process == 1, "staging"].any()
    e = s["staging_effect"]
    assert e["arm"] == "B0" and e["blocks_overlapped"] == e["blocks_clear"] == 1
    # one block on each side: a point, no interval, no direction claimed
    assert np.isnan(e["ci"]).all() and e["direction"] == "no clear difference"


def test_host_survey_cli_writes_its_files_and_refuses_a_core_it_cannot_use(tmp_path, capsys):
    from cadencelab.bench.__main__ import main

    assert main(["host", "--device", "cpu", "--cores", "99999", "--out", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err
    assert "--cores" in err and len(err.strip().splitlines()) == 1 and not (tmp_path / "bad").exists()
    core = sorted(os.sched_getaffinity(0))[0]
    assert main(["host", "--device", "cpu", "--cores", str(core), "--rounds", "1", "--out", str(tmp_path)]) == 0
    import json

    r = json.loads((tmp_path / "host_survey.json").read_text())
    assert r["summary"]["cores_surveyed"] == [core] and r["provenance"]["date"]
    assert (tmp_path / "host_survey.csv").exists()


def test_a_single_value_gives_a_point_and_no_interval():
    pt, lo, hi = measure.ratio_interval([[1.5]], [[1.0], [1.1]])
    assert pt == pytest.approx(1.5 / 1.05 - 1) and np.isnan(lo) and np.isnan(hi)
    assert measure.direction(lo, hi) == "no clear difference" and measure.interval_halfwidth(pt, lo, hi) == float("inf")
    assert np.isfinite(measure.ratio_interval([[1.5, 1.6]], [[1.0], [1.1]])[1])  # one process, two blocks: resampled
    # the A/A check on one value a side is not run: it neither holds nor fails
    assert measure.a_a_check({"B0": [[1.0]], "B0_repeat": [[1.2]]}) is None
