"""Token2wav on the adapter kit as one whole-call operator, for the kit's own factorial.

:func:`kit_model` is a :class:`~cadencelab.adapters.kit.KitModel` of the vendor ``(flow, hift)``: the kit's arms
(B0, S, R, Rc, SR, SRc) on Token2wav, certified and measured by ``python -m cadencelab.bench kit --model
token2wav``. The paper's arms (:class:`~cadencelab.adapters.token2wav.runtime.Token2wavRuntime`) run the same two
steps as two operators.

**Declaration** (:func:`kit_declaration`): :func:`~cadencelab.adapters.token2wav.steps.declaration` plus one
operator, ``stream_chunk`` (a whole stream call: flow chunk, vocoder, cross-fade), which reads the two attention
caches like ``flow_chunk`` and shares its catalog. **Steps**: the ``flow_chunk`` and ``vocoder_core`` steps of
:func:`~cadencelab.adapters.token2wav.steps.token2wav_steps` in a row, then the stock trim; the stock step is
their stock forms in a row (:class:`~cadencelab.adapters.token2wav.StockToken2wav`'s loop). **Turns**: ``init``
primes with the vendor's ``setup_cache`` and seeds the generators (HiFT draws every call: every arm sees the
same draws).

How the kit's arms differ from the paper's: Rc/SRc replay flow, vocoder and cross-fade in one graph where the
paper's replay the flow and the vocoder apart; R and SR replay the step without and with the carries' writes
kept eager, not every DiT call inside the vendor loop; every arm uses the device-resident constants and the
capture-safe iSTFT (bit-identical values); the state-rule arms hold demand-sized solver buffers, the others the
vendor's when built for that arm (``arm=``), else demand-sized ones too.
"""

from __future__ import annotations

import dataclasses

import torch

from ...contract import Operator
from .clocks import T2W_CLOCKS, Token2wavClocks
from ...replay import At
from ..kit import ARMS, KitModel, Traffic
from .build import build_token2wav
from .configs import REAL, TEACHING, Token2wavConfig
from .parts import VocoderSplit, make_constants_device_resident
from .prompts import PromptState, make_prompt
from .runtime import runtime_envelope
from .steps import FLOW, declaration, token2wav_steps, trim
from .stock import StockToken2wav

__all__ = ["OPERATOR", "kit_declaration", "kit_steps", "kit_model", "kit_model_on",
           "kit_model_teaching", "vendor_loop", "vocoder_start"]

OPERATOR = "stream_chunk"


def kit_declaration(cfg: Token2wavConfig, clocks: Token2wavClocks = T2W_CLOCKS):
    """:func:`~.steps.declaration` (the estimator cache carried in the solver's buffer, the mel overlap at its
    attended envelope) with the ``stream_chunk`` operator (see the module docstring)."""
    d = declaration(cfg, clocks)
    flow = d.operator("flow_chunk")
    op = Operator(OPERATOR, reads=flow.reads, clock=flow.clock, flush="lookahead", scalars=flow.scalars,
                  description="one stream call: flow chunk, vocoder, cross-fade")
    return dataclasses.replace(d, operators=d.operators + (op,))


def kit_steps(flow, hift, decl, clocks: Token2wavClocks, spk: torch.Tensor, device):
    """``(step, stock)`` of one stream call (see the module docstring): the two operators' steps of
    :func:`~.steps.token2wav_steps` in a row, then the stock trim; ``spk`` holds the turn's speaker embedding
    (written by ``init``)."""
    s = token2wav_steps(flow, VocoderSplit.graph_safe_for(hift).whole, decl, clocks, spk, device)

    def call(flow_step, vocoder_step):
        def step(x, caches, last):
            first = caches["vocoder_speech_cache"].shape[-1] == 0
            mel, new = flow_step(x, caches, last)
            speech, voc = vocoder_step(mel, caches, last)
            return trim(speech, first, last, s.keep), {**new, **voc}
        return step

    return call(s.flow, s.vocoder), call(s.flow_stock, s.vocoder_stock)


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
        flow_start = {n: cache[n][:clocks.n_steps] if n.startswith("estimator") else cache[n] for n in FLOW}
        return {**flow_start, **vocoder_start(mels)}

    prompt = make_prompt(cfg, seed, device, clocks=clocks)
    signals = _turns(cfg, clocks, seed, turns, chunks, device)
    traffic = Traffic.stream(decl, signals, clock="tokens", prompts=[prompt] * turns)
    adopt = {"estimator_att_cache": dec.att_cache_buffer, "estimator_cnn_cache": dec.cnn_cache_buffer}
    return KitModel(decl, step, stock, traffic, frames=At(0, dim=1, clock="tokens"), form="stock", operator=OPERATOR,
                    init=init, modules=(flow, hift), device=str(device), adopt=None if stock_arm else adopt,
                    held={"spk": spk}, audits=("declared",), reference=vendor_loop(flow, hift, device, clocks, seed))


def vendor_loop(flow, hift, device, clocks: Token2wavClocks, seed: int):
    """The certificate's reference: the vendor's own streaming loop (:class:`~.stock.StockToken2wav`, its own
    caches and cuts) over a traffic, each turn primed from its prompt and seeded as ``init`` seeds it."""
    def loop(traffic: Traffic) -> list:
        stock, outs = StockToken2wav(flow, hift, device, n_timesteps=clocks.n_steps), []
        for t, turn in enumerate(traffic.turns):
            torch.manual_seed(seed)
            stock.set_stream_cache(traffic.prompt(t))
            for i, x in enumerate(turn):
                wav = stock.stream(x[0].tolist(), last_chunk=i == len(turn) - 1, return_waveform=True)
                outs.append(torch.from_numpy(wav).to(device))
        return outs
    return loop


def vocoder_start(mels: torch.Tensor) -> dict:
    """The vocoder's caches at a turn's start as the vendor's ``set_stream_cache`` makes them: empty mel, source
    and speech (the model's own start, not the declaration's)."""
    z = mels.new_zeros
    return {"vocoder_mel_cache": z(1, mels.shape[2], 0), "vocoder_source_cache": z(1, 1, 0),
            "vocoder_speech_cache": z(1, 0)}


def kit_model_on(device="cpu", arm: str | None = None) -> KitModel:
    """:func:`kit_model` of the real sizes (``REAL``) on ``device`` (``bench kit --model token2wav``)."""
    return kit_model(REAL, device=device, arm=arm)


def kit_model_teaching(device="cpu", arm: str | None = None) -> KitModel:
    """:func:`kit_model` of the teaching sizes (``bench kit --model token2wav-teaching``: a CPU-sized run)."""
    return kit_model(TEACHING, device=device, arm=arm)
