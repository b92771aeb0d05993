"""ExactShapeReplay on the CUDA backend: bit-exact replay, RNG effects, guards, aliasing, failures.

Every test needs a CUDA device (``@pytest.mark.cuda``; skipped by conftest.py without one).
The reference for every replayed output is a separate eager run of the same callable from
an identical initial state, compared with ``torch.equal``.

The capture-failure test is last in the file: a failed capture is the one thing here that
leaves the CUDA runtime in an unusual state if the engine mishandles it.
"""

from __future__ import annotations

import gc
import random

import pytest
import torch

import toys
from cadencelab.replay import CAPTURED, FAILED, REJECTED, ExactShapeReplay
from cadencelab.state import Carry
from toys import POLICY, F, randn

MiB = 2**20
GRANULE = 2 * MiB  # the caching allocator rounds large blocks to 2 MiB

D = 16


@pytest.fixture(autouse=True)
def _replay_enabled(monkeypatch):
    monkeypatch.delenv("CADENCELAB_NO_REPLAY", raising=False)


def _model():
    """A streaming attention-like step over a prompt-retained, newest-first carry."""
    return toys.Attend(D, seed=100, out_proj=True)


def _stream():
    """One stream's state: a carry sized A + f, reset to the same prompt."""
    return toys.Stream(D, "cuda", from_declaration=False)


def _stream_inputs(n):
    return [randn(F, D, seed=1000 + i).cuda() for i in range(n)]


@pytest.mark.cuda
def test_streaming_carry_replay_is_bit_exact():
    model = _model().cuda()
    eager, replayed = _stream(), _stream()
    eng = ExactShapeReplay(model, "tiny_attention", backend="cuda", owners=lambda: [replayed.carry.buffer],
                           modules=[model])
    lengths = []
    for i, x in enumerate(_stream_inputs(12)):
        lengths.append(replayed.carry.length)
        got = replayed.call(eng, x)
        want = eager.call(model, x)
        assert torch.equal(got, want), f"call {i}: replay differs from eager"
    torch.cuda.synchronize()
    assert torch.equal(replayed.carry.view(), eager.carry.view())
    assert replayed.carry.address_ok()
    assert lengths == [6, 8, 10] + [10] * 9  # three classes until retention locks the extent
    c = eng.counters()
    assert c["status"].tolist() == [CAPTURED] * 3
    assert int(c["replays"].sum()) == 9 and c["replays"].tolist() == [0, 0, 9]
    assert set(c["backend"]) == {"cuda"} and set(c["rng"]) == {"none"}
    assert c["staging_bytes"].tolist() == [F * D * 4] * 3  # x is staged; the carry is aliased
    assert eng.summary() == "tiny_attention: 9 of 12 replayed, 3 misses: probe 3"


@pytest.mark.cuda
def test_pointer_drift_invalidates_and_outputs_stay_exact():
    model = _model().cuda()
    eager, replayed = _stream(), _stream()
    eng = ExactShapeReplay(model, "tiny_attention", backend="cuda", owners=lambda: [replayed.carry.buffer],
                           modules=[model])
    for i, x in enumerate(_stream_inputs(10)):
        if i == 5:  # swap the carry for a new tensor (same values, new address) mid-stream
            old = replayed.carry
            replayed.carry = Carry("kv", POLICY, 0, old.buffer.clone(), length=old.length)
        assert torch.equal(replayed.call(eng, x), eager.call(model, x)), f"call {i}"
    torch.cuda.synchronize()
    assert torch.equal(replayed.carry.view(), eager.carry.view())
    c = eng.counters()
    locked = c[c["hits"] == 8].iloc[0]  # the class at the retention bound: calls 2..9
    assert locked["invalidations"] == 1 and locked["captures"] == 2 and locked["status"] == CAPTURED
    assert locked["replays"] == 5  # 2 before the swap, 3 after the re-capture at the new address
    assert locked["miss_reasons"] == {"probe": 2, "invalidated": 1}
    inval = [e for e in eng.events if e["kind"] == "invalidation"]
    assert len(inval) == 1 and inval[0]["detail"] == "aliased input moved"


def noisy(x):
    return x + torch.rand_like(x) + torch.randn(x.shape, device=x.device)


