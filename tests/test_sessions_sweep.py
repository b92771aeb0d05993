"""The sessions study's sweep to the break point, its time sharing and its verification plan (pure, no model)."""

from __future__ import annotations

import pandas as pd
import pytest

from cadencelab.bench import sessions as study
from cadencelab.bench.sessions_sweep import BREAKS, HOLDS, OOM, Sweep, arm_deadline, order_points
from cadencelab.bench.sessions_verify import GATE, REFERENCE, gate_tasks, reference_tasks, split_workers


def _drive(sw: Sweep, capacity: int, oom_at: int | None = None, headroom=None) -> list[int]:
    """Run ``sw`` against an arm that holds up to ``capacity`` sessions (out of memory from ``oom_at``)."""
    seen = []
    while (n := sw.next()) is not None:
        seen.append(n)
        verdict = OOM if oom_at is not None and n >= oom_at else HOLDS if n <= capacity else BREAKS
        sw.record(n, verdict, headroom(n) if headroom else None)
    return seen


def test_grid_extension_break_and_bisection_to_the_resolution():
    sw = Sweep((1, 4, 16), growth=2.0, resolution=0.125)
    assert _drive(sw, capacity=45) == [1, 4, 16, 32, 64, 48, 40, 44]
    assert sw.bracket == (44, 48) and 48 <= 44 * 1.125  # within the resolution: no further bisection
    assert sw.exact and sw.holds == 44 and sw.breaks == 48
    coarse = Sweep((1, 4, 16), growth=2.0, resolution=0.25)
    _drive(coarse, capacity=45)
    lo, hi = coarse.bracket
    assert lo <= 45 < hi <= lo * 1.25 and hi - lo > 1  # stopped as soon as the bracket was within 25%


def test_a_break_inside_the_list_bisects_below_it():
    sw = Sweep((1, 2, 4, 8, 16, 32), resolution=0.0)
    assert _drive(sw, capacity=5) == [1, 2, 4, 8, 6, 5]  # 16 and 32 are never run
    assert sw.bracket == (5, 6)


def test_nothing_breaks_below_max_sessions_is_a_lower_bound():
    sw = Sweep((1, 2), growth=3.0, max_sessions=20)
    assert _drive(sw, capacity=10**6) == [1, 2, 6, 18, 20]
    assert sw.bracket == (20, None) and not sw.exact and sw.next() is None


def test_out_of_memory_is_a_break_and_ends_the_extra_points():
    sw = Sweep((1, 2, 4, 8), extra_points=2, resolution=0.0)
    assert _drive(sw, capacity=100, oom_at=8) == [1, 2, 4, 8, 6, 7]
    assert sw.bracket == (7, 8)
    extra = Sweep((1, 2, 4, 8, 16), extra_points=1, resolution=1.0)
    assert _drive(extra, capacity=3) == [1, 2, 4, 8]  # one point past the break, then the bracket is within 100%


def test_a_hold_above_the_first_break_resumes_the_ascent():
    """Noise: 4 breaks, the extra point 8 holds; the capacity is read as the summary reads it (largest hold)."""
    sw = Sweep((1, 2, 4, 8), extra_points=1, resolution=0.0)
    for n, v in ((1, HOLDS), (2, HOLDS), (4, BREAKS), (8, HOLDS)):
        assert sw.next() == n
        sw.record(n, v)
    assert sw.holds == 8 and sw.breaks is None and sw.ascending and sw.next() == 16


def test_headroom_caps_the_jump_but_never_below_the_resolution():
    # a point at 4 whose p95 (or load) is half the cadence: the next N is no further than 4 * 1.25 / 0.5 = 10
    sw = Sweep((1, 4, 64), growth=2.0, resolution=0.125, margin=0.25)
    sw.record(1, HOLDS, 0.1)
    sw.record(4, HOLDS, 0.5)
    assert sw.next() == 10
    # close to the break (headroom 0.99): one step of the resolution, not one session at a time
    near = Sweep((1,), growth=2.0, resolution=0.125)
    near.record(1, HOLDS, 0.05)
    near.record(2, HOLDS, 0.1)
    near.record(40, HOLDS, 0.99)
    assert near.next() == 51  # max(41, ceil(40 * 1.125) = 45, ceil(40 * 1.25 / 0.99) = 51)
    # without headroom (an out-of-memory, or nothing measured) the list and the growth decide
    free = Sweep((1, 64))
    free.record(1, HOLDS)
    assert free.next() == 64


