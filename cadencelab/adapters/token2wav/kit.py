"""Token2wav on the adapter kit: the declaration plus one step per stream call, for the kit's factorial.

:func:`kit_model` is a :class:`~cadencelab.adapters.kit.KitModel` of the vendor ``(flow, hift)``: the kit's arms
(B0, S, R, Rc, SR, SRc: the runtime's switches) on Token2wav, certified and measured by
``python -m cadencelab.bench kit --model token2wav``. It is the kit's Token2wav, not the paper's arms of
:class:`~cadencelab.adapters.token2wav.runtime.Token2wavRuntime`; how they differ is said below.

**Declaration** (:func:`kit_declaration`): :func:`~cadencelab.adapters.token2wav.runtime.declaration_for` plus
one operator, ``stream_chunk`` (a whole stream call: flow chunk, vocoder, cross-fade; it reads the two attention
caches, like ``flow_chunk``, whose catalog it shares). Two regions say where the kit carries them: the
estimator cache is carried in the solver's own buffer (not a workspace region the kit skips: the buffer is
adopted as its carry, at the attended envelope, as arm S keeps it) and the vocoder's mel overlap at its
attended envelope (the step appends the chunk's mel in place and vocodes the carry).

**Steps**, both in the kit's stock form (the attended caches, the runtime keeps the declared cut):

* the step: the vendor's ``flow.inference_chunk`` on the carries (it writes the estimator cache into the
  adopted solver buffer itself; the runtime retains it there by in-place moves), the chunk's mel appended to
  the mel carry, the whole vocoder (:class:`~cadencelab.adapters.token2wav.parts.VocoderSplit` with the
  capture-safe iSTFT) on it, the vendor's cross-fade and the stock trim; the returned PCM is the call's output;
* the stock step: the same operations on plain tensors with the stock ``torch.cat`` and cut
  (:class:`~cadencelab.adapters.token2wav.StockToken2wav`'s loop), a test checks it against that class.

**Turns**: ``init`` primes with the vendor's ``setup_cache`` (prompt tokens plus the lookahead's silence) and
seeds the generators (HiFT draws every call: every arm sees the same draws).

How the kit's arms differ from the paper's (``bench token2wav``): the whole call (flow, vocoder, cross-fade)
is one step, so Rc/SRc replay it in one graph where the paper's replay the flow and the vocoder apart with
the cross-fade eager; R and SR are the kit's (the step replayed without, and with, the carries' writes kept
eager), not the paper's solver-step granularity (every DiT call replayed inside the vendor loop); every arm
uses the device-resident constants and the capture-safe iSTFT (bit-identical values); the state-rule arms
hold the demand-sized solver buffers, the others the vendor's 16 x 1000 when built for that arm
(``arm=``), else the demand-sized ones too.
"""

from __future__ import annotations

import contextlib
import dataclasses

import numpy as np
import torch

from ...contract import T2W_CLOCKS, Operator, Token2wavClocks
from ...replay import At
from ..kit import ARMS, KitModel, Traffic
from .build import build_token2wav
from .configs import REAL, TEACHING, Token2wavConfig
from .parts import VocoderSplit, make_constants_device_resident
from .prompts import PromptState, make_prompt
from .runtime import declaration_for, runtime_envelope
from .stock import crossfade

__all__ = ["OPERATOR", "FLOW", "VOCODER", "kit_declaration", "kit_steps", "kit_model", "kit_model_on",
           "kit_model_teaching"]

OPERATOR = "stream_chunk"
#: the flow's caches (the vendor's cache dict) and the vocoder's
FLOW = ("estimator_att_cache", "conformer_att_cache", "estimator_cnn_cache", "conformer_cnn_cache")
VOCODER = ("vocoder_mel_cache", "vocoder_source_cache", "vocoder_speech_cache")


def kit_declaration(cfg: Token2wavConfig, clocks: Token2wavClocks = T2W_CLOCKS):
    """:func:`declaration_for` with the ``stream_chunk`` operator, the estimator cache carried in the solver's
    buffer and the mel overlap at its attended envelope (see the module docstring)."""
    d = declaration_for(cfg, clocks=clocks)
    where = {"estimator_att_cache": dict(resident_in=None, envelope="attended"),
             "vocoder_mel_cache": dict(envelope="attended")}
    regions = tuple(dataclasses.replace(r, **where[r.name]) if r.name in where else r for r in d.regions)
    flow = d.operator("flow_chunk")
    op = Operator(OPERATOR, reads=flow.reads, clock=flow.clock, flush="lookahead", scalars=flow.scalars,
                  description="one stream call: flow chunk, vocoder, cross-fade")
    return dataclasses.replace(d, regions=regions, operators=d.operators + (op,))