@pytest.mark.cuda
def test_device_rng_callable_replays_bit_exactly():
    xs = [torch.linspace(-1, 1, 4 * 257, device="cuda").reshape(4, 257) * i for i in range(6)]
    torch.cuda.manual_seed(1234)
    want = [noisy(x) for x in xs]
    want_next = torch.rand(5, device="cuda")
    torch.cuda.manual_seed(1234)
    eng = ExactShapeReplay(noisy, backend="cuda")
    got = [eng(x) for x in xs]
    got_next = torch.rand(5, device="cuda")
    for i, (g, w) in enumerate(zip(got, want)):
        assert torch.equal(g, w), f"call {i}: replayed draws differ from eager"
    assert torch.equal(got_next, want_next)  # the generator ends where eager leaves it
    row = eng.counters().iloc[0]
    assert (row["status"], row["rng"], row["replays"], row["eager"]) == (CAPTURED, "device", 5, 1)


@pytest.mark.cuda
def test_host_rng_callable_is_rejected_on_cuda():
    def jitter(x):
        return x + float(random.random())  # advances Python's host generator

    xs = [torch.full((8,), float(i), device="cuda") for i in range(5)]
    random.seed(21)
    want = [jitter(x) for x in xs]
    random.seed(21)
    eng = ExactShapeReplay(jitter, backend="cuda")
    got = [eng(x) for x in xs]
    assert all(torch.equal(g, w) for g, w in zip(got, want))
    row = eng.counters().iloc[0]
    assert (row["status"], row["reason"], row["rng"], row["replays"], row["eager"]) == (
        REJECTED, "host_rng", "host", 0, 5)


@pytest.mark.cuda
def test_aliasing_removes_the_staging_copy():
    x = torch.ones(4096, 4096, device="cuda")  # 64 MiB

    def colsum(t):
        return t.sum(dim=0)

    want = colsum(x)  # warm the kernel outside the measurement
    torch.cuda.synchronize()

    def setup(owners):
        gc.collect()  # graph capture runs gc.collect(); collect first so nothing else is freed mid-measurement
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        eng = ExactShapeReplay(colsum, backend="cuda", owners=owners)
        outs = [eng(x) for _ in range(3)]  # probe + capture, then two replays
        torch.cuda.synchronize()
        return eng, outs, torch.cuda.memory_allocated() - before

    staged, staged_outs, staged_growth = setup(())
    aliased, aliased_outs, aliased_growth = setup([x])
    for o in staged_outs + aliased_outs:
        assert torch.equal(o, want)
    s_row, a_row = staged.counters().iloc[0], aliased.counters().iloc[0]
    assert s_row["status"] == a_row["status"] == CAPTURED
    assert s_row["replays"] == a_row["replays"] == 2
    assert s_row["staging_bytes"] == 64 * MiB
    assert a_row["staging_bytes"] == 0
    assert "A(owner 0+0)" in a_row["signature"]
    assert abs((staged_growth - aliased_growth) - s_row["staging_bytes"]) <= GRANULE, (
        staged_growth, aliased_growth, s_row["staging_bytes"])


class _Cycle:
    """Holds an engine in a reference cycle: only the cyclic collector can free it."""

    def __init__(self, engine, state):
        self.engine, self.state, self.me = engine, state, self


class DropsAGraphWhileCapturing(torch.nn.Module):
    """The toy attention step that, while its own capture is in progress, lets another engine (which owns a
    captured graph) become cyclic garbage and then allocates Python containers."""

    def __init__(self, inner, holder: list):
        super().__init__()
        self.inner, self.holder = inner, holder

    def forward(self, x, buf, length):
        if torch.cuda.is_current_stream_capturing():
            self.holder.clear()  # the other engine is now unreachable, kept only by its cycle
            junk = [[i] for i in range(2000)]  # container allocations: the collector's trigger
            assert len(junk) == 2000
        return self.inner(x, buf, length)


def _engine_in_a_cycle() -> _Cycle:
    """An engine with captured graphs, reachable only through the cycle it is returned in."""
    state, model = _stream(), _model().cuda()
    eng = ExactShapeReplay(model, "dead", backend="cuda", owners=lambda: [state.carry.buffer], modules=[model])
    for x in _stream_inputs(2):
        state.call(eng, x)
    assert (eng.counters()["status"] == CAPTURED).all()
    return _Cycle(eng, state)


