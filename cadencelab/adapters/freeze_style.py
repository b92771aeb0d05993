"""A Freeze-Omni-*style* streaming codec decoder, with a carry path and an overlap-recompute path.

**This is not Freeze-Omni**, whose code and weights cannot be installed here: a small model written from
published facts about its codec stage (codec tokens to 24 kHz PCM at 600 samples per token; a first chunk of 20
tokens, then 40-token windows recomputing a 10-token overlap on each side), with seeded random weights: only the
*streaming structure* is modelled. In :class:`FreezeStyleDecoder` every layer is causal, and upsampling repeats
then convolves instead of a transposed conv, so a chunk border never splits an upsampling footprint and every
layer's only cross-frame dependency is a causal conv's left context.

Bit-exact by construction: ``torch.conv1d`` on a CPU is not invariant to the sequence length (its GEMM blocking
changes with it), so every conv is :func:`causal_conv`, a fixed-order sum of separate elementwise ``mul`` / ``add``
ops, and softsign replaces ``tanh`` (whose vectorised and scalar-tail kernels may differ). Every op is elementwise
or a gather, so a sample's arithmetic does not depend on how many others are computed with it.

Two paths, one PCM tensor per 20-token chunk: (a) **overlap recompute** (:func:`stream_reference` with an
:class:`OverlapPolicy`, the stock-policy control) decodes each window from a zero state and keeps the new tokens'
samples; its 10 tokens of left context are shorter than the receptive field, so it only approximates the
full-history decode. (b) **carry** (:func:`stream_with_carry`; :class:`CarryStream` on the adapter kit) decodes
only the new tokens, each conv reading its left context from a :class:`~cadencelab.state.Carry`: bit-exact with the
full-history decode, replayed (``replay=True``) or not. Declaration hook: :func:`freeze_style_declaration`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

import pandas as pd
import torch
import torch.nn.functional as F

from ..contract import Admission, Clock, Declaration, Operator, Region, SlidingWindow
from ..state import Carry
from .kit import KitModel, StreamingRuntime, Traffic

__all__ = [
    "FreezeStyleConfig", "FreezeStyleDecoder", "OverlapPolicy", "FULL_HISTORY", "CarryStream",
    "stream_reference", "stream_with_carry", "causal_conv", "compare", "declaration", "OPERATOR", "LEFT_CONTEXT",
    "KIT_REGIONS", "kit_declaration", "kit_steps", "kit_model", "kit_model_on", "freeze_style_declaration",
]

OPERATOR = "decode_chunk"
LEFT_CONTEXT = "left_context"
FULL_HISTORY = "full_history"


@dataclass(frozen=True)
class FreezeStyleConfig:
    """Sizes of the Freeze-Omni-style decoder (not Freeze-Omni's: small, for a CPU)."""

    vocab: int = 1024 + 4
    channels: tuple = (32, 16, 8, 4)  # C0 (token rate), then after each upsampling stage
    rates: tuple = (10, 6, 10)  # 600 samples per token
    token_kernel: int = 5
    token_dilation: int = 5  # left context (5 - 1) * 5 = 20 tokens: the declared bounded state
    up_kernel: int = 3
    out_kernel: int = 7
    sample_rate: int = 24_000
    chunk_tokens: int = 20
    seed: int = 0

    @property
    def samples_per_token(self) -> int:
        n = 1
        for r in self.rates:
            n *= r
        return n

    @property
    def token_context(self) -> int:
        return (self.token_kernel - 1) * self.token_dilation

    @property
    def contexts(self) -> tuple:
        """Left-context frames of each causal conv, token conv first."""
        return (self.token_context,) + (self.up_kernel - 1,) * len(self.rates) + (self.out_kernel - 1,)


def freeze_style_declaration(first: int = 20, steady: int = 40, overlap: int = 10, state: int = 20,
                             samples_per_token: int = 600, channels: int = 256) -> Declaration:
    """A Freeze-Omni-style codec decoder: first window ``first`` tokens, then ``steady`` with ``overlap``.

    With the carry, the decoder keeps ``state`` tokens of left context instead of
    recomputing the overlap; the left-context extent takes two values (0, then ``state``).
    """
    clocks = (
        Clock("tokens", "codec token", rate_hz=40.0),
        Clock("samples", "PCM sample at 24 kHz", parent="tokens", ratio=samples_per_token),
    )
    regions = (
        Region("left_context", clock="tokens", shape=(1, channels, "tokens"), policy=SlidingWindow(state),
               growth=state, lifetime="turn", role="state", address_stable=True,
               stock={"tokens": 2 * overlap + state}),
    )
    operators = (Operator("decode_chunk", reads=("left_context",), clock="tokens", call=state,
                          flush=(1, state, 1)),)
    return Declaration("freeze-style-decoder", clocks, regions, operators, admission=Admission("tokens", state),
                       params=dict(first=first, steady=steady, overlap=overlap, state=state))


def declaration(cfg: FreezeStyleConfig | None = None):
    """The declaration this model follows: ``freeze_style_declaration`` at this model's sizes."""
    c = cfg or FreezeStyleConfig()
    return freeze_style_declaration(state=c.token_context, samples_per_token=c.samples_per_token,
                                    channels=c.channels[0])


def causal_conv(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, dilation: int = 1) -> torch.Tensor:
    """Valid (no padding) conv of h (1, Cin, L) -> (1, Cout, L - (k-1)*dilation), length-invariant.

    ``y = bias + sum_{ci, j} w[:, ci, j] * h[ci, t + j*dilation]``, accumulated in a fixed order
    with separate elementwise mul and add: every output frame gets identical arithmetic whatever L.
    """
    cout, cin, k = weight.shape
    n = h.shape[2] - (k - 1) * dilation
    y = bias.view(1, cout, 1).expand(1, cout, n).clone()
    for ci in range(cin):
        for j in range(k):
            y = y + weight[:, ci, j].view(1, cout, 1) * h[:, ci:ci + 1, j * dilation:j * dilation + n]
    return y


def _leaky(x: torch.Tensor) -> torch.Tensor:
    return torch.where(x > 0, x, x * 0.1)


class FreezeStyleDecoder(torch.nn.Module):
    """A Freeze-Omni-*style* HiFi-GAN-like codec generator (NOT Freeze-Omni), seeded random weights.

    Written from published facts (600 samples/token at 24 kHz, HiFi-GAN-style upsampling); every
    layer is causal, so decoding new tokens needs only each conv's left context.
    :meth:`decode` takes those contexts explicitly and returns the next ones.
    """

    def __init__(self, cfg: FreezeStyleConfig | None = None):
        super().__init__()
        self.cfg = c = cfg or FreezeStyleConfig()
        ch = c.channels
        self.embed = torch.nn.Embedding(c.vocab, ch[0])
        self.token_conv = torch.nn.Conv1d(ch[0], ch[0], c.token_kernel, dilation=c.token_dilation)
        self.ups = torch.nn.ModuleList(torch.nn.Conv1d(ch[i], ch[i + 1], c.up_kernel) for i in range(len(c.rates)))
        self.out = torch.nn.Conv1d(ch[-1], 1, c.out_kernel)
        g = torch.Generator().manual_seed(c.seed)
        with torch.no_grad():
            for p in self.parameters():
                fan = p[0].numel() if p.dim() > 1 else 1
                p.copy_(torch.randn(p.shape, generator=g) / fan ** 0.5)

    def convs(self) -> list:
        return [self.token_conv, *self.ups, self.out]

    def zero_contexts(self, dtype=torch.float32, device=None) -> list:
        """The turn-start contexts: zeros (the full-history decode's implicit left padding)."""
        dev = device if device is not None else self.embed.weight.device
        return [torch.zeros(1, conv.in_channels, n, dtype=dtype, device=dev)
                for conv, n in zip(self.convs(), self.cfg.contexts)]

    def decode(self, tokens: torch.Tensor, contexts: Sequence[torch.Tensor], cut: bool = True):
        """tokens (1, n) + left contexts -> (pcm (1, n * 600), next contexts as views of conv inputs).

        ``contexts[0]`` may hold 0 frames (a turn's first chunk): it is then zero-padded here to
        the full 20 tokens, the same arithmetic as a zero-filled carry. ``cut=False`` returns each
        conv's whole input instead (the given context, unpadded, then the call's frames): what a
        runtime retaining per a declaration keeps its cut from.
        """
        c = self.cfg
        x = self.embed(tokens).transpose(1, 2)  # (1, C0, n)
        nxt = []
        ctx0, pad = contexts[0], max(c.token_context - contexts[0].shape[2], 0)
        if pad:
            ctx0 = F.pad(ctx0, (pad, 0))
        h = torch.cat([ctx0, x], dim=2)
        nxt.append(h[:, :, h.shape[2] - c.token_context:] if cut else h[:, :, pad:])
        y = _leaky(self._conv(self.token_conv, h))
        for conv, r, ctx, n in zip(self.ups, c.rates, contexts[1:], c.contexts[1:]):
            y = y.repeat_interleave(r, dim=2)  # nearest upsampling: pointwise per frame
            h = torch.cat([ctx, y], dim=2)
            nxt.append(h[:, :, h.shape[2] - n:] if cut else h)
            y = _leaky(self._conv(conv, h))
        h = torch.cat([contexts[-1], y], dim=2)
        nxt.append(h[:, :, h.shape[2] - c.contexts[-1]:] if cut else h)
        y = self._conv(self.out, h)
        return (y / (y.abs() + 1.0)).reshape(1, -1), nxt  # softsign: elementwise, correctly rounded

    @staticmethod
    def _conv(conv: torch.nn.Conv1d, h: torch.Tensor) -> torch.Tensor:
        return causal_conv(h, conv.weight, conv.bias, conv.dilation[0])

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Full decode from a zero state: tokens (1, n) -> PCM (1, n * 600)."""
        return self.decode(tokens, self.zero_contexts())[0]


# ---------------------------------------------------------------------------------------
# (a) and the full-history reference
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OverlapPolicy:
    """Freeze-Omni-style chunk policy: first ``first`` tokens, then ``steady``-token windows
    with ``overlap`` tokens recomputed on each side (new tokens per steady call: steady - 2*overlap)."""

    first: int = 20
    steady: int = 40
    overlap: int = 10

    @property
    def hop(self) -> int:
        return self.steady - 2 * self.overlap

    def windows(self, n: int) -> list[tuple[int, int, int, int]]:
        """Per chunk (window_start, window_end, keep_start, keep_end) in token indices of a turn of n."""
        out = [(0, min(self.first, n), 0, min(self.first, n))]
        k0 = self.first
        while k0 < n:
            k1 = min(k0 + self.hop, n)
            out.append((max(k0 - self.overlap, 0), min(k1 + self.overlap, n), k0, k1))
            k0 = k1
        return out


def _turns(tokens) -> list[torch.Tensor]:
    if isinstance(tokens, torch.Tensor):
        tokens = [tokens]
    return [t.reshape(1, -1).long() for t in tokens]


@torch.inference_mode()
def stream_reference(model: FreezeStyleDecoder, tokens, policy=FULL_HISTORY) -> list[torch.Tensor]:
    """Eager references. ``tokens``: one (n,) / (1, n) LongTensor or a list of them (one per turn).

    ``policy=FULL_HISTORY``: chunks of ``model.cfg.chunk_tokens``; each chunk decodes the turn's
    whole token prefix from a zero state and keeps the new samples (the carry path's reference).
    ``policy=OverlapPolicy(...)``: path (a), overlap recompute (see the module docstring).
    Returns one (1, samples) PCM tensor per chunk, turns in order.
    """
    spt = model.cfg.samples_per_token
    outs = []
    for tok in _turns(tokens):
        n = tok.shape[1]
        if isinstance(policy, OverlapPolicy):
            for w0, w1, k0, k1 in policy.windows(n):
                pcm = model(tok[:, w0:w1])
                outs.append(pcm[:, (k0 - w0) * spt:(k1 - w0) * spt].clone())
        elif policy == FULL_HISTORY:
            step = model.cfg.chunk_tokens
            for k0 in range(0, n, step):
                k1 = min(k0 + step, n)
                outs.append(model(tok[:, :k1])[:, k0 * spt:k1 * spt].clone())
        else:
            raise ValueError(f"stream_reference: unknown policy {policy!r}")
    return outs


# ---------------------------------------------------------------------------------------
# (b) the carry path
# ---------------------------------------------------------------------------------------


class CarryStream:
    """Path (b): the Freeze-Omni-*style* decoder (NOT Freeze-Omni) streamed over carries, on the adapter kit.

    :func:`kit_declaration` plus :func:`kit_steps` on :class:`~cadencelab.adapters.kit.StreamingRuntime`
    (``kit``; the same runtime as :func:`kit_model`'s S arm, or SRc with ``replay=True``): one carry per causal
    conv, the declared ``left_context`` first (SlidingWindow(20) tokens; live extent 0 at a turn's start, then
    20), the rest ``Fixed`` (2, 2, 2 and 6 frames), all allocated once at addresses that never change.
    """

    def __init__(self, model: FreezeStyleDecoder, *, replay: bool = False, backend: str = "auto"):
        self.model, self.cfg = model, model.cfg
        self.decl = kit_declaration(self.cfg)
        step, stock = kit_steps(model)
        spec = KitModel(self.decl, step, stock, form="stock", modules=[model], device=model.embed.weight.device)
        self.kit = StreamingRuntime(spec, "SRc" if replay else "S", backend=backend)
        self.reset()

    @property
    def carries(self) -> list[Carry]:
        return list(self.kit.carries.values())

    @property
    def engine(self):
        return self.kit.engine

    @property
    def state_bytes(self) -> int:
        return sum(c.buffer.numel() * c.buffer.element_size() for c in self.carries)

    def reset(self) -> None:
        """Turn reset, in place: left context to extent 0, the sample-rate contexts to zeros."""
        self.kit.reset()

    def start(self, prompt=None) -> None:
        """The session protocol's turn start (the decoder takes no prompt): :meth:`reset`."""
        self.reset()

    def counters(self):
        return self.kit.counters()

    def __call__(self, tokens: torch.Tensor, last: bool | None = None) -> torch.Tensor:
        """New tokens (1, n) -> their PCM (1, n * 600); ``last``: the turn's final call (default: fewer tokens
        than a chunk)."""
        return self.kit(tokens, tokens.shape[1] != self.cfg.chunk_tokens if last is None else last)

    def pointers(self) -> tuple:
        return tuple(c.buffer.data_ptr() for c in self.carries)


def stream_with_carry(model: FreezeStyleDecoder, tokens, chunk_tokens: int = 20, *, replay: bool = False,
                      backend: str = "auto", runtime: CarryStream | None = None, timings: list | None = None):
    """Path (b): decode each turn chunk by chunk over the carries (reset at each turn start).

    Returns one (1, samples) PCM tensor per chunk. ``runtime`` reuses a :class:`CarryStream`
    (to read its engine or pointers afterwards); ``timings`` collects per-chunk seconds.
    """
    rt = runtime or CarryStream(model, replay=replay, backend=backend)
    outs = []
    for tok in _turns(tokens):
        rt.reset()
        for k0 in range(0, tok.shape[1], chunk_tokens):
            chunk = tok[0, k0:k0 + chunk_tokens].clone().view(1, -1)  # fresh (1, n), strides (n, 1): one key per shape
            _sync(chunk.device, timings)
            t0 = time.perf_counter()
            outs.append(rt(chunk))  # a fresh tensor: the eager step makes one, the engine clones its outputs
            if timings is not None:
                _sync(chunk.device, timings)
                timings.append(time.perf_counter() - t0)
    return outs


def _sync(device: torch.device, timings) -> None:
    """Wait for the device before reading the clock (only when timing, only on a GPU)."""
    if timings is not None and device.type == "cuda":
        torch.cuda.synchronize(device)


# ---------------------------------------------------------------------------------------
# comparison
# ---------------------------------------------------------------------------------------


@torch.inference_mode()
def compare(model: FreezeStyleDecoder, tokens, policy: OverlapPolicy | None = None) -> pd.DataFrame:
    """Per chunk, (a) overlap recompute vs (b) carry: seconds (perf_counter, the device synchronised), tokens decoded,
    samples out, state bytes kept between calls, and whether the chunk equals the full-history
    reference bit for bit (``exact_vs_full``) with its max abs difference.

    State bytes: (a) keeps the last ``steady - hop`` = 20 token ids (int64) to rebuild its next
    window; (b) keeps the carries (float32 activations: 20 x C0 plus the sample-rate contexts).
    """
    policy = policy or OverlapPolicy()
    spt = model.cfg.samples_per_token
    ref = stream_reference(model, tokens, FULL_HISTORY)
    rows = []
    i = 0
    for tok in _turns(tokens):
        for w0, w1, k0, k1 in policy.windows(tok.shape[1]):
            _sync(tok.device, rows)
            t0 = time.perf_counter()
            pcm = model(tok[:, w0:w1])[:, (k0 - w0) * spt:(k1 - w0) * spt]
            _sync(tok.device, rows)
            dt = time.perf_counter() - t0
            r = ref[i] if i < len(ref) else None
            same = r is not None and r.shape == pcm.shape
            rows.append(dict(path="a: overlap recompute", chunk=i, tokens_new=k1 - k0, tokens_decoded=w1 - w0,
                             samples_out=pcm.shape[1], seconds=dt,
                             state_bytes=(policy.steady - policy.hop) * tok.element_size(),
                             exact_vs_full=bool(same and torch.equal(r, pcm)),
                             max_abs_diff=(r - pcm).abs().max().item() if same else float("nan")))
            i += 1
    rt = CarryStream(model)
    times: list = []
    got = stream_with_carry(model, tokens, model.cfg.chunk_tokens, runtime=rt, timings=times)
    for j, (pcm, dt) in enumerate(zip(got, times)):
        r = ref[j]
        n = pcm.shape[1] // spt
        rows.append(dict(path="b: carry", chunk=j, tokens_new=n, tokens_decoded=n, samples_out=pcm.shape[1],
                         seconds=dt, state_bytes=rt.state_bytes, exact_vs_full=bool(torch.equal(r, pcm)),
                         max_abs_diff=(r - pcm).abs().max().item()))
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------
# (b) on the adapter kit: every conv's left context declared, a step and the model's own step
# ---------------------------------------------------------------------------------------

#: the state regions of :func:`kit_declaration`, one per causal conv (token conv first)
KIT_REGIONS = (LEFT_CONTEXT, "up1_context", "up2_context", "up3_context", "out_context")


def kit_declaration(cfg: FreezeStyleConfig | None = None):
    """Path (b)'s whole state as a declaration: each causal conv's left context is a region on the clock it
    runs at (tokens, then each upsampling stage's), the token conv's a ``SlidingWindow`` (empty at a turn's
    start), the others ``Fixed``; one call decodes ``chunk_tokens`` tokens (a turn's final call the rest)."""
    from ..contract import Admission, Clock, Declaration, Fixed, Operator, Region, SlidingWindow

    c = cfg or FreezeStyleConfig()
    clocks = [Clock("chunks", "decoder call", rate_hz=40.0 / c.chunk_tokens),
              Clock("tokens", "codec token", parent="chunks", ratio=c.chunk_tokens)]
    names = ["tokens"]
    for i, r in enumerate(c.rates):
        names.append("samples" if i == len(c.rates) - 1 else f"up{i + 1}")
        clocks.append(Clock(names[-1], f"frame after upsampling stage {i + 1}", parent=names[-2], ratio=r))
    at = [names[0], *names[1:], names[-1]]  # the clock each conv runs at: tokens, up1, up2, samples, samples
    chans = (c.channels[0], *c.channels[:len(c.rates)], c.channels[-1])
    regions = tuple(Region(n, clock=k, shape=(1, ch, k), lifetime="turn", address_stable=True,
                           policy=SlidingWindow(ctx) if i == 0 else Fixed(ctx))
                    for i, (n, k, ch, ctx) in enumerate(zip(KIT_REGIONS, at, chans, c.contexts)))
    op = Operator(OPERATOR, reads=(LEFT_CONTEXT,), clock="tokens", flush=(1, c.chunk_tokens, 1))
    return Declaration("freeze-style-decoder-carry", tuple(clocks), regions, (op,),
                       admission=Admission("tokens", c.chunk_tokens), call_clock="chunks")


def kit_steps(model: FreezeStyleDecoder):
    """``(step, stock)`` of path (b) for the adapter kit: the step in the kit's stock form (each conv's whole
    input, uncut: the runtime keeps the declared cut in its carries) and the model's own streaming step (its
    own cut), both over the regions of :func:`kit_declaration`."""

    def step(x, caches, last):
        pcm, full = model.decode(x, [caches[n] for n in KIT_REGIONS], cut=False)
        return pcm, dict(zip(KIT_REGIONS, full))

    def stock(x, caches, last):
        ctx = [caches.get(n) for n in KIT_REGIONS]
        if any(c is None for c in ctx):  # a turn's start: the model's own contexts (zeros)
            ctx = [z if c is None else c for c, z in zip(ctx, model.zero_contexts(device=x.device))]
        pcm, nxt = model.decode(x, ctx)
        return pcm, dict(zip(KIT_REGIONS, nxt))

    return step, stock


def kit_model(model: FreezeStyleDecoder | None = None, tokens=None, device="cpu"):
    """Path (b) on the adapter kit (:class:`~cadencelab.adapters.kit.KitModel`): :func:`kit_declaration`, the
    step in the kit's stock form (each conv's whole input; the runtime keeps the declared cut in its carries),
    the model's own streaming step (its own cut) and ``tokens`` (turns of ids, default two seeded turns)
    cut into calls. Its outputs equal the full-history reference bit for bit (:func:`stream_reference`)."""
    model = model or FreezeStyleDecoder().to(device)
    decl = kit_declaration(model.cfg)
    if tokens is None:
        g = torch.Generator().manual_seed(7)
        tokens = [torch.randint(0, model.cfg.vocab, (1, n), generator=g) for n in (67, 40)]
    dev = model.embed.weight.device
    step, stock = kit_steps(model)
    traffic = Traffic.stream(decl, [t.to(dev) for t in _turns(tokens)], clock="tokens")
    return KitModel(decl, step, stock, traffic, form="stock", modules=(model,), device=str(dev))


def kit_model_on(device="cpu"):
    """:func:`kit_model` on ``device`` (``python -m cadencelab.bench kit --model freeze-style``)."""
    return kit_model(device=device)
