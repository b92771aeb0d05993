"""User and student code has a time limit and its exits are caught (issue 39): a step that hangs during
``bench kit``'s certification stops at ``--block-timeout``; the capstone grader gives a hanging or exiting
student step a feedback row instead of hanging or ending the cell. CPU."""

from __future__ import annotations

import signal
import sys
import time

import pytest
from kit_models import StreamingConformer
from test_kit import conformer_declaration, conformer_steps, conformer_traffic

from cadencelab import cli
from cadencelab.adapters.kit import KitModel, Traffic
from cadencelab.adapters.kit.usercode import UserCodeTimeout, UserExit, user_code
from cadencelab.course import capstone
import runpy
from pathlib import Path

ADAPTER_SOLUTIONS = runpy.run_path(str(Path(__file__).parents[1] / "course-solutions" / "solutions.py"))["ADAPTER_SOLUTIONS"]

ME = "test_bad_input_limits"


def test_user_code_stops_at_its_limit_and_catches_exits():
    t0 = time.perf_counter()
    with pytest.raises(UserCodeTimeout, match="the loop ran past its time limit of 0.5 s"), user_code("the loop", 0.5):
        while True:
            pass
    assert time.perf_counter() - t0 < 5 and signal.getitimer(signal.ITIMER_REAL)[0] == 0
    with pytest.raises(UserExit, match=r"the factory called sys.exit\(3\)"), user_code("the factory", 5):
        sys.exit(3)
    with user_code("outer", 30):
        with user_code("inner", 1):
            pass
        assert 0 < signal.getitimer(signal.ITIMER_REAL)[0] <= 30  # the outer limit is back
    assert signal.getitimer(signal.ITIMER_REAL)[0] == 0


def hanging_model(device):
    model = StreamingConformer()
    _, stock = conformer_steps(model)

    def step(x, caches, last):
        time.sleep(3600)

    return KitModel(conformer_declaration(), step, stock, Traffic(conformer_traffic().turns[:1]), modules=(model,),
                    device=device)


def test_a_step_that_hangs_in_bench_kit_certification_stops_at_the_block_timeout(capsys, tmp_path):
    t0 = time.perf_counter()
    rc = cli.main(["bench", "kit", "--model", f"{ME}:hanging_model", "--device", "cpu", "--inline",
                   "--block-timeout", "1", "--out", str(tmp_path)])
    assert rc == 1 and time.perf_counter() - t0 < 60
    err = capsys.readouterr().err
    assert "ran past its time limit of 4 s" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("bad, said", [("hang", "ran past its time limit of 2 s"),
                                       ("exit", "called sys.exit(0)")])
def test_the_capstone_grader_gives_a_hanging_or_exiting_step_a_row(bad, said):
    declare, make_step = ADAPTER_SOLUTIONS["window"]

    def make_bad(model):
        step = make_step(model)

        def bad_step(x, caches, last):
            if bad == "hang":
                time.sleep(3600)
            sys.exit(0)
            return step(x, caches, last)

        return bad_step

    fb = capstone.check_adapter((declare, make_bad), time_limit_s=2)
    assert not fb.ok and len(fb.table) == 2
    assert all(said in h for h in fb.table["hint"]), fb.table["hint"].tolist()