@pytest.mark.cuda
def test_a_garbage_collection_during_capture_cannot_invalidate_it():
    """A collection inside a capture could free an unreachable graph, whose reset invalidates the
    capture in progress (seen on the H200 across tests). The engine holds collection off while it captures."""
    holder = [_engine_in_a_cycle()]
    inner = _model().cuda()
    model = DropsAGraphWhileCapturing(inner, holder)
    eager, replayed = _stream(), _stream()
    eng = ExactShapeReplay(model, "captures_amid_garbage", backend="cuda", owners=lambda: [replayed.carry.buffer],
                           modules=[inner])
    old = gc.get_threshold()
    gc.collect()
    gc.set_threshold(1, 1, 1)  # every container allocation may start a full collection
    try:
        for i, x in enumerate(_stream_inputs(4)):
            got = replayed.call(eng, x)
            want = eager.call(inner, x)
            assert torch.equal(got, want), f"call {i}"
    finally:
        gc.set_threshold(*old)
    gc.collect()
    assert not holder
    c = eng.counters()
    assert c["status"].tolist() == [CAPTURED] * 3, c[["label", "status", "reason"]].to_dict("records")
    assert int(c["replays"].sum()) == 1


# --- keep last: a capture that fails ------------------------------------------------------


@pytest.mark.cuda
def test_inputs_are_keyed_by_their_alignment_up_to_256_bytes():
    """A view 16- but not 256-aligned is another class than a fresh (512-aligned) tensor of the same shape:
    cuBLASLt picks its kernel by alignment up to 256 bytes, so the stock call on the view may compute other
    bits than a replay of a graph captured on an aligned buffer. Each class replays exactly on its own."""
    from cadencelab.replay.engine import _static_like
    from cadencelab.replay.signatures import alignment, signature

    dev = torch.device("cuda")
    lin = torch.nn.Linear(64, 64, device=dev)
    big = torch.randn(1, 64 * 64 + 12, device=dev)
    fresh = torch.randn(64, 64, device=dev)
    view = big[0, 12:12 + 64 * 64].view(64, 64)  # 48 bytes past a 512-aligned block
    assert alignment(view) == 256 and fresh.data_ptr() % 256 == 0 and view.data_ptr() % 256 == 48
    assert signature((view,), {}, [])[0] != signature((fresh,), {}, [])[0]
    assert _static_like(view).data_ptr() % 256 == 48
    eng = ExactShapeReplay(lambda x: lin(x), name="align", backend="cuda")
    with torch.no_grad():
        for x in (fresh, view, fresh.clone(), big[0, 12:12 + 64 * 64].view(64, 64).clone()):
            for _ in range(3):
                assert torch.equal(eng(x), lin(x))
    c = eng.counters()
    assert len(c) == 2 and (c["status"] == CAPTURED).all() and (c["replays"] > 0).all()


@pytest.mark.cuda
def test_sync_inside_capture_fails_closed_to_eager():
    def syncing(x):
        return x * 2 + x.max().item()  # a host read: illegal while the stream is capturing

    xs = [torch.arange(6, device="cuda", dtype=torch.float32) + i for i in range(4)]
    eng = ExactShapeReplay(syncing, backend="cuda")
    default = torch.cuda.current_stream()
    for x in xs:
        assert torch.equal(eng(x), syncing(x))
    assert torch.cuda.current_stream() == default  # the engine restored the caller's stream
    row = eng.counters().iloc[0]
    assert (row["status"], row["reason"], row["replays"], row["eager"]) == (FAILED, "capture_failed", 0, 4)
    assert row["miss_reasons"] == {"probe": 1, "capture_failed": 3}
    assert [e["kind"] for e in eng.events] == ["capture_failed"]
    # the device is still usable for ordinary work afterwards
    y = torch.ones(3, device="cuda") * 3
    assert y.sum().item() == 9.0
    # ...including device randomness: the failed capture must not leave the generator in capture mode
    torch.cuda.manual_seed(3)
    a = torch.rand(4, device="cuda")
    torch.cuda.manual_seed(3)
    assert torch.equal(a, torch.rand(4, device="cuda"))


@pytest.mark.cuda
def test_capture_failure_keeps_earlier_rng_graphs_exact():
    """A capture failure between replays of a device-RNG graph does not shift its draws."""
    noisy = ExactShapeReplay(lambda x: x + torch.rand_like(x), backend="cuda")
    broken = ExactShapeReplay(lambda x: x * 2 + x.max().item(), backend="cuda")
    x = torch.zeros(5, device="cuda")
    torch.cuda.manual_seed(11)
    got = [noisy(x), noisy(x)]
    broken(x)
    broken(x)  # the capture fails here
    got += [noisy(x), noisy(x)]
    torch.cuda.manual_seed(11)
    want = [x + torch.rand_like(x) for _ in range(4)]
    assert all(torch.equal(g, w) for g, w in zip(got, want))
    assert noisy.counters().iloc[0]["replays"] >= 2
