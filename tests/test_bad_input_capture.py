"""A failed capture names its first failing operation (issue 35 item 4): the op log the engine takes on a second,
throwaway capture of a call whose capture failed names the first op that cannot be captured (a host sync, a host
tensor) or the first op that raised, with the user's line. The log itself is checked on CPU; the engine's use
of it on CUDA."""

from __future__ import annotations

import pytest
import torch

from cadencelab.replay import ExactShapeReplay
from cadencelab.replay.oplog import OpLog, diagnose_capture

HERE = "test_bad_input_capture.py"


def syncs(x):
    y = x * 2
    if y.sum().item() > 1e9:  # a host read of a device value: a capture cannot hold it
        y = y + 1
    return torch.nonzero(y)


def raises(x):
    y = x + 1
    return y @ torch.ones(3, 3, device=x.device)


def test_the_op_log_names_the_first_host_sync_with_the_users_line():
    why = diagnose_capture(syncs, (torch.ones(4),), {})
    assert why.startswith("first operation that cannot be captured: aten::_local_scalar_dense (a host sync) at ")
    assert f"{HERE}:" in why and "in syncs" in why


def test_the_op_log_names_the_first_op_that_raised():
    why = diagnose_capture(raises, (torch.ones(2),), {})
    assert why.startswith(("first failing operation: aten::mm at ", "first failing operation: aten::matmul"))
    assert f"{HERE}:" in why and "in raises" in why


def test_the_op_log_records_every_op_and_changes_no_result():
    x = torch.arange(4.0)
    with OpLog() as log:
        y = (x * 2 + 1).sum()
    assert float(y) == 16.0 and log.ops[:3] == ["aten::mul", "aten::add", "aten::sum"] and log.describe() == ""


def test_diagnosis_never_raises():
    assert diagnose_capture(lambda: 1 / 0, (), {}) == ""  # a Python error is no op's


@pytest.mark.cuda
def test_a_failed_capture_names_the_host_sync_on_cuda():
    x = torch.ones(4, device="cuda")
    eng = ExactShapeReplay(syncs, backend="cuda")
    eng(x)  # probe, then the capture fails: the class stays eager
    failed = [e for e in eng.events if e["kind"] == "capture_failed"]
    assert failed and "aten::_local_scalar_dense (a host sync)" in failed[0]["detail"] and HERE in failed[0]["detail"]
    assert torch.equal(eng(x), syncs(x))  # and the engine goes on, eagerly
