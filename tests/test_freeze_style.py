"""The Freeze-Omni-style decoder (a model written from published facts, not Freeze-Omni)."""

import pytest
import torch

from cadencelab.adapters.freeze_style import (
    FULL_HISTORY, CarryStream, FreezeStyleDecoder, OverlapPolicy, causal_conv, compare, declaration,
    stream_reference, stream_with_carry,
)
from cadencelab.contract import derive
from cadencelab.adapters.freeze_style import freeze_style_declaration


@pytest.fixture(scope="module")
def model():
    return FreezeStyleDecoder()


@pytest.fixture(scope="module")
def turns():
    g = torch.Generator().manual_seed(1)
    # turn 1: 6 steady chunks + a 7-token flush; turn 2 (after a reset): 2 steady + a 10-token flush
    return [torch.randint(0, 1028, (127,), generator=g), torch.randint(0, 1028, (50,), generator=g)]


def test_model_shape_and_conv(model):
    tok = torch.randint(0, 1028, (1, 3))
    assert model(tok).shape == (1, 3 * 600)
    c = model.token_conv
    h = torch.randn(1, 32, 40)
    ref = torch.nn.functional.conv1d(h, c.weight, c.bias, dilation=c.dilation[0])
    torch.testing.assert_close(causal_conv(h, c.weight, c.bias, c.dilation[0]), ref)


def test_carry_bit_exact_with_full_history_reference(model, turns):
    ref = stream_reference(model, turns, FULL_HISTORY)
    rt = CarryStream(model)
    ptrs = rt.pointers()
    got = stream_with_carry(model, turns, 20, runtime=rt)
    assert len(got) == len(ref) == 10  # >= 6 chunks in the first turn, then a turn reset
    assert all(torch.equal(a, b) for a, b in zip(ref, got))
    assert rt.pointers() == ptrs and all(c.address_ok() for c in rt.carries) and len(rt.carries) == 5


def test_overlap_recompute_is_not_bitwise_equal(model, turns):
    a = stream_reference(model, turns, OverlapPolicy(20, 40, 10))
    b = stream_with_carry(model, turns, 20)
    assert [x.shape for x in a] == [x.shape for x in b]
    assert torch.equal(a[0], b[0])  # first chunk: both start from a zero state
    assert not torch.equal(a[1], b[1])  # truncated 10-token left context vs the exact 20-token one


def test_declaration_catalog_and_replay_classes(model, turns):
    assert derive(freeze_style_declaration()).verdict.set_index("operator").loc["decode_chunk", "K"] == 2
    assert derive(declaration(model.cfg)).verdict.set_index("operator").loc["decode_chunk", "K"] == 2
    rt = CarryStream(model, replay=True, backend="eager")
    ptrs = rt.pointers()
    got = stream_with_carry(model, turns, 20, runtime=rt)
    assert all(torch.equal(a, b) for a, b in zip(stream_reference(model, turns), got))
    assert rt.pointers() == ptrs
    labels = {c.label for c in rt.engine.classes.values() if c.label is not None}
    steady = {lab for lab in labels if lab[1] == 20}
    assert steady == {(0, 20), (20, 20)} and len(steady) <= 2
    counters = rt.engine.counters()
    assert (counters.loc[counters["status"] != "unclassed", "status"] == "captured").all()
    assert counters["replays"].sum() > 0 and counters["invalidations"].sum() == 0


def test_compare_frame(model, turns):
    df = compare(model, turns[:1])
    assert set(df["path"]) == {"a: overlap recompute", "b: carry"}
    assert {"seconds", "tokens_decoded", "state_bytes", "exact_vs_full"} <= set(df.columns)
    b = df[df["path"] == "b: carry"]
    assert b["exact_vs_full"].all()
    a = df[df["path"] == "a: overlap recompute"]
    assert a["tokens_decoded"].sum() > b["tokens_decoded"].sum()
