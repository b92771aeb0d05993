"""The capstone's models: streaming models the course has not shown, each as its author wrote it.

A student picks one (:data:`MODELS`, by name) and writes its adapter; :mod:`cadencelab.course.capstone`
certifies it. Each model is a :class:`CapstoneModel`: its sizes (one dataclass, shown and hidden), its
weights, its code (the functions the notebook prints: a call and the model's own streaming step, which
concatenates and cuts its caches itself), where a call's frames are, the declaration the grader diagnoses
against (never shown) and what the notebook says about it.

* ``"window"``, a **sliding-window decoder**: latent frames in, audio samples out. One attention layer over a
  K|V cache of the newest ``window`` frames (no sink) plus the whole call; each frame becomes ``hop``
  samples, smoothed by a causal ``taps``-tap filter that needs the previous ``taps - 1`` samples. A call
  commits ``chunk`` frames and reads ``lookahead`` more; the turn's final call commits all it carries.
* ``"codec"``, a **causal codec decoder with a ring cache**, as streaming codecs keep their transformer's
  keys: a causal convolution of ``kernel`` frames (the previous ``kernel - 1`` input frames are its left
  context), then attention over a ring of ``capacity`` keys written at slot ``(end + i) % capacity`` and
  masked where the turn has not written yet, then ``hop`` samples per frame. A call decodes ``chunk``
  frames; a turn's last call may carry fewer (no lookahead).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from ..replay import At
from .sample_encoder import seed_weights

__all__ = ["CapstoneModel", "MODELS", "capstone_model", "DecoderSizes", "WindowDecoder", "decode", "stock_step",
           "CodecSizes", "CodecDecoder", "front", "attend_ring", "to_samples",
           "codec_stock_step", "FRAMES"]

#: where a call's frames are in its input, for every capstone model: (1, frames, dim)
FRAMES = At(0, dim=1, clock="frames")


# ---------------------------------------------------------------------------------------
# the sliding-window decoder
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DecoderSizes:
    """Every size of the sliding-window decoder, in one place."""

    dim: int = 8
    heads: int = 2
    window: int = 9  # K|V cache: the newest frames
    chunk: int = 4  # frames a call commits
    lookahead: int = 1  # frames a call reads beyond them
    hop: int = 5  # samples per frame
    taps: int = 3  # causal output filter: taps - 1 samples of left context


class WindowDecoder(torch.nn.Module):
    """The sliding-window decoder's weights (seeded); :func:`decode` and :func:`stock_step` are its code."""

    def __init__(self, s: DecoderSizes = DecoderSizes(), seed: int = 0):
        super().__init__()
        self.s = s
        self.qkv, self.out = torch.nn.Linear(s.dim, 3 * s.dim), torch.nn.Linear(s.dim, s.dim)
        self.to_samples = torch.nn.Linear(s.dim, s.hop)
        self.filt = torch.nn.Conv1d(1, 1, s.taps, bias=False)  # no padding: the cache is the left context
        seed_weights(self, seed)


def decode(m: WindowDecoder, x, kv, tail, last):
    """One call: x (1, n, dim) -> samples of the committed frames, their new K|V, their unfiltered samples."""
    s, hd = m.s, m.s.dim // m.s.heads
    n = x.shape[1]
    c = n if last else n - s.lookahead  # committed frames
    q, k, v = (t.reshape(n, s.heads, hd).transpose(0, 1) for t in m.qkv(x[0]).chunk(3, dim=-1))
    keys, vals = torch.cat([kv[0], k], dim=1), torch.cat([kv[1], v], dim=1)
    a = torch.softmax(q @ keys.transpose(1, 2) / math.sqrt(hd), dim=-1) @ vals
    h = x[0] + m.out(a.transpose(0, 1).reshape(n, s.dim))
    raw = m.to_samples(h[:c]).reshape(1, c * s.hop)  # hop samples per committed frame
    out = m.filt(torch.cat([tail, raw], dim=1)[:, None])[:, 0]  # causal: the previous taps - 1 samples first
    return out, torch.stack([k, v])[:, :, :c], raw


