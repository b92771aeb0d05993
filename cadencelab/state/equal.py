"""Bit-exactness as the product means it: the same bytes, not ``torch.equal``.

``torch.equal`` says a tensor holding a NaN differs from itself (NaN != NaN), so a model whose outputs hold NaN
would fail against its own stock loop, and it says ``-0.0`` equals ``0.0``. Comparing the bytes is the claim
the project makes ("bit-identical"): identical NaNs are equal, a NaN where the other side has a number is not.
:func:`nan_detail` names NaN in a verdict's detail, so a divergence caused by NaN says so.
"""

from __future__ import annotations

import torch

__all__ = ["bitwise_equal", "nan_detail"]


def _bytes(t: torch.Tensor) -> torch.Tensor:
    flat = t.detach().reshape(-1)
    return flat.view(torch.uint8) if flat.element_size() == 1 else flat.contiguous().view(torch.uint8)


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same shape, dtype and bytes (``b`` compared on ``a``'s device)."""
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        raise TypeError(f"bitwise_equal compares tensors, got {type(a).__name__} and {type(b).__name__}")
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.numel() == 0:
        return True
    return torch.equal(_bytes(a), _bytes(b.to(a.device)))


def nan_detail(want: torch.Tensor, got: torch.Tensor, names=("stock", "got")) -> str:
    """'' when neither side holds a NaN; else where they are, e.g. "NaN: stock 0, got 3 elements (first at (0, 2))"."""
    nw, ng = torch.isnan(want), torch.isnan(got)
    cw, cg = int(nw.sum()), int(ng.sum())
    if not cw and not cg:
        return ""
    where = ""
    if nw.shape == ng.shape:
        diff = (nw ^ ng.to(nw.device)).nonzero()
        if len(diff):
            where = f", first where one side is NaN at {tuple(int(i) for i in diff[0].tolist())}"
    return f"NaN: {names[0]} {cw}, {names[1]} {cg} elements{where}"