def test_sweep_refuses_bad_values():
    with pytest.raises(ValueError, match="growth"):
        Sweep((1,), growth=1.0)
    with pytest.raises(ValueError, match="max_sessions"):
        Sweep((1, 64), max_sessions=8)
    with pytest.raises(ValueError, match="verdict"):
        Sweep((1,)).record(1, "fine")
    sw = Sweep((1,))
    sw.record(1, HOLDS)
    with pytest.raises(ValueError, match="already"):
        sw.record(1, BREAKS)


def test_order_points_runs_every_ascent_first_and_a_refused_point_stops_its_sweep_only():
    sweeps = {"a": Sweep((1, 2), resolution=0.0), "b": Sweep((1, 2), resolution=0.0),
              "c": Sweep((1, 2), resolution=0.0)}
    caps = {"a": 5, "b": 3, "c": 100}
    calls = []

    def run(key, n):
        calls.append((key, n))
        if key == "c" and n > 4:
            return None  # e.g. the time budget
        return (HOLDS if n <= caps[key] else BREAKS), None

    order_points(sweeps, run)
    ascents = [("a", 1), ("a", 2), ("a", 4), ("a", 8), ("b", 1), ("b", 2), ("b", 4), ("c", 1), ("c", 2), ("c", 4),
               ("c", 8)]
    assert calls[:len(ascents)] == ascents
    assert calls[len(ascents):] == [("a", 6), ("a", 5), ("b", 3)]  # then the bisections; c stopped
    assert sweeps["c"].stopped and not sweeps["c"].exact and sweeps["a"].bracket == (5, 6)


def test_arm_deadline_keeps_the_later_arms_reserve():
    assert arm_deadline(0.0, 540.0, 3, 45.0) == 540.0 - 135.0
    assert arm_deadline(500.0, 540.0, 3, 45.0) == 500.0  # never in the past: the arm then skips its points


def test_the_verification_owed_is_the_longer_of_references_and_capacity_gates():
    cfg = study.SessionsConfig(device="cpu", config="teaching", speak_seconds=2)
    owed = study.OwedVerification({0: 2}, chunk_s=0.3, workers=3, start_s=20.0, gates_s=5.0)
    assert owed.seconds() == pytest.approx(20.0 + 5.0)  # 2 chunks of references: 0.2 s < 5 s of gates
    assert owed.adds(cfg, "speak_heavy", 3) == 4  # sessions 1 and 2, two chunks each
    assert owed.seconds(100) == pytest.approx(20.0 + 102 * 0.3 / 3)
    assert owed.seconds(0, 30.0) == pytest.approx(20.0 + 35.0)
    owed.add([dict(session=1, chunk=1), dict(session=0, chunk=1)])
    assert owed.need == {0: 2, 1: 2} and owed.added_chunks == 2
    srb = study.OwedVerification({0: 2}, chunk_s=0.3, gated=False)
    assert srb.adds(cfg, "speak_heavy", 3) == 0 and srb.seconds() == pytest.approx(0.6)
    assert study.OwedVerification().seconds() == 0.0


def test_reference_tasks_cover_every_session_with_its_most_chunks():
    runs = [dict(rows=[dict(session=i, chunk=k) for i in range(3) for k in range(2)]),
            dict(rows=[dict(session=i, chunk=k) for i in range(2) for k in range(3)])]
    tasks = reference_tasks(runs, chunk_s=0.5)
    assert [(t.args, t.estimate_s, t.kind) for t in tasks] == [((0, 3), 1.5, REFERENCE), ((1, 3), 1.5, REFERENCE),
                                                              ((2, 2), 1.0, REFERENCE)]


