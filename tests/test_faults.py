"""Injected faults on a CPU: every one fails closed (eager, exact, counted) or raises a clear error.

* the carry swapped for a new tensor mid-stream -> pointer drift, invalidation, an eager call,
  output equal to a plain stream, a re-capture counted;
* a module parameter replaced mid-stream -> invalidation;
* a wrong layout declared -> the shadow auditor flags the eviction call, one call before the
  first output of a downstream consumer diverges;
* a callable drawing host randomness -> rejected (host_rng), outputs equal a plain seeded run;
* a shape outside the declared catalog -> outside_catalog miss, eager, exact;
* a truncated checkpoint / a malformed trace -> CheckpointError / TraceError naming the file;
* the Token2wav SRc runtime with the estimator's solver buffer (or a carry) swapped mid-stream
  -> invalidation, PCM bit-identical to the stock runtime;
* the soak's CPU smoke mode (``python -m cadencelab.bench soak --device cpu ...``).

The replay engine runs on its eager backend here (same admission logic, guards and counters);
tests/test_faults_cuda.py repeats the device faults with real graphs.
"""

from __future__ import annotations

import gzip
import json
import random
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import toys
from cadencelab.contract import PromptRetained, admitted_labels
from cadencelab.replay import CAPTURED, REJECTED, ExactShapeReplay
from cadencelab.state import Carry, ShadowAuditor
from sizes import CPU_STEPS
from toys import POLICY, F, P, R, declaration, one_row, randn

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(autouse=True)
def _replay_enabled(monkeypatch):
    monkeypatch.delenv("CADENCELAB_NO_REPLAY", raising=False)


D = 8
DECL = declaration(D)


def _model():
    return toys.Attend(D, seed=40)


def _stream(device="cpu"):
    return toys.Stream(D, device)


def _inputs(sizes, seed=100):
    return [randn(f, D, seed=seed + i) for i, f in enumerate(sizes)]


def _classify(x, buf, length):
    return (length, x.shape[0])


# ---------------------------------------------------------------------------------------
# pointer drift: the carry swapped, a parameter replaced
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["new_tensor", "data_swap"])
def test_carry_swapped_mid_stream_invalidates_runs_eagerly_and_stays_exact(how):
    model = _model()
    plain, watched = _stream(), _stream()
    eng = ExactShapeReplay(model, "attend", backend="eager", catalog=admitted_labels(DECL, "attend"),
                           classify=_classify, owners=lambda: [watched.carry.buffer], modules=[model])
    swap_at = 5
    for i, x in enumerate(_inputs([F] * 10)):
        if i == swap_at:
            old = watched.carry
            if how == "new_tensor":  # the carry replaced by a copy at a new address
                watched.carry = Carry("kv", POLICY, 0, old.buffer.clone(), length=old.length)
            else:  # the same tensor object, its storage swapped underneath
                old.buffer.data = old.buffer.data.clone()
                assert not old.address_ok()
        assert torch.equal(watched.call(eng, x), plain.call(model, x)), f"call {i}"
    assert torch.equal(watched.carry.view(), plain.carry.view())
    locked = one_row(eng.counters(), label=(P + R, F))  # the class at the retention bound: calls 2..9
    assert locked["hits"] == 8 and locked["status"] == CAPTURED
    assert locked["invalidations"] == 1
    assert locked["captures"] == 2  # re-captured at the new address on its next hit
    assert locked["miss_reasons"] == {"probe": 2, "invalidated": 1}
    assert locked["replays"] == 8 - 3
    inval = [e for e in eng.events if e["kind"] == "invalidation"]
    assert len(inval) == 1 and inval[0]["call"] == swap_at + 1 and inval[0]["detail"] == "aliased input moved"
    recapture = [e["call"] for e in eng.events if e["kind"] == "capture" and e["label"] == (P + R, F)]
    assert recapture == [3, swap_at + 2]


