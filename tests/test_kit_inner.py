"""The kit's inner operators, committed frames and per-operator options, on Token2wav's rule arms.

Token2wav's R and SR arms replay every DiT call inside the vendor's Euler loop: the flow chunk runs at the kit's
``"inner"`` granularity with ``estimator_step`` and ``flow_encoder`` installed on the modules; the vocoder is fed
the flow's committed mel (``Committed``: no lookahead in it). Bit-exactness of every arm is
tests/test_token2wav_runtime.py; this file checks the wiring and every refusal.
"""

from __future__ import annotations

import pytest
import torch

from cadencelab.adapters.kit import Committed, Inner, KitModel, StreamingRuntime
from cadencelab.adapters.token2wav import TEACHING, build_token2wav, make_prompt
from cadencelab.adapters.token2wav.runtime import Token2wavRuntime, runtime_envelope
from cadencelab.adapters.token2wav.steps import declaration
from cadencelab.replay import At, ExactShapeReplay
from cadencelab.state import Carry

from sizes import CPU_STEPS

TOKENS = torch.randint(0, 6561, (200,), generator=torch.Generator().manual_seed(3)).tolist()


def _arm(arm: str) -> Token2wavRuntime:
    flow, hift = build_token2wav(TEACHING, 0, envelope=runtime_envelope(arm, n_timesteps=CPU_STEPS))
    return Token2wavRuntime(flow, hift, "cpu", arm, cfg=TEACHING, backend="eager", n_timesteps=CPU_STEPS)


def _turn(rt, chunks=5, flush=13):
    rt.set_stream_cache(make_prompt(TEACHING, 0))
    buf = [4218] * 3 + TOKENS[:25 * chunks + flush - 3]
    while True:
        last = len(buf) < 28
        rt.stream(buf if last else buf[:28], last_chunk=last)
        if last:
            return
        buf = buf[25:]


@pytest.mark.parametrize("arm,engines", [("SR", {"vocoder_core", "estimator_step", "flow_encoder"}),
                                         ("R", {"vocoder_core", "estimator_step", "flow_encoder"}),
                                         ("SRc", {"flow_chunk", "vocoder_core"}),
                                         ("Rc", {"flow_chunk", "vocoder_core"})])
def test_each_arm_replays_at_its_granularity(arm, engines):
    rt = _arm(arm)
    assert set(rt.engines) == engines and rt.kit is not None
    _turn(rt)
    c = rt.counters()
    if "estimator_step" in engines:  # the vendor's own loop called the engine installed on its DiT
        dit = rt.dit()
        assert isinstance(vars(dit)["forward_chunk"], ExactShapeReplay)
        step = c[c["engine"] == "estimator_step"]
        assert step["replays"].sum() > 0
        assert {lb[-1] for lb in step["label"] if isinstance(lb[-1], int)} == {50, 26}
        assert rt.kit.granularity == {"flow_chunk": "inner", "vocoder_core": "call"}
    else:
        assert "forward_chunk" not in vars(rt.dit())
    # the vocoder is given committed mel frames: a steady call is labelled with the 50 it commits
    voc = c[c["engine"] == "vocoder_core"]
    assert {lb[-1] for lb in voc["label"].dropna()} >= {50, 26}
    # a turn's priming is recorded on the engine whose operator reads the primed regions, not on the vocoder's
    assert "priming" not in voc["miss_reasons"].map(lambda m: tuple(m)).sum()
    if "flow_chunk" in engines:
        flow = c[c["engine"] == "flow_chunk"]
        assert any("priming" in m for m in flow["miss_reasons"])


def test_per_operator_engine_options_and_modules():
    rt = _arm("SRc")
    e = rt.engines
    assert e["flow_chunk"].clone_outputs and e["vocoder_core"].clone_outputs
    assert e["flow_chunk"].modules == [rt.flow] and e["vocoder_core"].modules == [rt.hift]
    # each engine guards the carries its operator touches (and the held state): a flow carry moving leaves the
    # vocoder's graphs alone
    voc = set(e["vocoder_core"].write_through())
    assert {"vocoder_mel_cache", "vocoder_speech_cache", "spk"} <= voc and "conformer_att_cache" not in voc
    assert "conformer_att_cache" in e["flow_chunk"].write_through()
    rc = _arm("Rc")
    assert not rc.engines["flow_chunk"].clone_outputs  # stock state: the next call copies the caches in
    r = _arm("R")
    assert not r.engines["estimator_step"].clone_outputs and r.engines["estimator_step"].modules == [r.dit()]


def _kit(flow, hift, engine_options=None, **kw):
    """A Token2wav kit runtime built by hand (the flow step only, arm R), for the refusals."""
    decl = declaration(TEACHING)
    step = {"flow_chunk": lambda x, caches, last: (x, {}), "vocoder_core": lambda x, caches, last: (x, {})}
    base = dict(form="stock", frames={"flow_chunk": At(0, dim=1, clock="tokens"), "vocoder_core": Committed(2)},
                writes={"flow_chunk": (), "vocoder_core": ()}, stock=step, init=lambda prompt: None)
    return StreamingRuntime(KitModel(decl, step, **{**base, **kw}), "R", backend="eager", engine_options=engine_options)


