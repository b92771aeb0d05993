"""The carry: retained state at one address for the stream's life.

A :class:`Carry` owns a buffer of fixed capacity along the region's clock dimension,
allocated once. Retention writes the surviving frames into it in place, elementwise
identical to the stock ``torch.cat`` cut for the declared layout; turn resets write the
base state in place. ``data_ptr`` never changes, which is what lets the replay engine
alias the carry instead of staging a copy per call.

Host bookkeeping (``length``) is kept apart from device work: ``move_retained`` only
enqueues copies and returns the new extent computed from integers, so it can run inside a
captured graph; ``commit`` records the extent on the host.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from ..contract.errors import DeclarationError
from ..contract.policies import move_frames
from .alloc import check_fits

__all__ = ["Carry", "move_frames"]


@dataclass
class Carry:
    """A contract-owned buffer for one retained region.

    name:     region name (for errors, audits and counters).
    policy:   the region's retention policy (its layout says where new frames go).
    dim:      the clock dimension of ``buffer``.
    buffer:   the storage, allocated once at ``capacity`` frames along ``dim``.
    length:   live extent (host integer).
    """

    name: str
    policy: object
    dim: int
    buffer: torch.Tensor
    length: int = 0
    cursor: int = 0  # frames ever written (rings write at cursor % capacity)
    base_ptr: int = field(init=False)
    writes: int = field(default=0, init=False)

    def __post_init__(self):
        if not getattr(self.policy, "bounded", False):
            raise DeclarationError(f"regions.{self.name}.policy", "an unbounded region has no fixed capacity for a carry")
        self.base_ptr = self.buffer.data_ptr()

    # -- construction -----------------------------------------------------------------
    @classmethod
    def allocate(cls, name: str, policy, shape: tuple, dim: int, dtype=torch.float32, device="cpu") -> "Carry":
        """Allocate a zeroed carry of ``shape`` (capacity = shape[dim]); refused with one line naming the
        region when the shape is not one of non-negative whole extents or does not fit in free memory."""
        if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise ValueError(f"carry {name!r}: shape must be non-negative whole extents, got {tuple(shape)}")
        if not -len(shape) <= dim < len(shape):
            raise ValueError(f"carry {name!r}: dim {dim} outside the {len(shape)} dims of {tuple(shape)}")
        check_fits(math.prod(shape) * torch.empty((), dtype=dtype).element_size(), device,
                   f"carry {name!r} at {tuple(shape)} ({dtype})")
        with torch.inference_mode(False):  # a normal tensor even when built in inference mode: its version
            buffer = torch.zeros(shape, dtype=dtype, device=device)  # counter tells a write (kit's refused calls)
        return cls(name, policy, dim, buffer)

    @staticmethod
    def shape_for(decl, region: str, envelope: str | None = None) -> tuple:
        """The shape a carry of ``region`` has: retention bound A on its clock axis, or A + f_call for an
        in-buffer carry (``envelope="attended"``; default the region's declared envelope)."""
        from ..contract.derivation import envelope as env

        r = decl.region(region)
        _, a, a_att = env(decl, region)
        ext = int(a_att if (envelope or r.envelope) == "attended" else a)
        return tuple(ext if d == r.clock else (decl.dims[d] if isinstance(d, str) else d) for d in r.shape)

    @classmethod
    def for_region(cls, decl, region: str, device="cpu", dtype=None, envelope: str | None = None) -> "Carry":
        """A carry sized from the declaration (:meth:`shape_for`), allocated zeroed."""
        r = decl.region(region)
        dt = dtype or getattr(torch, r.dtype)
        return cls.allocate(r.name, r.policy, cls.shape_for(decl, region, envelope), r.clock_axis, dt, device)

    # -- views and checks -------------------------------------------------------------
    @property
    def capacity(self) -> int:
        return self.buffer.shape[self.dim]

    @property
    def layout(self) -> str:
        return self.policy.layout

    def view(self, length: int | None = None) -> torch.Tensor:
        """The live extent (or ``length`` frames) as a view starting at the buffer base."""
        n = self.length if length is None else length
        if n > self.capacity:
            raise ValueError(f"carry '{self.name}': extent {n} exceeds capacity {self.capacity}")
        return self.buffer.narrow(self.dim, 0, n)

    def address_ok(self) -> bool:
        return self.buffer.data_ptr() == self.base_ptr

    def owns(self, t: torch.Tensor) -> bool:
        """True when ``t`` is a view of this carry starting at its base."""
        return t.data_ptr() == self.base_ptr

    def _need(self, n: int, what: str) -> None:
        if n > self.capacity:
            raise ValueError(
                f"carry '{self.name}': {what} needs {n} frames but capacity is {self.capacity}; "
                "size the carry from the declaration's attended envelope (A + f_call)"
            )

    # -- device work (capturable: no host reads, no allocation beyond copies) -----------
    # each is the policy's write rule on this buffer; what it returns is the position commit() records
    def move_retained(self, attended: int) -> int:
        """Apply retention in place to a buffer holding ``attended`` frames; return the new position."""
        return self.policy.settle(self.buffer, self.dim, attended)

    def write_retained_from(self, h: torch.Tensor) -> int:
        """Write the frames of a separate full cache ``h`` that survive retention; return the new position."""
        if h.data_ptr() == self.base_ptr:
            return self.move_retained(h.shape[self.dim])
        return self.policy.write_retained(self.buffer, self.dim, h, self._need)

    def write_appended(self, new: torch.Tensor, length: int) -> int:
        """Add ``new`` frames to a carry at position ``length``, where the policy puts them; return the new
        position (a ring's is its cursor: frames ever written)."""
        return self.policy.write(self.buffer, self.dim, new, length, self._need)

    def write_append_retained(self, new: torch.Tensor, length: int) -> int:
        """Append ``new`` at position ``length`` and retain, in place; return the new position. A chronological
        carry needs room only for what survives; a newest-first one for the attended envelope."""
        return self.policy.write_settled(self.buffer, self.dim, new, length, self._need)

    # -- host bookkeeping + eager conveniences ----------------------------------------
    @property
    def position(self) -> int:
        """Where the next write continues (the live extent, or a ring's cursor)."""
        return self.policy.position(self.length, self.cursor)

    def commit(self, position: int) -> None:
        """Record the live extent on the host (after device work, replayed or eager) from the ``position`` the
        device work returned (for a ring, its cursor: the live extent is then capped at capacity)."""
        length, cursor = self.policy.committed(position, self.capacity, self.cursor)
        self._need(length, "commit")
        self.length, self.cursor = length, cursor
        self.writes += 1

    def retain_in_place(self) -> None:
        self.commit(self.move_retained(self.position))

    def adopt(self, h: torch.Tensor) -> None:
        """The operator wrote its full cache ``h`` into this buffer itself: record its extent."""
        if not self.owns(h):
            raise ValueError(f"carry '{self.name}': adopt() needs a view of the carry's own storage")
        self.commit(h.shape[self.dim])

    def retain_from(self, h: torch.Tensor) -> None:
        self.commit(self.write_retained_from(h))

    def append_in_place(self, new: torch.Tensor) -> None:
        self.commit(self.write_appended(new, self.position))

    def reset_in_place(self, base: torch.Tensor | None) -> None:
        """Turn reset: write the base state into the existing storage (no reallocation)."""
        self.cursor = 0
        if base is None or base.shape[self.dim] == 0:
            self.commit(0)
            return
        n = base.shape[self.dim]
        self._need(n, "reset")
        start = self.buffer.narrow(self.dim, 0, n)
        if not (base.data_ptr() == start.data_ptr() and base.shape == start.shape and base.stride() == start.stride()):
            start.copy_(base)  # a base the model wrote into this very storage (an adopted buffer) is already there
        self.commit(n)
