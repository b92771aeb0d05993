"""The pieces the Token2wav runtime fits around the vendor modules.

Device-resident constants (the three host constants of the stock code, rebuilt once on the device,
bit-identically), engine stand-ins for vendor submodules (solver-step granularity), the vendor's own
graph buckets (the controls), the vocoder split at the iSTFT (:class:`VocoderSplit`) and the pinned
host staging of tokens and waveform (:class:`HostStaging`). :mod:`.runtime` wires them into the arms.
"""

from __future__ import annotations

import math
import time
import types
from typing import Sequence

import numpy as np
import torch

from ...replay import GraphSafeISTFT, no_collection
from .configs import DiTConfig, EncoderConfig, Token2wavConfig

__all__ = ["config_of", "make_constants_device_resident", "capture_vendor_buckets", "with_ops_swapped", "VocoderSplit",
           "HostStaging"]


# ---------------------------------------------------------------------------------------
# device-resident constants (the three host constants of the stock code)
# ---------------------------------------------------------------------------------------


def make_constants_device_resident(flow: torch.nn.Module, hift: torch.nn.Module, device) -> list[str]:
    """Replace the per-call host->device constant copies with buffers built once, bit-identically.

    Each constant is computed on the host exactly as the stock code computes it, then moved
    to ``device`` once: the values the kernels read are the same bytes.
    """
    device = torch.device(device)
    emb = flow.decoder.estimator.t_embedder
    cached: dict = {}

    def timestep_embedding(t, dim, max_period=10000):
        key = (dim, max_period, t.dtype, t.device)
        if key not in cached:  # filled once, before any capture (see the warm call below)
            half = dim // 2
            freqs = torch.exp(-math.log(max_period) * torch.arange(start=0, end=half) / half)
            cached[key] = freqs.to(t)
        args = t[:, None] * cached[key][None]
        embedding = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
        if dim % 2:
            embedding = torch.cat([embedding, torch.zeros_like(embedding[:, :1])], dim=-1)
        return embedding

    emb.timestep_embedding = timestep_embedding
    flow_dtype = next(flow.parameters()).dtype
    timestep_embedding(torch.zeros(1, device=device, dtype=flow_dtype), emb.frequency_embedding_size)

    sine = hift.m_source.l_sin_gen
    harmonics = torch.FloatTensor([[range(1, sine.harmonic_num + 2)]]).to(device)

    def sine_forward(f0):
        fn = torch.multiply(f0, harmonics)
        sine_waves = sine._f02sine(fn) * sine.sine_amp
        uv = sine._f02uv(f0)
        noise_amp = uv * sine.noise_std + (1 - uv) * sine.sine_amp / 3
        noise = noise_amp * torch.randn_like(sine_waves)
        sine_waves = sine_waves * uv + noise
        return sine_waves, uv, noise

    sine.forward = sine_forward
    window = hift.stft_window.to(device)
    if "stft_window" not in hift._buffers:
        del hift.stft_window  # a plain attribute, which Module.to() would leave behind
    hift.register_buffer("stft_window", window, persistent=False)
    return ["timestep_freqs", "harmonic_multiplier", "stft_window"]


# ---------------------------------------------------------------------------------------
# engine stand-ins for vendor submodules (solver-step granularity)
# ---------------------------------------------------------------------------------------


class CountingGraph:
    """Wraps a vendor ``CUDAGraph`` to count how often the vendor's branch replays it."""

    def __init__(self, graph, counter: dict, key):
        self.graph, self.counter, self.key = graph, counter, key

    def replay(self):
        self.counter[self.key] = self.counter.get(self.key, 0) + 1
        return self.graph.replay()


