"""The factorial driver (:mod:`cadencelab.bench.rounds`) on fake arm processes: no model, no process spawned."""

from __future__ import annotations

import json

import pytest

from cadencelab.bench.measure import Method
from cadencelab.bench.rounds import Rounds, run_rounds


class FakeArm:
    """An arm process's interface: ``fail_start`` fails its set-up, ``fail_block`` that block (every round);
    ``staged``: None while staging (it reports on its first poll)."""

    def __init__(self, arm, log, fail_start=False, fail_block=None, staging=()):
        self.arm, self.log, self.fail_start, self.fail_block, self.dead = arm, log, fail_start, fail_block, None
        self.stopped = False
        if staging:
            self.staged = None

    def poll(self):
        return ("staged", {"stage_s": 0.1})

    def go(self):
        self.log.append(("go", self.arm))

    def wait(self, timeout):
        if getattr(self, "staged", {}) is None:
            return ("staged", {"stage_s": 0.1})
        if self.fail_start:
            return ("error", f"Traceback ...\nRuntimeError: {self.arm} cannot start")
        return ("ready", {"setup_s": 1.0})

    def ask(self, msg, timeout):
        self.log.append((self.arm, msg[1], timeout))
        if msg[1] == self.fail_block:
            return ("error", f"Traceback ...\nRuntimeError: {self.arm} broke")
        return ("ok", {"ms": 1.0})

    def request_stop(self):
        self.dead = self.dead or "stopped"

    def stop(self):
        self.request_stop()
        self.stopped = True


def plan(tmp_path, arms, halfwidths, spawned, log, fail_start=(), fail_block=None, **kw):
    """A study writing ``round.json`` after every round; the headline's half-width after round r is
    ``halfwidths[r]``."""
    kept, written = [], []

    def spawn(names, staging):
        procs = {a: FakeArm(a, log, a in fail_start, fail_block if a == "bad" else None, staging) for a in names}
        spawned.append(procs)
        return procs

    def finish(tally):
        rec = dict(round=tally.round, stopped=tally.stopped, failures=sorted(tally.failures), blocks=len(kept),
                   processes=len(tally.processes))
        (tmp_path / "round.json").write_text(json.dumps(rec))
        written.append(rec)

    method = kw.pop("method", Method(min_processes=2, max_processes=4, time_budget_s=600, target_halfwidth=0.05))
    p = Rounds(arms=arms, method=method, blocks=3, spawn=spawn, keep=lambda t, a, b, res, o: kept.append((t.round, a, b)),
               headline=lambda t: halfwidths[t.round], finish=finish, **kw)
    return p, kept, written


def test_a_failing_arm_is_recorded_the_rest_go_on_and_the_files_follow_every_round(tmp_path):
    log, spawned, heard = [], [], []
    p, kept, written = plan(tmp_path, ("B0", "SRc", "bad", "nostart"), [0.5, 0.2, 0.01, 0.01], spawned, log,
                            fail_start=("nostart",), fail_block=1, failed=lambda t, a, b, e: heard.append((a, b)))
    tally = run_rounds(p)
    # the stop rule: round 3's interval is within the target
    assert tally.stopped == "converged" and [w["round"] for w in written] == [0, 1, 2]
    assert [w["stopped"] for w in written] == [None, None, "converged"]
    assert json.loads((tmp_path / "round.json").read_text())["stopped"] == "converged"
    # the arm that failed to start and the one that failed its block 1 are heard once and run no more
    assert heard == [("nostart", None), ("bad", 1)] and sorted(tally.failures) == ["bad", "nostart"]
    assert "bad broke" in tally.failures["bad"] and written[0]["failures"] == ["bad", "nostart"]
    assert {a for r, a, b in kept} == {"B0", "SRc", "bad"} and ("bad", 2) not in {(a, b) for r, a, b in kept}
    assert sorted(spawned[1]) == ["B0", "SRc"]  # round 2 starts no process for a failed arm
    assert all(proc.stopped for procs in spawned for proc in procs.values())
    assert [(x["arm"], x["process"]) for x in tally.processes][:3] == [("B0", 0), ("SRc", 0), ("bad", 0)]
    # each round's blocks: every live arm once per block, in a rotating order
    r0 = [(a, b) for r, a, b in kept if r == 0]
    assert r0[:3] == [("B0", 0), ("SRc", 0), ("bad", 0)] and r0[3:5] == [("SRc", 1), ("B0", 1)]


def test_an_arm_failure_may_stop_the_run_its_processes_stopped(tmp_path):
    log, spawned = [], []

    def failed(tally, a, b, error):
        raise RuntimeError(f"arm {a}, block {b}: {error.splitlines()[-1]}")

    p, kept, written = plan(tmp_path, ("B0", "bad"), [0.5] * 4, spawned, log, fail_block=1, failed=failed)
    with pytest.raises(RuntimeError, match="arm bad, block 1: RuntimeError: bad broke"):
        run_rounds(p)
    assert written == [] and all(proc.stopped for proc in spawned[0].values())


def test_extend_arms_staging_and_the_first_round_hook(tmp_path):
    """Past min_processes only the ``extend`` arms get processes; with staging cores the next round's processes
    are spawned while a round runs and get the go; the first-round hook sees round 0's live processes; the
    rounds end at max_processes; the compile arm's first block gets its extra seconds."""
    log, spawned, first = [], [], []
    p, kept, written = plan(tmp_path, ("B0", "S", "compile"), [0.5] * 3, spawned, log, extend=("B0", "compile"),
                            method=Method(min_processes=1, max_processes=3, time_budget_s=600, target_halfwidth=0.05),
                            staging=(1,), timeout_s=10.0, first_extra_s={"compile": 5.0},
                            first_round=lambda t, procs: first.append(sorted(procs)))
    tally = run_rounds(p)
    assert tally.stopped == "max processes" and first == [["B0", "S", "compile"]]
    assert [sorted(s) for s in spawned] == [["B0", "S", "compile"], ["B0", "compile"], ["B0", "compile"]]
    assert ("go", "B0") in log and ("go", "compile") in log
    assert ("compile", 0, 15.0) in log and ("compile", 1, 10.0) in log and ("B0", 0, 10.0) in log
    assert {a for r, a, b in kept if r > 0} == {"B0", "compile"}
