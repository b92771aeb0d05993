"""EXPERIMENTAL: batch invariance for :class:`~.batched.BatchedToken2wav` (``invariant=True``).

A batched row equals its session run alone only if every kernel that reduces sees the solo call's shapes and
layout, and every random draw comes from the session's own generator. :class:`PerSession` is a
``TorchFunctionMode`` scoped to one batched call: the ops whose kernel choice or reduction order can follow the
row count (GEMMs, convolutions, attention, FFTs, scans, the norm in ``F.normalize``) run once per session on
that session's rows, laid out as the solo call lays them out; elementwise ops and per-row normalisations
(``layer_norm``, ``softmax``: each row reduces alone, in an order set by the row length) stay batched. A batch
is ``n`` sessions of 1 row each, or the DiT's ``2n`` CFG rows ``[cond_1..cond_n, uncond_1..uncond_n]``, whose
session ``b`` is rows ``(b, n + b)`` (the solo call's pair). An op known to fold the batch into another dim
(``mm``, ``addmm``, ``einsum``) is refused, so a vendor change cannot lose invariance silently.

HiFT's draws (:data:`RANDOM`) are taken out of the call: :func:`noise_templates` records their batched shapes
once per class (the vendor's own source path, generators restored), :func:`fill_noise` draws each row from its
session's generator with the solo draw's shape and layout before the call, and the mode hands the filled
buffers to the vendor in draw order. The buffers sit at fixed addresses, so a graph replays them.
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from ..replay.signatures import alignment

__all__ = ["PerSession", "RANDOM", "noise_templates", "fill_noise", "new_noise"]

_LINEAR = (F.linear, torch.conv1d, torch.conv2d, torch.conv_transpose1d, torch.conv_transpose2d,
           F.conv1d, F.conv2d, F.conv_transpose1d, F.conv_transpose2d, F.normalize, torch.cumsum,
           torch.Tensor.cumsum, torch.stft, torch.istft, torch.Tensor.stft, torch.Tensor.istft)
_PAIRWISE = (torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.bmm, torch.Tensor.bmm)
#: function -> positions of the arguments that carry the batch at dim 0 (the others: weights, windows, sizes)
SPLIT = {**{f: (0,) for f in _LINEAR}, **{f: (0, 1) for f in _PAIRWISE},
         F.scaled_dot_product_attention: (0, 1, 2, 3), torch.baddbmm: (0, 1, 2), torch.Tensor.baddbmm: (0, 1, 2)}
#: batch-sensitive ops whose rows this mode cannot attribute to a session
REFUSED = (torch.mm, torch.Tensor.mm, torch.addmm, torch.Tensor.addmm, torch.einsum)
#: the random factories HiFT draws from; each is served from a pre-drawn buffer
RANDOM = {torch.rand: "uniform", torch.randn_like: "normal", torch.randn: "normal", torch.rand_like: "uniform"}


def _dense_strides(shape: Sequence[int], like: torch.Tensor) -> tuple:
    """Dense strides for ``shape`` in ``like``'s dim order (outermost = largest stride), as ``empty_like`` keeps."""
    order = sorted(range(like.dim()), key=lambda d: (-like.stride(d), d))
    strides, step = [0] * like.dim(), 1
    for d in reversed(order):
        strides[d] = step
        step *= max(int(shape[d]), 1)
    return tuple(strides)


def _rows(x: torch.Tensor, rows: tuple) -> torch.Tensor:
    """Rows ``rows`` of ``x`` (dim 0) as the solo call holds them: in x's layout and at x's pointer residue (the
    solo operand's: kernels are chosen on alignment up to :func:`~cadencelab.replay.signatures.alignment`), a
    view when adjacent rows already sit at that residue, else a copy placed at it."""
    align = alignment(x)
    if all(r == rows[0] + i for i, r in enumerate(rows)):
        view = x.narrow(0, rows[0], len(rows))
        if (view.data_ptr() - x.data_ptr()) % align == 0:
            return view
    shape = (len(rows),) + tuple(x.shape[1:])
    out = _empty_at(shape, _dense_strides(shape, x), x, x.data_ptr() % align, align)
    for i, r in enumerate(rows):
        out.narrow(0, i, 1).copy_(x.narrow(0, r, 1))
    return out