def capture_vendor_buckets(dit: torch.nn.Module, buckets: dict[int, int]) -> None:
    """The vendor's own graph branch, captured at other ``{chunk_frames: max_cache_frames}`` buckets.

    Mirrors what the vendor's ``_init_cuda_graph_chunk`` sets up (static inputs with the cache
    padded to ``max_cache_frames`` and a padded boolean mask, one graph of
    ``blocks_forward_chunk`` per bucket) so that its unchanged ``forward_chunk`` takes the graph
    path for those chunk sizes.
    """
    dtype, device = dit.cnn_cache_buffer.dtype, dit.cnn_cache_buffer.device
    depth, heads = len(dit.blocks), dit.blocks[0].attn.num_heads
    kv, conv = 2 * dit.blocks[0].attn.head_dim, dit.cnn_cache_buffer.shape[2]
    hidden = dit.in_proj.out_features
    with torch.no_grad():
        for chunk, max_size in buckets.items():
            dit.max_size_chunk[chunk] = max_size
            x = torch.zeros((2, dit.in_channels, chunk), dtype=dtype, device=device)
            t = torch.zeros((2, 1, hidden), dtype=dtype, device=device)
            mask = torch.ones((2, chunk, max_size + chunk), dtype=torch.bool, device=device)
            att = torch.zeros((depth, 2, heads, max_size, kv), dtype=dtype, device=device)
            cnn = torch.zeros((depth, 2, conv, 2), dtype=dtype, device=device)
            new_cnn = torch.zeros((depth, 2, conv, 2), dtype=dtype, device=device)
            new_att = torch.zeros((depth, 2, heads, max_size + chunk, kv), dtype=dtype, device=device)
            dit.blocks_forward_chunk(x, t, mask, cnn, att, new_cnn, new_att)
            # not the kit's road: this control rebuilds the vendor's own padded graphs, so the vendor code takes them
            graph = torch.cuda.CUDAGraph()
            with no_collection(), torch.cuda.graph(graph):
                out = dit.blocks_forward_chunk(x, t, mask, cnn, att, new_cnn, new_att)
            dit.inference_buffers_chunk[chunk] = {"static_inputs": [x, t, mask, cnn, att],
                                                  "static_outputs": [out, new_cnn, new_att]}
            dit.graph_chunk[chunk] = graph
    dit.use_cuda_graph = True




class _TorchWith:
    """The ``torch`` module with some attributes replaced: the globals a vendor function runs with
    when one op is swapped (:func:`with_ops_swapped`)."""

    def __init__(self, **override):
        self.__dict__.update(override)

    def __getattr__(self, name):
        return getattr(torch, name)


def with_ops_swapped(fn, **override):
    """``fn`` (a vendor function) whose ``torch.<name>`` calls go to ``override[name]``; nothing else changes."""
    env = dict(fn.__globals__, torch=_TorchWith(**override))
    return types.FunctionType(fn.__code__, env, fn.__name__, fn.__defaults__, fn.__closure__)


class VocoderSplit:
    """The stock HiFT split at its iSTFT, so the part before it can be replayed and the part after it
    run on the (possibly cut) output.

    ``core(mel, cache_source)`` is the vendor's own ``hift(mel, cache_source)`` (device RNG included)
    with the iSTFT stashed -> (magnitude, phase, source); ``tail(magnitude, phase)`` is the vendor's
    ``_istft`` and the clamp; ``whole(mel, cache_source)`` is both -> (speech, source). The stash is
    installed on the module only for the duration of ``core``, so every other user of the same module
    (a B0 runtime, the vendor's own code) still gets the whole vocoder.

    ``istft``: a :class:`~cadencelab.replay.GraphSafeISTFT` for the vocoder's window; ``tail`` then runs
    the vendor's ``_istft`` with ``torch.istft`` swapped for it (its argument check refuses anything but
    the declared window and sizes), which makes ``whole`` capturable in one graph, bit-identically.
    """

    def __init__(self, hift: torch.nn.Module, istft: GraphSafeISTFT | None = None):
        self.hift = hift
        fn = type(hift)._istft
        if istft is not None:
            fn = with_ops_swapped(fn, istft=istft.drop_in)
        self.graph_safe = istft is not None
        self._istft = types.MethodType(fn, hift)
        self._stash: list = []

    @classmethod
    def graph_safe_for(cls, hift: torch.nn.Module) -> "VocoderSplit":
        """The split whose tail is capture-safe: the vocoder's own iSTFT sizes and (device-resident) window."""
        p = hift.istft_params
        return cls(hift, GraphSafeISTFT(p["n_fft"], p["hop_len"], p["n_fft"], hift.stft_window))

    def _stash_istft(self, magnitude, phase):
        self._stash.append((magnitude, phase))
        return magnitude.new_empty(0)

    def core(self, mel, cache_source):
        self.hift._istft = self._stash_istft
        try:
            _, source = self.hift(mel, cache_source)
        finally:
            del self.hift._istft
        magnitude, phase = self._stash.pop()
        return magnitude, phase, source

    def tail(self, magnitude, phase):
        return torch.clamp(self._istft(magnitude, phase), -self.hift.audio_limit, self.hift.audio_limit)

    def whole(self, mel, cache_source):
        magnitude, phase, source = self.core(mel, cache_source)
        return self.tail(magnitude, phase), source


