"""Errors that help (issue 35 item 4, issue 39): a failure inside a user's step names the operator, the call and
turn, the input's shape and the regions given (only the one the cause quotes, where it quotes one), the cause
in full and the user's line; no hint where the cause is unknown; a step returning None or a 3-tuple is named;
the one error wrapper prints a cause in full. CPU."""

from __future__ import annotations

import pytest
import torch
from kit_models import StreamingConformer
from test_kit import conformer_declaration, conformer_steps, conformer_traffic

from cadencelab.adapters.kit import KitModel, StreamingRuntime, certify, run_stock
from cadencelab.adapters.kit.steps import StepFailed
from cadencelab.bench.flags import run_main

HERE = "test_bad_input_errors.py"


def _runtime(step):
    model = StreamingConformer()
    _, stock = conformer_steps(model)
    return StreamingRuntime(KitModel(conformer_declaration(), step, stock), backend="eager")


def _turns():
    return conformer_traffic().turns


def test_a_failing_step_names_operator_call_turn_input_and_regions():
    model = StreamingConformer()
    good, _ = conformer_steps(model)
    seen = [0]

    def step(x, caches, last):
        seen[0] += 1
        if seen[0] == 10:  # the third call of the second turn (the first has 7)
            return torch.ones(3, 5) @ torch.ones(4, 2), {}
        return good(x, caches, last)

    rt = _runtime(step)
    turns = _turns()
    rt.reset()
    for x in turns[0][:-1]:
        rt(x)
    rt(turns[0][-1], last=True)
    rt.reset()
    rt(turns[1][0])
    rt(turns[1][1])
    with pytest.raises(StepFailed) as err:
        rt(turns[1][2])
    msg = str(err.value)
    assert msg.startswith("the step of 'encode' raised RuntimeError at call 9 (turn 1, its call 2, 16 'frames' "
                          "committed) given x (1, 20, 8) torch.float32 and the streaming-conformer regions")
    assert "'kv' (2, 2, 32, 4) (declared (2, 2, 'frames', 4))" in msg and "'conv' (1, 8, 14)" in msg
    assert "mat1 and mat2 shapes cannot be multiplied (3x5 and 4x2)" in msg  # the cause, in full
    assert f"{HERE}:" in msg and "in step" in msg  # the user's line
    assert "another order" not in msg  # no hint: the cause is not a region's dims
    assert isinstance(err.value.__cause__, RuntimeError)


def test_a_cause_quoting_one_region_shape_names_only_that_region():
    def step(x, caches, last):
        raise RuntimeError(f"bad tensor of shape {list(caches['kv'].shape)}")

    rt = _runtime(step)
    rt.reset()
    with pytest.raises(StepFailed) as err:
        rt(_turns()[0][0])
    msg = str(err.value)
    assert "the streaming-conformer region 'kv' (2, 2, 0, 4) (declared (2, 2, 'frames', 4)):" in msg
    assert "'conv'" not in msg


def test_a_type_error_inside_the_step_is_named_with_its_line():
    def step(x, caches, last):
        return x + "text", {}

    rt = _runtime(step)
    rt.reset()
    with pytest.raises(StepFailed, match=r"raised TypeError at call 0 .*unsupported operand") as err:
        rt(_turns()[0][0])
    assert f"{HERE}:" in str(err.value)


@pytest.mark.parametrize("ret, said", [(None, "None"), ((1, 2, 3), "a tuple of 3"), ("out", "a str")])
def test_a_step_returning_other_than_a_pair_is_named(ret, said):
    rt = _runtime(lambda x, caches, last: ret)
    rt.reset()
    with pytest.raises(ValueError, match=rf"the step of 'encode' \(views form\) returned {said}; it must return "
                                         r"\(output, \{region: tensor\}\)"):
        rt(_turns()[0][0])


def test_a_stock_step_returning_a_triple_is_named():
    model = StreamingConformer()

    def stock(x, caches, last):
        return model.forward_chunk(x, caches["kv"], caches["conv"], last)  # (out, kv, conv): not a pair

    with pytest.raises(ValueError, match=r"the stock step of 'encode' returned a tuple of 3") as err:
        run_stock(KitModel(conformer_declaration(), stock=stock, traffic=conformer_traffic()))
    assert "at call 0 (turn 0, its call 0" in "".join(err.value.__notes__)


def test_a_step_failing_in_certify_preflight_is_named():
    model = StreamingConformer()
    _, stock = conformer_steps(model)

    def step(x, caches, last):
        raise IndexError("the user's index")

    with pytest.raises(StepFailed, match=r"the step of 'encode' \(in the preflight\) raised IndexError at call 0"):
        certify(KitModel(conformer_declaration(), step, stock, conformer_traffic(), modules=[model]), backend="eager")


def test_the_error_wrapper_prints_the_cause_in_full_with_its_notes(capsys):
    long = "a cause " * 80 + "THE END"

    def fn(argv):
        e = RuntimeError(long)
        e.add_note("the note")
        raise e

    assert run_main("prog", fn, []) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "THE END the note" in err and f"[{HERE}:" in err
