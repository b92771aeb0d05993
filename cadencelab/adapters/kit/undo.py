"""A refused call leaves no trace: what a step writes into its carries before the runtime refuses the call.

The runtime checks a step's result before it writes anything itself, and it records extents, ring positions,
``ended`` and its counters only once a call is accepted. What a step writes *itself* while it runs is logged
here: :meth:`~.steps.Caches.append` (a newest-first append is undone by the inverse shift; a chronological one
writes only frames past the live extent, which nothing reads) and :meth:`~.rings.RingView.write` (the slots it
overwrites are copied first, a call's new frames only). Nothing is copied on the hot path but those slots, and
nothing at all while a graph is captured (a captured call is checked by its probe first).

Any other write into a carry during a refused call (an in-place step's own code, a step writing through a view)
is seen by the carries' version counters, which every in-place op bumps: that state cannot be restored, so the
runtime refuses every call until :meth:`~.runtime.StreamingRuntime.reset` (:func:`moved_error`).
"""

from __future__ import annotations

import torch

from ...state.carry import move_frames

__all__ = ["Undo", "moved_error", "version"]


def version(t: torch.Tensor) -> int | None:
    """``t``'s version counter (bumped by every in-place write through it or a view), None for an inference
    tensor, which keeps none."""
    return None if t.is_inference() else t._version


def _capturing(t: torch.Tensor) -> bool:
    return t.is_cuda and torch.cuda.is_current_stream_capturing()


class Undo:
    """One call of runtime ``rt``'s operator ``b``, as a context: the log of the writes its step makes into its
    carries itself, in order (``rt.undo`` while it runs). A call refused inside it (any exception) has them
    undone (:meth:`restore`) and a note added saying so; a write it cannot undo sets ``rt.moved``, which refuses
    every call until reset."""

    def __init__(self, rt, b):  # on every call's hot path: host reads only, no call per region
        self.rt, self.b, self.log = rt, b, []
        carries, ends = rt.carries, rt.ends
        self.buffers = buffers = {n: carries[n].buffer for n in b.touches}  # region (or ring end) -> its tensor
        if ends:
            buffers.update({ends[n].name: ends[n].buffer for n in b.touches if n in ends})
        self.expect = expect = {}
        for n, t in buffers.items():
            try:
                expect[n] = t._version
            except RuntimeError:  # an inference tensor keeps no version counter
                expect[n] = None
        self.dirty, self.shifted = set(), set()

    def __enter__(self):
        self.rt.undo = self
        return self

    def __exit__(self, kind, e, tb) -> bool:
        rt = self.rt
        rt.undo = None
        if e is not None:
            moved = self.restore()
            if moved:
                rt.moved = moved_error(self.b.name, moved, rt.calls)
            e.add_note(rt.moved or f"call {rt.calls} of '{self.b.name}' refused: the carries are as they were "
                                   f"before it")
        return False

    def _seen(self, name: str) -> None:
        """Before a logged write: a write since the last logged one (or the call's start) was not logged."""
        if name in self.expect and (self.expect[name] is None or version(self.buffers[name]) != self.expect[name]):
            self.dirty.add(name)

    def _done(self, name: str) -> None:
        if name in self.expect and self.expect[name] is not None:
            self.expect[name] = version(self.buffers[name])

    def appended(self, name: str, buf: torch.Tensor, dim: int, n: int, f: int, newest_first: bool, write) -> None:
        """Run ``write`` (``f`` frames appended to a carry holding ``n``), logged: a newest-first append shifted
        the ``n`` live frames up by ``f``, undone by shifting them back (once a call: a second shift loses
        frames past the first's, so that region is then reported, not restored)."""
        self._seen(name)
        if newest_first and name in self.shifted:
            self.dirty.add(name)
        write()
        if newest_first and not _capturing(buf):
            self.shifted.add(name)
            self.log.append(lambda: move_frames(buf, dim, f, 0, n))
        self._done(name)

    def ring_write(self, name: str, buf: torch.Tensor, dim: int, pos: torch.Tensor, write) -> None:
        """Run ``write`` (frames written at slots ``pos``), logged: the slots' old frames are copied first."""
        self._seen(name)
        if not _capturing(buf):
            old = buf.index_select(dim, pos)
            self.log.append(lambda: buf.index_copy_(dim, pos, old))
        write()
        self._done(name)

    def restore(self) -> list[str]:
        """Undo the logged writes, newest first; returns the regions written otherwise since the call began
        (their state cannot be restored: the caller refuses further calls)."""
        for name, want in self.expect.items():
            if want is None or version(self.buffers[name]) != want:
                self.dirty.add(name)
        for undo in reversed(self.log):
            undo()
        self.log.clear()
        return sorted(self.dirty)


def moved_error(operator: str, regions: list, call: int) -> str:
    return (f"call {call} of '{operator}' was refused after its step wrote {regions} in place in a way the runtime "
            f"cannot undo (its own code or a view; the runtime undoes Caches.append, once per region a call, and "
            f"RingView.write): the turn's state is lost; call reset() to start the turn again")