@pytest.mark.parametrize("how", ["parameter", "data"])
def test_module_parameter_replaced_mid_stream_invalidates(how):
    model, ref = _model(), _model()
    plain, watched = _stream(), _stream()
    eng = ExactShapeReplay(model, "attend", backend="eager", owners=lambda: [watched.carry.buffer], modules=[model])
    for i, x in enumerate(_inputs([F] * 8)):
        if i == 4:  # same values, new storage
            if how == "parameter":
                model.q.weight = torch.nn.Parameter(model.q.weight.detach().clone(), requires_grad=False)
            else:
                model.q.weight.data = model.q.weight.data.clone()
        assert torch.equal(watched.call(eng, x), plain.call(ref, x)), f"call {i}"
    inval = [e for e in eng.events if e["kind"] == "invalidation"]
    assert len(inval) == 1 and inval[0]["call"] == 5
    assert inval[0]["detail"] == "write-through/parameter moved: module0.q.weight"
    c = eng.counters()
    assert int(c["invalidations"].sum()) == 1 and int(c["captures"].sum()) == 4  # 3 classes + the re-capture


# ---------------------------------------------------------------------------------------
# a wrong layout declared: the audit fires before any output diverges
# ---------------------------------------------------------------------------------------


def _int_frames(n, seed):
    """Small-integer frames: sums of products stay exact in float32, so only frame *sets* matter."""
    return torch.randint(-3, 4, (n, D), generator=torch.Generator().manual_seed(seed)).float()


def consume(q, frames):
    """A downstream consumer that cannot see frame order (attention without positions), exactly."""
    scores = frames @ q
    return (scores[:, None] * frames).sum(0)


def _wrong_layout_stream(compare: str, calls: int):
    """The stock cache (newest first, as declared) beside a carry built chronological (the wrong layout)."""
    prompt = _int_frames(P, 1)
    carry = Carry.allocate("kv", PromptRetained(P, R, layout="chronological"), (P + R + F, D), 0)
    carry.reset_in_place(prompt)
    audit = ShadowAuditor(compare=compare)
    audit.watch(carry, POLICY, prompt)  # the declaration's layout is the truth the shadow follows
    stock = prompt.clone()
    ref_out, bad_out = [], []
    for t in range(calls):
        new, q = _int_frames(F, 100 + t), _int_frames(1, 500 + t)[0]
        attended = torch.cat([new, stock])  # stock: newest first, then the stock cut
        ref_out.append(consume(q, attended))
        stock = POLICY.apply(attended, 0).clone()
        bad_out.append(consume(q, torch.cat([carry.view(), new])))  # the faulty stream attends its own carry
        audit.step(carry, new, t)
    first_out = next((t for t in range(calls) if not torch.equal(ref_out[t], bad_out[t])), None)
    return audit, first_out


def test_wrong_layout_is_flagged_at_the_eviction_call_before_the_output_diverges():
    calls = 6
    eviction = next(t for t in range(calls) if P + (t + 1) * F > P + R)  # first call whose retention cuts
    assert eviction == 2
    audit, first_out = _wrong_layout_stream("frames", calls)
    assert audit.first_divergence is not None
    assert audit.first_divergence.call == eviction  # the retention that went wrong
    assert [r["agreed"] for r in audit.records[:eviction]] == [True] * eviction  # same frames, order aside
    assert "frame sets differ" in audit.first_divergence.detail
    assert first_out == eviction + 1  # the consumer first sees the wrong frames on the next call
    assert audit.first_divergence.call < first_out
    # the elementwise audit (the product's bar) fires even earlier: on the first retention
    strict, first_out_again = _wrong_layout_stream("elementwise", calls)
    assert strict.first_divergence.call == 0 < first_out_again == first_out
    assert strict.summary().iloc[0]["first_divergent_call"] == 0


def test_correct_layout_never_diverges():
    prompt = _int_frames(P, 1)
    carry = Carry.allocate("kv", POLICY, (P + R + F, D), 0)
    carry.reset_in_place(prompt)
    audit = ShadowAuditor()
    audit.watch(carry, POLICY, prompt)
    for t in range(6):
        assert audit.step(carry, _int_frames(F, 100 + t), t)
    assert audit.ok and audit.agreements == 6


