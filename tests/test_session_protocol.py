"""One session protocol (start a turn, a call with ``last``, counters): every shipped runtime speaks it, and a
turn driven through it equals the same turn through the runtime's own verbs, bit for bit."""

from __future__ import annotations

import pytest
import torch

from cadencelab.adapters import freeze_style as fs
from cadencelab.adapters import teaching
from cadencelab.adapters.kit import KitModel, Session, StreamingRuntime, run_turns
from cadencelab.adapters.token2wav import TEACHING, StockToken2wav, build_token2wav, make_prompt
from cadencelab.adapters.token2wav.runtime import Token2wavRuntime, runtime_envelope

from sizes import CPU_STEPS


def test_the_teaching_runtime_through_the_protocol_equals_its_own_run():
    model = teaching.TinyStreamer(teaching.TeachingConfig())
    stream = teaching.make_stream(model.cfg)
    own = teaching.TeachingRuntime(model, replay=True, backend="eager").run(stream).outputs
    rt = teaching.TeachingRuntime(model, replay=True, backend="eager")
    assert isinstance(rt, Session) and isinstance(rt.kit, Session)
    got = run_turns(rt, stream.turns, [stream.prompt] * len(stream.turns))
    assert len(got) == len(own) and all(torch.equal(a, b) for a, b in zip(got, own))
    assert (rt.counters()["replays"] > 0).any()


def test_the_freeze_style_carry_stream_through_the_protocol_equals_stream_with_carry():
    model = fs.FreezeStyleDecoder()
    g = torch.Generator().manual_seed(3)
    tokens = torch.randint(0, model.cfg.vocab, (1, 3 * model.cfg.chunk_tokens + 7), generator=g)
    own = fs.stream_with_carry(model, tokens, model.cfg.chunk_tokens)
    rt = fs.CarryStream(model)
    assert isinstance(rt, Session)
    n = model.cfg.chunk_tokens
    turn = [tokens[:, a:a + n] for a in range(0, tokens.shape[1], n)]
    got = run_turns(rt, [turn])
    assert len(got) == len(own) and all(torch.equal(a, b) for a, b in zip(got, own))
    assert rt.counters().empty  # no replay: an empty frame, not an error


def test_the_token2wav_runtime_through_the_protocol_equals_the_vendor_verbs():
    prompt = make_prompt(TEACHING, 0)
    tokens = torch.randint(0, 6561, (28,), generator=torch.Generator().manual_seed(1), dtype=torch.int32)
    turn = [tokens, tokens[:13]]

    def arm():
        flow, hift = build_token2wav(TEACHING, 0, envelope=runtime_envelope("SRc", n_timesteps=CPU_STEPS))
        return Token2wavRuntime(flow, hift, "cpu", "SRc", cfg=TEACHING, backend="eager", n_timesteps=CPU_STEPS)

    rt = arm()
    assert isinstance(rt, Session)
    torch.manual_seed(5)
    got = run_turns(rt, [turn], [prompt])
    own = arm()
    torch.manual_seed(5)
    own.set_stream_cache(prompt)
    want = [own.stream(x.tolist(), last_chunk=i == 1, return_waveform=True) for i, x in enumerate(turn)]
    assert all(bytes(a.tobytes()) == bytes(b.tobytes()) for a, b in zip(got, want))
    assert not isinstance(StockToken2wav(*build_token2wav(TEACHING, 0), "cpu"), Session)  # the vendor's loop, as is


def test_run_turns_refuses_an_object_without_the_protocol():
    with pytest.raises(ValueError, match="does not speak the session protocol"):
        run_turns(object(), [[torch.zeros(1)]])


def test_the_kit_runtime_start_is_its_reset():
    from test_kit import conformer_declaration, conformer_steps, conformer_traffic
    from kit_models import StreamingConformer

    model = StreamingConformer()
    step, stock = conformer_steps(model)
    spec = KitModel(conformer_declaration(), step, stock)
    rt = StreamingRuntime(spec, "SRc", backend="eager")
    traffic = conformer_traffic()
    got = run_turns(rt, traffic.turns)
    want = StreamingRuntime(spec, "SRc", backend="eager").run(traffic)
    assert all(torch.equal(a, b) for a, b in zip(got, want.outputs))
    assert set(rt.counters()["engine"]) == {"encode"}