@pytest.fixture(scope="module")
def modules():
    return build_token2wav(TEACHING, 0)


def _inner(flow, **kw):
    return Inner(flow.decoder.estimator, At("x", dim=2), {"estimator_att_cache": At("att_cache", dim=3)}, **kw)


@pytest.mark.parametrize("kw,match", [
    (lambda f: dict(inner={"estimator_step": _inner(f)}), r"granularity='inner' \(a step replayed whole would capture"),
    (lambda f: dict(granularity={"flow_chunk": "inner"}), r"inner= names no operator"),
    (lambda f: dict(granularity={"flow_chunk": "inner"}, inner={"flow_chunk": _inner(f)}),
     r"'flow_chunk' is an operator the runtime calls itself"),
    (lambda f: dict(granularity={"flow_chunk": "inner"}, inner={"dit_call": _inner(f)}),
     r"'dit_call' is not an operator of the token2wav declaration"),
    (lambda f: dict(granularity={"flow_chunk": "inner"}, inner={"estimator_step": f.decoder.estimator}),
     r"inner\['estimator_step'\] must be an Inner"),
    (lambda f: dict(granularity={"flow_chunk": "inner"}, inner={"estimator_step": _inner(f, method="forward_all")}),
     r"has no method 'forward_all'"),
    (lambda f: dict(granularity={"flow_chunk": "sideways"}), r"granularity of operator 'flow_chunk' must be one of"),
    (lambda f: dict(engine_options={"flow_chunk": dict(budget=1)}),
     r"engine_options\['flow_chunk'\]: \['budget'\] are not engine options"),
    (lambda f: dict(engine_options={"flow_chunk": 3}), r"must each map engine options"),
])
def test_kit_refuses_bad_inner_wiring(modules, kw, match):
    flow, hift = modules
    with pytest.raises(ValueError, match=match):
        _kit(flow, hift, **kw(flow))
    assert "forward_chunk" not in vars(flow.decoder.estimator)  # a refused runtime installed nothing


def test_an_inner_engine_is_installed_once_per_module():
    flow, hift = build_token2wav(TEACHING, 0)
    _kit(flow, hift, granularity={"flow_chunk": "inner"}, inner={"estimator_step": _inner(flow)})
    with pytest.raises(ValueError, match=r"already has an engine installed"):
        _kit(flow, hift, granularity={"flow_chunk": "inner"}, inner={"estimator_step": _inner(flow)})


def test_committed_frames_take_an_int_dim(modules):
    flow, hift = modules
    with pytest.raises(ValueError, match=r"Committed.dim must be an int"):
        _kit(flow, hift, frames={"flow_chunk": At(0, dim=1, clock="tokens"), "vocoder_core": Committed("mel")})


def test_a_base_already_in_the_carry_is_not_copied():
    """An adopted buffer the model primed itself (Token2wav's solver cache): the turn reset records its extent
    and writes nothing; any other base is copied in."""
    from cadencelab.contract import SlidingWindow

    buf = torch.arange(24.0).reshape(1, 2, 12)
    c = Carry("r", SlidingWindow(8), 2, buf, length=0)
    v = buf._version
    c.reset_in_place(buf.narrow(2, 0, 5))
    assert c.length == 5 and buf._version == v
    c.reset_in_place(buf.narrow(2, 2, 5).clone())
    assert c.length == 5 and buf._version > v and torch.equal(buf[..., :5], torch.arange(24.0).reshape(1, 2, 12)[..., 2:7])


def test_a_stock_step_is_given_the_regions_its_operator_touches():
    """Stock state (R, Rc): the vocoder's step (and so its engine, which copies every input it is given into its
    graph's inputs) sees the three vocoder regions, not the flow's caches."""
    rt = _arm("Rc")
    seen = []
    b = rt.kit.ops["vocoder_core"]
    stock = b.stock

    def spy(x, caches, last):
        seen.append(sorted(caches))
        return stock(x, caches, last)

    b.stock = spy
    _turn(rt, chunks=2)
    assert seen and all(k == sorted(b.touches) for k in seen), seen
    assert set(rt.kit.caches) >= {"estimator_att_cache", "vocoder_mel_cache"}  # every region still held


def test_a_chunk_after_the_turns_final_one_is_refused_and_changes_nothing():
    rt = _arm("SRc")
    _turn(rt, chunks=2)
    before = [(c.length, c.buffer.clone()) for c in rt.carries()]
    with pytest.raises(ValueError, match=r"final chunk \(last_chunk=True\): call set_stream_cache"):
        rt.stream(TOKENS[:28])
    assert all(c.length == n and torch.equal(c.buffer, b) for c, (n, b) in zip(rt.carries(), before))
    rt.set_stream_cache(make_prompt(TEACHING, 0))  # the next turn starts as usual
    rt.stream([4218] * 3 + TOKENS[:25])