# ---------------------------------------------------------------------------------------
# host randomness: rejected, and the probe was the real call
# ---------------------------------------------------------------------------------------


def _torch_noise(x):
    return x + torch.rand(x.shape)


def _python_noise(x):
    return x + random.random()


def _numpy_noise(x):
    return x + float(np.random.rand())


def _seed_all(s):
    torch.manual_seed(s)
    random.seed(s)
    np.random.seed(s)


def _next_draws():
    return (torch.rand(3), random.random(), float(np.random.rand()))


@pytest.mark.parametrize("fn", [_torch_noise, _python_noise, _numpy_noise], ids=["torch", "python", "numpy"])
def test_host_rng_callable_is_rejected_and_matches_a_plain_run(fn):
    xs = [torch.full((4,), float(i)) for i in range(6)]
    _seed_all(9)
    want = [fn(x) for x in xs]
    want_next = _next_draws()
    _seed_all(9)
    eng = ExactShapeReplay(fn, "noisy", backend="eager")
    got = [eng(x) for x in xs]
    got_next = _next_draws()
    assert all(torch.equal(g, w) for g, w in zip(got, want))
    assert torch.equal(got_next[0], want_next[0]) and got_next[1:] == want_next[1:]  # generators untouched
    row = eng.counters().iloc[0]
    assert (row["status"], row["reason"], row["rng"], row["replays"], row["eager"]) == (REJECTED, "host_rng", "host", 0, 6)
    assert row["miss_reasons"] == {"probe": 1, "host_rng": 5}
    assert [e["kind"] for e in eng.events] == ["rejected"]


# ---------------------------------------------------------------------------------------
# a shape outside the declared catalog
# ---------------------------------------------------------------------------------------


def test_shape_outside_the_catalog_runs_eagerly_and_exactly():
    labels = admitted_labels(DECL, "attend")
    assert (P + R, F + 2) not in labels and (P + R, 1) in labels  # flushes above f_chunk are not admitted
    model = _model()
    plain, watched = _stream(), _stream()
    eng = ExactShapeReplay(model, "attend", backend="eager", catalog=labels, classify=_classify,
                           owners=lambda: [watched.carry.buffer], modules=[model])
    sizes = [F, F, F, F, F + 2, 1, F, F, F + 2, F]
    for i, x in enumerate(_inputs(sizes)):
        assert torch.equal(watched.call(eng, x), plain.call(model, x)), f"call {i} (f={x.shape[0]})"
    c = eng.counters()
    out = one_row(c, label=(P + R, F + 2))
    assert (out["status"], out["reason"], out["hits"], out["eager"], out["replays"], out["captures"]) == (
        REJECTED, "outside_catalog", 2, 2, 0, 0)
    assert out["miss_reasons"] == {"outside_catalog": 2}
    steady = one_row(c, label=(P + R, F))
    assert steady["status"] == CAPTURED and steady["replays"] == 4
    assert one_row(c, label=(P + R, 1))["status"] == CAPTURED  # an admitted flush: probed and captured
    assert "outside_catalog 2" in eng.summary()


# ---------------------------------------------------------------------------------------
# files: a truncated checkpoint, a malformed trace
# ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from cadencelab.adapters.token2wav import TEACHING, build_token2wav, save_checkpoint

    flow, hift = build_token2wav(TEACHING, 0)
    return save_checkpoint(tmp_path_factory.mktemp("ckpt"), flow, hift, TEACHING)


def _truncate(path: Path, keep: float | int):
    data = path.read_bytes()
    n = int(len(data) * keep) if isinstance(keep, float) else keep
    path.write_bytes(data[:n])


