"""transformers' ``MimiModel`` at a small seeded size, and what its two adapters share: the clocks of its
convs read from the model, and the model's own padding cache as the template of the bridge's.

The weights are seeded random numbers (the audio means nothing); the streaming structure is the model's:
causal convs with a padding cache (constant-padded, the latent downsample replicate-padded), a
sliding-window transformer whose positions are a count, codes at ``frame_rate``.
"""

from __future__ import annotations

import math

import torch

from ...contract import Clock

__all__ = [
    "build",
    "clocks",
    "conv_hops",
    "hop_clock",
    "host_conv_sizes",
    "padding_template",
    "reference_decoder",
    "reference_encoder",
    "tiny_config",
]


def tiny_config(**kw):
    """A ``MimiConfig`` small enough for a CPU test: 16 samples per code, 2 frames per code, window 8; weights
    drawn wide enough (``initializer_range``, layer scale 1) that attention, and so the positions and the KV
    cache, change every output."""
    from transformers import MimiConfig

    sizes = {"sampling_rate": 1600, "upsampling_ratios": [4, 2], "hidden_size": 32, "num_filters": 4,
             "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 16,
             "intermediate_size": 64, "sliding_window": 8, "codebook_size": 16, "codebook_dim": 16,
             "num_quantizers": 4, "vector_quantization_hidden_dimension": 16, "upsample_groups": 32,
             "max_position_embeddings": 4096, "initializer_range": 0.2, "layer_scale_initial_scale": 1.0}
    return MimiConfig(**{**sizes, **kw})


def build(config=None, seed: int = 0, device="cpu"):
    """A seeded random-weight ``MimiModel`` (eval mode) on ``device``."""
    from transformers import MimiModel

    torch.manual_seed(seed)
    model = MimiModel(config or tiny_config()).eval()
    with torch.no_grad():  # transformers starts every codebook at zero (all codes one latent): seeded centroids
        for m in model.modules():
            if type(m).__name__ == "MimiEuclideanCodebook":
                m.embed_sum.normal_()
                m._embed = None
    return host_conv_sizes(model.to(device))


def host_conv_sizes(model):
    """``model`` with each conv's stride, kernel size and padding kept on the host (plain attributes).

    transformers registers them as buffers, so they follow the model to the GPU, and every call of a conv
    without a padding cache (the decoder's) reads them back to pad (a host read a CUDA graph capture
    refuses). The values and the arithmetic are unchanged; idempotent."""
    for m in model.modules():
        for name in ("stride", "kernel_size", "padding_total"):
            t = m._buffers.get(name) if type(m).__name__ == "MimiConv1d" else None
            if t is not None:
                del m._buffers[name]
                setattr(m, name, t.cpu())
    return model


def padding_template(encoder):
    """The padding cache the model's encoder builds for itself (its per-layer padding, modes and channels),
    taken from one streaming call on silence: the bridge's template, never rewritten by hand. Its paddings
    are read to host ints once here (the model keeps them as device tensors: a host read on every call,
    which a CUDA graph capture refuses)."""
    cfg = encoder.config
    p = next(encoder.parameters())
    with torch.inference_mode():
        x = torch.zeros(1, cfg.audio_channels, cfg.frame_size, device=p.device, dtype=p.dtype)
        own = encoder(x, use_streaming=True).padding_cache
    return type(own)(len(own.per_layer_padding), [int(v) for v in own.per_layer_padding],
                     list(own.per_layer_padding_mode), [int(v) for v in own.per_layer_in_channels])


def conv_hops(encoder) -> list[int]:
    """Samples per input frame of each conv of the encoder's padding cache, in its layer order."""
    convs = [encoder.encoder_seanet.get_submodule(n) for n in encoder.encoder_seanet._conv1d_layer_names]
    hops, h = [], 1
    for c in convs + [encoder.downsample]:
        hops.append(h)
        h *= int(c.conv.stride[0])
    return hops


def hop_clock(hop: int, frame_hop: int) -> str:
    return "samples" if hop == 1 else "frames" if hop == frame_hop else f"x{hop}"


def clocks(config, codes_per_call: int) -> tuple:
    """calls -> codes -> transformer frames -> each conv rate -> samples: the model's rates as clocks."""
    frame_hop = math.prod(config.upsampling_ratios)
    out = [Clock("calls", "codec call"), Clock("codes", "code frame", parent="calls", ratio=codes_per_call),
           Clock("frames", "transformer frame", parent="codes", ratio=config.latent_stride)]
    hop = frame_hop
    for r in config.upsampling_ratios:  # the decoder's order of upsampling = the encoder's from the bottom
        out.append(Clock(hop_clock(hop // r, frame_hop), f"frame at hop {hop // r}", parent=out[-1].name, ratio=r))
        hop //= r
    return tuple(out)


def reference_encoder(model):
    """transformers' own streaming encoder loop (its padding cache and KV cache, chunk by chunk; fresh
    caches each turn): ``reference(traffic) -> [latents per call]``."""

    def reference(traffic):
        outs, pc, kv = [], None, None
        for t, i, op, x, last in traffic.items_of():
            if i == 0:
                pc = kv = None
            o = model.encoder(x, padding_cache=pc, cache=kv, use_streaming=True)
            pc, kv = o.padding_cache, o.cache
            outs.append(o.latents.clone())
        return outs

    return reference


def reference_decoder(model):
    """transformers' own streaming decoder loop (``decode`` with its decoder cache, chunk by chunk; a fresh
    cache each turn): ``reference(traffic) -> [audio per call]``."""

    def reference(traffic):
        outs, kv = [], None
        for t, i, op, x, last in traffic.items_of():
            if i == 0:
                kv = None
            o = model.decode(x, decoder_cache=kv, use_cache=True)
            kv = o.decoder_cache
            outs.append(o.audio_values.clone())
        return outs

    return reference
