"""Two streaming models the package does not ship, written as their authors would (stock code with its
own caches and its own cut), for the adapter-kit tests. Tiny sizes, CPU.

* :class:`StreamingConformer`: depthwise causal conv (kernel 15: 14 frames of left context), then chunked
  attention over an attention sink (the turn's first 8 frames) + a sliding window (the newest 48);
  each call brings 16 committed frames + 4 lookahead frames.
* :class:`TokenDecoder`: token ids -> samples (4 per token) with one lookahead token per call; a
  newest-first token history of 12 (attention) and a 3-sample causal output filter.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


def seeded(module: torch.nn.Module, seed: int, scale: float) -> torch.Generator:
    """Every parameter of ``module`` drawn from N(0, scale^2) with a generator seeded ``seed`` (returned, to draw on)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * scale)
    return g


@dataclass(frozen=True)
class ConformerSizes:
    dim: int = 8
    heads: int = 2
    kernel: int = 15
    sink: int = 8
    window: int = 48
    chunk: int = 16
    lookahead: int = 4


class StreamingConformer(torch.nn.Module):
    def __init__(self, sizes: ConformerSizes = ConformerSizes(), seed: int = 0):
        super().__init__()
        self.s = s = sizes
        self.dw = torch.nn.Conv1d(s.dim, s.dim, s.kernel, groups=s.dim)  # no padding: the cache is the left context
        self.qkv = torch.nn.Linear(s.dim, 3 * s.dim)
        self.out = torch.nn.Linear(s.dim, s.dim)
        seeded(self, seed, 0.4)

    def chunk(self, x, kv_cache, conv_cache, last=False):
        """x (1, n, dim) -> output of the committed frames, and the committed frames' new K|V and conv input."""
        s, n = self.s, x.shape[1]
        c = n if last else n - s.lookahead
        h = torch.cat([conv_cache, x.transpose(1, 2)], dim=2)
        y = self.dw(h).transpose(1, 2)
        q, k, v = self.qkv(y).chunk(3, dim=-1)

        def heads(t):
            return t.reshape(n, s.heads, s.dim // s.heads).transpose(0, 1)

        kv_new = torch.stack([heads(k), heads(v)])
        kv = torch.cat([kv_cache, kv_new], dim=2)  # chunked attention: the cache and the whole chunk
        w = torch.softmax(heads(q) @ kv[0].transpose(1, 2) / math.sqrt(s.dim // s.heads), dim=-1)
        a = (w @ kv[1]).transpose(0, 1).reshape(1, n, s.dim)
        out = (y + self.out(a))[:, :c]
        return out, kv_new[:, :, :c], x.transpose(1, 2)[:, :, :c]

    def start(self, x):
        """This model's own state at a turn's start: no K|V, a zero conv context (the implicit left padding)."""
        s = self.s
        return (x.new_zeros(2, s.heads, 0, s.dim // s.heads), x.new_zeros(1, s.dim, s.kernel - 1))

    def forward_chunk(self, x, kv_cache=None, conv_cache=None, last=False):
        """The stock streaming step: new caches by concatenation and this model's own cut (None: the turn's start)."""
        s = self.s
        kv0, conv0 = self.start(x)
        kv_cache = kv0 if kv_cache is None else kv_cache
        conv_cache = conv0 if conv_cache is None else conv_cache
        out, kv_new, conv_new = self.chunk(x, kv_cache, conv_cache, last)
        kv = torch.cat([kv_cache, kv_new], dim=2)
        if kv.shape[2] > s.sink + s.window:
            kv = torch.cat([kv[:, :, :s.sink], kv[:, :, kv.shape[2] - s.window:]], dim=2)
        conv = torch.cat([conv_cache, conv_new], dim=2)
        return out, kv, conv[:, :, conv.shape[2] - (s.kernel - 1):]


@dataclass(frozen=True)
class DecoderSizes:
    vocab: int = 32
    dim: int = 8
    history: int = 12
    tokens: int = 4
    lookahead: int = 1
    samples_per_token: int = 4
    taps: int = 4


class TokenDecoder(torch.nn.Module):
    def __init__(self, sizes: DecoderSizes = DecoderSizes(), seed: int = 1):
        super().__init__()
        self.s = s = sizes
        self.embed = torch.nn.Embedding(s.vocab, s.dim)
        self.proj = torch.nn.Linear(s.dim, s.samples_per_token)
        g = seeded(self, seed, 0.5)
        self.register_buffer("taps", torch.randn(s.taps, generator=g))

    def decode(self, tokens, history=None, tail=None, last=False, cut=True):
        """tokens (1, n) -> samples of the committed tokens; history (1, h, dim) newest first, tail (1, taps-1)
        (None: the turn's start, an empty history and a zero tail)."""
        s, n = self.s, tokens.shape[1]
        if history is None:
            history = self.embed.weight.new_zeros(1, 0, s.dim)
        if tail is None:
            tail = self.embed.weight.new_zeros(1, s.taps - 1)
        c = n if last else n - s.lookahead
        e = self.embed(tokens)  # (1, n, dim)
        hist = torch.cat([e[:, :c].flip(1), history], dim=1)  # newest first
        ctx = torch.softmax(e @ torch.cat([e.flip(1), history], dim=1).transpose(1, 2), dim=-1) @ torch.cat(
            [e.flip(1), history], dim=1)
        raw = self.proj(ctx[:, :c]).reshape(1, c * s.samples_per_token)
        full = torch.cat([tail, raw], dim=1)
        out = sum(self.taps[j] * full[:, j:j + raw.shape[1]] for j in range(s.taps))
        if cut:
            return out, hist[:, :s.history], full[:, full.shape[1] - (s.taps - 1):]
        return out, hist, full


@dataclass(frozen=True)
class RingSizes:
    dim: int = 8
    capacity: int = 10  # not a multiple of the chunk: writes wrap in the middle of a call
    chunk: int = 4


class RingStreamer(torch.nn.Module):
    """Attention over a ring of keys, as streaming codecs keep them (Mimi's ring K|V): the stock code writes
    each call's keys at slot ``(end + i) % capacity`` of a fixed buffer, then attends over the whole ring,
    masking the slots not yet written this turn."""

    def __init__(self, sizes: RingSizes = RingSizes(), seed: int = 4):
        super().__init__()
        self.s = s = sizes
        self.key = torch.nn.Linear(s.dim, s.dim)
        self.query = torch.nn.Linear(s.dim, s.dim)
        seeded(self, seed, 0.5)

    def attend(self, x, ring, filled):
        """x (1, n, dim) over the ring (1, capacity, dim) with ``filled`` (capacity,) bool: (1, n, dim)."""
        w = (self.query(x) @ ring.transpose(1, 2)).masked_fill(~filled, float("-inf"))
        return x + torch.softmax(w, dim=-1) @ ring

    def forward_chunk(self, x, caches, last=False):
        """The stock step: its own ring buffer and write position in its cache dict."""
        s = self.s
        ring = caches["kv"].clone() if caches.get("kv") is not None else x.new_zeros(1, s.capacity, s.dim)
        end = caches.get("end", 0)
        k = self.key(x)
        for i in range(k.shape[1]):
            ring[:, (end + i) % s.capacity] = k[:, i]
        filled = torch.arange(s.capacity, device=x.device) < min(end + k.shape[1], s.capacity)
        return self.attend(x, ring, filled), {"kv": ring, "end": end + k.shape[1]}


class SelfRing(torch.nn.Module):
    """A streaming model that keeps its state itself, as Mimi's modules do: a ring of keys and its write
    position allocated in :meth:`start`, written in place by :meth:`forward` (``index_copy_`` at the device
    position), plus a call counter the declaration does not name and a flag that ``rebinds=True`` rebinds
    every call (``self.first = torch.where(...)``, as moshi's replicate-padded conv does)."""

    def __init__(self, sizes: RingSizes = RingSizes(), seed: int = 6, rebinds: bool = False):
        super().__init__()
        self.s, self.rebinds = sizes, rebinds
        self.key = torch.nn.Linear(sizes.dim, sizes.dim)
        self.query = torch.nn.Linear(sizes.dim, sizes.dim)
        seeded(self, seed, 0.5)
        self.start()

    def start(self, device="cpu") -> None:
        s = self.s
        self.ring = torch.zeros(1, s.capacity, s.dim, device=device)
        self.end = torch.zeros(1, dtype=torch.int64, device=device)
        self.count = torch.zeros(1, dtype=torch.int64, device=device)
        self.first = torch.ones(1, dtype=torch.bool, device=device)

    def reset_state(self) -> None:
        """In place, as a stream reset: position, counter and flag (the ring's stale frames stay, masked)."""
        self.end.zero_()
        self.count.zero_()
        self.first.fill_(True)

    def forward(self, x):
        s, k = self.s, self.key(x)
        slots = (self.end + torch.arange(k.shape[1], device=x.device)) % s.capacity
        self.ring.index_copy_(1, slots, k)
        self.end.add_(k.shape[1])
        self.count.add_(1)
        filled = torch.arange(s.capacity, device=x.device) < torch.clamp(self.end, max=s.capacity)
        w = (self.query(x) @ self.ring.transpose(1, 2)).masked_fill(~filled, float("-inf"))
        out = x + torch.softmax(w, dim=-1) @ self.ring + self.first.to(x.dtype)
        if self.rebinds:
            self.first = torch.where(self.count > 0, torch.zeros_like(self.first), self.first)
        else:
            self.first.copy_(torch.where(self.count > 0, torch.zeros_like(self.first), self.first))
        return out