def test_a_runtime_refused_after_its_inner_engines_bind_installs_nothing():
    """Every check comes before the model is touched: a bad inner read (found when its engine binds) or a bad
    audit region leaves the DiT's method as the vendor wrote it."""
    flow, hift = build_token2wav(TEACHING, 0)
    dit = flow.decoder.estimator
    bad_read = Inner(dit, At("x", dim=2), {"conformer_att_cache": At("att_cache", dim=3)})
    with pytest.raises(Exception, match=r"does not read region 'conformer_att_cache'"):
        _kit(flow, hift, granularity={"flow_chunk": "inner"},
             inner={"flow_encoder": Inner(flow.encoder, At("xs", dim=1, clock="tokens", last="last_chunk"),
                                          {"conformer_att_cache": At("att_cache", dim=3)}),
                    "estimator_step": bad_read})
    assert "forward_chunk" not in vars(dit) and "forward_chunk" not in vars(flow.encoder)
    with pytest.raises(ValueError, match=r"audit_regions: \['nowhere'\]"):
        _kit(flow, hift, granularity={"flow_chunk": "inner"}, inner={"estimator_step": _inner(flow)},
             audit_regions=["nowhere"])
    assert "forward_chunk" not in vars(dit)


def test_modules_an_r_runtime_wired_are_refused_to_the_next_runtime():
    """R installs its engines on the DiT and the encoder: a B0 built on those modules would replay, not run the
    stock code. It is refused, naming the method and what to do."""
    flow, hift = build_token2wav(TEACHING, 0)
    Token2wavRuntime(flow, hift, "cpu", "R", cfg=TEACHING, backend="eager", n_timesteps=CPU_STEPS)
    with pytest.raises(ValueError, match=r"forward_chunk was replaced by an earlier runtime.*arm 'B0'"):
        Token2wavRuntime(flow, hift, "cpu", "B0", cfg=TEACHING, n_timesteps=CPU_STEPS)


def test_a_final_chunk_beyond_the_declared_flush_is_refused_naming_the_counts():
    """The declaration admits a final call of at most 54 frames (27 tokens); the rule arms refuse a longer one
    before anything moves, naming the counts (B0, the vendor's loop, runs it)."""
    rt = _arm("S")
    rt.set_stream_cache(make_prompt(TEACHING, 0))
    rt.stream([4218] * 3 + TOKENS[:25])
    before = [(c.length, c.buffer.clone()) for c in rt.carries()]
    with pytest.raises(ValueError, match=r"final call commits at most 54 'frames'.*\(56 committed\)"):
        rt.stream(TOKENS[25:53], last_chunk=True)
    assert all(c.length == n and torch.equal(c.buffer, b) for c, (n, b) in zip(rt.carries(), before))
    assert not rt.kit.ended


@pytest.mark.parametrize("state_rule", [True, False], ids=["carries", "stock state"])
def test_inner_operators_on_a_model_they_were_not_written_for(state_rule):
    """The teaching model's attention, ``model.attend``, declared as an inner operator of its chunk (a test-only
    operator reading the K|V cache): its calls from inside the step go through their own engine, outputs
    bit-exact with the stock step. The attention sees the cache with the call's frames in it, one call more than
    the chunk's declared extents, so the classes past the first ones fall outside the catalog and run eagerly
    (fail closed, counted)."""
    import dataclasses

    from cadencelab.adapters.teaching import KV, OPERATOR, TinyStreamer, declaration, kit_steps, make_stream, prime_init
    from cadencelab.adapters.kit import Traffic

    model = TinyStreamer()
    decl = declaration(model.cfg)
    chunk = decl.operator(OPERATOR)
    decl2 = dataclasses.replace(decl, operators=decl.operators + (dataclasses.replace(chunk, name="attend"),))
    stream = make_stream(model.cfg)
    traffic = Traffic(stream.turns, [stream.prompt] * len(stream.turns))
    step, stock = kit_steps(model)
    ref = StreamingRuntime(KitModel(decl, step, stock, init=prime_init(model)), "B0").run(traffic).outputs
    other = TinyStreamer()
    step, stock = kit_steps(other)
    spec = KitModel(decl2, step, stock, operator=OPERATOR, init=prime_init(other), modules=[other], granularity="inner",
                    inner={"attend": Inner(other, At("q", dim=1), {KV: At("kv", dim=2)}, method="attend")})
    rt = StreamingRuntime(spec, "SR" if state_rule else "R", backend="eager")
    got = rt.run(traffic).outputs
    assert len(got) == len(ref) and all(torch.equal(a, b) for a, b in zip(got, ref))
    c = rt.engines["attend"].counters()
    assert c["replays"].sum() > 0 and set(rt.engines) == {"attend"}
    assert c["miss_reasons"].map(lambda m: m.get("outside_catalog", 0)).sum() > 0
