"""The streaming encoder of notebook 8, shipped for its graded exercise.

Notebook 8 writes this model in the notebook, as its author would, and the student writes its
declaration. The exercise checker (:func:`cadencelab.course.exercises.check_declaration`) needs
the same model inside the package: it certifies the student's declaration on the sizes the
notebook shows (:data:`VISIBLE`) and on a second configuration the student does not see
(:data:`HIDDEN`), so a size typed as a literal instead of read from the sizes is caught.

A strided conv frontend turns every ``hop`` samples into one frame (each call needs the previous
``kernel - hop`` samples as left context); one attention layer attends over its K|V cache plus
the whole call: an attention sink (the turn's first ``sink`` frames) and a sliding window (the
newest ``window``). A call commits ``chunk`` frames and reads ``lookahead`` more; the turn's final
call commits all it carries.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

from ..adapters.kit import Traffic
from ..contract import Declaration
from ..replay import At

__all__ = ["Sizes", "VISIBLE", "HIDDEN", "SampleEncoder", "encode", "stock_step", "steps",
           "traffic", "SIGNAL_FRAMES", "with_policy", "seed_weights"]


@dataclass(frozen=True)
class Sizes:
    """Every size of the encoder, in one place."""

    hop: int = 4  # samples per frame (the frontend's stride)
    kernel: int = 8  # frontend kernel: kernel - hop samples of left context
    dim: int = 8
    heads: int = 2
    sink: int = 2  # attention sink: the turn's first frames
    window: int = 10  # sliding window: the newest frames
    chunk: int = 6  # frames a call commits
    lookahead: int = 2  # frames a call reads beyond them

    @property
    def context(self) -> int:
        """Samples of frontend left context."""
        return self.kernel - self.hop


#: the configuration the notebook shows
VISIBLE = Sizes()
#: the second configuration the checker certifies a declaration on (the student does not see it)
HIDDEN = Sizes(hop=3, kernel=9, sink=3, window=7, chunk=4, lookahead=1)
#: frames of audio per turn of the checker's traffic (three turns, uneven lengths)
SIGNAL_FRAMES = (50, 37, 23)


class SampleEncoder(torch.nn.Module):
    """The encoder's weights (seeded); :func:`encode` and :func:`stock_step` are its code."""

    def __init__(self, s: Sizes = VISIBLE, seed: int = 0):
        super().__init__()
        self.s = s
        self.front = torch.nn.Conv1d(1, s.dim, s.kernel, stride=s.hop)  # no padding: the cache is the context
        self.qkv, self.out = torch.nn.Linear(s.dim, 3 * s.dim), torch.nn.Linear(s.dim, s.dim)
        seed_weights(self, seed)


def seed_weights(module: torch.nn.Module, seed: int, scale: float = 0.5) -> None:
    """Every parameter of ``module`` drawn from N(0, scale^2) with one seeded generator (the same weights on
    every machine)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * scale)


def encode(m: SampleEncoder, x, kv, ctx, last):
    """One call: x (1, samples) -> output of the committed frames, their new K|V, the samples they consumed."""
    s, hd = m.s, m.s.dim // m.s.heads
    y = m.front(torch.cat([ctx, x], dim=1)[:, None]).transpose(1, 2)[0]  # (n, dim): n frames
    n = y.shape[0]
    c = n if last else n - s.lookahead  # committed frames
    q, k, v = (t.reshape(n, s.heads, hd).transpose(0, 1) for t in m.qkv(y).chunk(3, dim=-1))
    keys, vals = torch.cat([kv[0], k], dim=1), torch.cat([kv[1], v], dim=1)
    a = torch.softmax(q @ keys.transpose(1, 2) / math.sqrt(hd), dim=-1) @ vals  # (heads, n, hd)
    out = y + m.out(a.transpose(0, 1).reshape(n, s.dim))
    return out[None, :c], torch.stack([k, v])[:, :, :c], x[:, :c * s.hop]


def stock_step(m: SampleEncoder, x, kv, ctx, last):
    """The model's own streaming step: concatenate, then its own cut (sink + window, context). At a turn's start
    (``kv``/``ctx`` None) it starts itself: no K|V, a zero context."""
    s = m.s
    kv = x.new_zeros(2, s.heads, 0, s.dim // s.heads) if kv is None else kv
    ctx = x.new_zeros(1, s.context) if ctx is None else ctx
    out, kv_new, x_new = encode(m, x, kv, ctx, last)
    kv = torch.cat([kv, kv_new], dim=2)
    if kv.shape[2] > s.sink + s.window:
        kv = torch.cat([kv[:, :, :s.sink], kv[:, :, kv.shape[2] - s.window:]], dim=2)
    ctx = torch.cat([ctx, x_new], dim=1)
    return out, kv, ctx[:, ctx.shape[1] - s.context:]


def steps(m: SampleEncoder):
    """The adapter's step (views form), the model's stock step, and where a call's frames are."""

    def step(x, caches, last):
        out, kv, ctx = encode(m, x, caches["kv"], caches["ctx"], last)
        return out, {"kv": kv, "ctx": ctx}

    def stock(x, caches, last):
        out, kv, ctx = stock_step(m, x, caches.get("kv"), caches.get("ctx"), last)
        return out, {"kv": kv, "ctx": ctx}

    return step, stock, At(0, dim=1, clock="samples")


def traffic(s: Sizes, declaration: Declaration, seed: int = 1, device="cpu") -> Traffic:
    """Three turns of random audio cut into the calls ``declaration`` makes (the grader passes its own; a notebook
    the student's certified one)."""
    g = torch.Generator().manual_seed(seed)
    signals = [torch.randn(1, s.hop * n, generator=g).to(device) for n in SIGNAL_FRAMES]
    return Traffic.stream(declaration, signals, clock="samples")


def with_policy(decl: Declaration, region: str, policy) -> Declaration:
    """``decl`` with region ``region`` under another retention ``policy`` (a wrong declaration, on purpose)."""
    if region not in {r.name for r in decl.regions}:
        raise ValueError(f"with_policy: no region {region!r}; the declaration has {[r.name for r in decl.regions]}")
    regions = tuple(dataclasses.replace(r, policy=policy) if r.name == region else r for r in decl.regions)
    return dataclasses.replace(decl, regions=regions)
