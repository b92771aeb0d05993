"""Every arm of the Token2wav runtime is bit-identical to the stock arm.

CPU: eager replay backend (bookkeeping only) on the teaching config, at CPU_STEPS solver steps.
CUDA: real graph capture and replay, teaching and real configs, at the declared steps.
"""

from __future__ import annotations

import hashlib

import pytest
import torch

from cadencelab.adapters.token2wav import REAL, TEACHING, StockToken2wav, build_token2wav, make_prompt
from cadencelab.adapters.token2wav.runtime import ARMS, FACTORIAL, Token2wavRuntime, chunk_frames, runtime_envelope

from sizes import CPU_STEPS  # the solver steps of the CPU comparisons (tests/sizes.py: why 3 cover the 10)

TOKENS = torch.randint(0, 6561, (400,), generator=torch.Generator().manual_seed(1)).tolist()


def _drive(model, prompt, turns=((3, 13), (2, 27)), seed=5, device="cpu"):
    """Two turns: (steady chunks, flush tokens) each. Returns per-chunk (pcm, mel, speech) digests."""
    torch.manual_seed(seed)
    if device != "cpu":
        torch.cuda.manual_seed(seed)
    out, pos = [], 0
    for chunks, flush in turns:
        model.set_stream_cache(prompt)
        n = 25 * chunks + flush - 3
        buf = [4218] * 3 + TOKENS[pos:pos + n]
        pos += n
        while True:
            last = len(buf) < 28
            pcm = model.stream(buf if last else buf[:28], last_chunk=last)
            mel = model.last_mel.float().cpu().numpy().tobytes()
            wav = model.last_speech.float().cpu().numpy().tobytes()
            out.append(tuple(hashlib.sha256(b).hexdigest() for b in (pcm, mel, wav)))
            if last:
                break
            buf = buf[25:]
    return out


def _stock(cfg, device, steps=None):
    flow, hift = build_token2wav(cfg, 0, device=device)
    return StockToken2wav(flow, hift, device, **({} if steps is None else {"n_timesteps": steps}))


def _arm(cfg, arm, device, backend, steps=None):
    flow, hift = build_token2wav(cfg, 0, device=device, envelope=runtime_envelope(arm, n_timesteps=steps))
    return Token2wavRuntime(flow, hift, device, arm, cfg=cfg, backend=backend, n_timesteps=steps)


def test_chunk_frames():
    assert chunk_frames(28, False) == 50
    assert chunk_frames(28, True) == 56
    assert chunk_frames(13, True) == 26


def test_state_arm_refuses_stock_buffers():
    flow, hift = build_token2wav(TEACHING, 0)
    with pytest.raises(ValueError, match="demand"):
        Token2wavRuntime(flow, hift, "cpu", "S", cfg=TEACHING)


@pytest.fixture(scope="module")
def cpu_reference():
    prompt = make_prompt(TEACHING, 0)
    return prompt, _drive(_stock(TEACHING, "cpu", CPU_STEPS), prompt)


@pytest.mark.parametrize("arm", FACTORIAL)
def test_arm_bit_identical_to_stock_cpu(arm, cpu_reference):
    prompt, ref = cpu_reference
    rt = _arm(TEACHING, arm, "cpu", "eager", CPU_STEPS)
    got = _drive(rt, prompt)
    assert got == ref
    if ARMS[arm].replay:
        c = rt.counters()
        assert (c["replays"] > 0).any(), rt.summaries()  # admitted calls (eager backend)
        assert "vocoder_core" in rt.engines
    if ARMS[arm].state_rule:
        assert rt.est.address_ok() and rt.conf_att.address_ok()
        assert rt.est.length == 402  # prompt + retained after the turn's chunks
        rt.set_stream_cache(prompt)
        assert rt.est.length == 302 and rt.est.address_ok()


def test_state_rule_extents_follow_the_declaration():
    prompt = make_prompt(TEACHING, 0)
    rt = _arm(TEACHING, "S", "cpu", "eager", CPU_STEPS)
    rt.set_stream_cache(prompt)
    lengths = []
    buf = [4218] * 3 + TOKENS[:25 * 4]
    for _ in range(4):
        rt.stream(buf[:28])
        buf = buf[25:]
        lengths.append((rt.est.length, rt.conf_att.length, rt.mel.length, rt.src.length, rt.spc.length))
    assert [x[0] for x in lengths] == [352, 402, 402, 402]
    assert [x[1] for x in lengths] == [352, 402, 402, 402]
    assert lengths[-1][2:] == (8, 3840, 3840)