class HostStaging:
    """Page-locked host buffers for a stream's host<->device copies, so neither copy blocks on a
    pageable staging step: ``tokens_to_device`` writes the call's token ids into a pinned buffer and
    copies them asynchronously into a device buffer (same values as ``torch.tensor(..., device=)``);
    ``to_host`` copies the waveform into a pinned buffer and waits for that copy alone. On a CPU
    device both are plain tensor operations."""

    def __init__(self, device: torch.device, max_tokens: int, max_samples: int):
        self.device = device
        self.cuda = device.type == "cuda"
        self.waited_from: float | None = None
        if self.cuda:
            self.tokens_host = torch.empty(1, max_tokens, dtype=torch.int32, pin_memory=True)
            self.tokens_dev = torch.empty(1, max_tokens, dtype=torch.int32, device=device)
            self.pcm_host = torch.empty(max_samples, dtype=torch.float32, pin_memory=True)
            self.done = torch.cuda.Event()

    def tokens_to_device(self, tokens: Sequence[int]) -> torch.Tensor:
        n = len(tokens)
        if not self.cuda or n > self.tokens_host.shape[1]:
            return torch.tensor([list(tokens)], dtype=torch.int32, device=self.device)
        host = self.tokens_host[:, :n]
        host.numpy()[0] = np.asarray(tokens, dtype=np.int32)
        dev = self.tokens_dev[:, :n]
        dev.copy_(host, non_blocking=True)
        return dev

    def to_host(self, speech: torch.Tensor) -> np.ndarray:
        """``speech.cpu().numpy()`` (a copy the caller owns)."""
        if not self.cuda or speech.numel() > self.pcm_host.numel() or speech.dtype != torch.float32:
            return speech.cpu().numpy()
        host = self.pcm_host[: speech.numel()]
        host.copy_(speech.reshape(-1), non_blocking=True)
        self.done.record()
        self.waited_from = time.perf_counter()  # the call's work is enqueued: from here the host waits
        self.done.synchronize()
        return host.numpy().reshape(speech.shape).copy()


def config_of(flow) -> Token2wavConfig:
    """Recover a config's clock-relevant sizes from built modules (for declarations)."""
    dit, enc = flow.decoder.estimator, flow.encoder
    attn = dit.blocks[0].attn
    hidden = dit.in_proj.out_features
    out = enc.output_size()
    heads = enc.encoders[0].self_attn.h
    return Token2wavConfig(
        name="derived", input_size=out,
        encoder=EncoderConfig(input_size=out, output_size=out, num_blocks=len(enc.encoders),
                              num_up_blocks=len(enc.up_encoders), attention_heads=heads),
        estimator=DiTConfig(depth=len(dit.blocks), num_heads=attn.num_heads, head_dim=attn.head_dim, hidden_size=hidden),
    )