CHECKPOINT_FAULTS = [
    ("flow.pt truncated to half", "flow.pt", lambda p: _truncate(p, 0.5), "cannot be read"),
    ("flow.pt truncated to 64 bytes", "flow.pt", lambda p: _truncate(p, 64), "cannot be read"),
    ("flow.pt empty", "flow.pt", lambda p: _truncate(p, 0), "cannot be read"),
    ("flow.pt deleted", "flow.pt", lambda p: p.unlink(), "missing file"),
    ("flow.pt of another model", "flow.pt", lambda p: torch.save({"w": torch.zeros(2)}, p), "does not match"),
    ("hift.pt truncated", "hift.pt", lambda p: _truncate(p, 0.3), "cannot be read"),
    ("hift.pt holds no tensors", "hift.pt", lambda p: torch.save({"w": 1}, p), "expected a mapping"),
    ("flow.yaml truncated", "flow.yaml", lambda p: _truncate(p, 0.4), ""),
    ("flow.yaml garbage", "flow.yaml", lambda p: p.write_text("flow: [unclosed\n  - {"), "malformed YAML"),
]


@pytest.mark.parametrize("target,corrupt,reason", [c[1:] for c in CHECKPOINT_FAULTS],
                         ids=[c[0] for c in CHECKPOINT_FAULTS])
def test_corrupt_checkpoint_raises_checkpoint_error_naming_the_file(checkpoint, tmp_path, target, corrupt, reason):
    from cadencelab.adapters.token2wav import CheckpointError, load_checkpoint

    folder = Path(shutil.copytree(checkpoint, tmp_path / "ckpt"))
    load_checkpoint(folder)  # intact: loads
    corrupt(folder / target)
    with pytest.raises(Exception) as info:
        load_checkpoint(folder)
    assert type(info.value) is CheckpointError, f"{type(info.value).__name__}: {info.value}"
    msg = str(info.value)
    assert msg.startswith(str(folder / target) + ":"), msg
    assert reason in msg


