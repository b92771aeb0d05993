"""Ring regions as a kit step sees them: the whole buffer in ring order and the device count of frames written.

A :class:`~cadencelab.contract.Ring` region keeps ``capacity`` frames, frame ``i`` of a turn at slot
``i % capacity``, zero-filled at a turn's start. Its extent in every signature is the capacity, so the
write position cannot enter a signature: it lives on the device (:class:`RingEnd`, one int64 scalar at a
stable address, advanced inside the captured call), and every write is an ``index_copy_`` at positions
computed on the device from it. A step given a :class:`RingView` may write its new frames itself
(:meth:`RingView.write`, e.g. to attend over the ring after writing as its stock code does); otherwise the
runtime writes the frames the step returns.
"""

from __future__ import annotations

import torch

__all__ = ["RingEnd", "RingView"]


class RingEnd:
    """Frames written this turn to one ring region: a device int64 scalar (``buffer``, an engine owner).

    ``buffer`` given: the model's own count (an adopted ring), which the model advances itself."""

    def __init__(self, region: str, device, buffer: torch.Tensor | None = None):
        self.name = f"{region}.end"
        self.model_advances = buffer is not None
        with torch.inference_mode(False):  # a version counter, as a carry's
            self.buffer = buffer if buffer is not None else torch.zeros((), dtype=torch.int64, device=device)
        self.host = 0  # the same count on the host (bookkeeping, audits)

    def reset(self, frames: int = 0) -> None:
        self.buffer.fill_(frames)
        self.host = frames


class RingView:
    """One call's view of a ring region: ``buffer`` (capacity frames along ``dim``, ring order) and ``end``
    (a device int64 scalar: frames written this turn before the call)."""

    def __init__(self, buffer: torch.Tensor, end: torch.Tensor, dim: int, undo=None, name: str = ""):
        self.buffer, self.end, self.dim = buffer, end, dim
        self.written, self.undo, self.name = False, undo, name

    @property
    def capacity(self) -> int:
        return self.buffer.shape[self.dim]

    @property
    def shape(self) -> torch.Size:
        return self.buffer.shape

    def positions(self, n: int) -> torch.Tensor:
        """Slots of the call's ``n`` new frames, on the device."""
        return (self.end + torch.arange(n, device=self.buffer.device)) % self.capacity

    def filled(self, n_new: int = 0) -> torch.Tensor:
        """Which slots hold a frame of this turn once ``n_new`` more are written (device bool, capacity long)."""
        slots = torch.arange(self.capacity, device=self.buffer.device)
        return slots < torch.clamp(self.end + n_new, max=self.capacity)

    def write(self, new: torch.Tensor) -> None:
        """Write ``new`` (its frames along ``dim``) at the next slots, in place, on the device."""
        pos = self.positions(new.shape[self.dim])
        if self.undo is None:
            self.buffer.index_copy_(self.dim, pos, new)
        else:  # logged: a call the runtime then refuses is undone
            self.undo.ring_write(self.name, self.buffer, self.dim, pos,
                                 lambda: self.buffer.index_copy_(self.dim, pos, new))
        self.written = True
