"""State a model allocates itself: carries adopted from the model's tensors, and the state it holds unnamed.

A model whose streaming code keeps its state inside its own modules (Moshi's Mimi: ring K|V caches, conv
contexts, flags and counters, all written in place) is not handed its caches per call. The kit then:

* **adopts** the tensors of the declared regions as its carries (the spec's ``adopt={region: tensor}``, in the
  arms with the state rule; a ring region also names the model's own write position, ``(tensor, end)``): the
  carry *is* the model's storage, so the model's in-place writes are the carry's writes, checked against the
  declared shape, dtype and device;
* **guards** the state the declaration does not name (the spec's ``held={name: tensor or getter}``): counters,
  flags, other conv contexts. Every engine checks their addresses on every call, as write-through buffers; a
  getter is read anew each call, so a field the model rebinds is seen moving.
"""

from __future__ import annotations

from typing import Callable, Mapping

import torch

from ...contract import Declaration
from ...state import Carry
from .regions import declared_text, on_device

__all__ = ["Held", "adoptions", "adopted_carry", "adopted_end", "held_state", "on_device"]


class Held:
    """One tensor of state the model keeps and the declaration does not name (``buffer``: read now). Never a
    call's argument, so an engine guards its address without aliasing it (``owner`` False)."""

    owner = False

    def __init__(self, name: str, get: Callable[[], torch.Tensor]):
        self.name, self.reader = name, get  # an engine reads the buffer through it (no property in between)

    @property
    def buffer(self) -> torch.Tensor:
        return self.reader()


def _what(t) -> str:
    return f"a tensor {tuple(t.shape)} {t.dtype} on {t.device}" if isinstance(t, torch.Tensor) else \
        f"a value of type {type(t).__name__}"


def adoptions(adopt: Mapping | None, names: list, rings: set) -> dict:
    """``adopt`` as region -> (tensor, end or None), its regions checked (the tensors are checked when carried)."""
    if adopt is None:
        return {}
    if not isinstance(adopt, Mapping):
        raise ValueError(f"adopt must be a dict region -> tensor, got {type(adopt).__name__}")
    out = {}
    for n, v in adopt.items():
        if n not in names:
            raise ValueError(f"adopt: '{n}' is not a state region the runtime carries ({names})")
        if isinstance(v, tuple) and (len(v) != 2 or n not in rings):
            raise ValueError(f"adopt: region '{n}' takes a tensor" + (" or (tensor, end)" if n in rings else "")
                             + f", got a tuple of {len(v)}")
        out[n] = v if isinstance(v, tuple) else (v, None)
    return out


def adopted_carry(decl: Declaration, region, tensor, shape: tuple, device: torch.device) -> Carry:
    """The carry of ``region`` on the model's own ``tensor``: refused unless it is the shape the kit would
    allocate (``shape``), the declared dtype and on the runtime's device."""
    dtype = getattr(torch, region.dtype)
    if not isinstance(tensor, torch.Tensor) or tuple(tensor.shape) != tuple(shape) or tensor.dtype != dtype \
            or not on_device(tensor, device):
        raise ValueError(f"adopt: region '{region.name}' was given {_what(tensor)}; {declared_text(decl, region)} "
                         f"is carried as {tuple(shape)} {dtype} on {device}")
    return Carry(region.name, region.policy, region.clock_axis, tensor)


def adopted_end(region: str, end, device: torch.device) -> torch.Tensor:
    """The model's own count of frames written to a ring region: one int64 element on the device."""
    if not isinstance(end, torch.Tensor) or end.dtype != torch.int64 or end.numel() != 1 or not on_device(end, device):
        raise ValueError(f"adopt: ring region '{region}''s write position must be one int64 element on {device} "
                         f"(the model's own count of frames written), got {_what(end)}")
    return end


def held_state(held: Mapping | None, regions: list) -> list:
    """``held`` as :class:`Held` objects; a name may not be a region's (that state is adopted or carried)."""
    if held is None:
        return []
    if not isinstance(held, Mapping):
        raise ValueError(f"held must be a dict name -> tensor (or a function returning it), got {type(held).__name__}")
    clash = sorted(set(held) & set(regions))
    if clash:
        raise ValueError(f"held: {clash} are declared regions; adopt them (adopt={{region: tensor}}) instead")
    out = []
    for name, v in held.items():
        get = v if callable(v) and not isinstance(v, torch.Tensor) else (lambda v=v: v)
        if not isinstance(get(), torch.Tensor):
            raise ValueError(f"held: '{name}' is {_what(get())}, not a tensor")
        out.append(Held(str(name), get))
    return out
