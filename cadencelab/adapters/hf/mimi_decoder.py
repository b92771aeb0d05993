"""transformers' ``MimiModel`` streaming decoder on the kit, through the bridge (:mod:`.bridge`).

transformers streams Mimi's decoder with one cache: its transformer's K/V (``decode(codes,
decoder_cache=...)``; its convs keep no state between calls in transformers' loop). So the declared state
is each decoder transformer layer's K/V (``SlidingWindow(window - 1)``, what its sliding layer keeps) and
the RoPE positions (a :class:`~cadencelab.contract.Counter`). A call is ``codes_per_call`` codes; its
output the audio. Certified against transformers' own loop (:func:`~.mimi_codec.reference_decoder`).
"""

from __future__ import annotations

import torch

from ...contract import Counter, Declaration, Operator, Region, SlidingWindow
from ..kit import KitModel, Traffic
from .bridge import Bridge, kv_shape
from .mimi_codec import build, clocks, host_conv_sizes, reference_decoder

__all__ = ["OPERATOR", "declaration", "kit_model", "kit_model_on", "steps"]

OPERATOR = "decode"


def declaration(model, codes_per_call: int = 2) -> tuple[Declaration, list]:
    """(declaration, [K/V regions]) of the decoder, sized from the model's config."""
    cfg = model.decoder.config
    heads, dim = kv_shape(cfg)
    kvs = [f"kv{i}" for i in range(cfg.num_hidden_layers)]
    regions = [Region(n, clock="frames", shape=(2, 1, heads, "frames", dim), lifetime="turn", envelope="attended",
                      policy=SlidingWindow(cfg.sliding_window - 1)) for n in kvs]
    regions.append(Region("pos", clock="frames", shape=(1, "frames"), policy=Counter(), dtype="int64", lifetime="turn"))
    op = Operator(OPERATOR, reads=tuple(kvs), clock="codes", flush=(1, codes_per_call, 1))
    return Declaration("hf-mimi-decoder", clocks(cfg, codes_per_call), tuple(regions), (op,), call_clock="calls"), kvs


def steps(model, kvs: list):
    """(step, stock): ``decode`` with the bridge's cache over the carries, and with the model's own cache."""
    cfg, model = model.decoder.config, host_conv_sizes(model)  # the decoder's convs pad on every call

    def call(own):
        def step(x, caches, last):
            b = Bridge(caches, own=own)
            out = model.decode(x, decoder_cache=b.kv(kvs, cfg),
                               position_ids=b.positions("pos", x.shape[-1] * cfg.latent_stride, x.device))
            return out.audio_values, b.result()
        return step

    return call(False), call(True)


def kit_model(model=None, codes=None, codes_per_call: int = 2, device="cpu") -> KitModel:
    """The decoder as a :class:`~cadencelab.adapters.kit.KitModel`: two seeded turns of codes (11 and 6, a
    final call of one code each), its reference transformers' own streaming loop."""
    model = model or build(device=device)
    decl, kvs = declaration(model, codes_per_call)
    if codes is None:
        g = torch.Generator().manual_seed(5)
        codes = [torch.randint(0, model.config.codebook_size, (1, model.config.num_quantizers, n), generator=g)
                 for n in (11, 6)]
    traffic = Traffic.stream(decl, [c.to(device) for c in codes], clock="codes", dim=2)
    step, stock = steps(model, kvs)
    return KitModel(decl, step, stock, traffic, frames=2, modules=(model,), device=str(device),
                    reference=reference_decoder(model))


def kit_model_on(device="cpu") -> KitModel:
    """``python -m cadencelab.bench kit --model cadencelab.adapters.hf.mimi_decoder:kit_model_on``."""
    return kit_model(device=device)