def kit_steps(flow, hift, decl, clocks: Token2wavClocks, spk: torch.Tensor, device):
    """``(step, stock)`` of one stream call (see the module docstring); ``spk`` holds the turn's speaker
    embedding (written by ``init``)."""
    device = torch.device(device)
    vocoder = VocoderSplit.graph_safe_for(hift)
    keep = clocks.source_cache_samples
    window = torch.from_numpy(np.hamming(2 * keep)).to(device)
    cut = {n: decl.region(n).policy for n in ("estimator_att_cache", "conformer_att_cache")}

    def autocast():
        return torch.amp.autocast("cuda", dtype=torch.float32) if device.type == "cuda" else contextlib.nullcontext()

    def flow_chunk(token, caches, last):
        with autocast():
            return flow.inference_chunk(token=token, spk=spk, cache={n: caches[n] for n in FLOW}, last_chunk=last,
                                        n_timesteps=clocks.n_steps)

    def fade_and_trim(speech, tail, last):
        """The vendor's cross-fade with the kept tail, then the stock trim: (speech to keep from, output)."""
        first = tail.shape[-1] == 0
        if not first:
            speech = crossfade(speech, tail, window)
        if last:
            return speech, speech
        if first:
            return speech, torch.cat([torch.zeros(1, keep, device=speech.device), speech[:, :-keep]], dim=1)
        return speech, speech[:, :-keep]

    def step(x, caches, last):
        mel, new = flow_chunk(x, caches, last)
        attended = caches.append("vocoder_mel_cache", mel)  # the chunk after the kept overlap, in the carry
        speech, source = vocoder.whole(attended, caches["vocoder_source_cache"])
        speech, out = fade_and_trim(speech, caches["vocoder_speech_cache"], last)
        return out, dict(new, vocoder_mel_cache=attended, vocoder_source_cache=source, vocoder_speech_cache=speech)

    def stock(x, caches, last):
        mel, new = flow_chunk(x, caches, last)
        new["estimator_att_cache"] = cut["estimator_att_cache"].apply(new["estimator_att_cache"], 4)
        new["conformer_att_cache"] = cut["conformer_att_cache"].apply(new["conformer_att_cache"], 3)
        attended = torch.concat([caches["vocoder_mel_cache"], mel], dim=2)
        speech, source = vocoder.whole(attended, caches["vocoder_source_cache"])
        speech, out = fade_and_trim(speech, caches["vocoder_speech_cache"], last)
        return out, dict(new, vocoder_mel_cache=attended[..., -clocks.mel_cache_frames:].clone(),
                         vocoder_source_cache=source[:, :, -keep:].clone(),
                         vocoder_speech_cache=speech[:, -keep:].clone())

    return step, stock


def _turns(cfg: Token2wavConfig, clocks: Token2wavClocks, seed: int, turns: int, chunks: int, device) -> list:
    """Seeded token ids, one (1, n) int32 tensor per turn: ``chunks`` steady calls and a final one."""
    g = torch.Generator().manual_seed(seed)
    n = chunks * clocks.tokens_per_chunk + clocks.lookahead_tokens + clocks.tokens_per_chunk // 2
    return [torch.randint(0, cfg.vocab_size, (1, n), generator=g, dtype=torch.int32).to(device) for _ in range(turns)]


def kit_model(cfg: Token2wavConfig = TEACHING, seed: int = 0, device="cpu", *, arm: str | None = None,
              clocks: Token2wavClocks = T2W_CLOCKS, turns: int = 2, chunks: int = 3) -> KitModel:
    """Token2wav as the adapter kit runs it: seeded vendor modules, :func:`kit_declaration`, :func:`kit_steps`,
    priming as ``init`` and ``turns`` turns of ``chunks`` steady calls and a final one.

    ``arm``: the one arm this model will run (a process of ``bench kit``): an arm without the state rule gets
    the vendor's stock solver buffers; by default (every arm in one process) the demand-sized ones."""
    device = torch.device(device)
    stock_arm = arm is not None and not ARMS[arm]["state_rule"]
    flow, hift = build_token2wav(cfg, seed, device=device, envelope=runtime_envelope("B0" if stock_arm else "S",
                                                                                        clocks=clocks))
    make_constants_device_resident(flow, hift, device)
    decl = kit_declaration(cfg, clocks)
    dec = flow.decoder
    if not stock_arm:  # the solver reads its start noise at [offset, offset + f): the declared extent suffices
        dec.rand_noise = dec.rand_noise[:, :, :decl.region("cfm_noise").policy.extent].clone()
    spk = torch.zeros(1, flow.spk_embed_affine_layer.in_features, device=device)
    step, stock = kit_steps(flow, hift, decl, clocks, spk, device)
    silence = clocks.silence_token

    def init(prompt: PromptState) -> dict:
        torch.manual_seed(seed)  # HiFT draws every call: each turn from the same generator state, in every arm
        tokens, _, spk_emb, mels, _ = prompt.as_tuple()
        pad = torch.full((1, clocks.lookahead_tokens), silence, device=tokens.device, dtype=tokens.dtype)
        cache = flow.setup_cache(torch.cat([tokens, pad], dim=1), mels, spk_emb, n_timesteps=clocks.n_steps)
        spk.copy_(spk_emb)
        # the solver's buffers hold the vendor's 16 slots in a stock arm: the declared steps are the first
        return {n: cache[n][:clocks.n_steps] if n.startswith("estimator") else cache[n] for n in FLOW}

    prompt = make_prompt(cfg, seed, device, clocks=clocks)
    signals = _turns(cfg, clocks, seed, turns, chunks, device)
    traffic = Traffic.stream(decl, signals, clock="tokens", prompts=[prompt] * turns)
    adopt = {"estimator_att_cache": dec.att_cache_buffer, "estimator_cnn_cache": dec.cnn_cache_buffer}
    return KitModel(decl, step, stock, traffic, frames=At(0, dim=1, clock="tokens"), form="stock", operator=OPERATOR,
                    init=init, modules=(flow, hift), device=str(device), adopt=None if stock_arm else adopt,
                    held={"spk": spk}, audits=("declared",))


def kit_model_on(device="cpu", arm: str | None = None) -> KitModel:
    """:func:`kit_model` of the real sizes (``REAL``) on ``device`` (``bench kit --model token2wav``)."""
    return kit_model(REAL, device=device, arm=arm)


def kit_model_teaching(device="cpu", arm: str | None = None) -> KitModel:
    """:func:`kit_model` of the teaching sizes (``bench kit --model token2wav-teaching``: a CPU-sized run)."""
    return kit_model(TEACHING, device=device, arm=arm)
