"""transformers' ``MimiModel`` streaming encoder on the kit, through the bridge (:mod:`.bridge`).

State, every part of it read from the model: each causal conv's left context (a region on the clock of
the conv's input; constant-padded ones ``Fixed``, started by ``init`` from the model's own
``_cache_init``; the replicate-padded latent downsample a ``SlidingWindow`` that starts empty, so the model
starts it from its first call's input), each transformer layer's K/V (``SlidingWindow(window - 1)``, what
transformers' sliding layer keeps) and the RoPE positions (a :class:`~cadencelab.contract.Counter`). A call
is ``codes_per_call`` codes of audio; its output the latents (the quantizer's input). Certified against
transformers' own loop (:func:`~.mimi_codec.reference_encoder`).
"""

from __future__ import annotations

import torch

from ...contract import Counter, Declaration, Fixed, Operator, Region, SlidingWindow
from ..kit import KitModel, Traffic
from .bridge import Bridge, kv_shape, padding_init
from .mimi_codec import build, clocks, conv_hops, hop_clock, padding_template, reference_encoder

__all__ = ["OPERATOR", "declaration", "kit_model", "kit_model_on", "steps"]

OPERATOR = "encode"


def declaration(model, codes_per_call: int = 2) -> tuple[Declaration, dict, list]:
    """(declaration, {conv layer: padding region}, [K/V regions]) of the encoder, sized from the model."""
    enc, cfg = model.encoder, model.config
    tpl, frame_hop = padding_template(enc), cfg.frame_size // cfg.latent_stride
    pads = {i: f"pad{i}" for i, p in enumerate(tpl.per_layer_padding) if int(p) > 0}
    regions = [Region(n, clock=(k := hop_clock(conv_hops(enc)[i], frame_hop)),
                      shape=(1, tpl.per_layer_in_channels[i], k), lifetime="turn",
                      policy=(Fixed if tpl.per_layer_padding_mode[i] == "constant" else SlidingWindow)(
                          int(tpl.per_layer_padding[i]))) for i, n in pads.items()]
    kvs = [f"kv{i}" for i in range(cfg.num_hidden_layers)]
    regions += [Region(n, clock="frames", shape=(2, 1, *kv_shape(cfg)[:1], "frames", kv_shape(cfg)[1]),
                       policy=SlidingWindow(cfg.sliding_window - 1), lifetime="turn", envelope="attended")
                for n in kvs]
    regions.append(Region("pos", clock="frames", shape=(1, "frames"), policy=Counter(), dtype="int64", lifetime="turn"))
    grows = tuple(r.name for r in regions if not r.policy.constant_extent)
    op = Operator(OPERATOR, reads=grows, clock="samples", flush=(cfg.frame_size, cfg.frame_size * codes_per_call,
                                                                  cfg.frame_size))
    return Declaration("hf-mimi-encoder", clocks(cfg, codes_per_call), tuple(regions), (op,),
                       call_clock="calls"), pads, kvs


def steps(model, pads: dict, kvs: list):
    """(step, stock): the encoder's own forward with the bridge's caches over the carries (views form), and
    with the model's own cache objects filled from the state (the stock step)."""
    enc, tpl = model.encoder, padding_template(model.encoder)
    frame_hop = enc.config.frame_size // enc.config.latent_stride

    def call(own):
        def step(x, caches, last):
            b = Bridge(caches, own=own)
            out = enc(x, padding_cache=b.padding(tpl, pads), cache=b.kv(kvs, enc.config), use_streaming=True,
                      position_ids=b.positions("pos", x.shape[-1] // frame_hop, x.device))
            return out.latents, b.result()
        return step

    return call(False), call(True)


def kit_model(model=None, signals=None, codes_per_call: int = 2, device="cpu") -> KitModel:
    """The encoder as a :class:`~cadencelab.adapters.kit.KitModel`: two seeded turns of noise (11 and 6
    codes, a final call of one code each), its reference transformers' own streaming loop."""
    model = model or build(device=device)
    decl, pads, kvs = declaration(model, codes_per_call)
    fs = model.config.frame_size
    if signals is None:
        g = torch.Generator().manual_seed(3)
        signals = [torch.randn(1, 1, n * fs, generator=g) for n in (11, 6)]
    traffic = Traffic.stream(decl, [s.to(device) for s in signals], clock="samples", dim=2)
    step, stock = steps(model, pads, kvs)
    return KitModel(decl, step, stock, traffic, frames=2, init=padding_init(padding_template(model.encoder), pads),
                    modules=(model,), device=str(device), reference=reference_encoder(model))


def kit_model_on(device="cpu") -> KitModel:
    """``python -m cadencelab.bench kit --model cadencelab.adapters.hf.mimi_encoder:kit_model_on``."""
    return kit_model(device=device)
