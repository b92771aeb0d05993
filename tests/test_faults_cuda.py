"""Injected faults on the CUDA backend (run on an H200): real graphs, failing closed, bit-exact.

* the carry swapped for a new tensor (or its storage swapped) mid-stream -> invalidation, the
  call runs eagerly, the class is re-captured, every output equals an eager stream;
* a module parameter replaced mid-stream -> invalidation, exact;
* a callable drawing host randomness -> rejected at capture (host_rng), equal to a plain run;
* a shape outside the declared catalog -> outside_catalog, eager, exact, the stream goes on;
* Token2wav SRc on the teaching config with the solver buffer (or a carry) swapped mid-stream
  -> invalidation, PCM bit-identical to StockToken2wav on the same stream;
* a callable that syncs inside capture -> capture_failed, that class stays eager and counted,
  the stream goes on (other classes keep replaying) and device randomness still works.

Every test needs a CUDA device (``@pytest.mark.cuda``; skipped by conftest.py without one). The
capture-failure test is last: a failed capture is the one fault here that could leave the CUDA
runtime in an unusual state if the engine mishandled it.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import toys
from cadencelab.contract import admitted_labels
from cadencelab.replay import CAPTURED, FAILED, REJECTED, ExactShapeReplay
from cadencelab.state import Carry
from toys import POLICY, F, P, R, declaration, one_row, randn

D = 16
DECL = declaration(D)


@pytest.fixture(autouse=True)
def _deterministic_and_replay_enabled(monkeypatch):
    monkeypatch.delenv("CADENCELAB_NO_REPLAY", raising=False)
    old = torch.backends.cudnn.deterministic, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.deterministic = True
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.deterministic, torch.backends.cuda.matmul.allow_tf32 = old


def _model():
    return toys.Attend(D, seed=300, out_proj=True)


def _stream():
    return toys.Stream(D, "cuda")


def _inputs(sizes, seed=2000):
    return [randn(f, D, seed=seed + i).cuda() for i, f in enumerate(sizes)]


def _classify(x, buf, length):
    return (length, x.shape[0])


# ---------------------------------------------------------------------------------------
# pointer drift
# ---------------------------------------------------------------------------------------


@pytest.mark.cuda
@pytest.mark.parametrize("how", ["new_tensor", "data_swap"])
def test_carry_swap_invalidates_and_equals_eager(how):
    model = _model().cuda()
    eager, replayed = _stream(), _stream()
    eng = ExactShapeReplay(model, "attend", backend="cuda", catalog=admitted_labels(DECL, "attend"),
                           classify=_classify, owners=lambda: [replayed.carry.buffer], modules=[model])
    for i, x in enumerate(_inputs([F] * 10)):
        if i == 5:
            old = replayed.carry
            if how == "new_tensor":
                replayed.carry = Carry("kv", POLICY, 0, old.buffer.clone(), length=old.length)
            else:
                old.buffer.data = old.buffer.data.clone()
        assert torch.equal(replayed.call(eng, x), eager.call(model, x)), f"call {i}"
    torch.cuda.synchronize()
    assert torch.equal(replayed.carry.view(), eager.carry.view())
    locked = one_row(eng.counters(), label=(P + R, F))
    assert (locked["status"], locked["invalidations"], locked["captures"], locked["replays"]) == (CAPTURED, 1, 2, 5)
    assert locked["miss_reasons"] == {"probe": 2, "invalidated": 1}
    inval = [e for e in eng.events if e["kind"] == "invalidation"]
    assert len(inval) == 1 and inval[0]["detail"] == "aliased input moved" and inval[0]["call"] == 6


@pytest.mark.cuda
def test_parameter_replaced_invalidates_and_equals_eager():
    model, ref = _model().cuda(), _model().cuda()
    eager, replayed = _stream(), _stream()
    eng = ExactShapeReplay(model, "attend", backend="cuda", owners=lambda: [replayed.carry.buffer], modules=[model])
    for i, x in enumerate(_inputs([F] * 8)):
        if i == 4:
            model.o.weight = torch.nn.Parameter(model.o.weight.detach().clone(), requires_grad=False)
        assert torch.equal(replayed.call(eng, x), eager.call(ref, x)), f"call {i}"
    inval = [e for e in eng.events if e["kind"] == "invalidation"]
    assert len(inval) == 1 and inval[0]["detail"] == "write-through/parameter moved: module0.o.weight"
    assert int(eng.counters()["replays"].sum()) >= 3


# ---------------------------------------------------------------------------------------
# host randomness, a shape outside the catalog
# ---------------------------------------------------------------------------------------


def _torch_host_noise(x):
    return x + torch.rand(x.shape).to(x.device)  # the CPU generator: host randomness


def _numpy_noise(x):
    return x * float(np.random.rand())


def _python_noise(x):
    return x + random.random()


@pytest.mark.cuda
@pytest.mark.parametrize("fn", [_torch_host_noise, _numpy_noise, _python_noise], ids=["torch_cpu", "numpy", "python"])
def test_host_rng_rejected_on_cuda(fn):
    xs = [torch.full((64,), float(i), device="cuda") for i in range(5)]

    def seed():
        torch.manual_seed(21)
        np.random.seed(21)
        random.seed(21)

    seed()
    want = [fn(x) for x in xs]
    want_next = torch.rand(3)
    seed()
    eng = ExactShapeReplay(fn, "noisy", backend="cuda")
    got = [eng(x) for x in xs]
    assert all(torch.equal(g, w) for g, w in zip(got, want))
    assert torch.equal(torch.rand(3), want_next)
    row = eng.counters().iloc[0]
    assert (row["status"], row["reason"], row["rng"], row["replays"], row["eager"]) == (REJECTED, "host_rng", "host", 0, 5)
    assert eng.events[0]["kind"] == "rejected"


@pytest.mark.cuda
def test_shape_outside_the_catalog_is_eager_and_exact_on_cuda():
    model = _model().cuda()
    eager, replayed = _stream(), _stream()
    eng = ExactShapeReplay(model, "attend", backend="cuda", catalog=admitted_labels(DECL, "attend"),
                           classify=_classify, owners=lambda: [replayed.carry.buffer], modules=[model])
    sizes = [F, F, F, F, F + 2, 1, F, F, F + 2, F]
    for i, x in enumerate(_inputs(sizes)):
        assert torch.equal(replayed.call(eng, x), eager.call(model, x)), f"call {i} (f={x.shape[0]})"
    torch.cuda.synchronize()
    assert torch.equal(replayed.carry.view(), eager.carry.view())
    c = eng.counters()
    out = one_row(c, label=(P + R, F + 2))
    assert (out["status"], out["reason"], out["eager"], out["replays"], out["captures"]) == (
        REJECTED, "outside_catalog", 2, 0, 0)
    steady = one_row(c, label=(P + R, F))
    assert steady["status"] == CAPTURED and steady["replays"] == 4


# ---------------------------------------------------------------------------------------
# Token2wav SRc: the solver buffer or a carry swapped mid-stream
# ---------------------------------------------------------------------------------------

T2W_TOKENS = toys.token2wav_tokens(8)
SWAP_AT = 4  # chunk 3 replays the (402, 402, 50) graph; chunk 4 meets the swap; chunks 6, 7 replay the re-capture


def _drive_t2w(model, prompt, swap=None, swap_at=SWAP_AT):
    return toys.drive_token2wav(model, prompt, T2W_TOKENS, swap, swap_at)


@pytest.mark.cuda
@pytest.mark.parametrize("swap,detail", [(toys.swap_solver_buffer, "solver_workspace"),
                                         (toys.swap_conformer_carry, "aliased input moved")],
                         ids=["solver_buffer", "conformer_carry"])
def test_token2wav_src_buffer_swap_invalidates_and_equals_stock(swap, detail):
    from cadencelab.adapters.token2wav import TEACHING, StockToken2wav, build_token2wav, make_prompt
    from cadencelab.adapters.token2wav.runtime import Token2wavRuntime, runtime_envelope

    prompt = make_prompt(TEACHING, 0, "cuda")
    flow, hift = build_token2wav(TEACHING, 0, device="cuda")
    ref = _drive_t2w(StockToken2wav(flow, hift, "cuda"), prompt)
    del flow, hift
    flow, hift = build_token2wav(TEACHING, 0, device="cuda", envelope=runtime_envelope("SRc"))
    rt = Token2wavRuntime(flow, hift, "cuda", "SRc", cfg=TEACHING, backend="cuda")
    got = _drive_t2w(rt, prompt, swap=swap)
    assert got == ref, [i for i, (a, b) in enumerate(zip(got, ref)) if a != b]
    flow_engine = rt.engines["flow_chunk"]
    inval = [e for e in flow_engine.events if e["kind"] == "invalidation"]
    assert len(inval) == 1 and detail in inval[0]["detail"], flow_engine.events
    locked = one_row(rt.counters(), engine="flow_chunk", label=(402, 402, 50))
    assert (locked["status"], locked["invalidations"], locked["captures"]) == (CAPTURED, 1, 2)
    assert locked["replays"] == 3  # chunk 3 before the swap; chunks 6 and 7 after the re-capture at chunk 5
    assert locked["miss_reasons"] == {"probe": 2, "invalidated": 1}
    assert not [e for e in flow_engine.events if e["kind"] == "capture_failed"]
    voc = rt.counters().query("engine == 'vocoder_core'")
    assert (voc["rng"] == "device").any() and int(voc["replays"].sum()) > 0
    del rt
    torch.cuda.empty_cache()


# --- keep last: a capture that fails --------------------------------------------------------


class SyncingAttend(toys.Attend):
    """The flush class reads a device value on the host: legal eagerly, illegal while capturing."""

    def __init__(self):
        super().__init__(D, seed=300, out_proj=True)

    @torch.no_grad()
    def forward(self, x, buf, length):
        out = super().forward(x, buf, length)
        if x.shape[0] != F:
            out = out * float(out.abs().amax())  # .item(): a device->host sync
        return out


@pytest.mark.cuda
def test_sync_inside_capture_fails_that_class_the_stream_goes_on():
    model = SyncingAttend().cuda()
    eager, replayed = _stream(), _stream()
    eng = ExactShapeReplay(model, "attend", backend="cuda", catalog=admitted_labels(DECL, "attend"),
                           classify=_classify, owners=lambda: [replayed.carry.buffer], modules=[model])
    default = torch.cuda.current_stream()
    sizes = [F, F, F, F, 1, F, F, 1, F, F]
    for i, x in enumerate(_inputs(sizes, seed=4000)):
        assert torch.equal(replayed.call(eng, x), eager.call(model, x)), f"call {i} (f={x.shape[0]})"
    torch.cuda.synchronize()
    assert torch.cuda.current_stream() == default
    assert torch.equal(replayed.carry.view(), eager.carry.view())
    c = eng.counters()
    flush = one_row(c, label=(P + R, 1))
    assert (flush["status"], flush["reason"], flush["replays"], flush["eager"]) == (FAILED, "capture_failed", 0, 2)
    assert flush["miss_reasons"] == {"probe": 1, "capture_failed": 1}
    steady = one_row(c, label=(P + R, F))
    assert steady["status"] == CAPTURED and steady["replays"] == 5  # the stream went on replaying
    assert [e["kind"] for e in eng.events].count("capture_failed") == 1
    # device randomness still works, and a device-RNG graph captured afterwards replays exactly
    torch.cuda.manual_seed(3)
    a = torch.rand(4, device="cuda")
    torch.cuda.manual_seed(3)
    assert torch.equal(a, torch.rand(4, device="cuda"))
    noisy = ExactShapeReplay(lambda x: x + torch.randn_like(x), "noisy", backend="cuda")
    x = torch.zeros(33, device="cuda")
    torch.cuda.manual_seed(8)
    got = [noisy(x) for _ in range(4)]
    torch.cuda.manual_seed(8)
    want = [x + torch.randn_like(x) for _ in range(4)]
    assert all(torch.equal(g, w) for g, w in zip(got, want))
    assert noisy.counters().iloc[0]["replays"] == 3