def test_gate_tasks_put_each_sweeps_capacity_point_first_then_its_break():
    def run(n, verdict, arrivals="aligned", plan_size=None):
        plan = [[(i, 0)] for i in range(plan_size or n)]
        return dict(arm="SRb", arrivals=arrivals, workload="mixed", sessions=n, verdict=verdict, plan=plan, rows=[1])

    runs = [run(1, "holds"), run(8, "holds"), run(16, "breaks"), run(12, "holds"), run(14, "breaks"),
            run(4, "holds", "staggered"), run(8, "oom", "staggered") | dict(oom=True),
            run(6, "breaks", "staggered")]
    tasks = gate_tasks(runs, {1: 0.25})
    firsts = [(t.key["arrivals"], t.key["sessions"]) for t in tasks]
    assert set(firsts[:2]) == {("aligned", 12), ("staggered", 4)}  # the capacity points
    assert set(firsts[2:4]) == {("aligned", 14), ("staggered", 6)}  # the breaks above them
    assert firsts[4:] == [("aligned", 1), ("aligned", 8), ("aligned", 16)]  # the rest, cheapest first
    assert ("staggered", 8) not in firsts  # an out-of-memory run served nothing
    assert tasks[0].kind == GATE and tasks[-1].estimate_s == pytest.approx(16 * 0.25)


def test_split_workers_gives_the_gate_one_process():
    assert split_workers(4, [REFERENCE, GATE]) == {GATE: 1, REFERENCE: 3}
    assert split_workers(1, [REFERENCE, GATE]) == {GATE: 1, REFERENCE: 1}
    assert split_workers(4, [REFERENCE]) == {REFERENCE: 4}
    assert split_workers(4, []) == {}


def _srb_run(n: int) -> dict:
    rows = [dict(arm="SRb", workload="speak_heavy", sessions=n, session=i, chunk=0, arrival_s=0.0, start_s=0.0,
                 completion_s=0.1, latency_ms=100.0, service_ms=100.0, audio_s=1.0, swap_bytes=0, swap_ms=0.0,
                 batch=0, batch_size=n, sha_i16=f"s{i}", sha_mel=f"m{i}") for i in range(n)]
    return dict(kind="run", arm="SRb", arrivals="aligned", workload="speak_heavy", sessions=n, rows=rows,
                peak_bytes=None, oom=False, verdict="holds")


def test_gate_entries_check_srb_rows_and_a_solo_reference_never_gates_them():
    """SRb's rows are checked against the verification's gate entries only; rows left ungated (the budget
    ended first) are unchecked, not compared with the solo references, which SRb's rows differ from."""
    cfg = study.SessionsConfig(device="cpu", config="teaching", arms=("SRb", "B0"), workloads=("speak_heavy",),
                               speak_seconds=1)
    gate = dict(kind="gate", arm="SRb", arrivals="aligned", workload="speak_heavy", sessions=2, oom=False,
                rows=[dict(session=i, chunk=0, gate_sha_i16=f"s{i}", gate_sha_mel=f"m{i}") for i in range(2)])
    refs = [dict(kind="reference", session=i, chunk=0, ref_sha_i16=f"solo{i}", ref_sha_mel=f"m{i}") for i in range(4)]
    res = study.analyse(cfg, {"SRb": [_srb_run(2), _srb_run(4)], "verification": [gate, *refs]}, {}, {})
    cap = pd.DataFrame(res["capacity"]).set_index("sessions")
    assert cap.loc[2, "checked_chunks"] == cap.loc[2, "exact_chunks"] == 2
    assert cap.loc[4, "checked_chunks"] == 0  # not gated: unchecked
    s = res["summary"]
    assert s["all_checked_chunks_exact"] and s["checked_chunks_by_arm"]["SRb"] == dict(checked=2, chunks=6)
    assert s["exactness_reference"]["SRb"] == ["batched_eager"]
    # reported, not gated: the mel equals the solo one, the PCM (another seed) does not
    assert s["identical_to_solo_B0"]["SRb"] == dict(mel_and_pcm=0, mel=6, compared=6, chunks=6,
                                                    mel_iff_never_batched=False)
    wrong = dict(gate, rows=[dict(r, gate_sha_i16="other") for r in gate["rows"]])
    bad = study.analyse(cfg, {"SRb": [_srb_run(2)], "verification": [wrong]}, {}, {})
    assert bad["summary"]["non_exact_by_arm"] == {"SRb": 2}


class _Verifier:
    """A stand-in for the verification's servers: references and gates answer at once; one gate fails."""

    setup_s = 0.0

    def reference(self, i, chunks):
        return [dict(session=i, chunk=k, ref_sha_i16=f"r{i}.{k}", ref_sha_mel="m") for k in range(chunks)]

    def gate(self, workload, n, plan):
        if n == 2:
            raise RuntimeError("the gate failed")
        return dict(rows=[dict(session=i, chunk=k, gate_sha_i16="g", gate_sha_mel="m") for b in plan for i, k in b],
                    oom=False)