def stock_step(m: WindowDecoder, x, kv, tail, last):
    """The model's own streaming step: concatenate, then its own cut (the newest window, the filter's tail). At a
    turn's start (``kv``/``tail`` None) it starts itself: no K|V, a zero tail."""
    s = m.s
    kv = x.new_zeros(2, s.heads, 0, s.dim // s.heads) if kv is None else kv
    tail = x.new_zeros(1, s.taps - 1) if tail is None else tail
    out, kv_new, raw = decode(m, x, kv, tail, last)
    kv = torch.cat([kv, kv_new], dim=2)
    tail = torch.cat([tail, raw], dim=1)
    return out, kv[:, :, max(0, kv.shape[2] - s.window):], tail[:, tail.shape[1] - (s.taps - 1):]


def _window_stock(m: WindowDecoder):
    def stock(x, caches, last):
        out, kv, tail = stock_step(m, x, caches.get("kv"), caches.get("tail"), last)
        return out, {"kv": kv, "tail": tail}

    return stock


# ---------------------------------------------------------------------------------------
# the causal codec decoder with a ring cache
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CodecSizes:
    """Every size of the codec decoder, in one place."""

    dim: int = 8
    kernel: int = 3  # causal convolution over frames: kernel - 1 frames of left context
    capacity: int = 10  # the ring of keys (not a multiple of the chunk: writes wrap inside a call)
    chunk: int = 4  # frames a call decodes
    hop: int = 6  # samples per frame


class CodecDecoder(torch.nn.Module):
    """The codec decoder's weights (seeded); :func:`front`, :func:`attend_ring`, :func:`to_samples` and
    :func:`codec_stock_step` are its code."""

    def __init__(self, s: CodecSizes = CodecSizes(), seed: int = 3):
        super().__init__()
        self.s = s
        self.conv = torch.nn.Conv1d(s.dim, s.dim, s.kernel)  # no padding: the cache is the left context
        self.key, self.query = torch.nn.Linear(s.dim, s.dim), torch.nn.Linear(s.dim, s.dim)
        self.out = torch.nn.Linear(s.dim, s.hop)
        seed_weights(self, seed)


def front(m: CodecDecoder, x, ctx):
    """The causal convolution: x (1, n, dim) after its left context ctx (1, kernel - 1, dim) -> (1, n, dim)."""
    return m.conv(torch.cat([ctx, x], dim=1).transpose(1, 2)).transpose(1, 2)


def attend_ring(m: CodecDecoder, h, ring, filled):
    """h (1, n, dim) attends over the ring (1, capacity, dim), slots where ``filled`` (capacity,) is False masked."""
    w = (m.query(h) @ ring.transpose(1, 2) / math.sqrt(m.s.dim)).masked_fill(~filled, float("-inf"))
    return h + torch.softmax(w, dim=-1) @ ring


def to_samples(m: CodecDecoder, a):
    """(1, n, dim) -> (1, n * hop) samples."""
    return m.out(a).reshape(1, a.shape[1] * m.s.hop)


def codec_stock_step(m: CodecDecoder, x, ring, end, ctx):
    """The model's own streaming step: its keys written into its ring at slot (end + i) % capacity, attention
    over the ring, then its own cut of the convolution's context. Returns (samples, ring, end, ctx). At a turn's
    start (``ring``/``ctx`` None) it starts itself: an empty ring, a zero context."""
    s = m.s
    ring = x.new_zeros(1, s.capacity, s.dim) if ring is None else ring
    ctx = x.new_zeros(1, s.kernel - 1, s.dim) if ctx is None else ctx
    h = front(m, x, ctx)
    k = m.key(h)
    ring = ring.clone()
    for i in range(k.shape[1]):
        ring[:, (end + i) % s.capacity] = k[:, i]
    filled = torch.arange(s.capacity, device=x.device) < min(end + k.shape[1], s.capacity)
    out = to_samples(m, attend_ring(m, h, ring, filled))
    seen = torch.cat([ctx, x], dim=1)
    return out, ring, end + k.shape[1], seen[:, seen.shape[1] - (s.kernel - 1):]


def _codec_stock(m: CodecDecoder):
    def stock(x, caches, last):
        out, ring, end, ctx = codec_stock_step(m, x, caches.get("kv"), caches.get("end", 0), caches.get("ctx"))
        return out, {"kv": ring, "end": end, "ctx": ctx}

    return stock


# ---------------------------------------------------------------------------------------
# the table of models
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CapstoneModel:
    """One capstone model: name, title, sizes shown and hidden, its module, its code (what the notebook
    prints), its stock step in the kit's form (``stock(model) -> stock(x, caches, last)``), the turns the notebook
    shows and the hidden ones (frames per turn, seed, per configuration),
    and what the notebook says: ``about`` (the model) and ``task`` (what the adapter must hold)."""

    name: str
    title: str
    shown: object
    hidden: object
    module: type
    code: tuple
    stock: Callable
    shown_turns: tuple
    hidden_turns: dict
    about: str
    task: str

    def build(self, s=None, device="cpu") -> torch.nn.Module:
        """The model at sizes ``s`` (default: the shown ones), on ``device``."""
        return self.module(self.shown if s is None else s).to(device)


MODELS: dict[str, CapstoneModel] = {m.name: m for m in (
    CapstoneModel(
        "window", "a sliding-window decoder",
        DecoderSizes(), DecoderSizes(window=7, chunk=3, lookahead=2, hop=4, taps=4),
        WindowDecoder, (WindowDecoder, decode, stock_step), _window_stock,
        (21, 10), {"shown sizes": ((33, 17, 6), 11), "hidden sizes": ((26, 14, 9), 12)},
        "A **sliding-window decoder** (latent frames in, audio samples out): one attention layer over a cache of "
        "the newest frames' keys and values, then samples per frame smoothed by a short causal filter. A call "
        "commits some frames and reads a few more beyond them; the turn's final call commits all it carries.",
        "`declare(s)`: a call clock; a frames clock (`chunk` per call, `lookahead` as its offset); a samples clock "
        "(`hop` per frame); a region for each piece of state the stock step keeps, with the policy its cut "
        "implements; the operator `decode` reading the K|V cache on frames (`flush=\"lookahead\"`); admission on "
        "frames. `make_step(model)`: `step(x, caches, last) -> (out, {region: the frames this call adds})`, built "
        "on `decode`."),
    CapstoneModel(
        "codec", "a causal codec decoder with a ring cache",
        CodecSizes(), CodecSizes(kernel=4, capacity=7, chunk=3, hop=5),
        CodecDecoder, (CodecDecoder, front, attend_ring, to_samples, codec_stock_step), _codec_stock,
        (21, 10), {"shown sizes": ((30, 17, 6), 21), "hidden sizes": ((25, 13, 9), 22)},
        "A **causal codec decoder** (codec frames in, audio samples out), as streaming codecs keep their "
        "transformer's keys: a causal convolution over frames, then attention over a **ring** of keys that the "
        "step writes at slot `(end + i) % capacity` and masks where this turn has not written yet, then samples "
        "per frame. A call decodes a fixed number of frames with no lookahead; a turn's last call may carry fewer.",
        "`declare(s)`: a call clock and a frames clock (`chunk` per call); a region for each piece of state the "
        "stock step keeps, with the policy it implements (a ring is `Ring(capacity)`); the operator `decode` on "
        "frames, reading the state, with the sizes a turn's last call may take (`flush=(min, max, step)`); "
        "admission on frames. `make_step(model)`: `step(x, caches, last) -> (out, {region: the frames this call "
        "adds})`, built on `front`, `attend_ring` and `to_samples`. A ring region reaches the step as a "
        "`RingView`: `ring.write(k)` writes the call's keys at the ring's next slots on the device, "
        "`ring.filled(n)` says which slots hold this turn's keys once n more are written, `ring.buffer` is the "
        "ring."),
)}


def capstone_model(name: str) -> CapstoneModel:
    """The capstone model named ``name`` (a ValueError lists the models)."""
    if name not in MODELS:
        raise ValueError(f"no capstone model {name!r}; pick one of {list(MODELS)}")
    return MODELS[name]