def _empty_at(shape, strides, like: torch.Tensor, residue: int, align: int) -> torch.Tensor:
    """An uninitialised tensor of ``shape`` / ``strides`` whose data pointer is ``residue`` modulo ``align``."""
    size = like.element_size()
    span = 1 + sum((int(n) - 1) * st for n, st in zip(shape, strides) if int(n) > 0)
    flat = torch.empty(span + align // size, dtype=like.dtype, device=like.device)
    if residue % size:  # a residue between elements cannot be reproduced: the dense copy is the best there is
        return flat.as_strided(shape, strides, 0)
    skip = ((residue - flat.data_ptr()) % align) // size
    return flat.as_strided(shape, strides, skip)


class PerSession(TorchFunctionMode):
    """Inside: the ops of :data:`SPLIT` run per session (see the module docstring); ``noise``: the pre-drawn
    buffers returned, in order, for HiFT's random draws (None: a draw is refused)."""

    def __init__(self, n: int, noise: Sequence[torch.Tensor] | None = None, record: list | None = None):
        super().__init__()
        self.n, self.noise, self.record, self.drawn = int(n), noise, record, 0

    def _groups(self, r: int):
        n = self.n
        if r == n:
            return [(b,) for b in range(n)]
        if r == 2 * n:
            return [(b, n + b) for b in range(n)]
        return None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in RANDOM:
            return self._draw(func, args, kwargs)
        if func in REFUSED:
            raise RuntimeError(f"invariant batching: {getattr(func, '__name__', func)} folds the batch; "
                               "its rows cannot be attributed to sessions")
        where = SPLIT.get(func)
        x = args[0] if args else None
        if where is None or not isinstance(x, torch.Tensor) or x.dim() == 0:
            return func(*args, **kwargs)
        groups = self._groups(x.shape[0])
        if groups is None:  # not a batched tensor (a shared positional table, a weight)
            return func(*args, **kwargs)
        r = x.shape[0]
        outs = []
        for g in groups:
            a = [(_rows(v, g) if i in where and isinstance(v, torch.Tensor) and v.dim() and v.shape[0] == r else v)
                 for i, v in enumerate(args)]
            kw = {k: (_rows(v, g) if k == "attn_mask" and isinstance(v, torch.Tensor) and v.shape[0] == r else v)
                  for k, v in kwargs.items()}
            outs.append(func(*a, **kw))
        return self._join(outs, groups, r)

    @staticmethod
    def _join(outs: list, groups: list, r: int):
        if isinstance(outs[0], (tuple, list)):
            return type(outs[0])(PerSession._join([o[i] for o in outs], groups, r) for i in range(len(outs[0])))
        first = outs[0]
        shape = (r,) + tuple(first.shape[1:])
        out = torch.empty_strided(shape, _dense_strides(shape, first), dtype=first.dtype, device=first.device)
        for o, g in zip(outs, groups):
            for i, row in enumerate(g):
                out.narrow(0, row, 1).copy_(o.narrow(0, i, 1))
        return out

    def _draw(self, func, args, kwargs):
        if self.record is not None:  # the template probe: draw as the vendor does, note the shape and layout
            out = func(*args, **kwargs)
            self.record.append((RANDOM[func], tuple(out.shape), tuple(out.stride()), out.dtype))
            return out
        if self.noise is None or self.drawn >= len(self.noise):
            raise RuntimeError("invariant batching: a random draw with no pre-drawn buffer (the vocoder drew "
                               "more than its templates recorded)")
        buf = self.noise[self.drawn]
        self.drawn += 1
        like = args[0] if args and isinstance(args[0], torch.Tensor) else None
        shape = tuple(like.shape) if like is not None else tuple(args[0] if len(args) == 1 and
                                                                  isinstance(args[0], (tuple, list)) else args)
        if tuple(buf.shape) != tuple(int(s) for s in shape):
            raise RuntimeError(f"invariant batching: draw {self.drawn - 1} has shape {shape}, its buffer "
                               f"{tuple(buf.shape)}")
        return buf.clone()  # the vendor writes into some draws (rand_ini[:, 0] = 0): the buffer stays as drawn


@torch.inference_mode()
def noise_templates(hift, mel: torch.Tensor) -> list[tuple]:
    """(kind, batched shape, strides, dtype) of every draw HiFT's source path makes for ``mel``: the vendor's
    own f0 -> upsample -> source calls, run under a recording mode; the generators are restored after."""
    host = torch.get_rng_state()
    dev = torch.cuda.get_rng_state(mel.device) if mel.device.type == "cuda" else None
    rec: list = []
    try:
        with PerSession(mel.shape[0], record=rec):
            f0 = hift.f0_predictor(mel)
            s = hift.f0_upsamp(f0[:, None]).transpose(1, 2)
            hift.m_source(s)
    finally:
        torch.set_rng_state(host)
        if dev is not None:
            torch.cuda.set_rng_state(dev, mel.device)
    return rec


def new_noise(templates: list[tuple], device) -> list[torch.Tensor]:
    """One buffer per draw, in the batched call's shape and layout, and after them one solo-shaped row per draw
    (where each session's draw is made before it is copied in: allocated once, not per call)."""
    bufs = [torch.empty_strided(shape, stride, dtype=dt, device=device) for _, shape, stride, dt in templates]
    rows = [torch.empty_strided((1,) + tuple(shape[1:]), stride, dtype=dt, device=device)
            for _, shape, stride, dt in templates]
    return bufs + rows


def fill_noise(noise: list[torch.Tensor], templates: list[tuple], generators: Sequence[torch.Generator]) -> None:
    """Row ``b`` of every buffer of ``noise`` (:func:`new_noise`) drawn from ``generators[b]`` exactly as the solo
    call draws it: the same factory (``uniform_`` for ``rand``, ``normal_`` for ``randn_like``) on a tensor of the
    solo draw's shape and layout (the batched layout's row), the draws in the vendor's order."""
    k = len(templates)
    for b, g in enumerate(generators):
        for buf, row, (kind, *_) in zip(noise[:k], noise[k:], templates):
            if kind == "uniform":
                row.uniform_(0, 1, generator=g)
            else:
                row.normal_(0, 1, generator=g)
            buf.narrow(0, b, 1).copy_(row)