def test_verify_runs_what_fits_and_says_what_was_left(tmp_path, monkeypatch):
    import time

    from cadencelab.bench import sessions_verify as sv

    monkeypatch.setattr(sv, "_build", lambda kind, ckpt, cfg: _Verifier())
    cfg = study.SessionsConfig(device="cpu", config="teaching", processes=False, verify_workers=4)
    runs = [dict(arm="SRb", arrivals="aligned", workload="mixed", sessions=n, verdict="holds", rows=[1],
                 plan=[[(i, 0)] for i in range(n)]) for n in (1, 2, 3)]
    tasks = {REFERENCE: reference_tasks([dict(rows=[dict(session=i, chunk=1) for i in range(3)])], chunk_s=0.1),
             GATE: gate_tasks(runs, {1: 1.0})}
    tasks[REFERENCE][-1].estimate_s = 1e6  # session 2's reference cannot fit
    got = sv.verify(cfg, "ckpt", tasks, tmp_path, time.perf_counter() + 60.0, progress=lambda m: None)
    assert got["workers"] == {GATE: 1, REFERENCE: 1}  # inline: one worker per kind
    assert got["done"] == {REFERENCE: 2, GATE: 2} and got["left"] == {REFERENCE: 1, GATE: 1}
    assert any("the gate failed" in f for f in got["failures"])
    rows = study.read_rows(tmp_path / "verify.jsonl")
    assert sorted((r["session"], r["chunk"]) for r in rows if r["kind"] == "reference") == [(0, 0), (0, 1), (1, 0),
                                                                                            (1, 1)]
    left = [r for r in rows if r["kind"] == "unverified"]
    assert {(r["task"], r.get("session"), r.get("sessions")) for r in left} == {(REFERENCE, 2, None), (GATE, None, 2)}
    assert [r["sessions"] for r in rows if r["kind"] == "gate"] == [3, 1]  # the capacity point first


def test_the_readme_shows_a_bracket_only_where_it_is_wider_than_one_session():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "docs"))
    import results_table

    s = dict(max_sessions_at_cadence_SRl={"mixed": 56, "speak_heavy": 28},
             capacity_bound={"SRl": {"mixed": "exact", "speak_heavy": "exact"}},
             capacity_bracket={"SRl": {"mixed": [56, 64], "speak_heavy": [28, 29]}})
    assert results_table._cap(s, "SRl", "mixed") == "56 (64 broke)"
    assert results_table._cap(s, "SRl", "speak_heavy") == "28"
    old = dict(max_sessions_at_cadence_SRl={"mixed": 16}, capacity_bound={"SRl": {"mixed": "lower_bound"}})
    assert results_table._cap(old, "SRl", "mixed") == ">=16"


def test_reference_workers_on_one_gpu_are_priced_as_one_stream():
    """On a GPU the reference workers take turns (the recorded sweeps: 4 of them at 0.8-0.9x one B0 process's
    rate), so the references owed cost every chunk at B0's warm-up pace whatever the workers; off a GPU each
    worker has its own cores. The H200 sweep from 8 processes priced 51 sessions' references at ~24 s; its
    verification ran out of time after 44 s with 15 of them left."""
    from types import SimpleNamespace

    from cadencelab.bench.sessions_verify import reference_pace, reference_tasks

    assert reference_pace(0.25, 4, "cuda") == reference_pace(0.25, 4, "cuda:1") == 1.0
    assert reference_pace(0.25, 4, "cpu") == 0.25 and reference_pace(0.25, 0, "cuda") == 0.25
    rows = [dict(session=i, chunk=k) for i in range(51) for k in range(3)]
    for device, owed_s in (("cuda", 15.7 + 153 * 0.228), ("cpu", 15.7 + 153 * 0.228 / 4)):
        cfg = SimpleNamespace(arms=("B0", "SRc", "SRl"), processes=True, verify_workers=4, device=device)
        owed = study._owed(cfg, "SRl", {"B0": [dict(kind="run", rows=rows)]},
                           {"B0": dict(chunk_s_warmup=0.228, ready_s=15.7)})
        assert study.OwedVerification(**owed).seconds() == pytest.approx(owed_s)
    task = reference_tasks([dict(rows=rows)], reference_pace(0.228, 4, "cuda"))[0]
    assert task.estimate_s == pytest.approx(3 * 0.228 * 4)  # a session's three chunks, beside three others
