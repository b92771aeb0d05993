"""Token2wav's stream call as kit steps: the flow chunk and the vocoder, each with its stock form.

A stream call is two declared operators on the adapter kit's
:class:`~cadencelab.adapters.kit.StreamingRuntime` (kit form ``"stock"``: a step returns its caches uncut and
the runtime keeps what each region's declared policy retains, in place):

* ``flow_chunk`` (x: the chunk's token ids): the vendor's ``flow.inference_chunk`` on the four flow caches (it
  writes the estimator cache into the solver's own buffer, which the state rule adopts as that region's carry);
  its stock form also applies the stock cut (the attention caches' declared retention, as ``torch.cat`` and
  slicing);
* ``vocoder_core`` (x: the chunk's mel): the chunk appended to the mel overlap (in the carry, or ``torch.concat``
  in the stock form), the whole vocoder on it, and the vendor's cross-fade with the kept PCM tail; it writes the
  three vocoder regions and returns the faded waveform, which :func:`trim` cuts as the stock stream does.

:func:`declaration` is the Token2wav declaration with the regions where the kit carries them: the estimator
cache in the solver's buffer at its attended envelope (the buffer holds the call's whole attended extent) and
the mel overlap at its attended envelope (the chunk is appended in place before the vocoder reads it).
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from .clocks import T2W_CLOCKS, Token2wavClocks, token2wav_declaration
from .configs import Token2wavConfig
from .stock import crossfade

__all__ = ["FLOW", "VOCODER", "declaration_for", "declaration", "Token2wavSteps", "token2wav_steps", "trim"]

#: the flow's caches (the vendor's cache dict) and the vocoder's, as declared regions
FLOW = ("estimator_att_cache", "conformer_att_cache", "estimator_cnn_cache", "conformer_cnn_cache")
VOCODER = ("vocoder_mel_cache", "vocoder_source_cache", "vocoder_speech_cache")


def declaration_for(cfg: Token2wavConfig, n_timesteps: int | None = None, prompt_frames: int | None = None,
                    retained: int | None = None, clocks: Token2wavClocks = T2W_CLOCKS):
    """The Token2wav declaration of ``clocks`` at ``cfg``'s sizes (a clock argument given replaces that field)."""
    enc, dit = cfg.encoder, cfg.estimator
    return token2wav_declaration(
        clocks=clocks.with_(n_steps=n_timesteps, prompt_frames=prompt_frames, retained_frames=retained),
        depth=dit.depth, heads=dit.num_heads,
        head_dim=dit.head_dim, hidden=dit.hidden_size, enc_layers=enc.num_blocks + enc.num_up_blocks,
        enc_heads=enc.attention_heads, enc_head_dim=enc.output_size // enc.attention_heads, enc_hidden=enc.output_size,
    )


def declaration(cfg: Token2wavConfig, clocks: Token2wavClocks = T2W_CLOCKS):
    """:func:`declaration_for` with the estimator cache carried in the solver's buffer and the mel overlap at
    their attended envelopes (see the module docstring)."""
    d = declaration_for(cfg, clocks=clocks)
    where = {"estimator_att_cache": dict(resident_in=None, envelope="attended"),
             "vocoder_mel_cache": dict(envelope="attended")}
    return dataclasses.replace(d, regions=tuple(dataclasses.replace(r, **where[r.name]) if r.name in where else r
                                                for r in d.regions))


@dataclass(frozen=True)
class Token2wavSteps:
    """The two operators' steps and stock steps (``(x, caches, last) -> (out, {region: tensor})``)."""

    flow: Callable
    flow_stock: Callable
    vocoder: Callable
    vocoder_stock: Callable
    keep: int  # PCM samples held back for the next call's cross-fade


def token2wav_steps(flow, vocode: Callable, decl, clocks: Token2wavClocks, spk: torch.Tensor,
                    device) -> Token2wavSteps:
    """The steps of ``flow`` and the vocoder ``vocode(mel, source) -> (speech, source)`` (the vendor's HiFT itself,
    or a :class:`~cadencelab.adapters.token2wav.parts.VocoderSplit`'s ``whole``); ``spk`` holds the turn's speaker
    embedding (written at the turn's start)."""
    device = torch.device(device)
    keep = clocks.source_cache_samples
    window = torch.from_numpy(np.hamming(2 * keep)).to(device)
    # the stock cut: each attention cache's declared retention, along its declared frames axis
    cut = {n: (decl.region(n).policy, decl.region(n).clock_axis) for n in ("estimator_att_cache", "conformer_att_cache")}

    def autocast():
        return torch.amp.autocast("cuda", dtype=torch.float32) if device.type == "cuda" else contextlib.nullcontext()

    def flow_step(token, caches, last):
        with autocast():
            return flow.inference_chunk(token=token, spk=spk, cache={n: caches[n] for n in FLOW}, last_chunk=last,
                                        n_timesteps=clocks.n_steps)

    def flow_stock(token, caches, last):
        mel, new = flow_step(token, caches, last)
        for n, (policy, axis) in cut.items():
            new[n] = policy.apply(new[n], axis)
        return mel, new

    def fade(speech, tail):
        return speech if tail.shape[-1] == 0 else crossfade(speech, tail, window)

    def vocoder_step(mel, caches, last):
        attended = caches.append("vocoder_mel_cache", mel)  # the chunk after the kept overlap, in the carry
        speech, source = vocode(attended, caches["vocoder_source_cache"])
        speech = fade(speech, caches["vocoder_speech_cache"])
        return speech, dict(vocoder_mel_cache=attended, vocoder_source_cache=source, vocoder_speech_cache=speech)

    def vocoder_stock(mel, caches, last):
        attended = torch.concat([caches["vocoder_mel_cache"], mel], dim=2)
        speech, source = vocode(attended, caches["vocoder_source_cache"])
        speech = fade(speech, caches["vocoder_speech_cache"])
        return speech, dict(vocoder_mel_cache=attended[..., -clocks.mel_cache_frames:].clone(),
                            vocoder_source_cache=source[:, :, -keep:].clone(),
                            vocoder_speech_cache=speech[:, -keep:].clone())

    return Token2wavSteps(flow_step, flow_stock, vocoder_step, vocoder_stock, keep)


def trim(speech: torch.Tensor, first: bool, last: bool, keep: int) -> torch.Tensor:
    """The stock stream's output of a call: the faded waveform less the ``keep`` samples held back for the next
    call's cross-fade (the turn's first call leads with that much silence; its final call holds nothing back)."""
    if last:
        return speech
    if first:
        return torch.cat([torch.zeros(1, keep, device=speech.device), speech[:, :-keep]], dim=1)
    return speech[:, :-keep]