def _trace_faults():
    good = (FIXTURES / "traces" / "graph_replay.json").read_text()
    return [
        ("truncated JSON", "t.json", lambda p: p.write_text(good[: len(good) // 2]), "truncated JSON"),
        ("truncated gzip", "t.json.gz", lambda p: p.write_bytes(gzip.compress(good.encode())[:40]),
         "truncated or corrupt gzip"),
        ("gzip name, plain content", "t.json.gz", lambda p: p.write_text(good), "not gzip"),
        ("empty", "t.json", lambda p: p.write_text(""), "empty"),
        ("binary garbage", "t.json", lambda p: p.write_bytes(bytes(range(128, 256))), "not UTF-8"),
        ("not JSON", "t.json", lambda p: p.write_text("traceEvents: []"), "not valid JSON"),
        ("a number", "t.json", lambda p: p.write_text("42"), "expected a JSON object"),
        ("no traceEvents", "t.json", lambda p: p.write_text('{"events": []}'), "missing 'traceEvents'"),
        ("traceEvents not a list", "t.json", lambda p: p.write_text('{"traceEvents": {}}'), "must be a list"),
        ("an event without dur", "t.json",
         lambda p: p.write_text((FIXTURES / "traces" / "missing_dur.json").read_text()), "without 'dur'"),
        ("missing file", "t.json", lambda p: None, "cannot read trace file"),
    ]


@pytest.mark.parametrize("case", range(len(_trace_faults())), ids=[c[0] for c in _trace_faults()])
def test_malformed_trace_raises_trace_error_naming_the_file(tmp_path, case):
    from cadencelab.profile.trace import TraceError, load_trace

    _, name, write, reason = _trace_faults()[case]
    path = tmp_path / name
    write(path)
    with pytest.raises(Exception) as info:
        load_trace(path)
    assert type(info.value) is TraceError, f"{type(info.value).__name__}: {info.value}"
    assert str(info.value).startswith(f"{path}:"), str(info.value)
    assert reason in str(info.value)


def test_intact_trace_fixture_loads(tmp_path):
    from cadencelab.profile.trace import load_trace

    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress((FIXTURES / "traces" / "graph_replay.json").read_bytes()))
    assert len(load_trace(path).kernels) > 0


# ---------------------------------------------------------------------------------------
# Token2wav: the solver buffer (or a carry) swapped mid-stream
# ---------------------------------------------------------------------------------------

T2W_TOKENS = toys.token2wav_tokens(6)


def _drive_t2w(model, prompt, swap=None, swap_at=3):
    return toys.drive_token2wav(model, prompt, T2W_TOKENS, swap, swap_at)


@pytest.fixture(scope="module")
def t2w_reference():
    from cadencelab.adapters.token2wav import TEACHING, StockToken2wav, build_token2wav, make_prompt

    prompt = make_prompt(TEACHING, 0)
    flow, hift = build_token2wav(TEACHING, 0)
    return prompt, _drive_t2w(StockToken2wav(flow, hift, "cpu"), prompt)


@pytest.mark.parametrize("swap,detail", [(toys.swap_solver_buffer, "solver_workspace"),
                                         (toys.swap_conformer_carry, "aliased input moved")],
                         ids=["solver_buffer", "conformer_carry"])
def test_token2wav_buffer_swap_mid_stream_invalidates_and_pcm_stays_stock(t2w_reference, swap, detail):
    """Either the engine invalidates and the PCM still equals the stock stream, or a clear error: never a
    silent wrong result. What happens: the engine sees the drift, drops the class, runs it eagerly, re-captures,
    and the PCM of every chunk is the stock PCM."""
    from cadencelab.adapters.token2wav import TEACHING, build_token2wav
    from cadencelab.adapters.token2wav.runtime import Token2wavRuntime, runtime_envelope

    prompt, ref = t2w_reference
    flow, hift = build_token2wav(TEACHING, 0, envelope=runtime_envelope("SRc"))
    rt = Token2wavRuntime(flow, hift, "cpu", "SRc", cfg=TEACHING, backend="eager")
    try:
        got = _drive_t2w(rt, prompt, swap=swap, swap_at=3)
    except Exception as e:  # the other acceptable outcome: a clear error naming the buffer
        pytest.fail(f"raised instead of failing closed: {type(e).__name__}: {e}")
    assert got == ref, "silent wrong result after the swap"
    flow_engine = rt.engines["flow_chunk"]
    inval = [e for e in flow_engine.events if e["kind"] == "invalidation"]
    assert len(inval) == 1, flow_engine.events
    assert detail in inval[0]["detail"]
    locked = one_row(rt.counters(), engine="flow_chunk", label=(402, 402, 50))
    assert locked["invalidations"] == 1 and locked["captures"] == 2 and locked["status"] == CAPTURED
    assert locked["miss_reasons"] == {"probe": 2, "invalidated": 1}
    assert locked["replays"] >= 1  # admitted again after the re-capture
    assert rt.est.address_ok() and rt.est.length == 402


# ---------------------------------------------------------------------------------------
# the soak's CPU smoke mode
# ---------------------------------------------------------------------------------------


def _soak(tmp_path, *extra):
    from cadencelab.bench.__main__ import main

    out = tmp_path / "soak"
    rc = main(["soak", "--device", "cpu", "--config", "teaching", "--steps", str(CPU_STEPS), "--out", str(out), *extra])
    return rc, json.loads((out / "soak.json").read_text()), pd.read_csv(out / "soak_chunks.csv")


def test_soak_cpu_smoke(tmp_path):
    rc, res, chunks = _soak(tmp_path, "--chunks", "12", "--turn-every", "5")
    assert rc == 0
    s = res["summary"]
    for key in ("chunks", "exact_chunks", "peak_growth_bytes_after_warmup", "fallbacks_after_warmup",
                "warmup_chunks"):
        assert key in s
    assert (s["chunks"], s["exact_chunks"], s["compared_chunks"], s["exact_chunks_f32"]) == (12, 12, 12, 12)
    assert s["peak_growth_bytes_after_warmup"] is None  # no allocator on a CPU
    assert s["fallbacks_after_warmup"] == 0 and s["fallbacks_during_warmup"] == 0 and s["passed"]
    assert [t["calls"] for t in res["turns"]] == [5, 7]  # no stub turn is left at the end
    assert s["warmup_chunks"] == 12  # two warm-up turns: both flush sizes
    for key in ("git_commit", "torch", "date", "determinism", "study"):
        assert key in res["provenance"]
    assert res["provenance"]["study"]["chunks"] == 12
    assert len(chunks) == 12 and chunks["exact_i16"].all()
    assert chunks["kind"].tolist() == ["first"] + ["steady"] * 3 + ["flush"] + ["first"] + ["steady"] * 5 + ["flush"]
    assert (chunks["sha_i16"] == chunks["sha_i16_ref"]).all()


def test_soak_cpu_counts_declared_eager_cases_after_warmup(tmp_path):
    rc, res, chunks = _soak(tmp_path, "--chunks", "12", "--turn-every", "4", "--warmup-turns", "1")
    assert rc == 0
    s = res["summary"]
    assert [t["calls"] for t in res["turns"]] == [4, 4, 4] and s["warmup_chunks"] == 4
    assert s["exact_chunks"] == 12 and s["fallbacks_after_warmup"] == 0
    declared = s["declared_eager_after_warmup"]
    assert declared["flow_chunk:priming"] == 2  # turns 1 and 2 prime eagerly
    assert declared["flow_chunk:outside_catalog"] == 1  # turn 1 flushes 27 tokens: 54 frames > f_chunk
    assert declared["vocoder_core:outside_catalog"] == 1
    assert s["replayed_calls_after_warmup"] > 0
    assert chunks.loc[chunks["chunk"] == 7, "declared_eager"].item() >= 2


def test_soak_analysis_counts_fallbacks_and_allocator_growth():
    """The gate's bookkeeping on synthetic rows: a probe after warm-up is a fallback, growth is measured."""
    from cadencelab.bench.soak import SoakConfig, analyse, plan_turns, shard_turns

    cfg = SoakConfig(config="teaching", device="cuda", chunks=9, turn_every=3, jitter=0, warmup_turns=1)
    turns = plan_turns(cfg)
    assert [(t.start, t.calls, t.flush_tokens) for t in turns] == [(0, 3, 13), (3, 3, 27), (6, 3, 13)]
    assert [len(t.tokens) for t in turns] == [25 * 2 + 10, 25 * 2 + 24, 25 * 2 + 10]
    assert shard_turns(turns, 2) == [[0, 1], [2]] and shard_turns(turns, 8) == [[0], [1], [2]]
    rows = []
    for t in turns:
        for k in range(3):
            c = t.start + k
            last = k == 2
            misses = {}
            if k == 0:
                misses["flow_chunk:priming"] = 1
            if c < 3:
                misses["flow_chunk:probe"] = 1
            if c == 5:  # the 54-frame flush: declared
                misses["flow_chunk:outside_catalog"] = 1
            if c == 7:  # a class first seen after warm-up: a fallback
                misses["flow_chunk:probe"] = 1
            if c == 8:  # an outside-catalog miss on an admissible flush: a fallback
                misses["vocoder_core:outside_catalog"] = 1
            frames = 2 * t.flush_tokens if last else 50
            rows.append(dict(chunk=c, turn=t.turn, call=k, kind="flush" if last else ("first" if k == 0 else "steady"),
                             tokens=t.flush_tokens if last else 28, frames=frames, beyond_f_chunk=last and frames > 50,
                             sha_i16=f"h{c}", sha_f32=f"f{c}", latency_ms=1.0, wall_ms=1.0, allocated_bytes=100,
                             peak_bytes=1000 + (3 * 2**20 if c == 8 else 0), reserved_bytes=4000, replays=1,
                             misses=misses, events={}))
    arm = pd.DataFrame(rows)
    ref = arm.copy()
    ref.loc[ref["chunk"] == 4, "sha_i16"] = "different"
    res = analyse(cfg, turns, arm, ref, {}, [])
    s = res["summary"]
    assert (s["chunks"], s["exact_chunks"], s["first_mismatch_chunk"]) == (9, 8, 4)
    assert s["fallbacks_after_warmup"] == 2
    assert s["fallbacks_after_warmup_by_reason"] == {"flow_chunk:probe": 1, "vocoder_core:outside_catalog": 1}
    assert s["declared_eager_after_warmup"] == {"flow_chunk:priming": 2, "flow_chunk:outside_catalog": 1}
    assert s["peak_growth_bytes_after_warmup"] == 3 * 2**20 and s["peak_flat"] is False
    assert not s["passed"]