@pytest.mark.cuda
@pytest.mark.parametrize("cfg", [TEACHING, REAL], ids=["teaching", "real"])
def test_arms_bit_identical_cuda(cfg):
    prompt = make_prompt(cfg, 0, "cuda")
    ref = _drive(_stock(cfg, "cuda"), prompt, device="cuda")
    for arm in FACTORIAL:
        rt = _arm(cfg, arm, "cuda", "cuda")
        got = _drive(rt, prompt, device="cuda")
        assert got == ref, arm
        if ARMS[arm].replay:
            c = rt.counters()
            assert (c["replays"] > 0).any(), (arm, rt.summaries())
            voc = c[c["engine"] == "vocoder_core"]
            assert (voc["rng"] == "device").any(), "the vocoder draws device randomness and is admitted"
            assert (voc["replays"] > 0).any(), rt.summaries()
        del rt
        torch.cuda.empty_cache()


def test_one_build_path_from_a_checkpoint(tmp_path):
    """build_runtime(checkpoint=...): what the benches load (the checkpoint at the arm's envelope, its config, the
    seeded prompt), the same runtime and prompt as the steps done by hand."""
    from cadencelab.adapters.token2wav import load_checkpoint, make_prompt, save_checkpoint
    from cadencelab.adapters.token2wav.runtime import build_runtime

    save_checkpoint(tmp_path, *build_token2wav(TEACHING, 3), TEACHING)
    rt, prompt = build_runtime(None, "S", 5, "cpu", backend="eager", n_timesteps=4, checkpoint=tmp_path)
    flow, hift, cfg = load_checkpoint(tmp_path, seed_for_noise=5, envelope=runtime_envelope("S", n_timesteps=4))
    assert rt.cfg == cfg and rt.n_timesteps == 4 and rt.est.buffer.shape == flow.decoder.att_cache_buffer.shape
    assert all(torch.equal(a, b) for a, b in zip(prompt.as_tuple(), make_prompt(cfg, 5, "cpu").as_tuple()))
    assert torch.equal(rt.flow.decoder.rand_noise, flow.decoder.rand_noise[:, :, :rt.flow.decoder.rand_noise.shape[2]])
    assert all(torch.equal(p, q) for p, q in zip(rt.flow.parameters(), flow.parameters()))


def test_staged_modules_build_the_same_runtime(tmp_path):
    """arm_modules on the CPU, then build_runtime(modules=...): the path a staged bench arm takes gives the runtime
    and prompt of the one-call path."""
    from cadencelab.adapters.token2wav import save_checkpoint
    from cadencelab.adapters.token2wav.runtime import arm_modules, build_runtime
    from cadencelab.adapters.token2wav.clocks import T2W_CLOCKS

    save_checkpoint(tmp_path, *build_token2wav(TEACHING, 3), TEACHING)
    one, p1 = build_runtime(None, "SRc", 5, "cpu", backend="eager", n_timesteps=4, checkpoint=tmp_path)
    staged = arm_modules("SRc", 5, "cpu", checkpoint=tmp_path, clocks=T2W_CLOCKS.with_(n_steps=4))
    two, p2 = build_runtime(None, "SRc", 5, "cpu", backend="eager", n_timesteps=4, modules=staged)
    assert two.cfg == one.cfg and two.n_timesteps == one.n_timesteps == 4
    assert two.est.buffer.shape == one.est.buffer.shape
    assert all(torch.equal(a, b) for a, b in zip(p1.as_tuple(), p2.as_tuple()))
    assert all(torch.equal(a, b) for a, b in zip(one.flow.state_dict().values(), two.flow.state_dict().values()))
    with pytest.raises(ValueError, match="give neither cfg nor checkpoint"):
        build_runtime(None, "SRc", 5, "cpu", n_timesteps=4, modules=staged, checkpoint=tmp_path)
